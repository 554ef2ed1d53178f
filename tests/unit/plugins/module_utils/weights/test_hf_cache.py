"""A Hugging Face cache entry the operator filled, held to every file of the pinned revision before a
seat takes a GPU (weights/hf_cache.py through checkpoint_facts, which roles/seat/tasks/checks.yml runs
before the co-tenants are evicted and the engine starts with HF_HUB_OFFLINE=1)."""

import json
import os

import checkpoint_facts
import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.seatwright.fleet.plugins.module_utils.weights.hf_cache import (
    cache_gaps,
    refetch_hint,
    repo_of_entry,
)
from checkpoint_cases import REVISION, big_shards, blob_path, truncate, write_hf_entry

REPO = "nvidia/Qwen3.5-122B-A10B-NVFP4"
SHARD2 = "model-00002-of-00003.safetensors"


def run(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            checkpoint_facts.main()
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def entry(tmp_path):
    files = dict(big_shards(count=3, mib=1), **{"tokenizer.json": b'{"model": {}}\n'})
    return write_hf_entry(tmp_path, files, repo=REPO)


def snapshot(entry):
    return os.path.join(entry, "snapshots", REVISION)


def test_a_whole_cache_entry_is_complete_and_verified_by_its_blob_names(capsys, entry):
    result = run(capsys, {"path": entry, "revision": REVISION, "mode": "full", "require_verified": True})
    facts = result["ansible_facts"]["seatwright_checkpoint"]
    assert not result.get("failed") and facts["complete"] and facts["verified"]
    assert facts["errors"] == [] and facts["warnings"] == []


def test_a_missing_shard_is_named_with_what_to_do(capsys, entry):
    os.unlink(os.path.join(snapshot(entry), SHARD2))
    result = run(capsys, {"path": entry, "revision": REVISION, "require_complete": True})
    assert result["failed"]
    assert "missing: %s (not on disk)" % SHARD2 in result["msg"]
    assert "Re-stage it with the weights role" in result["msg"]


def test_a_blob_the_download_left_short_is_named(capsys, entry):
    truncate(blob_path(entry, SHARD2), 4096)
    result = run(capsys, {"path": entry, "revision": REVISION, "require_complete": True})
    assert result["failed"] and "truncated or malformed: %s" % SHARD2 in result["msg"]


def test_a_link_to_a_blob_that_is_gone_is_missing(capsys, entry):
    os.unlink(blob_path(entry, SHARD2))
    result = run(capsys, {"path": entry, "revision": REVISION, "require_complete": True})
    assert result["failed"] and "%s (link points at a missing blob)" % SHARD2 in result["msg"]


def test_a_snapshot_without_its_config_is_refused_naming_the_download(capsys, entry):
    os.unlink(os.path.join(snapshot(entry), "config.json"))
    result = run(capsys, {"path": entry, "revision": REVISION, "require_complete": True})
    assert result["failed"]
    assert "config.json is not in snapshot %s" % REVISION in result["msg"]
    assert "hf download %s --revision %s" % (REPO, REVISION) in result["msg"]


def test_a_partial_download_in_blobs_is_a_warning(capsys, entry):
    with open(os.path.join(entry, "blobs", "ab" * 32 + ".incomplete"), "wb") as handle:
        handle.write(b"\0" * 10)
    result = run(capsys, {"path": entry, "revision": REVISION})
    facts = result["ansible_facts"]["seatwright_checkpoint"]
    assert facts["complete"] and "stopped part-way" in facts["warnings"][0]


def test_another_revision_is_not_this_one(capsys, entry):
    other = "0" * 40
    result = run(capsys, {"path": entry, "revision": other, "require_complete": True})
    assert result["failed"] and "revision %s has no snapshot in this cache entry" % other in result["msg"]


@pytest.mark.parametrize(
    "files, shards, blobs, errors, warnings",
    [
        ({"config.json": {}, "tokenizer.json": {}, "model.safetensors": {}}, [], [], [], []),
        ({"tokenizer.json": {}, "model.safetensors": {}}, [], [], ["config.json is not in snapshot"], []),
        ({"config.json": {}, "model.safetensors": {}}, [], [], [], ["no tokenizer file"]),
        ({"config.json": {}, "tokenizer.model": {}}, [], [], ["no weight file"], []),
        ({"config.json": {}, "tokenizer.json": {}, "a.safetensors": {}, "b.safetensors": {}}, [], [], ["index"], []),
        (
            {"config.json": {"dangling": True}, "tokenizer.json": {}, "model.safetensors": {}},
            [],
            [],
            ["config.json is not in snapshot"],
            [],
        ),
        ({"config.json": {}, "tokenizer.json": {}}, ["model-1.safetensors"], ["x.incomplete"], [], ["x.incomplete"]),
    ],
)
def test_cache_gaps(files, shards, blobs, errors, warnings):
    found = cache_gaps(REVISION, files, shards, blobs, REPO)
    assert len(found["errors"]) == len(errors) and len(found["warnings"]) == len(warnings)
    for wanted, said in zip(errors + warnings, found["errors"] + found["warnings"]):
        assert wanted in said and "playbooks/weights.yml" in said


def test_the_entry_names_its_repository():
    assert repo_of_entry("models--nvidia--Qwen3.5-122B-A10B-NVFP4") == REPO
    assert repo_of_entry("Qwen3.5") is None
    assert "hf download <org>/<name> --revision <revision>" in refetch_hint(None, None)
