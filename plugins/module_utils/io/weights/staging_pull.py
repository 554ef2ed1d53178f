"""The destination side of staging: pull, hash while the bytes arrive, resume, verify, rename.

Several files move at once, one HTTP connection per stream. Each stream reads large chunks into
one buffer, feeds the hash and the file from it, and lets go of the GIL while the kernel and
hashlib work, so hashing on one stream overlaps receiving and writing on the others. A file is
written under a temporary name, fsynced, compared with the digest the source promised, and only
then renamed into place; the parity manifest is written last, once every file has verified.

Nothing the source says is trusted until its listing's signature under the run's secret checks
out (weights/staging_auth.py). Every path this side writes is resolved and must stay under the
destination; transfers in progress are opened without following links, and a file arrives with
permissions no wider than the source's copy.
"""

import fcntl
import http.client
import mmap
import os
import posixpath
import re
import stat
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import Interrupted, StagingError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.files import (
    atomic_write_bytes,
    atomic_write_json,
    fingerprint,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights.checkpoint_scan import (
    hash_many,
    load_manifest,
    new_hashers,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights.swarm import Swarm
from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights.throttle import Throttle
from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights.transport import (
    BodyReader,
    PartialFile,
    Source,
    Watchdog,
    fsync_dir,
    make_dirs_under,
    resolve_under,
    usable_cores,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.weights.checkpoint import (
    MANIFEST_NAME,
    build_manifest,
    is_hidden,
    is_revision,
    is_staging_artifact,
    manifest_differs,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.weights.staging import (
    check_bind_address,
    digest_problem,
    failure_summary,
    fetch_units,
    link_target,
    needs_hash,
    parse_content_length,
    parse_listing,
    parse_source_url,
    partial_name,
    plan_unit,
    progress_record,
    stage_options,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.weights.staging_auth import (
    CHUNK_BYTES as CHUNK,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.weights.staging_auth import (
    valid_client_name,
)

# The checkpoint's name becomes a folder and a state file name: no separators, no dot-dot tricks.
_SAFE_NAME = re.compile(r"^[A-Za-z0-9._-]+$")


class Progress:
    """Bytes moved per transfer, written to a JSON file on the node while the run lasts."""

    def __init__(self, name, path, total, interval_s):
        self.name, self.path, self.total, self.interval_s = name, path, total, interval_s
        self.started = time.monotonic()
        self.done = {}
        # Figures the run adds to its last record (where the bytes came from).
        self.extra = {}
        self.lock = threading.Lock()
        self.stop = threading.Event()
        self.thread = None

    def add(self, target, count):
        with self.lock:
            self.done[target] = self.done.get(target, 0) + count

    def write(self, state):
        if not self.path:
            return
        with self.lock:
            units = dict(self.done)
        now = time.monotonic()
        record = progress_record(
            self.name, os.getpid(), state, sum(units.values()), self.total, self.started, now, units
        )
        # Wall-clock ends of the transfer, so that nodes' runs can be laid side by side (bench/fleet_staging.py).
        record["started_epoch"] = round(time.time() - (now - self.started), 3)
        record["updated_epoch"] = round(time.time(), 3)
        record.update(self.extra)
        try:
            atomic_write_json(self.path, record)
        except OSError:
            pass

    def __enter__(self):
        def loop():
            while not self.stop.wait(self.interval_s):
                self.write("running")

        self.thread = threading.Thread(target=loop)
        self.thread.daemon = True
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join()
        self.write("failed" if exc[0] else "done")


def _unlink_quietly(path):
    try:
        os.unlink(path)
    except OSError:
        pass


class Writer:
    """Writes one chunk while the stream receives and hashes the next: two buffers, one write in flight.

    A direct write blocks until the disk has the data; without this the disk would idle while the
    stream hashes, and verified staging would fall behind a plain copy.
    """

    def __init__(self, handle, progress, target):
        self.handle, self.progress, self.target = handle, progress, target
        self.pool = ThreadPoolExecutor(max_workers=1)
        self.pending = None

    def _write(self, chunk):
        self.handle.write(chunk)
        self.progress.add(self.target, len(chunk))

    def submit(self, chunk):
        self.wait()
        self.pending = self.pool.submit(self._write, chunk)

    def wait(self):
        pending, self.pending = self.pending, None
        if pending is not None:
            pending.result()

    def shutdown(self):
        self.pool.shutdown(wait=True)


def pull(source, unit, partial, offset, throttle, progress, direct_io):
    """Fetch `unit` into `partial` from byte `offset`, hashing everything; (digests, start offset, direct).

    The bytes already in the partial file are hashed first, so the final digest covers the file.
    """
    hashers = new_hashers(bool(unit.get("git_sha1")) and not unit.get("sha256"), unit["size"])
    handle = PartialFile(partial, direct_io, resume=offset > 0)
    writer = Writer(handle, progress, unit["target"])
    synced = False
    try:
        # Anonymous maps are page-aligned, as direct I/O requires of its buffers.
        buffers = [memoryview(mmap.mmap(-1, CHUNK)) for _ in range(2)]
        offset = handle.usable_prefix(min(offset, os.fstat(handle.fd).st_size))
        os.lseek(handle.fd, 0, os.SEEK_SET)
        remaining = offset
        while remaining:
            count = handle.read_into(buffers[0][: min(CHUNK, remaining)])
            if not count:
                break
            for hasher in hashers.values():
                hasher.update(buffers[0][:count])
            remaining -= count
        offset -= remaining
        os.ftruncate(handle.fd, offset)
        os.lseek(handle.fd, offset, os.SEEK_SET)
        path = "/file/" + quote(unit["target"], safe="/")
        headers = source.headers("GET", path)
        if offset:
            headers["Range"] = "bytes=%d-" % offset
        try:
            conn = source.connection()
            conn.request("GET", path, headers=headers)
            response = conn.getresponse()
        except (OSError, http.client.HTTPException) as exc:
            raise Interrupted("request failed: %s" % exc)
        if response.status not in (200, 206):
            # Only the start of an error's body is shown, and no more of it is read, however long or slow.
            with Watchdog(conn.sock, source.io_timeout_s):
                try:
                    detail = response.read(300).decode("utf-8", "replace")
                except (OSError, http.client.HTTPException):
                    detail = ""
            raise StagingError("the source answered HTTP %d for %s: %s" % (response.status, unit["target"], detail))
        if offset and response.status == 200:
            raise StagingError("the source ignored the resume request for %s" % unit["target"])
        length = parse_content_length(response.getheader("Content-Length"))
        if length is None or response.chunked:
            raise StagingError(
                "the source answered %s with Content-Length %r, not a plain byte count; something between "
                "this node and the source altered the answer. Nothing in place here was replaced; check the "
                "fabric path to the source and run again." % (unit["target"], response.getheader("Content-Length"))
            )
        if length != unit["size"] - offset:
            raise StagingError(
                "the source offers %d bytes of %s from byte %d; the listing promised %d"
                % (length, unit["target"], offset, unit["size"] - offset)
            )
        remaining, turn = length, 0
        with BodyReader(conn.sock, response) as body:
            while remaining:
                want = min(CHUNK, remaining)
                # Writer.submit waited for this buffer's previous write, so it is free to fill again.
                view, turn = buffers[turn], (turn + 1) % len(buffers)
                try:
                    count = body.readinto(view[:want])
                    error = None
                except (OSError, http.client.HTTPException) as exc:
                    count, error = 0, exc
                if count < want:
                    raise Interrupted(
                        "connection lost with %d bytes of %s to go: %s"
                        % (remaining, unit["target"], error or "the source closed it")
                    )
                chunk = view[:count]
                for hasher in hashers.values():
                    hasher.update(chunk)
                writer.submit(chunk)
                remaining -= count
                throttle.consume(count)
        # An empty body leaves the response open until it is read, and the stream's next request then fails.
        response.read()
        writer.wait()
        synced = True
    finally:
        writer.shutdown()
        if not synced:
            # The rest of this response may still be on the wire; the stream's next request needs a clean connection.
            source.connection(fresh=True)
            # A transfer that failed before its first byte leaves nothing to resume: no empty partial file.
            if not os.fstat(handle.fd).st_size:
                _unlink_quietly(partial)
        handle.close(sync=synced, mode=unit["mode"] if synced else None)
    return {algo: hasher.hexdigest() for algo, hasher in hashers.items()}, offset, handle.opened_direct


def transfer(source, unit, root, layout, plan, throttle, progress, options):
    """Bring one unit into place; returns its record. StagingError when it cannot verify."""
    make_dirs_under(root, posixpath.dirname(unit["target"]))
    final = resolve_under(root, unit["target"])
    partial = resolve_under(root, partial_name(unit["target"], layout, unit))
    started = time.monotonic()
    offset = plan["offset"]
    received = Counter(progress, unit["target"])
    restarted, interruptions = False, 0
    while True:
        try:
            digests, start, direct = pull(source, unit, partial, offset, throttle, received, options["direct_io"])
        except Interrupted as exc:
            source.connection(fresh=True)
            interruptions += 1
            if interruptions > options["retries"]:
                raise StagingError(
                    "%s (interrupted %d times; the partial file is kept and resumes on the next run)"
                    % (exc, interruptions)
                )
            time.sleep(min(2**interruptions, 10))
            offset = (_stat(partial) or {"size": 0})["size"]
            continue
        problem = digest_problem(unit, digests)
        if problem is None:
            break
        os.unlink(partial)
        if start:
            offset, restarted = 0, True
            continue
        raise StagingError(
            "the source sent bytes whose %s: its copy of %s is corrupt or was changed. "
            "Nothing in place here was replaced" % (problem, unit["source_path"])
        )
    os.replace(partial, final)
    fsync_dir(os.path.dirname(final))
    seconds = time.monotonic() - started
    return {
        "target": unit["target"],
        "action": plan["action"],
        "reason": plan["reason"],
        "bytes": received.count,
        "bytes_reused": 0 if restarted else unit["size"] - received.count,
        "seconds": round(seconds, 3),
        "mb_per_s": round(received.count / seconds / 1e6, 1) if seconds > 0 else None,
        "sha256": digests["sha256"],
        "interruptions": interruptions,
        "direct_io": direct,
    }


class Counter:
    """Bytes of one unit written from the network in this run, passed on to the run's progress."""

    def __init__(self, progress, target):
        self.progress, self.target, self.count = progress, target, 0

    def add(self, _target, count):
        self.count += count
        self.progress.add(self.target, count)


def _stat(path, regular=True):
    """{size, mtime_ns} of what is at `path` without following a link; None when absent (or not a plain file)."""
    try:
        info = os.lstat(path)
    except FileNotFoundError:
        return None
    if regular and not stat.S_ISREG(info.st_mode):
        return None
    return {"size": info.st_size, "mtime_ns": info.st_mtime_ns}


def _stale_partials(root, unit, keep):
    """Partial files of other versions of this file, which can never resume now."""
    head, base = os.path.split(os.path.join(root, unit["target"]))
    if not os.path.isdir(head) or os.path.islink(head):
        return []
    prefix = "." + base + "."
    return [
        os.path.join(head, name)
        for name in os.listdir(head)
        if name.startswith(prefix) and name.endswith(".partial") and os.path.join(head, name) != keep
    ]


def _own_leftovers(folder):
    """Temporary files a killed run of ours left in the checkpoint folder (manifest copies, link swaps)."""
    found = []
    for current, dirs, names in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in names:
            rel = os.path.relpath(os.path.join(current, name), folder).replace(os.sep, "/")
            if is_staging_artifact(rel) and not name.endswith((".partial", ".incomplete")) and name != MANIFEST_NAME:
                found.append(os.path.join(current, name))
    return found


def _extra_files(folder, listing):
    """Checkpoint files in the folder that the listing does not name (another revision, or left by hand)."""
    listed = set(entry["path"] for entry in listing["files"])
    extra = []
    if not os.path.isdir(folder):
        return extra
    for current, dirs, names in os.walk(folder):
        dirs[:] = [d for d in dirs if not d.startswith(".")]
        for name in names:
            rel = os.path.relpath(os.path.join(current, name), folder).replace(os.sep, "/")
            if rel not in listed and not is_staging_artifact(rel) and not is_hidden(rel):
                extra.append(rel)
    return sorted(extra)


def _link_changes(root, listing):
    """Snapshot symlinks (and refs) a cache entry needs that are missing or point elsewhere."""
    changes = []
    snapshot = os.path.join(root, "snapshots", listing["revision"])
    for entry in listing["files"]:
        link = os.path.join(snapshot, entry["path"])
        wanted = link_target(entry["path"], entry["blob"])
        if not (os.path.islink(link) and os.readlink(link) == wanted):
            changes.append(("link", "snapshots/%s/%s" % (listing["revision"], entry["path"]), wanted))
    for ref, value in listing["refs"].items():
        ref_path = os.path.join(root, "refs", ref)
        try:
            with open(ref_path) as handle:
                current = handle.read().strip()
        except (OSError, UnicodeDecodeError):
            current = None
        if current != value:
            changes.append(("ref", "refs/" + ref, value))
    return changes


def _apply_link_changes(root, changes):
    for kind, rel, value in changes:
        make_dirs_under(root, os.path.dirname(rel))
        path = resolve_under(root, rel)
        if kind == "ref":
            atomic_write_bytes(path, value.encode("ascii"))
            continue
        temporary = os.path.join(os.path.dirname(path), ".%s.seatwright-link" % os.path.basename(path))
        if os.path.lexists(temporary):
            os.unlink(temporary)
        os.symlink(value, temporary)
        os.replace(temporary, path)


def _narrow_modes(root, units, plans):
    """Files kept in place get no permission wider than the source's copy; returns the targets changed."""
    narrowed = []
    for target, unit in units.items():
        if plans[target]["action"] != "skip":
            continue
        path = resolve_under(root, target)
        mode = stat.S_IMODE(os.lstat(path).st_mode)
        if mode & ~unit["mode"] & 0o777 or mode & 0o7000:
            os.chmod(path, mode & unit["mode"] & 0o777)
            narrowed.append(target)
    return narrowed


class StageLock:
    """Only one staging run may write a destination at a time."""

    def __init__(self, state_dir, dest):
        os.makedirs(state_dir, exist_ok=True)
        self.path = os.path.join(state_dir, "stage-%s.lock" % fingerprint(os.path.abspath(dest))[:16])
        self.fd = None

    def __enter__(self):
        self.fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.pread(self.fd, 32, 0).decode("ascii", "replace").strip()
            os.close(self.fd)
            raise StagingError(
                "another staging run (pid %s) is writing this destination; wait for it to finish "
                "or stop it, then run again" % (holder or "unknown")
            )
        os.ftruncate(self.fd, 0)
        os.pwrite(self.fd, str(os.getpid()).encode("ascii"), 0)
        return self

    def __exit__(self, *exc):
        fcntl.flock(self.fd, fcntl.LOCK_UN)
        os.close(self.fd)


def confirm_source(url, secret, client, connect_timeout_s, io_timeout_s=30):
    """A summary of the signed listing served at `url`; StagingError when no source of this run answers there."""
    # The ready check ends within its own timeout, however slowly a listener answers.
    source = Source(url, secret, client, min(io_timeout_s, connect_timeout_s))
    listing = parse_listing(source.listing(connect_timeout_s), url)
    return {
        "name": listing["name"],
        "layout": listing["layout"],
        "revision": listing["revision"],
        "files": len(listing["files"]),
        "bytes": sum(entry["size"] for entry in listing["files"]),
    }


def stage(options, check_mode=False, now=time.time):
    """Run one destination's staging; returns the result dict a module exits with.

    options: as weights/staging.py stage_options makes them from the module's parameters: dest,
    source_url, token (the run's secret), client, name, revision, streams (1 or more), verify,
    direct_io, bandwidth_limit_bytes_s, state_dir, connect_timeout_s, io_timeout_s, retries,
    progress_interval_s, source_label, prune.
    """
    started = time.monotonic()
    source = Source(options["source_url"], options["token"], options["client"], options["io_timeout_s"])
    outcome = {"ok": False}
    warnings = []
    try:
        result = _stage(options, source, check_mode, now, started, outcome)
        outcome["ok"] = True
    finally:
        swarm = outcome.pop("swarm", None)
        if not source.done(outcome) and outcome["ok"] and source.proven:
            warnings.append(
                "the weights source at %s did not acknowledge this node's report of being done; it serves on "
                "until it is idle. Every file here verified." % options["source_url"]
            )
        serving = None
        if swarm is not None:
            # Peers may still need what this node holds: it serves on until they are done (or idle).
            # What happens there never undoes files that verified here.
            try:
                serving = swarm.finish(options.get("lifetime_s") or 7200)
            except Exception as exc:  # noqa: BLE001 (a peer's answer must not fail a node whose files verified)
                if not outcome["ok"]:
                    raise
                warnings.append(
                    "serving peers after this node's files verified ended early (%s: %s); every file here "
                    "verified." % (type(exc).__name__, exc)
                )
    if serving:
        result["peer_serving"] = serving
        warnings.extend(serving.pop("warnings", []))
    if warnings:
        result["warnings"] = warnings
    return result


def _refuse_linked_prune(dest):
    """StagingError when pruning would delete through a link: a planted link would aim it at any folder."""
    real = os.path.realpath(dest)
    if real != os.path.abspath(dest):
        raise StagingError(
            "weights_transfer_prune is on and the destination %s is reached through a link (it resolves to "
            "%s): pruning would delete every file there that the listing does not name. Nothing was "
            "deleted or written; give the real folder (%s) as the destination, or turn prune off." % (dest, real, real)
        )


def _stage(options, source, check_mode, now, started, outcome):
    # Options as weights/staging.py stage_options made them: in bytes, checked, the stream count derived.
    if options.get("prune"):
        _refuse_linked_prune(options["dest"])
    listing = parse_listing(source.listing(options["connect_timeout_s"]), options["source_url"])
    if options.get("revision") and listing["revision"] != options["revision"]:
        raise StagingError(
            "the source serves revision %s of %s, but %s is pinned; point the role at the source "
            "that holds the pinned revision" % (listing["revision"], listing["name"], options["revision"])
        )
    layout = listing["layout"]
    # The destination may live behind a link (a big disk mounted elsewhere); everything below it may not.
    root = os.path.realpath(options["dest"])
    folder_rel = "snapshots/%s" % listing["revision"] if layout == "hf-cache" else ""
    manifest_path = resolve_under(root, posixpath.join(folder_rel, MANIFEST_NAME))
    folder = os.path.dirname(manifest_path)
    units = fetch_units(listing)
    old_manifest, _warning = load_manifest(folder)
    manifest_entries = (old_manifest or {}).get("files", {})
    finals = {target: _stat(resolve_under(root, target)) for target in units}
    to_hash = {
        target: (os.path.join(root, target), bool(unit.get("git_sha1")) and not unit.get("sha256"))
        for target, unit in units.items()
        if needs_hash(unit, finals[target], manifest_entries, options["verify"])
    }
    hashed = hash_many(to_hash, options["streams"])
    plans, stale = {}, []
    for target, unit in units.items():
        partial_stat = _stat(resolve_under(root, partial_name(target, layout, unit)))
        plans[target] = plan_unit(
            unit, finals[target], hashed.get(target), partial_stat["size"] if partial_stat else None
        )
        if layout == "folder":
            stale.extend(_stale_partials(root, unit, resolve_under(root, partial_name(target, layout, unit))))
    stale.extend(_own_leftovers(folder) if os.path.isdir(folder) else [])
    extra = _extra_files(folder, listing)
    pending = {t: p for t, p in plans.items() if p["action"] != "skip"}
    result = {
        "name": listing["name"],
        "revision": listing["revision"],
        "layout": layout,
        "dest": options["dest"],
        "manifest": os.path.join(options["dest"], folder_rel, MANIFEST_NAME),
        "bytes_total": sum(u["size"] for u in units.values()),
        "streams": options["streams"],
        "files_skipped": len(units) - len(pending),
        "files_fetched": 0,
        "files_resumed": 0,
        "bytes_transferred": 0,
        "bytes_reused": 0,
        "transfers": [],
        "extra_files": extra,
        "pruned": [],
        "modes_narrowed": [],
        "plan": {t: {"action": p["action"], "reason": p["reason"]} for t, p in sorted(plans.items())},
    }
    links = _link_changes(root, listing) if layout == "hf-cache" else []
    hashed_sha = {t: d["sha256"] for t, d in hashed.items()}
    prune = options.get("prune") and extra
    if check_mode:
        manifest = None if pending else _manifest(listing, units, root, hashed_sha, manifest_entries, options, now)
        differs = bool(pending) or manifest_differs(old_manifest, manifest)
        result.update(
            changed=bool(pending or stale or links or differs or prune), manifest_written=False, verified=not differs
        )
        if manifest is not None:
            result["diff"] = _diff(old_manifest, manifest, result["manifest"])
        return result
    os.makedirs(root, exist_ok=True)
    with StageLock(options["state_dir"], root):
        for path in stale:
            os.unlink(path)
        if prune:
            for rel in extra:
                os.unlink(resolve_under(folder, rel))
            result["pruned"] = extra
        result["modes_narrowed"] = _narrow_modes(root, units, plans)
        if listing.get("piece_bytes"):
            records, failures, swarm = _run_pieces(source, listing, units, pending, root, layout, options, outcome)
            result["bytes_from_peers"] = sum(r["bytes_from_peers"] for r in records)
            result["piece_hash"] = swarm.piece_hash
            result["peers_refused"] = dict(swarm.banned)
        else:
            records, failures = _run_transfers(source, units, pending, root, layout, options)
        result["transfers"] = sorted(records, key=lambda r: r["target"])
        result["files_fetched"] = sum(1 for r in records if r["action"] == "fetch")
        result["files_resumed"] = sum(1 for r in records if r["action"] == "resume")
        result["bytes_transferred"] = sum(r["bytes"] for r in records)
        result["bytes_reused"] = sum(r["bytes_reused"] for r in records)
        transfer_s = max(time.monotonic() - started, 1e-6)
        result["transfer_s"] = round(transfer_s, 3)
        result["throughput_mb_per_s"] = round(result["bytes_transferred"] / transfer_s / 1e6, 1)
        outcome.update(bytes=result["bytes_transferred"])
        if failures:
            corrupt_here = [
                p
                for t in failures
                for p in units[t]["paths"]
                if plans[t]["reason"].startswith("in place") and p in manifest_entries
            ]
            if corrupt_here:
                os.unlink(manifest_path)
            raise StagingError(failure_summary(listing["name"], failures))
        _apply_link_changes(root, links)
        hashed_sha.update((r["target"], r["sha256"]) for r in records)
        manifest = _manifest(listing, units, root, hashed_sha, manifest_entries, options, now)
        write_manifest = manifest_differs(old_manifest, manifest)
        if write_manifest:
            make_dirs_under(root, folder_rel)
            atomic_write_json(resolve_under(root, posixpath.join(folder_rel, MANIFEST_NAME)), manifest)
        result["diff"] = _diff(old_manifest, manifest, result["manifest"])
    result.update(
        changed=bool(pending or stale or links or write_manifest or prune or result["modes_narrowed"]),
        manifest_written=write_manifest,
        verified=True,
        elapsed_s=round(time.monotonic() - started, 3),
    )
    return result


def _manifest(listing, units, root, digests, manifest_entries, options, now):
    """The parity manifest for the files in place: their sizes and times now, their verified digests."""
    files = {}
    for target, unit in units.items():
        for rel in unit["paths"]:
            sha = digests.get(target) or manifest_entries[rel]["sha256"]
            files[rel] = dict(_stat(os.path.join(root, target)), sha256=sha)
    return build_manifest(
        listing["name"],
        listing["revision"],
        listing["layout"],
        files,
        time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now())),
        options["source_label"],
    )


def _diff(old, new, path):
    return {"before": _manifest_text(old), "after": _manifest_text(new), "before_header": path, "after_header": path}


def _manifest_text(manifest):
    if not manifest:
        return ""
    lines = ["%s %d %s" % (rel, entry["size"], entry["sha256"]) for rel, entry in sorted(manifest["files"].items())]
    return "revision %s\n%s\n" % (manifest.get("revision"), "\n".join(lines))


def _run_transfers(source, units, pending, root, layout, options):
    """Every pending unit, largest first, `streams` at a time; (records, {target: error})."""
    throttle = Throttle(options["bandwidth_limit_bytes_s"])
    total = sum(units[t]["size"] - p["offset"] for t, p in pending.items())
    progress_path = (
        os.path.join(options["state_dir"], "progress-%s.json" % options["name"])
        if options.get("progress_interval_s")
        else None
    )
    records, failures = [], {}
    # Largest first: the largest file's hash is the one path no spreading can shorten, so it starts at once.
    order = sorted(pending, key=lambda t: -units[t]["size"])
    with Progress(options["name"], progress_path, total, options.get("progress_interval_s") or 1) as progress:
        with ThreadPoolExecutor(max_workers=max(1, options["streams"])) as pool:
            futures = {
                t: pool.submit(transfer, source, units[t], root, layout, pending[t], throttle, progress, options)
                for t in order
            }
            for target, future in futures.items():
                try:
                    records.append(future.result())
                except StagingError as exc:
                    failures[target] = str(exc)
                except OSError as exc:
                    failures[target] = "write failed here: %s" % exc
    return records, failures


def _progress_path(options):
    if not options.get("progress_interval_s"):
        return None
    return os.path.join(options["state_dir"], "progress-%s.json" % options["name"])


def _run_pieces(source, listing, units, pending, root, layout, options, outcome):
    """Every pending unit by piece, from the origin and the peers; this node serves peers meanwhile."""
    throttle = Throttle(options["bandwidth_limit_bytes_s"])
    total = sum(units[t]["size"] for t in pending)
    with Progress(options["name"], _progress_path(options), total, options.get("progress_interval_s") or 1) as progress:
        swarm = Swarm(source, listing, units, pending, root, layout, options, progress, throttle)
        if options.get("serve_address") and swarm.peers:
            swarm.serve(
                options["serve_address"],
                options["serve_port"],
                options.get("linger_s") or 15,
                options.get("upload_limit_bytes_s") or 0,
            )
            outcome["swarm"] = swarm
        records, failures = swarm.run()
        progress.extra["bytes_from_peers"] = sum(r["bytes_from_peers"] for r in records)
    return records, failures, swarm


def run_stage(params, check_mode, want_diff):
    """The weight_stage module's run: check the request, stage, and shape the result.

    StagingError with the message for people, naming the host's own failure apart from the source's.
    """
    check_stage_request(params)
    options = stage_options(params, usable_cores())
    try:
        parse_source_url(params["source_url"])
        result = stage(options, check_mode=check_mode)
    except OSError as exc:
        raise StagingError("staging %s into %s failed on this host: %s" % (params["name"], params["dest"], exc))
    diff = result.pop("diff", None)
    if want_diff and diff is not None:
        result["diff"] = diff
    return result


def check_stage_request(params):
    """StagingError naming the first name that cannot make a staging run (numbers: stage_options)."""
    if params["revision"] is not None and not is_revision(params["revision"]):
        raise StagingError("revision %r is not a pinned 40-hex commit id" % params["revision"])
    if not _SAFE_NAME.match(params["name"]):
        raise StagingError("name %r may hold only letters, digits, '.', '_' and '-'" % params["name"])
    if not valid_client_name(params["client"]):
        raise StagingError("client %r may hold only letters, digits and '._:@-' (1-128 characters)" % params["client"])
    problem = peers_problem(params)
    if problem:
        raise StagingError(problem)


def peers_problem(params):
    """Why the peer options cannot make a run (a sentence), or None."""
    peers = params.get("peers") or []
    names = set()
    for peer in peers:
        if not isinstance(peer, dict) or not valid_client_name(peer.get("name")):
            return "peers: each entry needs a name of letters, digits and '._:@-', got %r" % (peer,)
        try:
            parse_source_url(peer.get("url"))
        except StagingError as exc:
            return "peers: %s: %s" % (peer["name"], exc)
        if peer["name"] in names:
            return "peers: %s is listed twice" % peer["name"]
        names.add(peer["name"])
    ranks, rank = params.get("ranks") or 1, params.get("rank") or 0
    if ranks < 1 or not 0 <= rank < ranks:
        return "rank %s must be from 0 to ranks - 1 (ranks is %s)" % (rank, ranks)
    if peers and params.get("serve_address"):
        problem = check_bind_address(params["serve_address"])
        if problem:
            return "serve_address: %s" % problem
    return None


def source_ready(params):
    """The weight_source_ready module's run: the source's listing once it answers, StagingError otherwise."""
    if params["timeout_s"] < 1:
        raise StagingError("timeout_s is %d; give 1 or more" % params["timeout_s"])
    if not valid_client_name(params["client"]):
        raise StagingError("client %r may hold only letters, digits and '._:@-'" % params["client"])
    try:
        listing = confirm_source(params["source_url"], params["token"], params["client"], params["timeout_s"])
    except StagingError as exc:
        raise StagingError("staging stopped before any node connected: %s" % exc)
    except OSError as exc:
        raise StagingError("cannot check the weights source at %s: %s" % (params["source_url"], exc))
    return dict(changed=False, listing=listing)
