"""The checkpoint_facts module through patch_module_args: facts, the seat's offline check, bad input."""

import json

import checkpoint_facts
import pytest
from ansible.module_utils.testing import patch_module_args
from checkpoint_cases import REVISION, blob_path, reference_files, truncate, write_hf_entry

SHARD1 = "model-00001-of-00002.safetensors"


def run(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            checkpoint_facts.main()
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def entry(tmp_path):
    return write_hf_entry(tmp_path, reference_files())


def test_facts_of_a_cache_entry_change_nothing(capsys, entry):
    result = run(capsys, {"path": entry, "revision": REVISION})
    facts = result["ansible_facts"]["seatwright_checkpoint"]
    assert result["changed"] is False
    assert facts["complete"] and facts["layout"] == "hf-cache"
    assert facts["safetensors"]["tensor_bytes"] == 3227


@pytest.mark.parametrize("mode, fails", [("quick", True), ("full", False)])
def test_require_verified_needs_parity_evidence(capsys, entry, mode, fails):
    result = run(capsys, {"path": entry, "revision": REVISION, "mode": mode, "require_verified": True})
    assert bool(result.get("failed")) is fails
    if fails:
        assert "no parity evidence" in result["msg"] and "mode=full" in result["msg"]


def test_require_complete_names_the_truncated_file(capsys, entry):
    truncate(blob_path(entry, SHARD1), 7)
    result = run(capsys, {"path": entry, "revision": REVISION, "require_complete": True})
    assert result["failed"]
    assert SHARD1 in result["msg"] and "7 missing" in result["msg"]
    assert result["ansible_facts"]["seatwright_checkpoint"]["truncated"] == [SHARD1]


@pytest.mark.parametrize(
    "args, words",
    [
        ({"revision": "main"}, "not a pinned 40-hex commit id"),
        ({"revision": None}, "give the pinned 40-hex revision"),
        ({"revision": REVISION, "hash_workers": 0}, "hash_workers is 0"),
        ({"revision": REVISION, "path": "/nonexistent/seatwright"}, "is not a directory on this host"),
        ({"revision": REVISION, "mode": "deep"}, "value of mode must be one of"),
    ],
)
def test_bad_input_gets_a_sentence(capsys, entry, args, words):
    result = run(capsys, dict({"path": entry}, **args))
    assert result["failed"]
    assert words in result["msg"]
