"""engine_image_build: the Docker build stream read into progress, and the module through its main().

The stream is synthetic, in the shape the classic builder writes (tests/fixtures/engine_images/
build-stream-classic.jsonl); the engine is a stand-in on a Unix socket that answers POST /build.
"""

import json
import tarfile
from pathlib import Path

import engine_image_build
import pytest
import unix_http
from ansible.module_utils.testing import patch_module_args
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import ImageError
from ansible_collections.seatwright.fleet.plugins.module_utils.images.buildstream import (
    new_state,
    outcome,
    progress_text,
    read_line,
    waiting_progress,
)
from conftest import FIXTURES

FIXTURES = FIXTURES / "engine_images"
STREAM = (FIXTURES / "build-stream-classic.jsonl").read_text().splitlines()
IMAGE_ID = "sha256:9a8b7c6d5e4f30211203948576afbecd9a8b7c6d5e4f30211203948576afbecd"
REFERENCE = "seatwright/vllm-sm120:0123456789abcdef"
ERROR_LINES = [
    '{"stream":"Step 1/2 : RUN /usr/local/bin/apply-patches python3 /patches gate"}',
    '{"stream":"SEATWRIGHT-PATCH-FAILED gate: patch gate no longer applies\\n"}',
    '{"errorDetail":{"code":3,"message":"The command \'/bin/sh -c apply-patches\' returned a non-zero code: 3"},'
    '"error":"The command \'/bin/sh -c apply-patches\' returned a non-zero code: 3"}',
]


def read(lines, clock=None):
    state = new_state(100.0)
    events = []
    for number, line in enumerate(lines):
        event = read_line(state, line, 100.0 + (clock or 10.0) * number)
        if event:
            events.append(event)
    return state, events


def test_steps_are_counted_and_the_image_id_read_from_the_aux_record():
    state, events = read(STREAM)
    steps = [(e["step"], e["steps"]) for e in events if e["kind"] == "step"]
    assert steps == [(1, 4), (2, 4), (3, 4), (4, 4)]
    assert [e["text"] for e in events if e["kind"] == "pull"] == [
        "Pulling from library/debian trixie-slim",
        "Pull complete 5c8a3f0e2b1d",
    ]
    second = next(e for e in events if e["kind"] == "step" and e["step"] == 2)
    assert progress_text(second) == (
        "step 2/4 after 60 s: RUN python3 -m pip install --no-index --find-links /wheels -r /lock.txt"
    )
    assert outcome(state, REFERENCE, 400.0) == {"image_id": IMAGE_ID, "elapsed_s": 300.0, "steps": 4}


def test_an_error_line_is_a_failure_naming_the_step_the_error_and_the_last_output():
    state, events = read(ERROR_LINES)
    assert events[-1]["kind"] == "error" and progress_text(events[-1]).startswith("failed after 20 s: The command")
    with pytest.raises(ImageError) as error:
        outcome(state, REFERENCE, 130.0)
    message = str(error.value)
    assert "failed at step 1/2 (RUN /usr/local/bin/apply-patches python3 /patches gate) after 30 s" in message
    assert "returned a non-zero code: 3" in message and "SEATWRIGHT-PATCH-FAILED gate" in message
    assert error.value.details["step"] == 1


@pytest.mark.parametrize("cut", [len(STREAM) - 3, 5, 0])
def test_a_stream_that_ends_without_an_image_id_fails(cut):
    state, _ = read(STREAM[:cut])
    with pytest.raises(ImageError, match="without an image id"):
        outcome(state, REFERENCE, 500.0)


def test_the_classic_builders_last_words_name_the_image_when_aux_is_missing():
    state, _ = read([line for line in STREAM if '"aux"' not in line])
    assert outcome(state, REFERENCE, 200.0)["image_id"] == "9a8b7c6d5e4f"


@pytest.mark.parametrize("line, words", [("Step 1/2 : RUN x", "not JSON"), ("[1, 2]", "not a JSON object")])
def test_a_line_that_is_not_a_json_object_is_refused_by_name(line, words):
    with pytest.raises(ImageError, match=words):
        read_line(new_state(0.0), line, 1.0)


def test_waiting_progress_reads_the_record_and_ignores_another_images():
    record = {"reference": REFERENCE, "started_epoch": 100.0, "line": "step 2/4 after 60 s: RUN pip", "done": False}
    shown = waiting_progress(record, REFERENCE, 7200, 190.0)
    assert shown["done"] is False
    assert shown["progress"] == {
        "waiting_for": "the build of " + REFERENCE,
        "elapsed_s": 90.0,
        "timeout_s": 7200,
        "detail": "step 2/4 after 60 s: RUN pip",
    }
    other = waiting_progress(dict(record, reference="seatwright/other:1", done=True), REFERENCE, 7200, 190.0)
    assert other["done"] is False and other["progress"]["detail"] == "no output yet"


