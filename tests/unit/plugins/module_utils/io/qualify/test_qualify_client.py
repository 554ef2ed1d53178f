"""The HTTP client, the runner and the CLI end to end against a small fake engine on loopback.

The fake answers the way vLLM's recorded responses do (tests/fixtures/qualify/vllm/); it can also
stall a stream or refuse a request, so timeouts and kept failures are exercised for real.
"""

import importlib.machinery
import importlib.util
import json
import re
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common import openai_http
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.openai_http import Endpoint, call
from conftest import FIXTURES, ROOT

sys.path.insert(0, str(ROOT / "tests"))
import bench_server  # noqa: E402  pylint: disable=wrong-import-position

VLLM = FIXTURES / "qualify" / "vllm"


def recorded(name):
    return json.loads((VLLM / name).read_text())["response"]


class FakeEngine(BaseHTTPRequestHandler):
    """Routes: /v1/models, /v1/chat/completions (stream or not), /v1/responses (404 like no API)."""

    stall_s = 0.0
    api_key = None
    seen = []

    def log_message(self, *args):
        pass

    def _send(self, status, payload, content_type="application/json"):
        data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        if self.path == "/v1/models":
            return self._send(200, {"object": "list", "data": [{"id": "smol", "max_model_len": 2048}]})
        return self._send(404, {"detail": "Not Found"})

    def do_POST(self):
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        type(self).seen.append({"path": self.path, "auth": self.headers.get("Authorization"), "body": body})
        if self.path != "/v1/chat/completions":
            return self._send(404, {"detail": "Not Found"})
        if body.get("stream"):
            # A streamed call where tools are offered; recorded prose where none are (the soak's prompts).
            return self._stream(
                recorded("stream_tool_call.json" if body.get("tools") else "stream_text.json")["chunks"]
            )
        if body.get("prompt_logprobs"):
            return self._send(400, recorded("nan_prompt_logprobs_400.json")["text"].encode())
        return self._send(200, recorded("smoke_answer.json")["json"])

    def _stream(self, chunks):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        try:
            for index, chunk in enumerate(chunks):
                if index == 2 and self.stall_s:
                    time.sleep(self.stall_s)
                self.wfile.write(("data: %s\n\n" % json.dumps(chunk)).encode())
                self.wfile.flush()
            self.wfile.write(b"data: [DONE]\n\n")
        except (BrokenPipeError, ConnectionResetError):
            pass  # the client gave up on a stalled stream, as it should


@pytest.fixture()
def engine():
    FakeEngine.stall_s = 0.0
    FakeEngine.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), FakeEngine)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield "http://127.0.0.1:%d/v1" % server.server_address[1]
    server.shutdown()
    server.server_close()


def test_plain_call(engine):
    response = call(Endpoint(engine), {"method": "POST", "path": "/chat/completions", "body": {"messages": []}})
    assert response["status"] == 200 and response["json"]["choices"] and response["error"] is None


def test_http_error_keeps_the_body(engine):
    response = call(Endpoint(engine), {"method": "POST", "path": "/chat/completions", "body": {"prompt_logprobs": 1}})
    assert response["status"] == 400 and "Out of range float" in response["text"]


def test_stream_records_chunk_times_and_first_token(engine):
    response = call(
        Endpoint(engine), {"method": "POST", "path": "/chat/completions", "body": {"stream": True}, "stream": True}
    )
    assert response["status"] == 200 and len(response["chunks"]) == len(response["chunk_times"]) > 2
    assert response["ttft_s"] is not None and response["chunk_times"] == sorted(response["chunk_times"])


def test_stalled_stream_is_cut_by_the_read_timeout(engine):
    FakeEngine.stall_s = 2.0
    response = call(
        Endpoint(engine, read_timeout_s=0.5),
        {"method": "POST", "path": "/chat/completions", "body": {"stream": True}, "stream": True},
    )
    assert response["stalled"] and "read timeout" in response["error"] and response["elapsed_s"] < 1.9


def test_refused_connection_is_an_error_not_an_exception():
    response = call(Endpoint("http://127.0.0.1:9/v1", read_timeout_s=2), {"method": "GET", "path": "/models"})
    assert response["status"] is None and response["error"]


def test_api_key_goes_in_the_header(engine):
    call(Endpoint(engine, api_key="sk-test-123"), {"method": "POST", "path": "/chat/completions", "body": {}})
    assert FakeEngine.seen[-1]["auth"] == "Bearer sk-test-123"


