"""tools/seatwright-bench end to end: AIPerf drives the test seat (tests/bench_server.py), which
answers in vLLM's recorded shapes with one fault each, and the record says what went wrong.

Needs AIPerf's venv (scripts/aiperf-venv; `make integration` builds it). Small on purpose: one
concurrency, two warm-up passes at most, two measured passes.
"""

import json
import os
import subprocess
import sys

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.io.bench.runner import aiperf_binary
from conftest import FIXTURES, ROOT

sys.path.insert(0, str(ROOT / "tests"))
import bench_server  # noqa: E402  pylint: disable=wrong-import-position

AIPERF = aiperf_binary(str(ROOT))
pytestmark = pytest.mark.skipif(
    not os.access(AIPERF, os.X_OK), reason="AIPerf's venv is missing: run scripts/aiperf-venv"
)


def run_bench(tmp_path, mode, delay=0.004, extra=()):
    server, port = bench_server.serve(mode, 0, delay, "tiny")
    folder = tmp_path / "evidence" / ("lab-" + mode) / "20261130T150000Z"
    try:
        proc = subprocess.run(
            [
                sys.executable,
                str(ROOT / "tools" / "seatwright-bench"),
                "--base-url",
                "http://127.0.0.1:%d/v1" % port,
                "--model",
                "tiny",
                "--tokenizer",
                str(FIXTURES / "bench" / "tokenizer-tiny"),
                "--evidence-dir",
                str(folder),
                "--concurrency",
                "2",
                "--passes",
                "2",
                "--warmup-max",
                "2",
                "--requests-per-stream",
                "4",
                "--min-requests",
                "8",
                "--input-tokens",
                "64",
                "--output-tokens",
                "24",
                "--timeout",
                "400",
                *extra,
            ],
            capture_output=True,
            text=True,
            timeout=1500,
            check=False,
        )
    finally:
        server.shutdown()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "pass 1, c=2" in proc.stderr  # progress for a person watching
    record = json.loads((folder / "record.json").read_text())
    return record, folder


def test_prefix_cache_hits_invalidate_prefill_end_to_end(tmp_path):
    record, folder = run_bench(tmp_path, "prefix-hit")
    level = record["benchmark"]["summary"][0]
    assert level["prefill_valid"] is False
    assert 0.5 < level["prefix_cache_hit_rate"]["median"] <= 0.9  # whole tokens per request, warm-up included
    assert "prefix-cache-hit" in record["summary"]["benchmark_flags"]
    report = (folder / "report.md").read_text()
    assert "invalid (cache)" in report
    assert (folder / "throughput.png").stat().st_size > 1000


def test_throughput_climbing_across_passes_is_flagged_unstable(tmp_path):
    record, _folder = run_bench(tmp_path, "climbing", delay=0.02)
    flags = record["summary"]["benchmark_flags"]
    assert "unstable" in flags or "warmup-unsettled" in flags
    values = record["benchmark"]["summary"][0]["figures"]["output_tok_s"]["values"]
    assert values[1] > values[0]


def test_spec_acceptance_of_one_on_a_loop_is_flagged(tmp_path):
    record, _folder = run_bench(tmp_path, "spec-loop")
    assert "loop-replay" in record["summary"]["benchmark_flags"]
    level = record["benchmark"]["summary"][0]
    assert level["spec_acceptance"]["median"] == 1.0
    assert level["figures"]["output_tok_s"]["median"] is None


def test_a_stream_that_is_all_reasoning_has_no_visible_rate_end_to_end(tmp_path):
    record, folder = run_bench(tmp_path, "reasoning-only")
    figures = record["benchmark"]["summary"][0]["figures"]
    assert figures["output_tok_s"]["median"] == 0.0 and figures["reasoning_tok_s"]["median"] > 0
    assert "reasoning-only" in record["summary"]["benchmark_flags"]
    assert "reasoning-only" in (folder / "report.md").read_text()


def test_a_half_reasoning_stream_reports_both_rates_end_to_end(tmp_path):
    record, _folder = run_bench(tmp_path, "half-reasoning")
    figures = record["benchmark"]["summary"][0]["figures"]
    assert 0.35 < figures["visible_share"]["median"] < 0.65
    assert figures["output_tok_s"]["median"] > 0 and figures["reasoning_tok_s"]["median"] > 0
    assert "reasoning-only" not in record["summary"]["benchmark_flags"]


def test_a_candidate_in_turns_with_a_slower_incumbent_wins_every_turn(tmp_path):
    # The incumbent streams each token three times slower; both get the same prompts, turn by turn.
    incumbent, port = bench_server.serve("steady", 0, 0.012, "tiny")
    try:
        record, folder = run_bench(
            tmp_path, "steady", extra=("--turns-with", "lab", "--turns-url", "http://127.0.0.1:%d/v1" % port)
        )
    finally:
        incumbent.shutdown()
    turns = record["benchmark"]["turns"]
    assert turns["seat"] == "lab" and len(turns["levels"]) == 2
    ratios = turns["pairs"][0]["figures"]["output_tok_s"]["turns"]
    assert [t["pass"] for t in ratios] == [1, 2] and all(t["ratio"] > 1.3 for t in ratios), ratios
    report = (folder / "report.md").read_text()
    assert "In turns with incumbent **lab**" in report and "yes" in report
    assert record["benchmark"]["verdict"]["clean"] is True, record["benchmark"]["verdict"]
