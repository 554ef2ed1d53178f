"""roles/seat/tasks/checks.yml's image check, evaluated by Ansible's templating (seat_checks_run.py).

The node's docker inspect and its files are stand-ins; the record is the one engine_image_pull
writes after a load (io/images/pull.py record_loaded), under the engine_image role's state folder.
"""

import json
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.io.images.pull import record_loaded
from test_image_registry import DIGEST, IMAGE_ID, LOCAL, PINNED, TAGGED, _Engine, _params

ROOT = Path(__file__).resolve().parents[2]
RUNNER = Path(__file__).resolve().parent / "seat_checks_run.py"
OTHER_ID = "sha256:" + "8" * 64


def run_check(tmp_path, image_ref, digest, inspected):
    case = {"state_dir": str(tmp_path / "state"), "image_ref": image_ref, "digest": digest, "inspected": inspected}
    done = subprocess.run(
        [sys.executable, str(RUNNER)], input=json.dumps(case), capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def _loaded(tmp_path, image_id):
    """A node that received the builder's image by docker load, and the record the role wrote for it."""
    images_dir = run_check(tmp_path, LOCAL, None, None)["images_dir"]
    engine = _Engine({LOCAL: dict(TAGGED, id=image_id)})
    record_loaded(_params(Path(images_dir), image_id=image_id), False, engine)


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
            ["lab-node1:", "RepoDigests do not list " + PINNED, "has no record", "run the engine_image role"],
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
