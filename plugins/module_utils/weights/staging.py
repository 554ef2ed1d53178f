"""Staging decisions: the source's listing, what each destination fetches, skips or resumes.

Pure functions only; the HTTP source lives in staging_source.py and the pulling destination in
staging_pull.py.
"""

import posixpath
import re
import unicodedata
from urllib.parse import urlsplit

from ansible_collections.seatwright.fleet.plugins.module_utils.addresses import plain_ip
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import StagingError
from ansible_collections.seatwright.fleet.plugins.module_utils.weights.checkpoint import is_revision, is_sha256
from ansible_collections.seatwright.fleet.plugins.module_utils.weights.pieces import (
    ORIGIN,
    check_piece_bytes,
    listing_pieces_problem,
)

LISTING_FORMAT = "seatwright-listing/2"
LAYOUTS = ("folder", "hf-cache")
_GIT_SHA1 = re.compile(r"^[0-9a-f]{40}$")
_BLOB = re.compile(r"^[0-9a-f]{40}([0-9a-f]{24})?$")
# The permission bits a listing may carry: nobody but the owner writes, no setuid, setgid or sticky bit.
LISTED_MODE_BITS = 0o755
# Control and invisible format characters forge log lines and hide what a name really is.
_UNPRINTABLE = ("Cc", "Cf", "Zl", "Zp")
_CONTENT_LENGTH = re.compile(r"^[0-9]{1,19}$")
# What one verified stream moves at most: one core's sha256 (1.06 GB/s measured on the 16-core device
# machine, 1.4 GB/s on the lab host with SHA extensions), since a file's sha256 cannot be split.
STREAM_BYTES_S = 1.0e9
# The fewest streams a node pulls with (the fixed count before streams were derived), and the most.
MIN_STREAMS = 4
# Cores one stream keeps busy on a node of few cores: its worker's splice and hash (two-core host).
CORES_PER_STREAM = 2
MAX_STREAMS = 32
# The most cores a node may have and still splice pieces into its files. Splicing saves a copy, so
# it spends the least CPU per byte, but each stream then receives and hashes in turn; receiving
# into buffers keeps three lanes busy at once. On two cores, where CPU is all that counts, verified
# staging splices at 1.42 GB/s against 1.33 buffered; on 8 and 16 cores buffered wins at every stream
# count up to 8, by 1.6-1.9x at the derived count (bench/results/staging-ram/device-2026-12-06).
SPLICE_MAX_CORES = 4
# Streams a node of more cores pulls with on the buffered path: buffered verified staging peaks at 6
# on 8 and 16 cores alike, and more streams only contend for the cores (device-2026-12-06).
BUFFERED_STREAMS = 6


def splice_pieces(cores, direct):
    """Whether a destination file takes its pieces by splice(2): buffered files on nodes of few cores only.

    `direct`: the file takes direct I/O (its bytes never pass the pages a splice fills, so the
    buffered path is the only one). `cores`: the cores this process may run on.
    """
    return not direct and (cores or 1) <= SPLICE_MAX_CORES


def write_turns(streams, shared_files):
    """Whether a node's streams take turns at each file's buffered writes (a lock that sleeps).

    `shared_files`: the files of this run that two streams could write at once (more than one piece).
    Only where the streams outnumber them do two streams surely write one file, and a writer waiting
    on the kernel's lock spins: there, at 12 and 16 streams into 8 files on the 16-core device, turns
    took 7 % of the CPU off each byte and verified staging ran 2-7 % faster. At 6 or 8 streams into
    8 files the two were level within the run's noise (bench/results/staging-ram/README.md).
    """
    return 0 < shared_files < streams


