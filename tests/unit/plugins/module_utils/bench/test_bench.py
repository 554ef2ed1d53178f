"""The benchmark's analysis against recorded AIPerf records, recorded vLLM /metrics and the test seat.

The three field traps are reproduced with the test seat's counters (tests/bench_server.py, which
keeps vLLM's recorded /metrics shape): a prefix-cache hit invalidates the prefill figure, a
throughput that climbs across passes is unstable, and spec acceptance 1.0 on a repeat loop is
flagged. tests/integration/test_bench_aiperf.py drives the same seat with AIPerf end to end.
"""

import copy
import json
import os
import subprocess
import sys

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.bench import (
    analysis,
    counters,
    promotion,
    records,
    stats,
    telemetry,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.bench import (
    workload as wl,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import MetricsFormatError
from conftest import FIXTURES, ROOT

sys.path.insert(0, str(ROOT / "tests"))
import bench_server  # noqa: E402  pylint: disable=wrong-import-position

BENCH = FIXTURES / "bench"
AIPERF_C4 = BENCH / "aiperf-0.13.0-profile_export-vllm-tiny-c4.jsonl"
AIPERF_RAW = BENCH / "aiperf-0.13.0-profile_export_raw-vllm-tiny-2req.jsonl"
# AIPerf 0.13.0 against tests/bench_server.py in its reasoning modes (vLLM 0.32's stream shape).
AIPERF_REASONING_ONLY = BENCH / "aiperf-0.13.0-profile_export-reasoning-only-c2.jsonl"
AIPERF_HALF_REASONING = BENCH / "aiperf-0.13.0-profile_export-half-reasoning-c2.jsonl"
VLLM_METRICS = BENCH / "vllm-0.32.0-cpu-metrics-tiny.txt"


def real_records():
    return records.parse_profile_export(AIPERF_C4.read_text())


def scrape(state):
    return counters.engine_counters(counters.parse_exposition(bench_server.metrics_text(state)), state.model)


def level_through_seat(mode, recs, text=None, duration_s=2.0):
    """One level's analysis with the counters the test seat reports around serving these requests."""
    state = bench_server.State(mode, 0.0, "tiny")
    before = scrape(state)
    for rec in recs:
        state.account(rec["input_tokens"], rec["output_tokens"])
    after = scrape(state)
    if text is not None:
        recs = [dict(r, text=text) for r in recs]
    return analysis.analyse_level(4, 1, recs, before, after, duration_s)


# ------------------------------------------------------------------------------------ engine counters


def test_recorded_vllm_metrics_give_the_counters():
    got = counters.engine_counters(counters.parse_exposition(VLLM_METRICS.read_text()), "tiny")
    assert got["prefix_cache_queries"] == 15807.0
    assert got["prefix_cache_hits"] == 0.0
    assert got["generation_tokens"] == 3600.0
    assert got["spec_draft_tokens"] is None


def test_other_models_series_are_left_out():
    text = (
        'vllm:prompt_tokens_total{engine="0",model_name="other"} 5.0\nvllm:prompt_tokens_total{model_name="tiny"} 7\n'
    )
    assert counters.engine_counters(counters.parse_exposition(text), "tiny")["prompt_tokens"] == 7.0


@pytest.mark.parametrize("text", ["vllm:x_total{a=\"b\"}", "vllm:x_total abc", "{}{} 1"])
def test_malformed_exposition_names_the_line(text):
    with pytest.raises(MetricsFormatError, match="line 1"):
        counters.parse_exposition(text)


@pytest.mark.parametrize(
    "before, after, hits, reset",
    [
        ({"prefix_cache_hits": 10.0}, {"prefix_cache_hits": 25.0}, 15.0, []),
        ({"prefix_cache_hits": 10.0}, {"prefix_cache_hits": 2.0}, None, ["prefix_cache_hits"]),
        ({}, {"prefix_cache_hits": 2.0}, None, []),
    ],
)
def test_counter_delta(before, after, hits, reset):
    delta = counters.counter_delta(before, after)
    assert delta["prefix_cache_hits"] == hits
    assert delta["reset"] == reset


# ------------------------------------------------------------------------------------ AIPerf records


def test_recorded_aiperf_records_map_to_request_records():
    recs = real_records()
    assert len(recs) == 16 and all(r["ok"] for r in recs)
    first = recs[0]
    # Server usage (32 generated) wins over AIPerf's re-tokenised count of the byte soup.
    assert first["output_tokens"] == 32
    assert first["input_tokens"] > 128
    assert first["ttft_ms"] is not None and first["ttfo_ms"] is not None and first["latency_ms"] > first["ttft_ms"]
    start, end = records.window(recs)
    assert 0 < end - start < 120


def test_aiperf_first_token_names_are_swapped_into_ours():
    entry = json.loads(AIPERF_C4.read_text().splitlines()[0])
    entry["metrics"]["time_to_first_token"] = {"value": 100.0, "unit": "ms"}
    entry["metrics"]["time_to_first_output_token"] = {"value": 900.0, "unit": "ms"}
    entry["metrics"]["usage_reasoning_tokens"] = {"value": 20, "unit": "tokens"}
    rec = records.request_from_aiperf(entry)
    assert rec["ttfo_ms"] == 100.0  # first output, reasoning included
    assert rec["ttft_ms"] == 900.0  # first visible token
    # The server says 20 went to reasoning it did not stream: the visible count is the visible text's
    # own (54 with the served tokenizer), never 32 - 20.
    assert rec["reasoning_tokens"] == 20 and rec["output_tokens"] == 54 and rec["generated_tokens"] == 32


def test_failed_requests_are_kept_with_their_error():
    entry = json.loads(AIPERF_C4.read_text().splitlines()[0])
    entry["error"] = {"code": 500, "type": "InternalServerError", "message": "engine died"}
    recs = real_records()[:3] + [records.request_from_aiperf(entry)]
    level = analysis.analyse_level(
        4,
        1,
        recs,
        {"prefix_cache_queries": 0, "prefix_cache_hits": 0},
        {"prefix_cache_queries": 400, "prefix_cache_hits": 0},
        1.0,
    )
    assert level["failed"] == 1 and level["succeeded"] == 3
    assert level["failures"][0]["error"] == "InternalServerError 500: engine died"
    assert "failed-requests" in [f["id"] for f in level["flags"]]


def test_raw_export_text_for_the_loop_check():
    texts = records.texts_from_raw_export(AIPERF_RAW.read_text())
    assert len(texts) == 2
    assert all(isinstance(t, str) and t for t in texts.values())


def test_reasoning_stays_out_of_the_visible_rate():
    rec = {
        "ok": True,
        "latency_ms": 1100.0,
        "ttfo_ms": 100.0,
        "output_tokens": 10,
        "reasoning_tokens": 91,
        "input_tokens": 100,
    }
    out = analysis.request_figures(rec)
    assert out["decode_tok_s"] == pytest.approx(100.0)
    assert out["visible_tok_s"] == pytest.approx(10.0)


# ------------------------------------------------------------------------------------ the three traps


def test_prefix_cache_hits_invalidate_the_prefill_figure():
    level = level_through_seat("prefix-hit", real_records())
    assert level["prefix_cache"]["hit_rate"] == pytest.approx(0.9, abs=0.01)
    assert level["prefix_cache"]["prefill_valid"] is False
    assert level["figures"]["prefill_tok_s_p50"] is None
    assert "prefix-cache-hit" in [f["id"] for f in level["flags"]]


def test_fresh_prompts_keep_the_prefill_figure():
    level = level_through_seat("steady", real_records())
    assert level["prefix_cache"]["hit_rate"] == 0.0
    assert level["prefix_cache"]["prefill_valid"] is True
    assert level["figures"]["prefill_tok_s_p50"] > 0
    assert level["flags"] == []


def test_no_prefix_counters_means_prefill_unverified():
    level = analysis.analyse_level(1, 1, real_records(), {}, {}, 1.0)
    assert level["prefix_cache"]["prefill_valid"] is False
    assert [f["id"] for f in level["flags"]] == ["prefill-unverified"]


def test_throughput_climbing_across_passes_is_unstable():
    # The field's trap: 79.4 -> 91.5 -> 104.0 tok/s over three passes after a "ready" warm-up.
    recs = real_records()
    visible = sum(r["output_tokens"] for r in recs)
    levels = [
        dict(level_through_seat("steady", recs, duration_s=visible / rate), **{"pass": i})
        for i, rate in enumerate((79.4, 91.5, 104.0), start=1)
    ]
    summary = analysis.summarise_sweep(levels)
    assert summary[0]["stable"] is False
    assert summary[0]["figures"]["output_tok_s"]["median"] == pytest.approx(91.5)
    assert summary[0]["figures"]["output_tok_s"]["spread"] == pytest.approx((104.0 - 79.4) / 91.5)
    assert "unstable" in [f["id"] for f in summary[0]["flags"]]


def test_passes_within_one_percent_are_stable():
    recs = real_records()
    visible = sum(r["output_tokens"] for r in recs)
    levels = [
        dict(level_through_seat("steady", recs, duration_s=visible / rate), **{"pass": i})
        for i, rate in enumerate((896.9, 900.0, 905.0), start=1)
    ]
    summary = analysis.summarise_sweep(levels)
    assert [f["id"] for f in summary[0]["flags"] if f["id"] in ("unstable", "single-pass")] == []


@pytest.mark.parametrize(
    "warm, settled",
    [([79.4, 91.5, 104.0], False), ([79.4, 101.0, 104.0], True), ([104.0], False), ([50.0, 50.5], True)],
)
def test_warmup_settles_when_two_passes_agree(warm, settled):
    assert analysis.warmup_settled(warm) is settled


def test_spec_acceptance_of_one_on_a_repeat_loop_is_flagged():
    recs = real_records()
    level = level_through_seat("spec-loop", recs, text=" ".join(["lock"] * 64))
    assert level["spec_decode"]["rate"] == 1.0
    ids = [f["id"] for f in level["flags"]]
    assert "loop-replay" in ids
    assert level["figures"]["output_tok_s"] is None  # the loop's speed is not the seat's


def test_spec_acceptance_of_one_on_varied_text_is_not_a_loop():
    text = " ".join(bench_server.answer_words("steady", 3, 64))
    level = level_through_seat(
        "spec-loop", real_records(), text=" ".join("%s%d" % (w, i) for i, w in enumerate(text.split()))
    )
    assert "loop-replay" not in [f["id"] for f in level["flags"]]
    assert level["figures"]["output_tok_s"] is not None


def test_spec_acceptance_of_one_without_text_is_suspect():
    level = level_through_seat("spec-loop", real_records())
    assert "loop-replay-unverified" in [f["id"] for f in level["flags"]]


# ------------------------------------------------------------------------------------ stats and workload


@pytest.mark.parametrize(
    "values, q, expected",
    [([1, 2, 3, 4], 50, 2.5), ([1, 2, 3, 4], 99, 3.97), ([5], 95, 5.0), ([], 50, None), ([None, 2.0], 50, 2.0)],
)
def test_percentile_interpolates_like_numpy(values, q, expected):
    got = stats.percentile(values, q)
    assert got == (pytest.approx(expected) if expected is not None else None)


def test_workload_id_ignores_how_much_is_measured():
    assert wl.workload_id(wl.workload()) == wl.workload_id(wl.workload())
    assert wl.workload_id(wl.workload()) != wl.workload_id(wl.workload(output_tokens=64))


@pytest.mark.parametrize("text, expected", [("1,4,8,16", (1, 4, 8, 16)), ("16,1", (1, 16)), ("4", (4,))])
def test_parse_concurrency(text, expected):
    assert wl.parse_concurrency(text) == expected


@pytest.mark.parametrize("text", ["", "0", "a,b", "1,-4"])
def test_parse_concurrency_refuses(text):
    with pytest.raises(ValueError, match="--concurrency"):
        wl.parse_concurrency(text)


def test_workload_refuses_unknown_settings():
    with pytest.raises(ValueError, match="unknown workload setting"):
        wl.workload(prompt_len=5)


# ------------------------------------------------------------------------------------ telemetry


def emulator_csv(tmp_path):
    env = dict(
        os.environ,
        SEATWRIGHT_EMU_PROFILE=str(ROOT / "lab" / "gpu_profiles" / "rtx-pro-6000-maxq-x2.json"),
        SEATWRIGHT_EMU_STATE=str(tmp_path / "state.json"),
    )
    emu = str(ROOT / "lab" / "nvidia_smi_emu.py")
    query = subprocess.run(
        [
            sys.executable,
            emu,
            "--query-gpu=" + ",".join(telemetry.SMI_TELEMETRY_FIELDS),
            "--format=csv,noheader,nounits",
        ],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    version = subprocess.run([sys.executable, emu, "--version"], env=env, capture_output=True, text=True, check=True)
    return query.stdout, version.stdout


def test_emulator_telemetry_is_labelled_and_never_judged(tmp_path):
    csv, version = emulator_csv(tmp_path)
    gpus = telemetry.gpus_from_smi_csv(csv)
    assert [g["index"] for g in gpus] == [0, 1]
    assert all(g["power_limit_w"] and g["power_w"] is not None for g in gpus)
    assert telemetry.is_emulated(version)
    hosts = {
        "node-a": {
            "source": "nvidia-smi",
            "emulated": True,
            "interval_s": 1.0,
            "samples": [{"t": 10.0 + i, "gpus": gpus} for i in range(5)],
        }
    }
    bench = {"levels": [{"concurrency": 16, "window": [10.0, 14.0]}]}
    out = telemetry.summarise({"hosts": hosts}, bench)
    assert out["emulated"] is True and "not a measurement" in out["label"]
    assert out["verdict"]["verdict"] == "not judged"


@pytest.mark.parametrize("power, verdict", [(87.0, "software-bound"), (289.0, "gpu-bound")])
def test_draw_far_below_cap_at_full_load_is_software_bound(power, verdict):
    gpu = {
        "index": 0,
        "power_w": power,
        "power_limit_w": 325.0,
        "sm_clock_mhz": 2300,
        "sm_clock_max_mhz": 3090,
        "util_pct": 99,
        "temp_c": 80,
    }
    hosts = {
        "node-b": {
            "source": "nvml",
            "emulated": False,
            "interval_s": 1.0,
            "samples": [{"t": 100.0 + i, "gpus": [gpu]} for i in range(3)]
            + [{"t": 50.0, "gpus": [dict(gpu, power_w=20.0)]}],
        }
    }
    bench = {"levels": [{"concurrency": 1, "window": [40.0, 60.0]}, {"concurrency": 16, "window": [99.0, 103.0]}]}
    out = telemetry.summarise({"hosts": hosts}, bench)
    assert out["full_load"]["node-b"]["0"]["power_w"] == power
    assert out["verdict"]["verdict"] == verdict


def test_nvml_sample_converts_milliwatts():
    gpu = telemetry.gpu_from_nvml(1, 87000, 325000, 2300, 3090, 97, 81)
    assert gpu["power_w"] == 87.0 and gpu["power_limit_w"] == 325.0


def test_verdict_collects_every_reason():
    recs = real_records()
    level = level_through_seat("prefix-hit", recs)
    summary = analysis.summarise_sweep([level, dict(copy.deepcopy(level), **{"pass": 2})])
    out = analysis.verdict(summary, {"settled": False, "output_tok_s": [1.0, 2.0]})
    assert out["clean"] is False
    assert "warmup-unsettled" in out["flags"] and "prefix-cache-hit" in out["flags"]


def test_aiperf_command_keeps_the_key_off_the_command_line_and_the_generator_light(tmp_path):
    from ansible_collections.seatwright.fleet.plugins.module_utils.io.bench.runner import AIPerfRunner, server_root

    runner = AIPerfRunner(
        "/opt/aiperf/bin/aiperf",
        "http://10.0.0.11:8000/v1",
        "tiny",
        "/models/tiny",
        str(tmp_path),
        wl.workload(),
        api_key="sk-bench-key-1234",
    )
    argv = runner.command(16, 64, 7, str(tmp_path / "out"))
    # AIPerf gets the key inside its own process (test_keys.py), never as an argument.
    assert "sk-bench-key-1234" not in " ".join(argv) and "--api-key" not in argv
    assert server_root("http://10.0.0.11:8000/v1/") == "http://10.0.0.11:8000"
    assert argv[argv.index("--url") + 1] == "http://10.0.0.11:8000"
    assert argv[argv.index("--cache-bust") + 1] == "first_turn_prefix"
    assert argv[argv.index("--warmup-request-count") + 1] == "16"
    assert "--no-server-metrics" in argv and "--streaming" in argv
    assert argv[argv.index("--extra-inputs") + 1] == "ignore_eos:true"


@pytest.mark.parametrize(
    "poll_hz, expected",
    [
        (None, ["--request-rate", "1000", "--arrival-pattern", "constant"]),  # the default: a 1 ms timer
        (250, ["--request-rate", "250", "--arrival-pattern", "constant"]),
        (0, None),  # AIPerf's own busy loop
    ],
)
def test_aiperf_closed_loop_checks_for_a_free_stream_on_a_timer(tmp_path, poll_hz, expected):
    from ansible_collections.seatwright.fleet.plugins.module_utils.io.bench.runner import AIPerfRunner

    extra = {} if poll_hz is None else {"poll_hz": poll_hz}
    runner = AIPerfRunner(
        "aiperf", "http://10.0.0.11:8000/v1", "tiny", "/models/tiny", str(tmp_path), wl.workload(), **extra
    )
    argv = runner.command(4, 16, 7, str(tmp_path / "out"))
    assert argv[argv.index("--concurrency") + 1] == "4"  # still a closed loop of 4 streams
    if expected is None:
        assert "--request-rate" not in argv and "--arrival-pattern" not in argv
    else:
        at = argv.index("--request-rate")
        assert argv[at : at + 4] == expected


def test_verdict_of_a_warmup_with_no_throughput_names_it():
    out = analysis.verdict([], {"settled": False, "output_tok_s": [None, 12.5]})
    assert out["reasons"] == ["warm-up did not settle within 2 passes (n/a, 12.5): the seat is unstable"]


def bench_cli(tmp_path, *extra):
    """tools/seatwright-bench against a closed port with a tokenizer folder, plus `extra`: for its input checks."""
    (tmp_path / "tok").mkdir(exist_ok=True)
    return subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "seatwright-bench"),
            "--evidence-dir",
            str(tmp_path / "evidence" / "lab" / "20261130T000000Z"),
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--model",
            "m",
            "--tokenizer",
            str(tmp_path / "tok"),
            *extra,
        ],
        capture_output=True,
        text=True,
        check=False,
    )


