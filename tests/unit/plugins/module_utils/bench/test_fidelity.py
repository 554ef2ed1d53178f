"""The harness-fidelity script's own pieces: pinning, in-flight counts, CPU accounting, same workload.

bench/fidelity/fidelity.py is a script (run under the lab lock against a real vLLM server); these
tests load it as a module and check what it decides without a server: the CPU lists it pins, the
server it would start, that both harnesses get the same workload (warm-ups included), the
requests-in-flight figure on a recorded AIPerf export, and the CPU arithmetic.
"""

import argparse

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.bench import records
from ansible_collections.seatwright.fleet.plugins.module_utils.bench import workload as wl
from ansible_collections.seatwright.fleet.plugins.module_utils.io.bench import runner as bench_runner
from conftest import FIXTURES, load_script

fidelity = load_script("bench/fidelity/fidelity.py")

AIPERF_C4 = FIXTURES / "bench" / "aiperf-0.13.0-profile_export-vllm-tiny-c4.jsonl"


@pytest.mark.parametrize("text, cpus", [("0", [0]), ("1-3", [1, 2, 3]), ("0,2-3", [0, 2, 3]), ("3,1", [1, 3])])
def test_cpu_lists(text, cpus):
    assert fidelity.parse_cpus(text) == cpus
    assert fidelity.parse_cpus(fidelity.cpu_text(cpus)) == cpus


@pytest.mark.parametrize("text", ["", "a", "1-b", "-1"])
def test_bad_cpu_list_is_named(text):
    with pytest.raises(SystemExit, match="CPU"):
        fidelity.parse_cpus(text)


def test_server_command_takes_host_and_port_from_the_base_url():
    argv = fidelity.server_command("/v/bin/python", "/m/smol", "smol", "http://127.0.0.1:8392/v1", 2048)
    assert argv[:3] == ["/v/bin/python", "-m", "vllm.entrypoints.openai.api_server"]
    assert argv[argv.index("--host") + 1] == "127.0.0.1"
    assert argv[argv.index("--port") + 1] == "8392"
    assert argv[argv.index("--served-model-name") + 1] == "smol"
    assert argv[argv.index("--max-model-len") + 1] == "2048"


@pytest.mark.parametrize("cpus, bind", [([0], "0"), ([0, 1], "0,1"), (None, None)])
def test_server_env_binds_vllm_openmp_threads_to_the_server_cpus(cpus, bind):
    env = fidelity.server_env(cpus)
    assert env.get("VLLM_CPU_OMP_THREADS_BIND") == bind
    assert env["HF_HUB_OFFLINE"] == "1"


def _args(**over):
    base = dict(
        base_url="http://127.0.0.1:8392/v1",
        model="smol",
        tokenizer="/m/smol",
        input_tokens=128,
        output_tokens=32,
        requests=64,
        concurrency=4,
    )
    base.update(over)
    return argparse.Namespace(**base)


@pytest.mark.parametrize("concurrency", [1, 4, 16])
def test_both_harnesses_get_the_same_workload(concurrency):
    args = _args(concurrency=concurrency)
    ref = fidelity.vllm_bench_argv(args, 7)
    load = wl.workload(input_tokens=args.input_tokens, output_tokens=args.output_tokens)
    runner = bench_runner.AIPerfRunner("aiperf", args.base_url, args.model, args.tokenizer, "/tmp/x", load)
    ours = runner.command(concurrency, args.requests, 7, "/tmp/x/out")

    def value(argv, flag):
        return argv[argv.index(flag) + 1]

    assert value(ref, "--num-warmups") == value(ours, "--warmup-request-count") == str(concurrency)
    assert value(ref, "--max-concurrency") == value(ours, "--concurrency")
    assert value(ref, "--num-prompts") == value(ours, "--request-count")
    assert value(ref, "--random-input-len") == value(ours, "--synthetic-input-tokens-mean")
    assert value(ref, "--random-output-len") == value(ours, "--output-tokens-mean")
    assert "--ignore-eos" in ref and "ignore_eos:true" in ours
    assert "--streaming" in ours and value(ref, "--backend") == "openai-chat"


@pytest.mark.parametrize(
    "spans, expected",
    [
        ([(0, 10), (0, 10), (0, 10), (0, 10)], 4.0),  # four streams busy all the time
        ([(0, 10), (0, 5), (5, 10), (0, 10)], 3.0),  # one stream idle half the time
        ([(0, 4), (6, 10)], 0.8),  # one stream with a gap
        ([], None),
    ],
)
def test_mean_in_flight(spans, expected):
    recs = [{"start_ns": s + 1, "end_ns": e + 1} for s, e in spans]
    got = records.mean_in_flight(recs)
    assert got == (pytest.approx(expected) if expected is not None else None)


def test_mean_in_flight_of_a_recorded_aiperf_run():
    # recorded on the loaded 2-core host at concurrency 4: AIPerf kept only about 2.3 streams busy
    recs = records.parse_profile_export(AIPERF_C4.read_text())
    got = records.mean_in_flight(recs)
    assert 0 < got <= 4
    assert got == pytest.approx(2.34, abs=0.01)