class _BuildEngine:
    """POST /build answers `lines`; GET /images/<ref>/json answers 404 until a build ran (or `present`)."""

    def __init__(self, path, lines, present=False):
        engine = self
        self.built, self.context_names, self.queries = present, [], []

        class Handler(unix_http.JsonHandler):
            def do_GET(self):
                if engine.built:
                    self._json(200, {"Id": IMAGE_ID, "Size": 1, "Created": "t", "Config": {"Labels": {}}})
                else:
                    self._json(404, {"message": "No such image"})

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                context = Path(path + ".ctx.tar")
                context.write_bytes(self.rfile.read(length))
                with tarfile.open(context) as archive:
                    engine.context_names = sorted(archive.getnames())
                engine.queries.append(self.path)
                # Chunked, as dockerd sends it, with one line split across two chunks.
                payload = "".join(line + "\r\n" for line in lines).encode("utf-8")
                cut = len(payload) // 2 + 7
                self.send_response(200)
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for chunk in (payload[:cut], payload[cut:], b""):
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
                engine.built = engine.built or any('"aux"' in line for line in lines)

        self.server = unix_http.serve(path, Handler)

    def close(self):
        unix_http.stop(self.server)


def run(capsys, args, check_mode=False):
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            engine_image_build.main()
    captured = capsys.readouterr()
    return dict(json.loads(captured.out), _stderr=captured.err)


@pytest.fixture
def context(tmp_path):
    folder = tmp_path / "context"
    folder.mkdir()
    (folder / "Dockerfile").write_text("FROM scratch\n")
    packed = tmp_path / "0123.context.tar"
    with tarfile.open(packed, "w") as archive:
        archive.add(folder, arcname=".")
    return packed


def _args(tmp_path, context, **extra):
    args = {
        "reference": REFERENCE,
        "context_tar": str(context),
        "progress_file": str(tmp_path / "progress.json"),
        "docker_socket": str(tmp_path / "docker.sock"),
    }
    args.update(extra)
    return args


def test_module_builds_streams_progress_and_records_the_end(capsys, tmp_path, context):
    engine = _BuildEngine(str(tmp_path / "docker.sock"), STREAM)
    try:
        result = run(capsys, _args(tmp_path, context))
    finally:
        engine.close()
    assert result.get("failed") is not True, result
    assert result["changed"] is True and result["built"] is True and result["image_id"] == IMAGE_ID
    assert result["steps"] == 4
    # The person at the terminal (or tail -f on the progress log) sees each step as it starts.
    assert REFERENCE + ": step 2/4 after 0 s: RUN python3 -m pip install" in result["_stderr"]
    assert engine.context_names == [".", "./Dockerfile"]
    assert "t=seatwright%2Fvllm-sm120%3A0123456789abcdef" in engine.queries[0] and "pull=0" in engine.queries[0]
    record = json.loads((tmp_path / "progress.json").read_text())
    assert record["done"] is True and record["failed"] is None and record["line"].startswith("built after")
    shown = run(capsys, {"state": "progress", "reference": REFERENCE, "progress_file": str(tmp_path / "progress.json")})
    assert shown["done"] is True and shown["progress"]["waiting_for"] == "the build of " + REFERENCE


def test_module_fails_on_an_error_line_and_the_progress_file_says_so(capsys, tmp_path, context):
    engine = _BuildEngine(str(tmp_path / "docker.sock"), ERROR_LINES)
    try:
        result = run(capsys, _args(tmp_path, context))
    finally:
        engine.close()
    assert result["failed"] is True and "SEATWRIGHT-PATCH-FAILED gate" in result["msg"]
    assert result["step"] == 1 and result["steps"] == 2
    record = json.loads((tmp_path / "progress.json").read_text())
    assert record["done"] is True and "failed at step 1/2" in record["failed"]


@pytest.mark.parametrize("check_mode", [False, True])
def test_a_tag_already_present_is_not_rebuilt(capsys, tmp_path, context, check_mode):
    engine = _BuildEngine(str(tmp_path / "docker.sock"), STREAM, present=True)
    try:
        result = run(capsys, _args(tmp_path, context), check_mode=check_mode)
    finally:
        engine.close()
    assert result["changed"] is False and result["built"] is False and engine.queries == []
    assert (tmp_path / "progress.json").exists() is not check_mode


def test_no_docker_engine_fails_by_name_and_ends_the_wait(capsys, tmp_path, context):
    result = run(capsys, _args(tmp_path, context))
    assert result["failed"] is True and "did not answer GET /images/" in result["msg"]
    shown = run(capsys, {"state": "progress", "reference": REFERENCE, "progress_file": str(tmp_path / "progress.json")})
    assert shown["done"] is True and "did not answer" in shown["failed"]


def test_check_mode_builds_nothing_and_says_it_would(capsys, tmp_path, context):
    engine = _BuildEngine(str(tmp_path / "docker.sock"), STREAM)
    try:
        result = run(capsys, _args(tmp_path, context), check_mode=True)
    finally:
        engine.close()
    assert result["changed"] is True and result["built"] is False and engine.queries == []
    assert not (tmp_path / "progress.json").exists()


@pytest.mark.parametrize(
    "content, words",
    [
        (None, "no build context at"),
        (b"not a tar at all" * 64, "is not a readable tar"),
        ("no-dockerfile", "has no Dockerfile at its root"),
    ],
)
def test_a_missing_or_wrong_context_fails_by_name_before_the_engine_is_asked(capsys, tmp_path, content, words):
    packed = tmp_path / "bad.context.tar"
    if content == "no-dockerfile":
        (tmp_path / "README").write_text("x\n")
        with tarfile.open(packed, "w") as archive:
            archive.add(tmp_path / "README", arcname="README")
    elif content is not None:
        packed.write_bytes(content)
    engine = _BuildEngine(str(tmp_path / "docker.sock"), STREAM)
    try:
        result = run(capsys, _args(tmp_path, packed))
    finally:
        engine.close()
    assert result.get("failed") is True and words in result["msg"], result
    assert engine.context_names == []
