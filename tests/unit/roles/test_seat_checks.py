"""roles/seat/tasks/checks.yml's image check, evaluated by Ansible's templating (seat_checks_run.py).

The node's docker inspect and its files are stand-ins; the record is what engine_image_pull writes
after a load under the engine_image role's state folder (test_seat_pinned_digest.py checks that
the writer writes exactly this file).
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from conftest import ROOT

RUNNER = Path(__file__).resolve().parent / "seat_checks_run.py"
HEX = "4b1c0d6e2f3a59788f0e1d2c3b4a5968778695a4b3c2d1e0f9e8d7c6b5a49382"
DIGEST = "sha256:" + HEX
PINNED = "vllm/vllm-openai@" + DIGEST
LOCAL = "vllm/vllm-openai:sha256-" + HEX
IMAGE_ID = "sha256:" + "9" * 64
OTHER_ID = "sha256:" + "8" * 64


def run_check(tmp_path, image_ref, digest, inspected):
    case = {"state_dir": str(tmp_path / "state"), "image_ref": image_ref, "digest": digest, "inspected": inspected}
    done = subprocess.run(
        [sys.executable, str(RUNNER)], input=json.dumps(case), capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def loaded_record(images_dir, image_id):
    """The record engine_image_pull (state: recorded) leaves on a node that loaded the builder's image."""
    path = Path(images_dir) / "registry" / ("sha256-%s.json" % HEX)
    record = {"format": 1, "pinned": PINNED, "digest": DIGEST, "reference": LOCAL, "image_id": image_id}
    return path, dict(record, how="loaded")


def _loaded(tmp_path, image_id):
    images_dir = run_check(tmp_path, LOCAL, None, None)["images_dir"]
    path, record = loaded_record(images_dir, image_id)
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(record, indent=2, sort_keys=True) + "\n")


@pytest.mark.parametrize(
    "image_ref, digest, inspected, loaded_id, words",
    [
        # Pulled by digest on this node: RepoDigests prove it.
        ("vllm/vllm-openai:v0.10.0", DIGEST, {"Id": IMAGE_ID, "RepoDigests": [PINNED]}, None, None),
        # Loaded over the fabric: no RepoDigests; the role's record of this id proves it.
        (LOCAL, DIGEST, {"Id": IMAGE_ID, "RepoDigests": []}, IMAGE_ID, None),
        ("vllm/vllm-openai:v0.10.0", DIGEST, {"Id": IMAGE_ID, "RepoDigests": []}, IMAGE_ID, None),
        # The record ties the digest to another image than the one under the tag now.
        (
            LOCAL,
            DIGEST,
            {"Id": OTHER_ID, "RepoDigests": []},
            IMAGE_ID,
            ["lab-node1:", "ties the digest to image " + IMAGE_ID, "run the engine_image role"],
        ),
        # Neither proof.
        (
            LOCAL,
            DIGEST,
            {"Id": IMAGE_ID, "RepoDigests": []},
            None,
            [
                "lab-node1:",
                "RepoDigests, where a pull by digest lists " + PINNED + ", are empty",
                "has no record",
                "run the engine_image role",
            ],
        ),
        # No pin: the image need not come from a registry.
        ("seatwright/vllm-cpu:abc", None, {"Id": IMAGE_ID, "RepoDigests": []}, None, None),
        # Not on the node at all: the first reason is named.
        (LOCAL, DIGEST, None, None, ["lab-node1: image " + LOCAL + " is not on the node"]),
    ],
)
def test_the_seat_check_accepts_repo_digests_or_the_nodes_record(
    tmp_path, image_ref, digest, inspected, loaded_id, words
):
    if loaded_id:
        _loaded(tmp_path, loaded_id)
    result = run_check(tmp_path, image_ref, digest, inspected)
    assert result["passed"] is (words is None), result["message"]
    for word in words or []:
        assert word in result["message"]