def build_listing(name, layout, revision, refs, files, problems, piece_bytes=None):
    """What the source serves: every file with its size, mode and the digest it must hash to.

    `files`: {rel: {size, mode, sha256, git_sha1, blob, pieces?}}. `refs` are the cache refs that
    point at the pinned revision, mirrored on destinations so that an offline engine resolves the
    name. With piece_bytes, each file also lists the sha256 of each piece, and its BLAKE3 when the
    source computed it (weights/pieces.py).
    """
    listing = {
        "format": LISTING_FORMAT,
        "name": name,
        "layout": layout,
        "revision": revision,
        "refs": {ref: value for ref, value in sorted((refs or {}).items()) if value == revision and safe_rel(ref)},
        "files": [
            {
                "path": rel,
                "size": entry["size"],
                "mode": entry.get("mode", 0o644) & LISTED_MODE_BITS,
                "sha256": entry.get("sha256"),
                "git_sha1": entry.get("git_sha1"),
                "blob": entry.get("blob"),
            }
            for rel, entry in sorted(files.items())
        ],
        "problems": list(problems),
    }
    if piece_bytes:
        listing["piece_bytes"] = piece_bytes
        for row in listing["files"]:
            row["pieces"] = files[row["path"]]["pieces"]
            if files[row["path"]].get("pieces_blake3"):
                row["pieces_blake3"] = files[row["path"]]["pieces_blake3"]
    return listing


def safe_rel(rel):
    """A relative path that stays inside the checkpoint folder once joined, with no hidden part.

    Hidden parts (`.git/`, dotfiles) are never checkpoint files and may hold credentials; control
    and format characters are never part of a checkpoint file's name.
    """
    if (
        not isinstance(rel, str)
        or not rel
        or len(rel) > 4096
        or rel.startswith("/")
        or "\\" in rel
        or any(unicodedata.category(char) in _UNPRINTABLE for char in rel)
    ):
        return False
    normal = posixpath.normpath(rel)
    return normal == rel and not any(part.startswith(".") for part in rel.split("/"))


def name_key(rel):
    """What a path is on a filesystem that folds case and normalises Unicode: two listed names must differ in it."""
    return "\0" + unicodedata.normalize("NFC", rel).casefold()


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def parse_listing(doc, source):
    """Validate the listing a source sent; StagingError names the first thing wrong with it.

    Every field is checked for its type before it is used: a listing is input from the network.
    """
    if not isinstance(doc, dict) or doc.get("format") != LISTING_FORMAT:
        raise StagingError(
            "source %s did not send a %s listing: is another service on that port?" % (source, LISTING_FORMAT)
        )
    name = doc.get("name")
    if not isinstance(name, str) or not name:
        raise StagingError("source %s sent a listing whose field 'name' is %r, expected a text label" % (source, name))
    problems = doc.get("problems", [])
    if not isinstance(problems, list) or not all(isinstance(p, str) for p in problems):
        raise StagingError("source %s sent a listing whose field 'problems' is not a list of sentences" % source)
    if problems:
        raise StagingError(
            "source %s refuses to serve checkpoint %s: %s. Nothing was written here; "
            "repair or re-download the source copy, then run again." % (source, name, "; ".join(problems))
        )
    if doc.get("layout") not in LAYOUTS:
        raise StagingError("source %s sent layout %r, expected one of %s" % (source, doc.get("layout"), LAYOUTS))
    revision = doc.get("revision")
    if doc["layout"] == "hf-cache" and not is_revision(revision):
        raise StagingError("source %s sent a cache entry without a 40-hex revision" % source)
    if revision is not None and not is_revision(revision):
        raise StagingError("source %s sent revision %r, expected a 40-hex commit id or none" % (source, revision))
    refs = doc.get("refs")
    if not isinstance(refs, dict):
        raise StagingError(
            "source %s sent a listing whose field 'refs' is %s, expected an object of ref names"
            % (source, type(refs).__name__ if refs is not None else "missing")
        )
    for ref, value in refs.items():
        if not safe_rel(ref):
            raise StagingError(
                "source %s lists an unsafe ref name %r: a ref must be a plain relative name "
                "inside refs/" % (source, ref)
            )
        if value != revision:
            raise StagingError(
                "source %s lists ref %s -> %r, which is not the pinned revision %s" % (source, ref, value, revision)
            )
    if "piece_bytes" in doc and check_piece_bytes(doc["piece_bytes"]):
        raise StagingError("source %s sent a listing whose %s" % (source, check_piece_bytes(doc["piece_bytes"])))
    files = doc.get("files")
    if not isinstance(files, list) or not files:
        raise StagingError("source %s lists no files for checkpoint %s" % (source, name))
    seen = {}
    for entry in files:
        rel = entry.get("path") if isinstance(entry, dict) else None
        if not safe_rel(rel):
            raise StagingError("source %s lists an unsafe path %r" % (source, rel))
        if rel in seen:
            raise StagingError("source %s lists %s twice" % (source, rel))
        other = seen.get(name_key(rel))
        if other is not None:
            raise StagingError(
                "source %s lists %r and %r, names that are one file on a filesystem that folds case or "
                "normalises Unicode (NFC): one would overwrite the other. Nothing was written here; rename one "
                "on the source." % (source, other, rel)
            )
        seen[rel] = rel
        seen[name_key(rel)] = rel
        if not _is_int(entry.get("size")) or entry["size"] < 0:
            raise StagingError("source %s lists %s without a size" % (source, rel))
        if not _is_int(entry.get("mode")) or entry["mode"] < 0 or entry["mode"] & ~LISTED_MODE_BITS:
            raise StagingError(
                "source %s lists %s with mode %s, expected permission bits within 0o%o (no write for group or "
                "others, no setuid, setgid or sticky bit): a file staged here must not be writable by other "
                "users. Nothing was written here." % (source, rel, _mode_text(entry.get("mode")), LISTED_MODE_BITS)
            )
        for field in ("sha256", "git_sha1", "blob"):
            if entry.get(field) is not None and not isinstance(entry[field], str):
                raise StagingError(
                    "source %s lists %s with a %s of type %s, expected text"
                    % (source, rel, field, type(entry[field]).__name__)
                )
        if not (is_sha256(entry.get("sha256")) or _GIT_SHA1.match(entry.get("git_sha1") or "")):
            raise StagingError("source %s lists %s without a sha256 or git blob digest" % (source, rel))
        if doc["layout"] == "hf-cache" and not _BLOB.match(entry.get("blob") or ""):
            raise StagingError("source %s lists %s without a cache blob name" % (source, rel))
        if "piece_bytes" in doc:
            problem = listing_pieces_problem(entry, doc["piece_bytes"])
            if problem:
                raise StagingError("source %s lists %s with pieces that do not fit: %s" % (source, rel, problem))
    return doc