def load_cli():
    path = ROOT / "tools" / "seatwright-qualify"
    loader = importlib.machinery.SourceFileLoader("seatwright_qualify", str(path))
    spec = importlib.util.spec_from_loader("seatwright_qualify", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


RECIPE = (ROOT / "seats" / "lab.yml").read_text()


def write_recipe(tmp_path, gates, extra=""):
    text = re.sub(r"  gates: \[[^\]]*\]", "  gates: [%s]" % ", ".join(gates), RECIPE, count=1)
    text = re.sub(r"  expect_fail: \[[^\]]*\]\n", "", text)
    text = re.sub(r"  tool_choice: \w+\n", "", text)
    text = re.sub(r"  soak: \{[^}]*\}\n", "", text)
    path = tmp_path / "seat.yml"
    path.write_text(text + extra)
    return path


def test_cli_writes_evidence_and_keeps_failures(engine, tmp_path, monkeypatch, capsys):
    cli = load_cli()
    monkeypatch.setenv("SEAT_KEY", "sk-live-secret-value")
    recipe = write_recipe(
        tmp_path,
        ["smoke", "nan-logits", "responses-api", "streaming-tool-calls"],
        "  tool_choice: named\n  runs: {streaming-tool-calls: 1}\n",
    )
    evidence = tmp_path / "evidence"
    status = cli.main(
        [
            "--base-url",
            engine,
            "--model",
            "smol",
            "--recipe",
            str(recipe),
            "--evidence-dir",
            str(evidence),
            "--api-key-env",
            "SEAT_KEY",
            "--parts",
            "gates",
        ]
    )
    record = json.loads((evidence / "qualification.json").read_text())
    gates = {gate["id"]: gate for gate in record["gates"]}
    assert [gate["id"] for gate in record["gates"]] == ["smoke", "nan-logits", "responses-api", "streaming-tool-calls"]
    assert status == 1 and record["verdict"] == "not-qualified" and record["passed"] is False
    assert gates["nan-logits"]["verdict"] == "fail" and gates["nan-logits"]["passed"] is False
    nan_exchange = gates["nan-logits"]["exchanges"][0]
    assert nan_exchange["request"]["body"]["prompt_logprobs"] == 1 and nan_exchange["response"]["status"] == 400
    assert gates["responses-api"]["verdict"] == "not-served"
    assert gates["streaming-tool-calls"]["verdict"] == "pass" and gates["streaming-tool-calls"]["passed"]
    assert record["served_context_source"] == "GET /models max_model_len"
    assert "sk-live-secret-value" not in (evidence / "qualification.json").read_text()
    usage = gates["smoke"]["exchanges"][1]["response"]["json"]["usage"]
    assert isinstance(usage["prompt_tokens"], int)  # token counts are not secrets to the redactor
    table = (evidence / "qualification.md").read_text()
    assert "| gate nan-logits | fail |" in table and "verdict: **not-qualified**" in table
    assert "verdict: **not-qualified**" in capsys.readouterr().out


@pytest.mark.parametrize(
    "args, message",
    [
        (["--parts", "gates,vibes"], "--parts: vibes not known"),
        (["--api-key-env", "SEAT_KEY_UNSET_FOR_TEST"], "SEAT_KEY_UNSET_FOR_TEST: that environment variable is empty"),
        (["--soak-duration-s", "0"], "--soak-duration-s must be at least 1"),
    ],
)
def test_cli_bad_input_is_a_message_and_status_2(engine, tmp_path, capsys, args, message):
    cli = load_cli()
    recipe = write_recipe(tmp_path, ["smoke"])
    status = cli.main(["--base-url", engine, "--recipe", str(recipe), "--evidence-dir", str(tmp_path / "e")] + args)
    assert status == 2 and message in capsys.readouterr().err


def test_cli_names_a_bad_recipe_field(engine, tmp_path, capsys):
    cli = load_cli()
    recipe = write_recipe(tmp_path, ["smoke", "retrieval-30k"])
    status = cli.main(["--base-url", engine, "--recipe", str(recipe), "--evidence-dir", str(tmp_path / "e")])
    err = capsys.readouterr().err
    assert status == 2 and "qualification.gates[1]" in err and "Traceback" not in err


def test_cli_soak_runs_for_its_time_and_counts(engine, tmp_path):
    cli = load_cli()
    recipe = write_recipe(tmp_path, ["smoke"], "  soak: {stall_s: 5, max_tokens: 16}\n")
    evidence = tmp_path / "evidence"
    started = time.monotonic()
    status = cli.main(
        [
            "--base-url",
            engine,
            "--model",
            "smol",
            "--recipe",
            str(recipe),
            "--evidence-dir",
            str(evidence),
            "--parts",
            "gates,soak",
            "--soak-duration-s",
            "2",
            "--soak-concurrency",
            "2",
        ]
    )
    soak = json.loads((evidence / "qualification.json").read_text())["soak"]
    assert time.monotonic() - started < 30
    assert soak["requests"] >= 2 and soak["errors"] == 0 and soak["completed"] == soak["requests"]
    assert soak["concurrency"] == 2 and soak["output_tokens"] > 0 and soak["latency_s"]["p50"] is not None
    assert status == 3  # the quality protocol was left out: incomplete, never qualified


def soak_against_test_seat(tmp_path, mode):
    """tools/seatwright-qualify's soak (2 s, 2 streams) against the test seat in one of its stream shapes."""
    server, port = bench_server.serve(mode, 0, 0.001, "tiny")
    evidence = tmp_path / ("evidence-" + mode)
    try:
        status = load_cli().main(
            [
                "--base-url",
                "http://127.0.0.1:%d/v1" % port,
                "--model",
                "tiny",
                "--recipe",
                str(write_recipe(tmp_path, ["smoke"], "  soak: {stall_s: 5, max_tokens: 16}\n")),
                "--evidence-dir",
                str(evidence),
                "--parts",
                "soak",
                "--soak-duration-s",
                "2",
                "--soak-concurrency",
                "2",
            ]
        )
    finally:
        server.shutdown()
    record = json.loads((evidence / "qualification.json").read_text())
    return status, record, (evidence / "qualification.md").read_text()


def test_cli_soak_of_replies_with_no_visible_content_does_not_pass(tmp_path, capsys):
    status, record, markdown = soak_against_test_seat(tmp_path, "reasoning-only")
    soak = record["soak"]
    assert soak["requests"] >= 2 and soak["errors"] == 0
    assert soak["verdict"] == "fail"  # main: pass, every empty reply counted as completed
    assert soak["completed"] == 0
    assert soak["reasoning_exhausted"] == soak["requests"] == soak.get("unanswered")
    assert soak["output_tok_s"] == 0 and soak["reasoning_tok_s"] > 0
    assert "reasoning-exhausted" in soak["reason"] and "reasoning tok/s" in markdown
    assert soak["failures"] and record["verdict"] != "qualified" and status != 0
    assert "reasoning-exhausted" in capsys.readouterr().err  # the progress line shows them


def test_cli_soak_of_half_reasoning_replies_reports_both_rates(tmp_path):
    _status, record, _markdown = soak_against_test_seat(tmp_path, "half-reasoning")
    soak = record["soak"]
    assert soak["verdict"] == "pass" and soak["completed"] == soak["requests"] >= 2
    visible, thinking = soak["output_tok_s"], soak.get("reasoning_tok_s")
    assert visible and thinking and visible / (visible + thinking) == pytest.approx(0.5, abs=0.05)


@pytest.mark.parametrize(
    "page,expected",
    [
        ({"status": 200, "problem": None}, None),
        ({"status": 503, "problem": None}, "HTTP 503"),
        ({"status": None, "problem": "connection refused"}, "connection refused"),
        ({"status": 200, "problem": "answer over 4 MiB"}, "answer over 4 MiB"),
    ],
)
def test_page_failure_names_the_transport_problem_before_the_status(page, expected):
    assert openai_http.page_failure(page) == expected


@pytest.mark.parametrize("error", [MemoryError(), RuntimeError("a reader's bug")], ids=["MemoryError", "a bug"])
def test_a_run_that_runs_out_of_memory_is_incomplete_with_evidence(engine, tmp_path, monkeypatch, error):
    # Issue 50 item 3: MemoryError was exit 1, which the role reads as "not qualified", and no evidence
    # was written. Any failure of the run's own is incomplete (exit 3), and the evidence says why.
    from ansible_collections.seatwright.fleet.plugins.module_utils.io.qualify import run as qualify_run

    calls = []

    def failing_call(endpoint, request):
        calls.append(request["path"])
        raise error

    cli = load_cli()
    monkeypatch.setattr(qualify_run, "call", failing_call)
    evidence = tmp_path / "evidence"
    argv = ["--base-url", engine, "--model", "smol", "--recipe", str(write_recipe(tmp_path, ["smoke"]))]
    try:
        status = cli.main(argv + ["--evidence-dir", str(evidence), "--parts", "gates"])
    except (MemoryError, RuntimeError) as exc:
        status = "raised %s" % type(exc).__name__
    assert status == 3 and calls
    record = json.loads((evidence / "qualification.json").read_text())
    assert record["verdict"] == "incomplete" and record["passed"] is False
    assert any(type(error).__name__ in reason for reason in record["reasons"]), record["reasons"]


def test_a_run_whose_answers_pass_the_run_bound_stops_incomplete(engine, tmp_path, monkeypatch):
    # Issue 50 item 3: each answer is bounded, and so is what one run keeps of all of them.
    from ansible_collections.seatwright.fleet.plugins.module_utils.io.qualify import run as qualify_run

    monkeypatch.setattr(qualify_run, "MAX_RUN_COST", 2000)
    cli = load_cli()
    evidence = tmp_path / "evidence"
    recipe = write_recipe(tmp_path, ["smoke", "streaming-tool-calls"], "  tool_choice: named\n")
    argv = ["--base-url", engine, "--model", "smol", "--recipe", str(recipe), "--evidence-dir", str(evidence)]
    assert cli.main(argv + ["--parts", "gates"]) == 3
    record = json.loads((evidence / "qualification.json").read_text())
    assert record["verdict"] == "incomplete"
    assert any("once parsed" in reason for reason in record["reasons"]), record["reasons"]
