"""Checkpoint decisions: safetensors headers, the shard index, HF cache naming, parity manifests.

Everything here takes data and returns data; reading files is checkpoint_scan.py's job. The same
functions judge a checkpoint for `checkpoint_facts`, for the staging source and for the check a
seat makes before it starts its engine offline.
"""

import re

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import CheckpointError
from ansible_collections.seatwright.fleet.plugins.module_utils.jsondoc import parse_json

MANIFEST_NAME = ".seatwright-manifest.json"
MANIFEST_FORMAT = "seatwright-parity/1"
INDEX_NAME = "model.safetensors.index.json"
SAFETENSORS_SUFFIX = ".safetensors"
# The safetensors reference implementation refuses headers above 100 MB; a larger length is damage.
MAX_HEADER_BYTES = 100 * 1000 * 1000

# Bits per element of every dtype the safetensors format names (sub-byte floats included).
DTYPE_BITS = {
    "BOOL": 8,
    "U8": 8,
    "I8": 8,
    "F8_E5M2": 8,
    "F8_E4M3": 8,
    "F8_E8M0": 8,
    "I16": 16,
    "U16": 16,
    "F16": 16,
    "BF16": 16,
    "I32": 32,
    "U32": 32,
    "F32": 32,
    "I64": 64,
    "U64": 64,
    "F64": 64,
    "C64": 64,
    "F4": 4,
    "F6_E2M3": 6,
    "F6_E3M2": 6,
}

_HEX40 = re.compile(r"^[0-9a-f]{40}$")
_HEX64 = re.compile(r"^[0-9a-f]{64}$")


def is_revision(value):
    """A pinned revision is a full 40-hex commit id, never a branch name."""
    return isinstance(value, str) and bool(_HEX40.match(value))


def is_sha256(value):
    return isinstance(value, str) and bool(_HEX64.match(value))


def blob_hash_kind(blob_name):
    """What an HF cache blob name promises: 'sha256' for LFS files, 'git-sha1' for small ones."""
    if is_sha256(blob_name):
        return "sha256"
    if isinstance(blob_name, str) and _HEX40.match(blob_name):
        return "git-sha1"
    return None


def git_blob_prefix(size):
    """Git hashes a blob as sha1 over this prefix followed by the content."""
    return b"blob %d\x00" % size


def header_length(first_eight):
    """The JSON header length from a safetensors file's first 8 bytes (little-endian u64)."""
    if len(first_eight) < 8:
        raise CheckpointError("file is shorter than the 8-byte safetensors length prefix")
    return int.from_bytes(first_eight[:8], "little")


def tensor_nbytes(dtype, shape):
    """Bytes a tensor of `dtype` and `shape` occupies, or None for a dtype this code does not know."""
    bits = DTYPE_BITS.get(dtype)
    if bits is None:
        return None
    count = 1
    for dim in shape:
        count *= dim
    return (count * bits + 7) // 8


def _tensor_problems(name, spec):
    if not isinstance(spec, dict):
        return ["tensor %s: entry is %s, expected an object" % (name, type(spec).__name__)]
    problems = []
    shape = spec.get("shape")
    offsets = spec.get("data_offsets")
    if not isinstance(spec.get("dtype"), str):
        problems.append("tensor %s: dtype %r is not a string" % (name, spec.get("dtype")))
    if not isinstance(shape, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in shape):
        problems.append("tensor %s: shape %r is not a list of non-negative integers" % (name, shape))
    if (
        not isinstance(offsets, list)
        or len(offsets) != 2
        or not all(isinstance(o, int) and not isinstance(o, bool) for o in offsets)
        or not 0 <= offsets[0] <= offsets[1]
    ):
        problems.append("tensor %s: data_offsets %r is not [begin, end] with 0 <= begin <= end" % (name, offsets))
    return problems