def test_mean_in_flight_from_vllm_bench_start_times_and_latencies():
    result = {"start_times": [100.0, 100.0, 101.0, 101.0], "latencies": [1.0, 1.0, 1.0, 0.0]}
    # three requests with a latency over a 2 s window (the failed one, latency 0, is left out)
    assert fidelity.mean_in_flight_vllm(result) == pytest.approx(1.5)
    assert fidelity.mean_in_flight_vllm({}) is None
    # without start times: the sum of latencies over the benchmark's duration
    assert fidelity.mean_in_flight_vllm({"latencies": [2.0, 2.0, 0.0], "duration": 2.0}) == pytest.approx(2.0)


def test_cpu_usage_splits_server_harness_and_the_rest():
    tick = fidelity.CLOCK_TICKS
    before = {"cores": {0: (0, 0), 1: (0, 0)}, "server": 0, "harness": 0}
    after = {"cores": {0: (9 * tick, 10 * tick), 1: (5 * tick, 10 * tick)}, "server": 8 * tick, "harness": 4 * tick}
    got = fidelity.cpu_usage(before, after, 10.0)
    assert got["server_cpu_s"] == 8 and got["harness_cpu_s"] == 4
    assert got["other_cpu_s"] == pytest.approx(2.0)
    assert got["core_busy"] == {"0": pytest.approx(0.9), "1": pytest.approx(0.5)}


def test_per_request_server_counts():
    got = fidelity.per_request(
        {"requests": 10, "prompt_tokens": 1000, "generation_tokens": 320},
        {"requests": 78, "prompt_tokens": 1000 + 68 * 150, "generation_tokens": 320 + 68 * 32},
    )
    assert got == {"requests": 68, "prompt_tokens_per_request": 150, "generation_tokens_per_request": 32}
    assert fidelity.per_request({}, {"requests": 3})["prompt_tokens_per_request"] is None


def _run(ttft, tok):
    return {
        "ttft_ms_p50": ttft,
        "output_tok_s": tok,
        "failed": 0,
        "in_flight_mean": 3.9,
        "cpu": {
            "wall_s": 10.0,
            "server_cpu_s": 9.0,
            "harness_cpu_s": 3.0,
            "other_cpu_s": 0.2,
            "core_busy": {"0": 0.95, "1": 0.4},
        },
        "server_saw": {"requests": 68, "prompt_tokens_per_request": 150.0, "generation_tokens_per_request": 32.0},
    }


def test_render_states_the_isolation_and_each_run():
    result = {
        "when": "2026-11-30T18:00:00Z",
        "command": ".venv/bin/python bench/fidelity/fidelity.py --rounds 1",
        "host": {"cpus": 2, "load_avg_at_end": [2.0, 1.5, 1.2], "load_avg_before": [0.9, 1.0, 1.1], "nice": 0},
        "server": {
            "argv": ["python", "-m", "vllm.entrypoints.openai.api_server"],
            "env": {"VLLM_CPU_OMP_THREADS_BIND": "0"},
            "cpus": [0],
            "ready_s": 95.0,
        },
        "pinning": {"server": {"11": "0", "12": "0"}},
        "harness_cpus": [1],
        "workload": {"concurrency": 4},
        "tolerance": 0.1,
        "passed": False,
        "summary": {
            "ttft_ms_p50": {
                "seatwright": 50.0,
                "vllm": 40.0,
                "ratio": 1.25,
                "within_tolerance": False,
                "seatwright_range": [50, 50],
                "vllm_range": [40, 40],
                "round_ratios": [1.25],
            },
            "output_tok_s": {
                "seatwright": 100.0,
                "vllm": 100.0,
                "ratio": 1.0,
                "within_tolerance": True,
                "seatwright_range": [100, 100],
                "vllm_range": [100, 100],
                "round_ratios": [1.0],
            },
        },
        "rounds": [
            {
                "round": 0,
                "warmup": True,
                "order": ["seatwright", "vllm"],
                "seatwright": _run(60, 90),
                "vllm": _run(45, 95),
            },
            {
                "round": 1,
                "warmup": False,
                "order": ["vllm", "seatwright"],
                "seatwright": _run(50, 100),
                "vllm": _run(40, 100),
            },
        ],
    }
    text = fidelity.render(result)
    assert "harnesses (this script, AIPerf and its processes, vLLM's benchmark) on CPU 1" in text
    assert "allowed CPUs as the kernel reported them: 0." in text
    assert "VLLM_CPU_OMP_THREADS_BIND=0" in text
    assert "| TTFT p50 ms | 50.0 (50.0–50.0) | 40.0 (40.0–40.0) | 1.250 | 1.25 | **no** |" in text
    assert (
        "| 1 | seatwright (AIPerf) | 50.0 | 100.0 | 3.90 | 68, 150.0 / 32.0 | 9.0 / 3.0 / 0.2 (10.0) "
        "| cpu0 95% cpu1 40% | 0 |" in text
    )
    assert text.count("\n| warm-up |") == 2
    assert "Passed: **no**." in text