def _mode_text(mode):
    return "0o%o" % mode if _is_int(mode) and mode >= 0 else repr(mode)


def parse_content_length(header):
    """The byte count a Content-Length header announces, or None when it is not a plain decimal count."""
    text = header.strip() if isinstance(header, str) else ""
    return int(text) if _CONTENT_LENGTH.match(text) else None


def check_bind_address(address):
    """None when `address` is one IP address a source may listen on, else why not.

    The source listens on the node's declared fabric address only: never the wildcard (0.0.0.0,
    ::, empty), which would serve on every network the node is on, nor a host name that could
    resolve anywhere.
    """
    try:
        parsed = plain_ip(address or "")
    except ValueError:
        return "bind address %r is not an IP address; give the node's fabric address (seatwright_node_fabric_ip)" % (
            address,
        )
    if parsed.is_unspecified or parsed.is_multicast or str(parsed) == "255.255.255.255":
        return (
            "bind address %s would listen on every network or none; give the node's fabric address "
            "(seatwright_node_fabric_ip)" % parsed
        )
    return None


def fetch_units(listing):
    """{target: unit}: one transfer per distinct blob (cache) or file (folder).

    A target is the destination path relative to the destination root: `blobs/<name>` in a
    cache entry, the file's own path in a folder.
    """
    units = {}
    for entry in listing["files"]:
        if listing["layout"] == "hf-cache":
            target = "blobs/" + entry["blob"]
        else:
            target = entry["path"]
        unit = units.setdefault(
            target,
            {
                "target": target,
                "source_path": entry["path"],
                "size": entry["size"],
                "mode": 0o777,
                "sha256": entry.get("sha256"),
                "git_sha1": entry.get("git_sha1"),
                "pieces": entry.get("pieces"),
                "pieces_blake3": entry.get("pieces_blake3"),
                "paths": [],
            },
        )
        unit["paths"].append(entry["path"])
        # One blob serves every path that names it: it gets no permission any of them lacks.
        unit["mode"] &= entry.get("mode", 0o644)
    return units


