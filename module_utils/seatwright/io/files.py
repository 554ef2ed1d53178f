"""Small I/O helpers shared by seatwright modules: atomic writes and fingerprinted caches.

Decisions never import this file; only modules (which run on the node) do.
"""
import hashlib
import json
import os
import tempfile
import time

from ansible.module_utils.seatwright.weights.checkpoint import parse_json


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
    atomic_write_bytes(path, (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8"), mode)


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
