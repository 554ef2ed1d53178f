#!/usr/bin/env python3
"""Write a synthetic safetensors checkpoint with real headers and a shard index.

Standard library only, so it runs inside the lab nodes. The layout is either a plain model
folder or a Hugging Face cache entry (blobs named by sha256 / git blob sha1, a snapshot of
symlinks, refs/main), which is what nodes usually hold. Tensor data is pseudo-random and
deterministic for a seed: no transport or filesystem can compress or deduplicate it.

  make_checkpoint.py --out /srv/hf --layout hf-cache --shards 4 --shard-mib 1024
"""

import argparse
import hashlib
import json
import os
import random
import sys

HIDDEN = 4096
LAYERS_PER_SHARD = 4
BLOCK = 16 * 1024 * 1024


class Filler:
    """Pseudo-random bytes: one random block, rotated differently for every chunk written."""

    def __init__(self, seed):
        self.block = random.Random(seed).randbytes(BLOCK)
        self.turn = 0

    def chunk(self, size):
        self.turn += 1
        shift = (self.turn * 1000003) % BLOCK
        rotated = self.block[shift:] + self.block[:shift]
        return rotated[:size]


def layer_tensors(layer, layer_bytes):
    """An NVFP4-flavoured layer: BF16 attention, packed 4-bit experts with FP8 scales, an F32 norm."""
    prefix = "model.layers.%d." % layer
    attn_rows = max(1, layer_bytes // 4 // (HIDDEN * 2))
    rest = layer_bytes - attn_rows * HIDDEN * 2 - HIDDEN * 4
    expert_rows = max(1, rest // (HIDDEN // 2 + HIDDEN // 16))
    return [
        (prefix + "input_layernorm.weight", "F32", [HIDDEN]),
        (prefix + "self_attn.qkv_proj.weight", "BF16", [attn_rows, HIDDEN]),
        (prefix + "mlp.experts.w13_weight", "U8", [expert_rows, HIDDEN // 2]),
        (prefix + "mlp.experts.w13_weight_scale", "F8_E4M3", [expert_rows, HIDDEN // 16]),
    ]


DTYPE_BYTES = {"F32": 4, "BF16": 2, "U8": 1, "F8_E4M3": 1}


def shard_header(tensors):
    """The safetensors header bytes (padded to 8) and the data length they describe."""
    header, offset = {"__metadata__": {"format": "pt"}}, 0
    for name, dtype, shape in tensors:
        count = 1
        for dim in shape:
            count *= dim
        size = count * DTYPE_BYTES[dtype]
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + size]}
        offset += size
    raw = json.dumps(header, separators=(",", ":")).encode("utf-8")
    raw += b" " * (-len(raw) % 8)
    return raw, offset


def write_shard(path, tensors, filler):
    """Write one shard; returns (size, sha256)."""
    raw, data_len = shard_header(tensors)
    digest = hashlib.sha256()
    with open(path, "wb") as handle:
        for piece in (len(raw).to_bytes(8, "little"), raw):
            digest.update(piece)
            handle.write(piece)
        remaining = data_len
        while remaining:
            piece = filler.chunk(min(BLOCK, remaining))
            digest.update(piece)
            handle.write(piece)
            remaining -= len(piece)
    return 8 + len(raw) + data_len, digest.hexdigest()


def build(out, layout, shards, shard_mib, repo, seed):
    """Write the checkpoint; returns a summary with its path, revision and files."""
    revision = hashlib.sha1(("%s|%d|%d|%d" % (repo, shards, shard_mib, seed)).encode()).hexdigest()
    if layout == "hf-cache":
        root = os.path.join(out, "models--" + repo.replace("/", "--"))
        files_dir = os.path.join(root, "snapshots", revision)
        staging_dir = os.path.join(root, "blobs")
    else:
        root = files_dir = staging_dir = out
    os.makedirs(files_dir, exist_ok=True)
    os.makedirs(staging_dir, exist_ok=True)
    filler = Filler(seed)
    weight_map, total, written = {}, 0, {}
    layer_bytes = shard_mib * 1024 * 1024 // LAYERS_PER_SHARD
    for shard in range(shards):
        name = "model-%05d-of-%05d.safetensors" % (shard + 1, shards)
        tensors = [
            t
            for layer in range(shard * LAYERS_PER_SHARD, (shard + 1) * LAYERS_PER_SHARD)
            for t in layer_tensors(layer, layer_bytes)
        ]
        temporary = os.path.join(staging_dir, ".%s.writing" % name)
        size, sha = write_shard(temporary, tensors, filler)
        _, data_len = shard_header(tensors)
        total += data_len
        weight_map.update({tensor: name for tensor, _, _ in tensors})
        written[name] = (temporary, size, sha, "sha256")
    small = {
        "config.json": {
            "architectures": ["SyntheticForCausalLM"],
            "hidden_size": HIDDEN,
            "num_hidden_layers": shards * LAYERS_PER_SHARD,
            "torch_dtype": "bfloat16",
        },
        "generation_config.json": {"do_sample": False},
        "model.safetensors.index.json": {"metadata": {"total_size": total}, "weight_map": weight_map},
    }
    for name, doc in small.items():
        payload = (json.dumps(doc, indent=2, sort_keys=True) + "\n").encode("utf-8")
        temporary = os.path.join(staging_dir, ".%s.writing" % name)
        with open(temporary, "wb") as handle:
            handle.write(payload)
        blob_sha1 = hashlib.sha1(b"blob %d\x00" % len(payload) + payload).hexdigest()
        written[name] = (temporary, len(payload), blob_sha1, "git-sha1")
    for name, (temporary, _size, digest, _kind) in written.items():
        if layout == "hf-cache":
            os.replace(temporary, os.path.join(staging_dir, digest))
            link = os.path.join(files_dir, name)
            if os.path.lexists(link):
                os.unlink(link)
            os.symlink("../../blobs/" + digest, link)
        else:
            os.replace(temporary, os.path.join(files_dir, name))
    if layout == "hf-cache":
        os.makedirs(os.path.join(root, "refs"), exist_ok=True)
        with open(os.path.join(root, "refs", "main"), "w") as handle:
            handle.write(revision)
    return {
        "path": root,
        "layout": layout,
        "revision": revision,
        "tensor_bytes": total,
        "bytes": sum(size for _, size, _, _ in written.values()),
        "files": {name: {"size": size, kind: digest} for name, (_, size, digest, kind) in written.items()},
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", required=True, help="folder to write (the cache root for hf-cache)")
    parser.add_argument("--layout", choices=["hf-cache", "folder"], default="hf-cache")
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--shard-mib", type=int, default=1024)
    parser.add_argument("--repo", default="seatwright/synthetic")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)
    summary = build(args.out, args.layout, args.shards, args.shard_mib, args.repo, args.seed)
    json.dump(summary, sys.stdout, indent=2, sort_keys=True)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
