"""Whether a Hugging Face cache entry an operator filled holds every file of the pinned revision.

Pure. A cache entry is `models--org--name/{refs/, blobs/<digest>, snapshots/<revision>/<file> ->
../../blobs/<digest>}`; huggingface_hub downloads a blob as `blobs/<digest>.incomplete` and renames it
when whole. Staged weights carry a parity manifest that lists every file; a cache the operator filled
does not, so what must be there is what the engines read: the model's config, a tokenizer and every
weight shard the index names. checkpoint_scan.py adds these sentences to the checkpoint's errors, so the
seat role's check before any GPU is taken (roles/seat/tasks/checks.yml) refuses the revision, naming
each file and what to do; the seat then serves with the hub offline (HF_HUB_OFFLINE=1, seat/launch.py).
"""

from ansible_collections.seatwright.fleet.plugins.module_utils.weights.checkpoint import (
    INDEX_NAME,
    SAFETENSORS_SUFFIX,
)

# What an engine reads from a snapshot besides the weights (vLLM and SGLang load both through transformers).
CONFIG_FILE = "config.json"
TOKENIZER_FILES = ("tokenizer.json", "tokenizer.model", "tiktoken.model", "vocab.json")
INCOMPLETE_SUFFIX = ".incomplete"


def refetch_hint(repo, revision):
    """What to do about a cache entry that lacks files: fetch the revision again, or stage it."""
    return (
        "fetch the revision again into the cache (`hf download %s --revision %s`, which resumes and "
        "completes it) or stage it with playbooks/weights.yml, then run the seat again"
        % (repo or "<org>/<name>", revision or "<revision>")
    )


def repo_of_entry(entry_name):
    """'nvidia/Qwen3.5-122B-A10B-NVFP4' from a cache entry's folder name 'models--nvidia--Qwen3.5-122B-A10B-NVFP4'."""
    parts = str(entry_name).split("--")
    return "/".join(parts[1:]) if len(parts) >= 3 and parts[0] == "models" else None


def cache_gaps(revision, files, index_shards, blob_names, repo=None):
    """{errors, warnings}: sentences naming what the snapshot of `revision` lacks (errors; none when every
    file the engines read is there) and downloads left part-way in blobs/ (warnings: huggingface_hub links
    a file into a snapshot only once it is whole, so a partial blob may be another revision's).

    `files`: {rel: {dangling: bool}} of snapshots/<revision>/ (checkpoint_scan.walk_files); `index_shards`:
    the shards the weight index names; `blob_names`: the names in blobs/ (an `.incomplete` one is a
    download that stopped part-way).
    """
    present = {rel for rel, seen in files.items() if not seen.get("dangling")}
    hint = refetch_hint(repo, revision)
    gaps = []
    if CONFIG_FILE not in present:
        gaps.append(
            "%s is not in snapshot %s: the engines read the model's shape from it; %s" % (CONFIG_FILE, revision, hint)
        )
    warnings = []
    if not any(name in present for name in TOKENIZER_FILES):
        # A warning: a few repositories serve with a tokenizer from another (--tokenizer).
        warnings.append(
            "no tokenizer file (%s) is in snapshot %s: unless the seat names another tokenizer, the served "
            "model cannot encode a prompt; %s" % (", ".join(TOKENIZER_FILES), revision, hint)
        )
    weights = [rel for rel in present if rel.endswith(SAFETENSORS_SUFFIX)]
    if not weights and not index_shards:
        gaps.append("no weight file (*%s) is in snapshot %s; %s" % (SAFETENSORS_SUFFIX, revision, hint))
    if len(weights) > 1 and INDEX_NAME not in files:
        gaps.append(
            "%s is not in snapshot %s, so which shards make the model cannot be checked; %s"
            % (INDEX_NAME, revision, hint)
        )
    partial = sorted(name for name in blob_names if name.endswith(INCOMPLETE_SUFFIX))
    if partial:
        warnings.append(
            "blobs/%s: %s stopped part-way in this cache entry (of this revision or another); if a file of "
            "revision %s is missing, %s"
            % (
                ", blobs/".join(partial),
                "a download" if len(partial) == 1 else "%d downloads" % len(partial),
                revision,
                hint,
            )
        )
    return {"errors": gaps, "warnings": warnings}