def parse_safetensors_header(header_bytes, length, file_size):
    """Judge one safetensors file from its JSON header and its size on disk.

    Returns tensors count, tensor bytes by dtype and in total, the size the header implies
    (8 + header length + the largest end offset) and the problems found. A file shorter than
    that size is truncated; a longer one carries trailing bytes no loader reads.
    """
    report = {
        "header_bytes": length,
        "tensors": 0,
        "tensor_bytes": 0,
        "bytes_by_dtype": {},
        "expected_size": None,
        "status": "ok",
        "problems": [],
        "tensor_names": [],
    }
    if length > MAX_HEADER_BYTES or 8 + length > file_size:
        report["status"] = "truncated" if length <= MAX_HEADER_BYTES else "bad-header"
        report["problems"].append("header length %d does not fit in a file of %d bytes" % (length, file_size))
        return report
    try:
        header = parse_json(header_bytes)
    except ValueError as exc:
        report["status"] = "bad-header"
        report["problems"].append("header is not JSON (%s)" % exc)
        return report
    if not isinstance(header, dict):
        report["status"] = "bad-header"
        report["problems"].append("header is a JSON %s, expected an object" % type(header).__name__)
        return report
    spans = []
    for name, spec in header.items():
        if name == "__metadata__":
            continue
        problems = _tensor_problems(name, spec)
        if problems:
            report["problems"].extend(problems)
            continue
        begin, end = spec["data_offsets"]
        nbytes = tensor_nbytes(spec["dtype"], spec["shape"])
        if nbytes is None:
            report["problems"].append("tensor %s: unknown dtype %s" % (name, spec["dtype"]))
        elif nbytes != end - begin:
            report["problems"].append(
                "tensor %s: %s%s needs %d bytes but its offsets span %d"
                % (name, spec["dtype"], spec["shape"], nbytes, end - begin)
            )
        spans.append((begin, end, name))
        report["tensor_names"].append(name)
        report["tensors"] += 1
        report["tensor_bytes"] += end - begin
        by_dtype = report["bytes_by_dtype"]
        by_dtype[spec["dtype"]] = by_dtype.get(spec["dtype"], 0) + end - begin
    report["problems"].extend(_coverage_problems(spans))
    data_end = max((end for _, end, _ in spans), default=0)
    report["expected_size"] = 8 + length + data_end
    if report["problems"]:
        report["status"] = "bad-header"
    elif file_size < report["expected_size"]:
        report["status"] = "truncated"
        report["problems"].append(
            "%d bytes on disk, the header needs %d (%d missing)"
            % (file_size, report["expected_size"], report["expected_size"] - file_size)
        )
    elif file_size > report["expected_size"]:
        report["status"] = "oversized"
        report["problems"].append(
            "%d bytes on disk, the header accounts for %d (%d trailing)"
            % (file_size, report["expected_size"], file_size - report["expected_size"])
        )
    return report


def _coverage_problems(spans):
    """Tensor data must tile the data section exactly: no gap, no overlap."""
    problems = []
    cursor = 0
    for begin, end, name in sorted(spans):
        if begin > cursor:
            problems.append("bytes %d-%d of the data section belong to no tensor (before %s)" % (cursor, begin, name))
        elif begin < cursor:
            problems.append("tensor %s overlaps the tensor before it at byte %d" % (name, begin))
        cursor = max(cursor, end)
    return problems