def test_bench_cli_refuses_a_negative_poll_rate(tmp_path):
    proc = bench_cli(tmp_path, "--poll-hz", "-1")
    assert proc.returncode == 2
    assert "--poll-hz must be 0 (AIPerf's own busy loop) or a rate per second, got -1" in proc.stderr


# ------------------------------------------------------------------------------------ reasoning streams


def without_server_reasoning_count(path, tmp_path):
    """The recorded run as a server that sends no usage.reasoning_tokens at all would give it.

    Today's main then took completion tokens minus AIPerf's count of the reasoning text: negative.
    """
    out = tmp_path / ("no-usage-reasoning-" + path.name)
    lines = []
    for line in path.read_text().splitlines():
        entry = json.loads(line)
        entry["metrics"].pop("usage_reasoning_tokens", None)
        lines.append(json.dumps(entry))
    out.write_text("\n".join(lines) + "\n")
    return out


def bench_replay(tmp_path, mode, recorded):
    """tools/seatwright-bench against the test seat, with AIPerf's recorded records of that seat replayed."""
    server, port = bench_server.serve(mode, 0, 0.0, "tiny")
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
                str(BENCH / "tokenizer-tiny"),
                "--evidence-dir",
                str(folder),
                "--concurrency",
                "2",
                "--passes",
                "2",
                "--warmup-max",
                "2",
                "--output-tokens",
                "24",
                "--aiperf",
                str(ROOT / "tests" / "aiperf_replay.py"),
            ],
            env=dict(os.environ, SEATWRIGHT_AIPERF_REPLAY=str(recorded)),
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
    finally:
        server.shutdown()
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc, json.loads((folder / "record.json").read_text()), (folder / "report.md").read_text()


