"""A seat's pinned image digest, proven by RepoDigests or by the node's engine_image record.

The decision is images/registry.py seat_digest_problem; the filters pinned_digest_record and
pinned_digest_problem are how roles/seat/tasks/checks.yml reaches it (test_seat_checks.py runs
that file's conditions).
"""

import base64
import json

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.seatwright.fleet.plugins.filter.pinned_digest_problem import pinned_digest_problem
from ansible_collections.seatwright.fleet.plugins.filter.pinned_digest_record import pinned_digest_record
from ansible_collections.seatwright.fleet.plugins.module_utils.images.registry import (
    new_record,
    parse_reference,
    record_name,
    seat_digest_problem,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.io.images.pull import record_loaded
from test_image_registry import DIGEST, HEX, IMAGE_ID, LOCAL, PINNED, TAGGED, _Engine, _params
from test_seat_checks import loaded_record

REFERENCE = parse_reference(PINNED)
RECORD = new_record(REFERENCE, IMAGE_ID, "loaded")
OTHER_ID = "sha256:" + "8" * 64
RECORD_PATH = "/var/lib/seatwright/images/registry/sha256-%s.json" % HEX
PULLED = {"Id": IMAGE_ID, "RepoDigests": [PINNED]}
LOADED = {"Id": IMAGE_ID, "RepoDigests": []}


@pytest.mark.parametrize(
    "image_ref, digest, image, record",
    [
        # Pulled by digest on this node: the engine lists familiar@digest.
        ("vllm/vllm-openai:v0.10.0", DIGEST, PULLED, None),
        (LOCAL, DIGEST, PULLED, None),
        # The recipe spells the registry; Docker keeps the familiar name.
        ("docker.io/vllm/vllm-openai:v0.10.0", DIGEST, PULLED, None),
        ("vllm/vllm-openai@" + DIGEST, DIGEST, PULLED, None),
        # A registry with a port: the name is not cut at its first ':'.
        (
            "registry.lab:5000/team/vllm:v1",
            DIGEST,
            {"Id": IMAGE_ID, "RepoDigests": ["registry.lab:5000/team/vllm@" + DIGEST]},
            None,
        ),
        # Loaded over the fabric: no RepoDigests, the record ties this id to the digest.
        (LOCAL, DIGEST, LOADED, RECORD),
        ("vllm/vllm-openai:v0.10.0", DIGEST, {"Id": IMAGE_ID}, RECORD),
        # Nothing pinned: nothing to prove.
        ("seatwright/vllm-cpu:abc", None, {"Id": IMAGE_ID, "RepoDigests": []}, None),
        ("seatwright/vllm-cpu:abc", "", {}, None),
    ],
)
def test_a_pinned_digest_is_proven_by_repo_digests_or_the_record(image_ref, digest, image, record):
    assert seat_digest_problem(image_ref, digest, image, record, RECORD_PATH) is None


@pytest.mark.parametrize(
    "image, record, words",
    [
        # The record names another image: the tag was moved or another image loaded since.
        (
            {"Id": OTHER_ID, "RepoDigests": []},
            RECORD,
            ["ties the digest to image " + IMAGE_ID, "not this one", OTHER_ID, RECORD_PATH],
        ),
        # No record and no RepoDigests: nothing proves the digest.
        (LOADED, None, ["the node has no record " + RECORD_PATH, "lists " + PINNED + ", are empty"]),
        ({"Id": IMAGE_ID}, None, ["the node has no record " + RECORD_PATH]),
        # A record of another digest, or of an unknown format.
        (LOADED, dict(RECORD, digest="sha256:" + "0" * 64), ["does not name this digest and image"]),
        (LOADED, dict(RECORD, format=99), ["does not name this digest and image"]),
        # RepoDigests of another digest of the same repository prove nothing either.
        (
            {"Id": IMAGE_ID, "RepoDigests": ["vllm/vllm-openai@sha256:" + "0" * 64]},
            None,
            ["lists " + PINNED + ", do not list it", "no record"],
        ),
    ],
)
def test_an_unproven_digest_is_refused_naming_both_proofs_and_what_to_do(image, record, words):
    problem = seat_digest_problem(LOCAL, DIGEST, image, record, RECORD_PATH)
    assert problem is not None
    for word in words + [
        "not proven to be the pinned digest " + DIGEST,
        "RepoDigests",
        "run the engine_image role for the registry image " + PINNED,
        "records the digest",
    ]:
        assert word in problem


def test_a_reference_that_cannot_be_parsed_is_a_problem_not_a_traceback():
    problem = seat_digest_problem("Bad/Name:tag", DIGEST, PULLED, None, RECORD_PATH)
    assert problem.startswith("the pinned digest cannot be checked: ") and "lower-case" in problem


def _slurped(data):
    return {"content": base64.b64encode(json.dumps(data).encode()).decode(), "encoding": "base64"}


@pytest.mark.parametrize(
    "image, slurped, words",
    [
        (LOADED, _slurped(RECORD), None),
        ({"Id": OTHER_ID, "RepoDigests": []}, _slurped(RECORD), "ties the digest to image " + IMAGE_ID),
        # slurp of a missing file (failed_when: false), a skipped read, a file that is not a JSON object.
        (LOADED, {"failed": True, "msg": "file not found"}, "has no record"),
        (LOADED, {"skipped": True}, "has no record"),
        (LOADED, {"content": base64.b64encode(b"not json").decode()}, "has no record"),
        (LOADED, _slurped([RECORD]), "has no record"),
        (PULLED, {"skipped": True}, None),
    ],
)
def test_the_filter_reads_the_record_as_slurp_returns_it(image, slurped, words):
    problem = pinned_digest_problem(image, LOCAL, DIGEST, slurped, RECORD_PATH)
    if words is None:
        assert problem == ""
    else:
        assert words in problem and RECORD_PATH in problem


@pytest.mark.parametrize("image_ref", [LOCAL, "vllm/vllm-openai:v0.10.0", "docker.io/vllm/vllm-openai"])
def test_the_seat_reads_the_record_the_engine_image_role_writes(image_ref):
    assert pinned_digest_record(image_ref, DIGEST) == record_name(REFERENCE) == "registry/sha256-%s.json" % HEX
    assert pinned_digest_record(image_ref, None) == ""


def test_the_record_filter_names_a_bad_reference():
    with pytest.raises(AnsibleFilterError, match="engine.image"):
        pinned_digest_record("vllm/vllm-openai:v1", "sha256:short")


def test_test_seat_checks_stands_in_for_the_record_the_role_writes(tmp_path):
    record_loaded(_params(tmp_path, image_id=IMAGE_ID), False, _Engine({LOCAL: TAGGED}))
    path, record = loaded_record(tmp_path, IMAGE_ID)
    assert json.loads(path.read_text()) == record
