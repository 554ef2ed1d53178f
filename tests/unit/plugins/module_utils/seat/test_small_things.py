"""Small things found on the way (issue 22, item 6): a missing figure printed as 0.0, a fit hint that
names the setting the seat already has, and `executor: ray` on a one-node seat taken without a word."""

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.bench import workload as wl
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.bench.runner import run_sweep
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.recipe import validate_recipe
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.rules import RULE_IDS
from seat_cases import SCHEMA, mutated, seat_data
from test_fit import EXAMPLE, fit_seat, settings


class FailingRunner:
    """A seat that answers every request with an error: no rate and no TTFT can be measured."""

    load = wl.workload()

    def run(self, name, concurrency, requests, seed):
        records = [
            {
                "ok": False,
                "error": "http 500: engine dead",
                "status": 500,
                "start_ns": 1_000_000_000 + i,
                "end_ns": 1_000_000_100 + i,
                "ttft_ms": None,
                "ttfo_ms": None,
                "latency_ms": None,
                "input_tokens": None,
                "output_tokens": None,
                "reasoning_tokens": None,
            }
            for i in range(requests)
        ]
        return {
            "records": records,
            "before": {},
            "after": {},
            "duration_s": 2.0,
            "window": [1.0, 3.0],
            "artefacts": "/tmp/%s" % name,
        }


def test_progress_lines_show_a_missing_figure_as_a_dash_not_zero():
    lines = []
    run_sweep(FailingRunner(), (1,), 1, 2, 7, {}, progress=lines.append)
    measured = [line for line in lines if "TTFT p50" in line]
    # No request answered: no TTFT at all (a dash), while no tokens in 2 s is a measured rate of 0.0.
    assert measured == [
        "    0.0 visible tok/s, 0.0 reasoning tok/s, TTFT p50 — ms, 8 failed, prefix-cache hits n/a — flags: "
        "prefill-unverified, failed-requests"
    ]


@pytest.mark.parametrize("kv_known", [True, False])
def test_the_fit_hint_names_a_setting_above_the_one_the_seat_runs_at(kv_known):
    # GLM-5.3-Flash at 0.90 with weights 1,000 B past what 0.90 of the card leaves beside the reserve.
    fit = {"kv_bytes_per_token": 6290, "kv_source": "[000] section 4"} if kv_known else {}
    data = settings(
        "glm53-vendor",
        [
            (("serving", "gpu_memory_utilization"), 0.9),
            # 4 x (0.90 of a 97,887 MiB card - the 10.21 GiB GLM-5.3 reserve + 1,000 B), with no MTP block.
            (("model", "checkpoint", "bytes"), 325669218720),
            (("fit",), fit),
        ],
    )
    verdict = fit_seat(data, EXAMPLE)
    assert verdict["per_rank"][0]["kv_headroom_bytes"] <= 0
    assert verdict["reasons"][-1].endswith("it needs at least 0.91 of each GPU")


def _problems(data):
    try:
        validate_recipe(data, SCHEMA, "seats/qwen35-122b.yml", RULE_IDS)
    except SeatError as exc:
        return str(exc)
    return ""


def test_ray_on_a_one_node_vllm_seat_is_refused():
    data = mutated(seat_data("qwen35-122b"), ("topology", "executor"), "ray")
    assert "topology.executor: 'ray' on a one-node seat; Ray only spans nodes here" in _problems(data)


@pytest.mark.parametrize("executor", [None, "mp"])
def test_a_one_node_seat_without_ray_is_taken(executor):
    assert _problems(mutated(seat_data("qwen35-122b"), ("topology", "executor"), executor)) == ""