def level_figure(record, key):
    return ((record["benchmark"]["summary"][0]["figures"]).get(key) or {}).get("median")


@pytest.mark.parametrize("server_counts_reasoning", [True, False], ids=["usage-reasoning-0", "no-usage-reasoning"])
def test_a_stream_that_is_all_reasoning_has_no_visible_rate_and_is_flagged(tmp_path, server_counts_reasoning):
    recorded = AIPERF_REASONING_ONLY
    if not server_counts_reasoning:
        recorded = without_server_reasoning_count(recorded, tmp_path)
    proc, record, report = bench_replay(tmp_path, "reasoning-only", recorded)
    assert level_figure(record, "output_tok_s") == 0.0  # main: 24 completion tokens counted visible, or negative
    assert (level_figure(record, "reasoning_tok_s") or 0) > 0
    assert level_figure(record, "visible_share") == 0.0
    assert "reasoning-only" in record["summary"]["benchmark_flags"]
    assert record["benchmark"]["verdict"]["clean"] is False
    assert "reasoning-only" in promotion.benchmark_flags(record)  # so it cannot carry a promotion
    assert "benchmark: FLAGGED" in proc.stdout and "visible tok/s" in proc.stdout
    assert "0 visible, " in report and "reasoning-only" in report
    assert "reasoning tok/s" in report and " 0.0 visible tok/s" in proc.stderr


