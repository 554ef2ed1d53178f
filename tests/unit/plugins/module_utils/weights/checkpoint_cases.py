"""Checkpoints for the checkpoint and staging tests, built in tmp_path.

The shards come from tests/fixtures/checkpoint/reference-2shard (written by the reference
safetensors library) or are packed here in the same format for larger sizes. RunningSource serves
one over loopback with the real staging source, for the staging tests.
"""

import hashlib
import json
import os
import random
import shutil
import threading

from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights import staging_source
from conftest import FIXTURES

REFERENCE = FIXTURES / "checkpoint" / "reference-2shard"
REVISION = "0123456789abcdef0123456789abcdef01234567"
OTHER_REVISION = "89abcdef0123456789abcdef0123456789abcdef"


def shard_bytes(tensors, seed=0):
    """A safetensors file for [(name, dtype, shape)], data pseudo-random (1-byte dtypes only sized by shape)."""
    widths = {"F32": 4, "F16": 2, "BF16": 2, "U8": 1, "I8": 1, "F8_E4M3": 1}
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, dtype, shape in tensors:
        count = 1
        for dim in shape:
            count *= dim
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + count * widths[dtype]]}
        offset += count * widths[dtype]
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    return len(raw).to_bytes(8, "little") + raw + random.Random(seed).randbytes(offset)


def big_shards(count=3, mib=2):
    """{name: bytes} for `count` shards of about `mib` MiB each, plus their index."""
    files, weight_map, total = {}, {}, 0
    for index in range(count):
        name = "model-%05d-of-%05d.safetensors" % (index + 1, count)
        tensors = [("model.layers.%d.w" % index, "U8", [mib * 1024, 1024]), ("model.layers.%d.n" % index, "F32", [64])]
        files[name] = shard_bytes(tensors, seed=index)
        weight_map.update({t[0]: name for t in tensors})
        total += mib * 1024 * 1024 + 256
    files["model.safetensors.index.json"] = json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}
    ).encode()
    files["config.json"] = b'{"hidden_size": 1024}\n'
    return files


def reference_files():
    return {path.name: path.read_bytes() for path in sorted(REFERENCE.iterdir())}


def write_folder(root, files):
    os.makedirs(root, exist_ok=True)
    for name, payload in files.items():
        path = os.path.join(root, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, "wb") as handle:
            handle.write(payload)
    return str(root)


def blob_name(name, payload):
    """How the Hub names a blob: sha256 for LFS files (the weights), git blob sha1 for the rest."""
    if name.endswith(".safetensors"):
        return hashlib.sha256(payload).hexdigest()
    return hashlib.sha1(b"blob %d\x00" % len(payload) + payload).hexdigest()


# What a real cache entry holds beside the weights: the engines read the model's shape from it
# (weights/hf_cache.py refuses a snapshot without one).
ENTRY_CONFIG = b'{"model_type": "llama"}\n'


def write_hf_entry(cache_root, files, revision=REVISION, repo="org/model"):
    """A cache entry models--org--model with blobs, a snapshot of relative symlinks and refs/main;
    a config.json is added where `files` has none, as every model repository has one."""
    files = dict({"config.json": ENTRY_CONFIG}, **files)
    entry = os.path.join(str(cache_root), "models--" + repo.replace("/", "--"))
    blobs = os.path.join(entry, "blobs")
    snapshot = os.path.join(entry, "snapshots", revision)
    os.makedirs(blobs, exist_ok=True)
    os.makedirs(snapshot, exist_ok=True)
    for name, payload in files.items():
        blob = blob_name(name, payload)
        with open(os.path.join(blobs, blob), "wb") as handle:
            handle.write(payload)
        link = os.path.join(snapshot, name)
        os.makedirs(os.path.dirname(link), exist_ok=True)
        os.symlink("../" * (2 + name.count("/")) + "blobs/" + blob, link)
    os.makedirs(os.path.join(entry, "refs"), exist_ok=True)
    with open(os.path.join(entry, "refs", "main"), "w") as handle:
        handle.write(revision)
    return entry


def blob_path(entry, name, revision=REVISION):
    return os.path.realpath(os.path.join(entry, "snapshots", revision, name))


def flip_byte(path, offset=-100):
    """Invert one byte in place, keeping size (and restoring mtime, as silent corruption would)."""
    info = os.stat(path)
    with open(path, "r+b") as handle:
        handle.seek(offset, os.SEEK_END if offset < 0 else os.SEEK_SET)
        byte = handle.read(1)
        handle.seek(-1, os.SEEK_CUR)
        handle.write(bytes([byte[0] ^ 0xFF]))
    os.utime(path, ns=(info.st_atime_ns, info.st_mtime_ns))


def truncate(path, cut):
    with open(path, "r+b") as handle:
        handle.truncate(os.path.getsize(path) - cut)


def copy_reference(dest):
    shutil.copytree(REFERENCE, dest)
    return str(dest)


class RunningSource:
    """A real staging source for the checkpoint at `path`, on 127.0.0.1, in a thread, holding `secret`."""

    def __init__(self, path, state_dir, secret, revision=REVISION, clients=99, port=0):
        listing, served, _ = staging_source.source_listing(path, revision, "m", state_dir)
        self.server = staging_source.bind_server(
            "127.0.0.1", port, secret, listing, served, clients, os.path.join(state_dir, "pid")
        )
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.port = self.server.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port

    def tamper(self, change):
        """What a source holding the secret, buggy or compromised, would sign and send."""
        change(self.server.listing)
        self.server.listing_bytes = json.dumps(self.server.listing).encode("utf-8")

    def stop(self):
        self.server.shutdown()
        self.server.server_close()
