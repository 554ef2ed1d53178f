"""Reading a checkpoint from disk: the walk, safetensors headers, streaming hashes.

The I/O half of checkpoint.py, shared by checkpoint_facts, weight_source and weight_stage. It
never writes.
"""

import hashlib
import os
import stat
from concurrent.futures import ThreadPoolExecutor

try:
    # Optional: pieces are checked with BLAKE3 where the node's Python has it (weights/pieces.py says why).
    import blake3
except ImportError:
    blake3 = None

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import CheckpointError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.files import read_json
from ansible_collections.seatwright.fleet.plugins.module_utils.jsondoc import parse_json
from ansible_collections.seatwright.fleet.plugins.module_utils.weights.checkpoint import (
    INDEX_NAME,
    MANIFEST_NAME,
    MAX_HEADER_BYTES,
    SAFETENSORS_SUFFIX,
    assemble_report,
    blob_hash_kind,
    check_index,
    failure_message,
    git_blob_prefix,
    header_length,
    is_hidden,
    is_revision,
    is_staging_artifact,
    judge_files,
    parse_manifest,
    parse_safetensors_header,
    revision_problems,
    summarise_tensors,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.weights.hf_cache import cache_gaps, repo_of_entry
from ansible_collections.seatwright.fleet.plugins.module_utils.weights.pieces import PIECE_FIELDS, PIECE_HASHES

# Large reads let hashlib drop the GIL for long stretches, so hashing threads overlap.
READ_CHUNK = 8 * 1024 * 1024


def detect_layout(path):
    """'hf-cache' for a `models--org--name` cache entry, else 'folder'."""
    if os.path.isdir(os.path.join(path, "snapshots")) and os.path.isdir(os.path.join(path, "blobs")):
        return "hf-cache"
    return "folder"


def checkpoint_dir(path, layout, revision):
    """The folder that holds the checkpoint's files: the snapshot of `revision` in a cache entry."""
    if layout == "hf-cache":
        return os.path.join(path, "snapshots", revision or "")
    return path


def read_refs(path):
    refs = {}
    refs_dir = os.path.join(path, "refs")
    for root, _dirs, names in os.walk(refs_dir):
        for name in names:
            full = os.path.join(root, name)
            if os.path.islink(full) or name.startswith("."):
                continue
            try:
                with open(full, encoding="ascii") as handle:
                    refs[os.path.relpath(full, refs_dir)] = handle.read().strip()
            except (OSError, UnicodeDecodeError):
                continue
    return refs


def _inside(path, folder):
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def walk_files(root, links_within=None):
    """({rel: {abs, size, mode, mtime_ns, blob, dangling}}, [escaping rel]) for the checkpoint under `root`.

    Hidden paths (`.git/`, dotfiles) and seatwright's own artifacts are not checkpoint files. A
    link must resolve inside `links_within` (the cache entry's blobs/, or the folder itself);
    one that leaves it is reported, never followed.
    """
    found, escapes = {}, []
    allowed = os.path.realpath(links_within or root)
    for current, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in sorted(names):
            full = os.path.join(current, name)
            rel = os.path.relpath(full, root).replace(os.sep, "/")
            if is_staging_artifact(rel) or is_hidden(rel):
                continue
            entry = {"abs": full, "size": None, "mode": None, "mtime_ns": None, "blob": None, "dangling": False}
            if os.path.islink(full):
                entry["blob"] = os.path.basename(os.readlink(full))
                if not _inside(os.path.realpath(full), allowed):
                    escapes.append(rel)
                    continue
            try:
                info = os.stat(full)
            except FileNotFoundError:
                entry["dangling"] = True
                found[rel] = entry
                continue
            if not stat.S_ISREG(info.st_mode):
                continue
            entry.update(
                abs=os.path.realpath(full),
                size=info.st_size,
                mode=stat.S_IMODE(info.st_mode) & 0o777,
                mtime_ns=info.st_mtime_ns,
            )
            found[rel] = entry
    return found, escapes


def read_header(path, size):
    """parse_safetensors_header's report for the file at `path`, read with two small reads."""
    with open(path, "rb") as handle:
        first = handle.read(8)
        try:
            length = header_length(first)
        except CheckpointError as exc:
            return {
                "status": "truncated",
                "problems": [str(exc)],
                "tensors": 0,
                "tensor_bytes": 0,
                "bytes_by_dtype": {},
                "expected_size": None,
                "tensor_names": [],
            }
        fits = 8 + length <= size
        body = handle.read(length) if fits and length <= MAX_HEADER_BYTES else b""
    return parse_safetensors_header(body, length, size)


def new_hashers(want_git_sha1, size):
    hashers = {"sha256": hashlib.sha256()}
    if want_git_sha1:
        hashers["git_sha1"] = hashlib.sha1(git_blob_prefix(size))
    return hashers


def hash_file(path, want_git_sha1=False):
    """Digests of a whole file, read in large chunks (sha256 always, git blob sha1 on request)."""
    size = os.path.getsize(path)
    hashers = new_hashers(want_git_sha1, size)
    buf = bytearray(READ_CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as handle:
        while True:
            count = handle.readinto(buf)
            if not count:
                break
            for hasher in hashers.values():
                hasher.update(view[:count])
        # Hashing a checkpoint should not evict what running services keep in the page cache.
        os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    return {algo: hasher.hexdigest() for algo, hasher in hashers.items()}


def piece_hashes_here():
    """The piece digests this Python can compute, in PIECE_HASHES order."""
    return tuple(algo for algo in PIECE_HASHES if algo != "blake3" or blake3 is not None)


def piece_hasher(algo):
    """A fresh hasher for one piece; BLAKE3 on one thread (more per stream was slower on the device machine)."""
    return blake3.blake3() if algo == "blake3" else hashlib.sha256()


def hash_pieces(path, piece_bytes, want_git_sha1=False):
    """hash_file's digests plus each piece_bytes-long piece's digest in every algorithm of
    piece_hashes_here() (`pieces` for sha256, `pieces_blake3`), all in the same read."""
    size = os.path.getsize(path)
    hashers = new_hashers(want_git_sha1, size)
    algos = piece_hashes_here()
    pieces = {algo: [] for algo in algos}
    buf = bytearray(min(READ_CHUNK, piece_bytes))
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as handle:
        while True:
            piece = {algo: piece_hasher(algo) for algo in algos}
            left = piece_bytes
            while left:
                count = handle.readinto(view[: min(len(buf), left)])
                if not count:
                    break
                for hasher in list(hashers.values()) + list(piece.values()):
                    hasher.update(view[:count])
                left -= count
            if left == piece_bytes and pieces["sha256"]:
                break
            for algo in algos:
                pieces[algo].append(piece[algo].hexdigest())
            if left:
                break
        os.posix_fadvise(handle.fileno(), 0, 0, os.POSIX_FADV_DONTNEED)
    digests = {algo: hasher.hexdigest() for algo, hasher in hashers.items()}
    digests.update((PIECE_FIELDS[algo], listed) for algo, listed in pieces.items())
    return digests


def hash_many(jobs, workers, piece_bytes=0):
    """{key: digests} for jobs {key: (path, want_git_sha1)}, several files at once (with pieces when piece_bytes)."""
    if not jobs:
        return {}
    with ThreadPoolExecutor(max_workers=max(1, min(workers, len(jobs)))) as pool:
        if piece_bytes:
            futures = {key: pool.submit(hash_pieces, path, piece_bytes, git) for key, (path, git) in jobs.items()}
        else:
            futures = {key: pool.submit(hash_file, path, git) for key, (path, git) in jobs.items()}
        return {key: future.result() for key, future in futures.items()}


def load_manifest(folder):
    """(manifest or None, warning or None) for the parity manifest in `folder`."""
    raw = read_json(os.path.join(folder, MANIFEST_NAME))
    if raw is None:
        return None, None
    try:
        return parse_manifest(raw), None
    except CheckpointError as exc:
        return None, "%s ignored: %s" % (MANIFEST_NAME, exc)


def expectations(layout, files, manifest, index_shards):
    """What each file should be, merged from blob names, the manifest and the index."""
    expected = {}
    for rel, seen in files.items():
        kind = blob_hash_kind(seen["blob"]) if layout == "hf-cache" else None
        if kind:
            expected[rel] = {"size": None, "sha256": None, "git_sha1": None, "source": "blob name"}
            expected[rel][kind.replace("-", "_")] = seen["blob"]
    for rel, entry in (manifest or {}).get("files", {}).items():
        want = expected.setdefault(rel, {"size": None, "sha256": None, "git_sha1": None, "source": "manifest"})
        want["size"] = entry["size"]
        want["sha256"] = want["sha256"] or entry["sha256"]
    for shard in index_shards:
        expected.setdefault(shard, {"size": None, "sha256": None, "git_sha1": None, "source": "index"})
    return expected


# config.json values the plan needs for the KV cache and the context (seat/kv.py); the rest is left.
CONFIG_KEYS = (
    "model_type",
    "architectures",
    "torch_dtype",
    "dtype",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "hidden_size",
    "kv_lora_rank",
    "qk_rope_head_dim",
    "max_position_embeddings",
    "max_sequence_length",
    "seq_length",
    "sliding_window",
    "hybrid_override_pattern",
    "layer_types",
)


def read_model_config(folder):
    """The planning values of the checkpoint's config.json (CONFIG_KEYS), or None without one.

    Multimodal checkpoints keep the language model's values under text_config; those are used.
    """
    doc = read_json(os.path.join(folder, "config.json"))
    if not isinstance(doc, dict):
        return None
    text = doc.get("text_config") if isinstance(doc.get("text_config"), dict) else {}
    merged = dict(doc, **text)
    return {key: merged[key] for key in CONFIG_KEYS if key in merged}


def scan_checkpoint(path, revision=None, mode="quick", workers=4):
    """(report, files) for the checkpoint at `path`; `files` carries absolute paths for serving."""
    layout = detect_layout(path)
    folder = checkpoint_dir(path, layout, revision)
    if layout == "hf-cache" and revision is None:
        raise CheckpointError("%s is a Hugging Face cache entry: give the pinned 40-hex revision to read" % path)
    snapshot_present = os.path.isdir(folder)
    links_within = os.path.join(path, "blobs") if layout == "hf-cache" else folder
    files, escapes = walk_files(folder, links_within) if snapshot_present else ({}, [])
    manifest, manifest_warning = load_manifest(folder) if snapshot_present else (None, None)
    headers = {}
    for rel, seen in files.items():
        if rel.endswith(SAFETENSORS_SUFFIX) and not seen["dangling"]:
            try:
                headers[rel] = read_header(seen["abs"], seen["size"])
            except OSError as exc:
                headers[rel] = {
                    "status": "bad-header",
                    "problems": ["unreadable: %s" % exc],
                    "tensors": 0,
                    "tensor_bytes": 0,
                    "bytes_by_dtype": {},
                    "expected_size": None,
                    "tensor_names": [],
                }
    index = None
    if INDEX_NAME in files and not files[INDEX_NAME]["dangling"]:
        try:
            with open(files[INDEX_NAME]["abs"], "rb") as handle:
                index_doc = parse_json(handle.read())
        except (OSError, ValueError) as exc:
            index_doc = None
            index = {
                "shards": [],
                "total_size": None,
                "errors": ["%s is unreadable: %s" % (INDEX_NAME, exc)],
                "warnings": [],
            }
        if index is None:
            shard_tensors = {
                rel: (report["tensor_names"] if report["status"] != "bad-header" else None)
                for rel, report in headers.items()
            }
            index = check_index(index_doc, shard_tensors)
    expected = expectations(layout, files, manifest, (index or {}).get("shards", []))
    hashes = None
    if mode == "full":
        jobs = {
            rel: (seen["abs"], bool(expected.get(rel, {}).get("git_sha1")))
            for rel, seen in files.items()
            if not seen["dangling"]
        }
        hashes = hash_many(jobs, workers)
    observed = {rel: dict(seen, header=headers.get(rel)) for rel, seen in files.items()}
    judged = judge_files(observed, expected, manifest, hashes)
    tensors = summarise_tensors(headers.values())
    issues = revision_problems(layout, revision, snapshot_present, manifest.get("revision") if manifest else None)
    issues += [
        "%s links outside %s (refused: a checkpoint file may only link into %s)"
        % (rel, links_within, "the cache entry's blobs/" if layout == "hf-cache" else "its own folder")
        for rel in escapes
    ]
    gaps = {"errors": [], "warnings": []}
    if layout == "hf-cache" and snapshot_present:
        # A cache the operator filled has no manifest listing its files: hold it to what the engines read.
        blobs = os.listdir(os.path.join(path, "blobs"))
        repo = repo_of_entry(os.path.basename(os.path.normpath(path)))
        gaps = cache_gaps(revision, files, (index or {}).get("shards", []), blobs, repo)
    report = assemble_report(layout, path, revision, judged, tensors, index, issues + gaps["errors"], manifest, mode)
    report["warnings"].extend(gaps["warnings"])
    if manifest_warning:
        report["warnings"].append(manifest_warning)
    if layout == "hf-cache":
        report["refs"] = read_refs(path)
    report["model_config"] = read_model_config(folder) if snapshot_present else None
    if hashes is not None:
        for entry in report["files"]:
            entry["sha256"] = hashes.get(entry["path"], {}).get("sha256")
    for rel, seen in files.items():
        seen["expect"] = expected.get(rel, {})
    return report, files


def checkpoint_facts(params):
    """The checkpoint_facts module's run: check the request, scan, and hold the checkpoint to what
    the caller requires. CheckpointError with the message for people (and the facts, once read)."""
    path = params["path"]
    if params["revision"] is not None and not is_revision(params["revision"]):
        raise CheckpointError(
            "revision %r is not a pinned 40-hex commit id; pin the full commit of the model "
            "repository, not a branch or tag" % params["revision"]
        )
    if not os.path.isdir(path):
        raise CheckpointError(
            "checkpoint path %s is not a directory on this host; stage the checkpoint first "
            "(playbooks/weights.yml) or fix the path" % path
        )
    if params["hash_workers"] < 1:
        raise CheckpointError("hash_workers is %d; give 1 or more" % params["hash_workers"])
    try:
        report, _files = scan_checkpoint(path, params["revision"], params["mode"], params["hash_workers"])
    except OSError as exc:
        raise CheckpointError("could not read checkpoint %s: %s" % (path, exc))
    facts = {"seatwright_checkpoint": report}
    if params["require_verified"] and not report["verified"] or params["require_complete"] and not report["complete"]:
        raise CheckpointError(failure_message(path, report, params["require_verified"]), ansible_facts=facts)
    return dict(changed=False, ansible_facts=facts)