def test_a_half_reasoning_stream_reports_both_rates(tmp_path):
    proc, record, report = bench_replay(tmp_path, "half-reasoning", AIPERF_HALF_REASONING)
    visible, thinking = level_figure(record, "output_tok_s"), level_figure(record, "reasoning_tok_s")
    assert visible and thinking  # main: no reasoning rate at all
    assert visible / (visible + thinking) == pytest.approx(0.5, abs=0.1)
    assert level_figure(record, "visible_share") == pytest.approx(0.5, abs=0.1)
    assert "reasoning-only" not in record["summary"]["benchmark_flags"]
    assert record["benchmark"]["verdict"]["clean"] is True
    assert (
        "%.1f visible tok/s, %.1f reasoning tok/s"
        % (
            record["benchmark"]["levels"][0]["figures"]["output_tok_s"],
            record["benchmark"]["levels"][0]["figures"]["reasoning_tok_s"],
        )
        in proc.stderr
    )
    assert "| reasoning tok/s |" in report


@pytest.mark.parametrize("path", [AIPERF_REASONING_ONLY, AIPERF_HALF_REASONING])
def test_visible_tokens_are_counted_from_the_visible_text_never_negative(path):
    recs = records.parse_profile_export(path.read_text())
    assert len(recs) == 8 and all(r["ok"] for r in recs)
    for rec in recs:
        assert rec.get("generated_tokens") == 24  # the server's usage: reasoning and answer alike
        assert rec["output_tokens"] >= 0 and rec["reasoning_tokens"] > 0
    if path == AIPERF_REASONING_ONLY:
        assert all(r["output_tokens"] == 0 for r in recs)