def check_index(index_doc, shard_tensors):
    """Compare `model.safetensors.index.json` with the shards' own headers.

    `shard_tensors` maps a shard's relative path to its tensor names, or to None when the shard
    is absent or unreadable. Returns {shards, total_size, errors, warnings}: errors make the
    checkpoint unusable (a shard or tensor the loader will look for is not there), warnings do not.
    """
    result = {"shards": [], "total_size": None, "errors": [], "warnings": []}
    if not isinstance(index_doc, dict) or not isinstance(index_doc.get("weight_map"), dict):
        result["errors"].append("%s has no weight_map object" % INDEX_NAME)
        return result
    weight_map = index_doc["weight_map"]
    metadata = index_doc.get("metadata") if isinstance(index_doc.get("metadata"), dict) else {}
    total = metadata.get("total_size")
    result["total_size"] = total if isinstance(total, int) and not isinstance(total, bool) else None
    wanted = {}
    for tensor, shard in weight_map.items():
        if not isinstance(shard, str):
            result["errors"].append("weight_map[%s] is %r, expected a file name" % (tensor, shard))
            continue
        wanted.setdefault(shard, set()).add(tensor)
    result["shards"] = sorted(wanted)
    for shard in result["shards"]:
        held = shard_tensors.get(shard)
        if held is None:
            result["errors"].append("index names shard %s, which is missing or unreadable" % shard)
            continue
        absent = sorted(wanted[shard] - set(held))
        if absent:
            result["errors"].append(
                "index places %d tensor(s) in %s that it does not hold, e.g. %s" % (len(absent), shard, absent[0])
            )
    for shard, held in sorted(shard_tensors.items()):
        if held is None:
            continue
        if shard not in wanted:
            result["warnings"].append("%s is not referenced by the index (a loader will ignore it)" % shard)
            continue
        unindexed = sorted(set(held) - wanted[shard])
        if unindexed:
            result["warnings"].append(
                "%s holds %d tensor(s) the index does not list, e.g. %s" % (shard, len(unindexed), unindexed[0])
            )
    return result


def index_total_warning(declared_total, tensor_bytes):
    """metadata.total_size should equal the shards' tensor bytes; a mismatch is worth a warning only."""
    if declared_total is None or declared_total == tensor_bytes:
        return None
    return "index metadata.total_size is %d, the shards hold %d tensor bytes" % (declared_total, tensor_bytes)


def parse_manifest(doc):
    """Validate a parity manifest; returns it normalised or raises CheckpointError."""
    if not isinstance(doc, dict) or doc.get("format") != MANIFEST_FORMAT:
        raise CheckpointError(
            "not a %s manifest (format=%r)" % (MANIFEST_FORMAT, doc.get("format") if isinstance(doc, dict) else None)
        )
    files = doc.get("files")
    if not isinstance(files, dict):
        raise CheckpointError("manifest has no files object")
    for rel, entry in files.items():
        if not isinstance(entry, dict) or not isinstance(entry.get("size"), int) or not is_sha256(entry.get("sha256")):
            raise CheckpointError("manifest entry %s needs an integer size and a 64-hex sha256" % rel)
    revision = doc.get("revision")
    if revision is not None and not is_revision(revision):
        raise CheckpointError("manifest revision %r is not a 40-hex commit id" % revision)
    return doc


def build_manifest(name, revision, layout, files, verified_at, source):
    """The parity record written beside a checkpoint once every file in it has verified.

    `files` maps a relative path to {size, sha256, mtime_ns}; mtime lets a quick check notice a
    file touched since it was hashed.
    """
    return {
        "format": MANIFEST_FORMAT,
        "name": name,
        "revision": revision,
        "layout": layout,
        "hash": "sha256",
        "source": source,
        "files": {
            rel: {"size": entry["size"], "sha256": entry["sha256"], "mtime_ns": entry["mtime_ns"]}
            for rel, entry in sorted(files.items())
        },
        "total_bytes": sum(entry["size"] for entry in files.values()),
        "verified_at": verified_at,
    }


def manifest_differs(old, new):
    """True when a new manifest says something the old one does not (the timestamp aside)."""
    if not isinstance(old, dict):
        return True
    strip = lambda doc: {k: v for k, v in doc.items() if k != "verified_at"}  # noqa: E731
    return strip(old) != strip(new)


def is_staging_artifact(rel):
    """Files seatwright itself leaves beside a checkpoint (also after a kill), never part of it.

    The manifest and its temporary copies (`.seatwright-manifest.json.XXXX`), transfers in progress
    (`.<name>.<digest>.partial`, `<blob>.incomplete`) and link swaps (`.<name>.seatwright-link`).
    """
    base = rel.rsplit("/", 1)[-1]
    return (
        base == MANIFEST_NAME
        or base.startswith(MANIFEST_NAME + ".")
        or base.endswith(".partial")
        or base.endswith(".incomplete")
        or base.endswith(".seatwright-link")
        or rel.startswith(".cache/")
    )