def stream_count(cores, nic_bytes_s=None, override=None):
    """Pieces or files a destination pulls at once: `override` when given (1 or more), else derived from the node.

    A node that splices (splice_pieces: few cores) keeps one stream per CORES_PER_STREAM cores
    busy. A node of more cores receives into buffers, and its streams stop gaining at
    BUFFERED_STREAMS (on the 16-core device machine, the source on the same cores, buffered verified
    moved 8.05, 9.31, 9.22 and 8.05 GB/s at 4, 6, 8 and 16 streams in one call; in another, with the
    pull on 8 cores of its own, 10.90, 11.30 and 11.47 at 4, 6 and 8:
    bench/results/staging-ram/device-2026-12-06). No more
    streams than the NIC (when its speed is known) can fill at STREAM_BYTES_S each; never fewer than
    MIN_STREAMS (latency hides behind them) nor more than MAX_STREAMS.
    """
    if override:
        return override
    cores = cores or 1
    want = max(1, cores // CORES_PER_STREAM) if splice_pieces(cores, False) else BUFFERED_STREAMS
    if nic_bytes_s:
        want = min(want, -(-int(nic_bytes_s) // int(STREAM_BYTES_S)))
    return max(MIN_STREAMS, min(MAX_STREAMS, want))


def stage_options(params, cores):
    """A destination run's options from weight_stage's parameters, converted and range-checked in one place.

    MB/s become bytes/s (bandwidth_limit_bytes_s, upload_limit_bytes_s, nic_bytes_s) and the stream
    count is derived for a node of `cores` (stream_count) unless one is given. StagingError names
    the first number that cannot make a run; staging_pull and swarm take the result as it is.
    """
    if params.get("streams") is not None and params["streams"] < 0:
        raise StagingError(
            "streams is %d; give 1 or more, or 0 to derive it from this node's cores" % params["streams"]
        )
    for field in ("connect_timeout_s", "io_timeout_s"):
        if params[field] < 1:
            raise StagingError("%s is %d; give 1 or more" % (field, params[field]))
    for field in (
        "retries",
        "progress_interval_s",
        "bandwidth_limit_mb_per_s",
        "nic_mb_per_s",
        "upload_limit_mb_per_s",
        "linger_s",
    ):
        if (params.get(field) or 0) < 0:
            raise StagingError("%s is %s; give 0 or more" % (field, params[field]))
    nic_bytes_s = int((params.get("nic_mb_per_s") or 0) * 1e6)
    return dict(
        params,
        bandwidth_limit_bytes_s=int((params.get("bandwidth_limit_mb_per_s") or 0) * 1e6),
        upload_limit_bytes_s=int((params.get("upload_limit_mb_per_s") or 0) * 1e6),
        nic_bytes_s=nic_bytes_s,
        streams=stream_count(cores, nic_bytes_s, params.get("streams")),
    )


def partial_name(target, layout, unit):
    """Where a transfer in progress lives; tied to the expected digest so a new version never resumes an old one."""
    if layout == "hf-cache":
        return target + ".incomplete"
    head, base = posixpath.split(target)
    digest = unit.get("sha256") or unit.get("git_sha1")
    return posixpath.join(head, ".%s.%s.partial" % (base, digest[:12]))


def digest_problem(unit, digests):
    """Why computed digests do not match a unit's expectation, or None when they do."""
    if unit.get("sha256"):
        if digests.get("sha256") != unit["sha256"]:
            return "sha256 %s, expected %s" % (digests.get("sha256"), unit["sha256"])
        return None
    if digests.get("git_sha1") != unit["git_sha1"]:
        return "git blob sha1 %s, expected %s" % (digests.get("git_sha1"), unit["git_sha1"])
    return None


def needs_hash(unit, final, manifest_entries, verify):
    """Whether a destination file already in place must be hashed before it can be trusted.

    In 'full' mode every present file is hashed. In 'quick' mode the parity manifest vouches for
    a file it recorded with the same size, modification time and expected digest.
    """
    if final is None or final["size"] != unit["size"]:
        return False
    if verify == "full":
        return True
    for rel in unit["paths"]:
        entry = manifest_entries.get(rel)
        if (
            entry is None
            or entry["size"] != unit["size"]
            or entry.get("mtime_ns") != final["mtime_ns"]
            or (unit.get("sha256") and entry["sha256"] != unit["sha256"])
        ):
            return True
    return False


def plan_unit(unit, final, digests, partial_size):
    """One of skip / fetch / resume for a unit, with the offset to start at and a reason.

    final: {size, mtime_ns} of the file in place, or None. digests: its digests when it was
    hashed, None when the manifest vouched for it. partial_size: bytes of an interrupted
    transfer of the same version, or None.
    """
    reason = None
    if final is not None:
        if final["size"] != unit["size"]:
            reason = "in place with %d bytes, the source has %d" % (final["size"], unit["size"])
        elif digests is None:
            return {"action": "skip", "offset": 0, "reason": "vouched for by the parity manifest"}
        else:
            problem = digest_problem(unit, digests)
            if problem is None:
                return {"action": "skip", "offset": 0, "reason": "in place and hashes as expected"}
            reason = "in place but corrupt (%s)" % problem
    if partial_size is not None and 0 < partial_size <= unit["size"]:
        return {
            "action": "resume",
            "offset": partial_size,
            "reason": (reason or "missing") + "; resuming an interrupted transfer at byte %d" % partial_size,
        }
    return {"action": "fetch", "offset": 0, "reason": reason or "missing"}


def link_target(rel, blob):
    """The relative symlink a cache snapshot uses for `rel`: ../../blobs/<blob>, deeper for nested files."""
    depth = rel.count("/")
    return "../" * (2 + depth) + "blobs/" + blob


def throttle_step(allowance, idle_s, count, rate_bytes_s, burst_bytes):
    """(allowance left, seconds to wait) for sending `count` bytes under a cap: a token bucket.

    The allowance refills at the rate while nothing is sent, but never past `burst_bytes`: a cap
    that averaged since its start would let a source idle while the nodes start up send the next
    seconds' worth at once, faster than the stated rate.
    """
    if not rate_bytes_s:
        return allowance, 0.0
    allowance = min(burst_bytes, allowance + idle_s * rate_bytes_s) - count
    return allowance, (-allowance / float(rate_bytes_s) if allowance < 0 else 0.0)


def progress_record(name, pid, state, done, total, started_at, now, units):
    """The progress file's content: totals, rate, time left and each transfer's share."""
    elapsed = max(now - started_at, 1e-6)
    rate = done / elapsed
    return {
        "name": name,
        "pid": pid,
        "state": state,
        "bytes_done": done,
        "bytes_total": total,
        "percent": round(100.0 * done / total, 1) if total else 100.0,
        "rate_mb_per_s": round(rate / 1e6, 1),
        "eta_s": round((total - done) / rate, 1) if rate > 0 and total > done else 0.0,
        "elapsed_s": round(elapsed, 1),
        "transfers": units,
    }


def parse_source_url(url):
    """(host, port) from http://host:port; StagingError when it is anything else."""
    parts = urlsplit(url or "")
    if parts.scheme != "http" or not parts.hostname or parts.path not in ("", "/"):
        raise StagingError("source_url %r is not http://<address>:<port> (the weights source on the fabric)" % url)
    try:
        port = parts.port or 80
    except ValueError:
        raise StagingError("source_url %r has an invalid port" % url)
    return parts.hostname, port


def failure_summary(name, failures):
    """One paragraph for a failed run: each file that failed and why, and what happened here."""
    lines = ["%s: %s" % (target, why) for target, why in sorted(failures.items())]
    return (
        "staging %s failed for %d file(s): %s. Files already in place were left as they were and "
        "no parity manifest was written; fix the cause and run again (completed files are kept, "
        "interrupted ones resume)." % (name, len(lines), "; ".join(lines))
    )


def peer_list(hosts, addresses, port):
    """[{name, url}] for the run's destinations from their fabric addresses; StagingError names a gap.

    hosts: the play's hosts in order. addresses: {host: fabric address or None}.
    """
    peers = []
    for host in hosts:
        if str(host) == ORIGIN:
            # A destination calls the source by this name: a peer of the same name would stand in for it.
            raise StagingError(
                "host %s cannot take part in peer-assisted staging: its name is the one destinations give "
                "the source. Rename the host in the inventory, or set weights_peer_assist: false." % host
            )
        address = addresses.get(host)
        problem = check_bind_address(address) if address else "no fabric address"
        if problem:
            raise StagingError(
                "host %s cannot take part in peer-assisted staging: %s. Declare seatwright_node_fabric_ip "
                "for it, or set weights_peer_assist: false." % (host, problem)
            )
        shown = "[%s]" % address if ":" in address else address
        peers.append({"name": str(host), "url": "http://%s:%d" % (shown, int(port))})
    return peers
