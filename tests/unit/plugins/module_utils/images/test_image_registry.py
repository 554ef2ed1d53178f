"""Registry images pinned by digest: the reference, the local tag, who holds it, the pull, the record.

The decisions are images/registry.py; the pull and the record go through io/images/pull.py with
an engine stand-in (no Docker), and the plan through engine_image_plan's main().
"""

import json

import engine_image_plan
import engine_image_pull
import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import ImageError
from ansible_collections.seatwright.fleet.plugins.module_utils.images.definition import validate_definition
from ansible_collections.seatwright.fleet.plugins.module_utils.images.registry import (
    holding,
    new_pull_state,
    new_record,
    parse_reference,
    pull_outcome,
    read_pull_line,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.io.images.pull import (
    hold_image,
    pull_progress,
    record_loaded,
)
from conftest import ROOT
from test_images import _options

DEFINITION = ROOT / "tests" / "fixtures" / "engine_images" / "registry-vllm-openai.yml"
HEX = "4b1c0d6e2f3a59788f0e1d2c3b4a5968778695a4b3c2d1e0f9e8d7c6b5a49382"
DIGEST = "sha256:" + HEX
PINNED = "vllm/vllm-openai@" + DIGEST
LOCAL = "vllm/vllm-openai:sha256-" + HEX
IMAGE_ID = "sha256:" + "9" * 64


@pytest.mark.parametrize(
    "text, familiar, pull_name, tag",
    [
        ("docker.io/vllm/vllm-openai@" + DIGEST, "vllm/vllm-openai", "docker.io/vllm/vllm-openai", None),
        ("vllm/vllm-openai:v0.33.0@" + DIGEST, "vllm/vllm-openai", "docker.io/vllm/vllm-openai", "v0.33.0"),
        ("ubuntu@" + DIGEST, "ubuntu", "docker.io/library/ubuntu", None),
        ("docker.io/library/ubuntu:24.04@" + DIGEST, "ubuntu", "docker.io/library/ubuntu", "24.04"),
        ("nvcr.io/nvidia/pytorch:25.01-py3@" + DIGEST, "nvcr.io/nvidia/pytorch", "nvcr.io/nvidia/pytorch", "25.01-py3"),
        ("localhost:5000/lab/vllm@" + DIGEST, "localhost:5000/lab/vllm", "localhost:5000/lab/vllm", None),
        ("lmsysorg/sglang@" + DIGEST, "lmsysorg/sglang", "docker.io/lmsysorg/sglang", None),
    ],
)
def test_a_pinned_reference_names_what_docker_keeps_and_the_local_tag(text, familiar, pull_name, tag):
    parsed = parse_reference(text)
    assert parsed["familiar"] == familiar and parsed["pull_name"] == pull_name and parsed["tag"] == tag
    assert parsed["pinned"] == familiar + "@" + DIGEST
    assert parsed["local"] == familiar + ":sha256-" + HEX and parsed["digest"] == DIGEST


@pytest.mark.parametrize(
    "text, words",
    [
        (
            "docker.io/vllm/vllm-openai:latest",
            ["names no digest", "docker buildx imagetools inspect", "skopeo inspect"],
        ),
        ("vllm/vllm-openai", ["names no digest", "@sha256:<64 hex>"]),
        ("vllm/vllm-openai@sha256:1234", ["expected sha256:<64 lower-case hex>", "imagetools"]),
        ("vllm/vllm-openai@sha256:" + HEX.upper(), ["expected sha256:<64 lower-case hex>"]),
        ("vLLM/openai@" + DIGEST, ["lower-case components"]),
        ("", ["pinned by digest"]),
        (None, ["pinned by digest"]),
    ],
)
def test_a_reference_without_a_good_digest_is_refused_saying_how_to_pin_it(text, words):
    with pytest.raises(ImageError) as error:
        parse_reference(text, "images/x.yml: registry")
    for word in words:
        assert word in str(error.value)


@pytest.mark.parametrize(
    "change, words",
    [
        ({"template": "engine-cuda"}, ["template", "not apply to a registry image"]),
        ({"packages": ["vllm==0.33.0"]}, ["packages"]),
        ({"platform": "linux/arm64"}, ["platform", "amd64"]),
        ({"python": None}, ["python", "facts probe"]),
        ({"engine": {"name": "trt", "version": "1", "device": "cuda"}}, ["engine"]),
        ({"registry": "vllm/vllm-openai:v0.33.0"}, ["registry", "names no digest"]),
    ],
)
def test_bad_registry_definitions_name_the_field(change, words):
    import yaml

    data = dict(yaml.safe_load(DEFINITION.read_text()), **change)
    with pytest.raises(ImageError) as error:
        validate_definition(data, "images/vllm-openai.yml")
    for word in words:
        assert word in str(error.value)


def test_a_registry_image_without_an_engine_reads_no_facts():
    import yaml

    data = yaml.safe_load(DEFINITION.read_text())
    del data["engine"], data["python"]
    assert validate_definition(data, "x")["engine"] is None


def _run(capsys, module, args, check_mode=False):
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            module.main()
    return json.loads(capsys.readouterr().out)


def test_the_plan_of_a_registry_image_names_the_local_tag_and_the_pull(capsys, tmp_path):
    result = _run(capsys, engine_image_plan, _options(tmp_path, definition_path=str(DEFINITION), template_paths=[]))
    assert result.get("failed") is not True, result
    assert result["reference"] == LOCAL and result["tag"] == "sha256-" + HEX
    assert result["pull"]["pinned"] == PINNED and result["pull"]["platform"] == "linux/amd64"
    assert result["pull"]["pull_name"] == "docker.io/vllm/vllm-openai"
    assert result["definition"]["engine"]["name"] == "vllm" and result["patches"] == []


def test_the_plan_of_a_built_image_has_no_pull(capsys, tmp_path):
    result = _run(capsys, engine_image_plan, _options(tmp_path))
    assert result["pull"] is None and result["reference"].startswith("seatwright/vllm-cpu:")


REFERENCE = parse_reference("docker.io/vllm/vllm-openai@" + DIGEST)
TAGGED = {"id": IMAGE_ID, "repo_digests": []}
PULLED = {"id": IMAGE_ID, "repo_digests": [PINNED]}
RECORD = new_record(REFERENCE, IMAGE_ID, "loaded")


@pytest.mark.parametrize(
    "local, pinned, record, expected",
    [
        # Pulled here: the engine ties the tag to the digest.
        (PULLED, PULLED, None, ("held", IMAGE_ID)),
        # Loaded from the builder: no repo digest survives save/load, the record ties them.
        (TAGGED, None, RECORD, ("held", IMAGE_ID)),
        # A tag with no record and no digest proves nothing.
        (TAGGED, None, None, ("pull", None)),
        # A record of another id: the tag was moved since.
        (TAGGED, None, dict(RECORD, image_id="sha256:" + "8" * 64), ("pull", None)),
        (TAGGED, None, dict(RECORD, digest="sha256:" + "0" * 64), ("pull", None)),
        # The digest was pulled by hand: tag it, no transfer, no pull.
        (None, PULLED, None, ("tag", IMAGE_ID)),
        ({"id": "sha256:" + "7" * 64, "repo_digests": []}, PULLED, None, ("tag", IMAGE_ID)),
        (None, None, RECORD, ("pull", None)),
        (None, None, None, ("pull", None)),
    ],
)
def test_whether_a_node_holds_the_pinned_image(local, pinned, record, expected):
    assert holding(REFERENCE, local, pinned, record) == expected


PULL_STREAM = [
    '{"status":"Pulling from vllm/vllm-openai","id":"' + DIGEST + '"}',
    '{"status":"Pulling fs layer","progressDetail":{},"id":"a1"}',
    '{"status":"Already exists","progressDetail":{},"id":"b2"}',
    '{"status":"Downloading","progressDetail":{"current":1000000000,"total":4000000000},"id":"a1"}',
    '{"status":"Downloading","progressDetail":{"current":3000000000,"total":4000000000},"id":"a1"}',
    '{"status":"Download complete","progressDetail":{},"id":"a1"}',
    '{"status":"Pull complete","progressDetail":{},"id":"a1"}',
    '{"status":"Digest: ' + DIGEST + '"}',
    '{"status":"Status: Downloaded newer image for vllm/vllm-openai@' + DIGEST + '"}',
]


def _read(lines, step=6.0):
    state = new_pull_state(100.0)
    events = [read_pull_line(state, line, 100.0 + step * number) for number, line in enumerate(lines)]
    return state, [event for event in events if event]


def test_a_long_pull_reports_bytes_and_layers():
    state, events = _read(PULL_STREAM)
    assert [event["text"] for event in events] == [
        "0.00 of ? GB, 1/2 layers done",
        "3.00 of 4.00 GB, 1/2 layers done",
        "4.00 of 4.00 GB, 2/2 layers done",
    ]
    assert pull_outcome(state, dict(REFERENCE, platform="linux/amd64"), 160.0) == {"elapsed_s": 60.0, "layers": 2}


@pytest.mark.parametrize(
    "line, words",
    [
        (
            '{"errorDetail":{"message":"manifest unknown"},"error":"manifest unknown"}',
            ["manifest unknown", "check the digest"],
        ),
        ('{"error":"unauthorized: authentication required"}', ["docker login", "docker.io"]),
        ('{"status":"Digest: sha256:' + "0" * 64 + '"}', ["another image than the pinned one"]),
    ],
)
def test_a_failed_pull_says_what_to_do(line, words):
    state, _events = _read([line])
    with pytest.raises(ImageError) as error:
        pull_outcome(state, dict(REFERENCE, platform="linux/amd64"), 110.0)
    for word in words:
        assert word in str(error.value)


class _Engine:
    """The Docker calls engine_image_pull makes, on a dict of references."""

    def __init__(self, images=None, stream=None):
        self.images = dict(images or {})
        self.stream = stream if stream is not None else PULL_STREAM
        self.pulls, self.tags = [], []

    def image(self, reference):
        found = self.images.get(reference)
        return dict(found, reference=reference) if found else None

    def tag(self, source, repository, tag):
        self.tags.append((source, repository, tag))
        self.images["%s:%s" % (repository, tag)] = {"id": self.images[source]["id"], "repo_digests": []}

    def pull_lines(self, name, digest, platform, timeout_s):
        self.pulls.append((name, digest, platform))
        self.images[PINNED] = dict(PULLED)
        return iter(self.stream)


def _params(tmp_path, **extra):
    params = {
        "registry": "docker.io/vllm/vllm-openai@" + DIGEST,
        "platform": "linux/amd64",
        "state_dir": str(tmp_path),
        "allow_pull": True,
        "progress_file": str(tmp_path / "pull.json"),
        "timeout_s": 3600,
        "idle_timeout_s": 600,
        "image_id": None,
        "docker_socket": "/nonexistent",
    }
    params.update(extra)
    return params


def _record(tmp_path):
    path = tmp_path / "registry" / ("sha256-%s.json" % HEX)
    return json.loads(path.read_text()) if path.exists() else None


def test_the_builder_pulls_once_tags_and_records_then_does_nothing(tmp_path):
    engine = _Engine()
    predicted = hold_image(_params(tmp_path), True, engine)
    assert predicted["changed"] is True and predicted["held"] is False and engine.pulls == []
    assert _record(tmp_path) is None and not (tmp_path / "pull.json").exists()
    first = hold_image(_params(tmp_path), False, engine, clock=iter(range(1000, 2000)).__next__)
    assert first["pulled"] is True and first["image_id"] == IMAGE_ID
    assert engine.pulls == [("docker.io/vllm/vllm-openai", DIGEST, "linux/amd64")]
    assert engine.tags == [(PINNED, "vllm/vllm-openai", "sha256-" + HEX)]
    assert _record(tmp_path)["image_id"] == IMAGE_ID and _record(tmp_path)["how"] == "pulled"
    assert pull_progress(_params(tmp_path))["done"] is True
    again = hold_image(_params(tmp_path), False, engine)
    assert again == dict(again, changed=False, held=True, pulled=False, action="held")
    assert len(engine.pulls) == 1


def test_a_node_that_pulled_the_digest_itself_is_tagged_not_pulled(tmp_path):
    engine = _Engine({PINNED: PULLED})
    result = hold_image(_params(tmp_path, allow_pull=False), False, engine)
    assert result["action"] == "tag" and result["held"] is True and engine.pulls == []
    assert engine.images[LOCAL]["id"] == IMAGE_ID and _record(tmp_path)["how"] == "tagged"


def test_a_node_without_the_image_is_left_to_the_fabric_unless_it_may_pull(tmp_path):
    engine = _Engine()
    result = hold_image(_params(tmp_path, allow_pull=False), False, engine)
    assert result == dict(result, changed=False, held=False, action="pull") and engine.pulls == []


def test_a_failed_pull_ends_the_progress_file_with_the_reason(tmp_path):
    engine = _Engine(stream=['{"error":"manifest unknown"}'])
    with pytest.raises(ImageError):
        hold_image(_params(tmp_path), False, engine)
    progress = pull_progress(_params(tmp_path))
    assert progress["done"] is True and "manifest unknown" in progress["failed"]


def test_a_loaded_image_is_checked_by_id_and_its_digest_recorded(tmp_path):
    engine = _Engine({LOCAL: TAGGED})
    assert record_loaded(_params(tmp_path, image_id=IMAGE_ID), True, engine)["changed"] is True
    assert _record(tmp_path) is None
    assert record_loaded(_params(tmp_path, image_id=IMAGE_ID), False, engine)["changed"] is True
    assert _record(tmp_path)["how"] == "loaded"
    assert record_loaded(_params(tmp_path, image_id=IMAGE_ID), False, engine)["changed"] is False
    # A later run: the loaded tag has no repo digest, the record says it is the pinned image.
    assert hold_image(_params(tmp_path, allow_pull=False), False, engine)["action"] == "held"
    with pytest.raises(ImageError) as error:
        record_loaded(_params(tmp_path, image_id="sha256:" + "8" * 64), False, engine)
    assert "not the pinned one" in str(error.value)


def test_the_pull_module_answers_through_main(capsys, tmp_path):
    args = {"registry": "vllm/vllm-openai:v1", "state_dir": str(tmp_path)}
    result = _run(capsys, engine_image_pull, args)
    assert result["failed"] is True and "names no digest" in result["msg"] and "skopeo" in result["msg"]
    args = {"state": "progress", "registry": PINNED, "state_dir": str(tmp_path), "progress_file": str(tmp_path / "p")}
    result = _run(capsys, engine_image_pull, args)
    assert result["done"] is False and result["progress"]["waiting_for"] == "the pull of " + PINNED