@pytest.mark.parametrize(
    "visible, reasoning, share, flagged",
    [(0, 800, 0.02, True), (10, 990, 0.02, True), (100, 900, 0.02, False), (50, 50, 0.6, True), (64, 0, 0.02, False)],
)
def test_reasoning_only_below_the_declared_visible_share(visible, reasoning, share, flagged):
    recs = [dict(r, output_tokens=visible, reasoning_tokens=reasoning, generated_tokens=None) for r in real_records()]
    level = analysis.analyse_level(4, 1, recs, {}, {}, 2.0, {"min_visible_share": share})
    assert ("reasoning-only" in [f["id"] for f in level["flags"]]) is flagged
    assert level["figures"]["output_tok_s"] == pytest.approx(visible * len(recs) / 2.0)
    assert level["figures"].get("reasoning_tok_s") == pytest.approx(reasoning * len(recs) / 2.0)


@pytest.mark.parametrize(
    "visible, reasoning, generated, want_visible",
    [(32, 0, 32, 31 / 1.55), (16, 16, 32, 16 / 1.55), (0, 32, 32, None)],
)
def test_visible_rate_per_stream_counts_tokens_after_the_first_output_as_decode_does(
    visible, reasoning, generated, want_visible
):
    """A plain stream's visible and decode rates per stream agree; a reasoning stream's visible rate is lower."""
    row = analysis.request_figures(
        {"ok": True, "latency_ms": 1600.0, "ttfo_ms": 50.0, "output_tokens": visible}
        | {"reasoning_tokens": reasoning, "generated_tokens": generated}
    )
    assert row["decode_tok_s"] == pytest.approx(31 / 1.55)
    assert row["visible_tok_s"] == (pytest.approx(want_visible) if want_visible else None)