def is_hidden(rel):
    """Hidden paths (`.git/`, `.cache/`, dotfiles) are never checkpoint files: they are not listed or staged."""
    return any(part.startswith(".") for part in rel.split("/"))


def judge_files(observed, expected, manifest=None, hashes=None):
    """Classify every file of a checkpoint and decide whether it is complete and verified.

    observed: {rel: {size, mtime_ns, header (parse_safetensors_header report or None),
                     dangling (bool)}} for what is on disk.
    expected: {rel: {size or None, sha256 or None, git_sha1 or None, source}} for what should be
              there (from HF blob names, a manifest, or the index); may name absent files.
    manifest: a parsed manifest or None; hashes: {rel: {sha256, git_sha1}} when files were hashed.
    """
    files = []
    missing, truncated, mismatched, extra, unverified = [], [], [], [], []
    for rel in sorted(set(observed) | set(expected)):
        seen = observed.get(rel)
        want = expected.get(rel, {})
        entry = {
            "path": rel,
            "size": None,
            "expected_size": want.get("size"),
            "status": "ok",
            "problems": [],
            "hash_source": want.get("source"),
            "expected_sha256": want.get("sha256"),
            "expected_git_sha1": want.get("git_sha1"),
        }
        if seen is None or seen.get("dangling"):
            entry["status"] = "missing"
            entry["problems"].append("not on disk" if seen is None else "link points at a missing blob")
            missing.append(rel)
            files.append(entry)
            continue
        entry["size"] = seen["size"]
        header = seen.get("header")
        if manifest is not None and rel not in manifest["files"]:
            extra.append(rel)
        if header is not None and header["status"] != "ok":
            entry["status"] = header["status"]
            entry["problems"].extend(header["problems"])
        elif want.get("size") is not None and seen["size"] != want["size"]:
            entry["status"] = "truncated" if seen["size"] < want["size"] else "oversized"
            entry["problems"].append("%d bytes on disk, %d expected" % (seen["size"], want["size"]))
        if entry["status"] in ("truncated", "oversized", "bad-header"):
            truncated.append(rel)
        got = (hashes or {}).get(rel)
        if got is not None and entry["status"] == "ok":
            wrong = digest_mismatch(want, got)
            if wrong:
                entry["status"] = "hash-mismatch"
                entry["problems"].append(wrong)
                mismatched.append(rel)
        if entry["status"] == "ok" and not _has_parity(rel, seen, want, manifest, got):
            unverified.append(rel)
        files.append(entry)
    complete = not (missing or truncated or mismatched)
    return {
        "files": files,
        "missing": missing,
        "truncated": truncated,
        "mismatched": mismatched,
        "extra": extra,
        "unverified": unverified,
        "complete": complete,
        "verified": complete and not unverified and not extra,
    }


def digest_mismatch(want, got):
    """A sentence when computed digests contradict the expected ones, else None."""
    for algo in ("sha256", "git_sha1"):
        if want.get(algo) and got.get(algo) and want[algo] != got[algo]:
            return "%s is %s, expected %s (from %s)" % (algo, got[algo], want[algo], want.get("source"))
    return None


def _has_parity(rel, seen, want, manifest, got):
    """Hashed against an expectation, or recorded in a manifest as hashed and untouched since."""
    if got is not None:
        return bool(want.get("sha256") or want.get("git_sha1"))
    entry = (manifest or {}).get("files", {}).get(rel)
    return bool(entry and entry["size"] == seen["size"] and entry.get("mtime_ns") == seen.get("mtime_ns"))


