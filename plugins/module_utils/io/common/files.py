"""Small I/O helpers shared by seatwright modules: atomic writes and fingerprinted caches.

Decisions never import this file; only modules (which run on the node) do.
"""

import hashlib
import json
import os
import tempfile
import time

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.jsondoc import finite, parse_json


def fingerprint(data):
    """Stable sha256 of a JSON-serialisable value, used to tell when a probe's inputs changed."""
    blob = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def atomic_write_bytes(path, payload, mode=0o644):
    """Write `payload` to `path` so that readers see the old file or the new one, never half."""
    directory = os.path.dirname(os.path.abspath(path)) or "."
    os.makedirs(directory, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(path), dir=directory)
    try:
        with os.fdopen(fd, "wb") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode)
        os.replace(tmp, path)
        dir_fd = os.open(directory, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_json(path, data, mode=0o644):
    """Standard JSON only: NaN and Infinity (which other readers refuse) are written as null."""
    clean, _notes = finite(data)
    text = json.dumps(clean, indent=2, sort_keys=True, allow_nan=False)
    atomic_write_bytes(path, (text + "\n").encode("utf-8"), mode)


def read_json(path):
    """The parsed JSON at `path`, or None when it is missing or unreadable (a cache miss)."""
    try:
        with open(path, "rb") as handle:
            return parse_json(handle.read())
    except (OSError, ValueError):
        return None


def cache_lookup(path, fingerprint_value, max_age_s, now=None):
    """A cached record still valid for these inputs, else None.

    The record is valid while its `fingerprint` matches and it is younger than `max_age_s`.
    """
    record = read_json(path)
    if not isinstance(record, dict) or record.get("fingerprint") != fingerprint_value:
        return None
    measured_at = record.get("measured_at_epoch")
    if not isinstance(measured_at, (int, float)):
        return None
    now = time.time() if now is None else now
    if max_age_s is not None and now - measured_at > max_age_s:
        return None
    return record


def _mode(value, default):
    if value in (None, ""):
        return default
    return int(str(value), 8) if not isinstance(value, int) else value


def converge_files(folders, files, check_mode=False):
    """Folders and whole files made to match, in one pass; only what differs is touched.

    `folders`: [{path, mode}]; `files`: [{path, content, mode}] (owner and group are root's when
    this runs as root). Files are written atomically; their folders are created as needed.
    Returns [{path, kind, changed, before, after}] (before/after: file text, for --diff).
    """
    owned = os.geteuid() == 0
    results = []
    for folder in folders:
        path, mode = folder["path"], _mode(folder.get("mode"), 0o755)
        try:
            current = os.stat(path)
            changed = (current.st_mode & 0o7777) != mode or (owned and (current.st_uid, current.st_gid) != (0, 0))
            exists = True
        except OSError:
            changed, exists = True, False
        if changed and not check_mode:
            if not exists:
                os.makedirs(path, mode)
            os.chmod(path, mode)
            if owned:
                os.chown(path, 0, 0)
        results.append({"path": path, "kind": "folder", "changed": changed})
    for item in files:
        path, mode = item["path"], _mode(item.get("mode"), 0o644)
        payload = item["content"].encode("utf-8")
        try:
            with open(path, "rb") as handle:
                before = handle.read()
            current = os.stat(path)
            attrs_differ = (current.st_mode & 0o7777) != mode or (owned and (current.st_uid, current.st_gid) != (0, 0))
        except OSError:
            before, attrs_differ = None, True
        changed = before != payload or attrs_differ
        if changed and not check_mode:
            if before != payload:
                atomic_write_bytes(path, payload, mode)
            os.chmod(path, mode)
            if owned:
                os.chown(path, 0, 0)
        results.append(
            {
                "path": path,
                "kind": "file",
                "changed": changed,
                "before": before.decode("utf-8", "replace") if before is not None else "",
                "after": item["content"],
            }
        )
    return results


def node_files(folders, files, check_mode=False, want_diff=False):
    """The node_files module's run: check the entries, converge them, and report what changed.

    SeatwrightError names the entry or the path that could not be made.
    """
    problem = _entries_problem(folders, "folders", ["path"]) or _entries_problem(files, "files", ["path", "content"])
    if problem:
        raise SeatwrightError(problem)
    try:
        results = converge_files(folders, files, check_mode)
    except (OSError, ValueError) as exc:
        raise SeatwrightError("could not write %s: %s" % (getattr(exc, "filename", None) or "a file", exc))
    changed = [r for r in results if r["changed"]]
    result = {
        "changed": bool(changed),
        "changed_paths": [r["path"] for r in changed],
        "paths": [{"path": r["path"], "kind": r["kind"], "changed": r["changed"]} for r in results],
    }
    if want_diff:
        result["diff"] = [
            {"before_header": r["path"], "after_header": r["path"], "before": r["before"], "after": r["after"]}
            for r in changed
            if r["kind"] == "file"
        ]
    return result


def _entries_problem(entries, kind, needs):
    for position, entry in enumerate(entries):
        missing = [key for key in needs if not isinstance(entry.get(key), str)]
        if missing or not entry["path"].startswith("/"):
            return "%s[%d]: expected an absolute path and %s, got %r" % (kind, position, ", ".join(needs), entry)
    return None


def file_sha256(path, chunk=8 * 1024 * 1024):
    """The sha256 hex digest of one file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for part in iter(lambda: handle.read(chunk), b""):
            digest.update(part)
    return digest.hexdigest()


def tree_digests(root, folders, skip=("__pycache__",)):
    """{relative path: sha256} of every file under `folders` of `root` (missing folders give nothing)."""
    digests = {}
    for top in folders:
        for folder, dirs, files in os.walk(os.path.join(root, top)):
            dirs[:] = sorted(d for d in dirs if d not in skip)
            for name in files:
                if name.endswith(".pyc"):
                    continue
                path = os.path.join(folder, name)
                digests[os.path.relpath(path, root)] = file_sha256(path)
    return digests