def revision_problems(layout, requested, snapshot_present, manifest_revision):
    """Why the checkpoint on disk is not the pinned revision, as a list of sentences.

    A folder with no manifest cannot say which revision it holds; that is a missing proof, which
    `verified` reports, not damage.
    """
    if requested is None:
        return []
    if not is_revision(requested):
        return ["revision %r is not a pinned 40-hex commit id" % requested]
    if layout == "hf-cache":
        if not snapshot_present:
            return ["revision %s has no snapshot in this cache entry" % requested]
        if manifest_revision not in (None, requested):
            return ["the parity manifest is for revision %s" % manifest_revision]
        return []
    if manifest_revision is not None and manifest_revision != requested:
        return ["the folder holds revision %s (from its manifest)" % manifest_revision]
    return []


def summarise_tensors(headers):
    """Tensor counts and bytes over every readable safetensors header."""
    total = {"files": 0, "tensors": 0, "tensor_bytes": 0, "bytes_by_dtype": {}}
    for report in headers:
        if report is None or report["status"] == "bad-header":
            continue
        total["files"] += 1
        total["tensors"] += report["tensors"]
        total["tensor_bytes"] += report["tensor_bytes"]
        for dtype, count in report["bytes_by_dtype"].items():
            total["bytes_by_dtype"][dtype] = total["bytes_by_dtype"].get(dtype, 0) + count
    return total


def problem_lines(report):
    """What keeps a checkpoint from being complete, one sentence per kind of damage."""
    parts = []
    for label, key in (
        ("missing", "missing"),
        ("truncated or malformed", "truncated"),
        ("hash mismatch", "mismatched"),
    ):
        if report[key]:
            parts.append("%s: %s" % (label, ", ".join(_detail(report, rel) for rel in report[key])))
    parts.extend(report.get("errors", []))
    return parts


def failure_message(path, report, require_verified):
    """One paragraph for an operator: what is wrong with which files, and what to do."""
    parts = problem_lines(report)
    if require_verified and not parts:
        if report["extra"]:
            parts.append(
                "not in the parity manifest: %s (files of another revision or left by hand; staging "
                "with weights_transfer_prune: true removes them)" % ", ".join(report["extra"][:8])
            )
        if report["unverified"]:
            parts.append(
                "no parity evidence (no manifest entry, or changed since hashed): %s"
                % ", ".join(report["unverified"][:8])
            )
    return (
        "checkpoint %s is not usable: %s. Re-stage it with the weights role "
        "(playbooks/weights.yml), or run checkpoint_facts with mode=full to hash it." % (path, "; ".join(parts))
    )


def _detail(report, rel):
    for entry in report["files"]:
        if entry["path"] == rel and entry["problems"]:
            return "%s (%s)" % (rel, entry["problems"][0])
    return rel


def assemble_report(layout, path, revision, judged, tensors, index, revision_issues, manifest, mode):
    """The facts a play sees: per-file verdicts plus the checkpoint-wide ones."""
    errors = list(revision_issues) + list((index or {}).get("errors", []))
    warnings = list((index or {}).get("warnings", []))
    total_warning = index_total_warning((index or {}).get("total_size"), tensors["tensor_bytes"])
    if index and total_warning:
        warnings.append(total_warning)
    complete = judged["complete"] and not errors
    return {
        "path": path,
        "layout": layout,
        "revision": revision,
        "mode": mode,
        "files": judged["files"],
        "file_count": sum(1 for entry in judged["files"] if entry["status"] != "missing"),
        "total_bytes": sum(entry["size"] or 0 for entry in judged["files"]),
        "safetensors": tensors,
        "index": index,
        "missing": judged["missing"],
        "truncated": judged["truncated"],
        "mismatched": judged["mismatched"],
        "extra": judged["extra"],
        "unverified": judged["unverified"],
        "errors": errors,
        "warnings": warnings,
        "complete": complete,
        "verified": complete and judged["verified"],
        "revision_confirmed": bool(revision)
        and not revision_issues
        and (layout == "hf-cache" or bool(manifest and manifest.get("revision") == revision)),
        "parity": "hashed" if mode == "full" else ("manifest" if manifest else "none"),
        "manifest": (
            {"present": True, "revision": manifest.get("revision"), "verified_at": manifest.get("verified_at")}
            if manifest
            else {"present": False}
        ),
    }
