"""Moving an alias (router/rollout.py): the refusal, the steps on each router, and the live gates
judged by the benchmark's own analysis on real AIPerf records and a real lab benchmark summary."""

import json

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.bench.records import parse_profile_export
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import RouterError
from ansible_collections.seatwright.fleet.plugins.module_utils.router import hold, rollout
from conftest import FIXTURES

# AIPerf 0.13.0 against the lab's vLLM CPU engine: 16 requests at concurrency 4, none failed.
RECORDS = parse_profile_export((FIXTURES / "bench" / "aiperf-0.13.0-profile_export-vllm-tiny-c4.jsonl").read_text())
LAB = {"benchmark": json.loads((FIXTURES / "router" / "lab-benchmark-summary.json").read_text())}
SPAN_S = (max(r["end_ns"] for r in RECORDS) - min(r["start_ns"] for r in RECORDS)) / 1e9


def promoted(**changes):
    record = {
        "decision": "promote",
        "seat": "lab-fast",
        "reasons": ["beats lab"],
        "comparisons": [{"incumbent": "lab", "comparable": True}],
    }
    record.update(changes)
    return record


@pytest.mark.parametrize(
    "targets, expected",
    [({"lab": 100}, "lab"), ({"lab": 100, "old": 0}, "lab")],
)
def test_current_seat(targets, expected):
    assert rollout.current_seat("production", targets) == expected


@pytest.mark.parametrize(
    "targets, fragment",
    [({}, "has no seat behind it"), ({"lab": 90, "lab-fast": 10}, "split between lab and lab-fast")],
)
def test_current_seat_refused(targets, fragment):
    with pytest.raises(RouterError, match=fragment):
        rollout.current_seat("production", targets)


@pytest.mark.parametrize(
    "record, candidate, incumbent, fragment",
    [
        (None, "lab-fast", "lab", "has no promotion record"),
        (promoted(seat="other"), "lab-fast", "lab", "seat other's, not lab-fast's"),
        (promoted(), "lab-fast", "lab-fast", "already sends everything to lab-fast"),
        (promoted(decision="do not promote", reasons=["loses at c=16"]), "lab-fast", "lab", "loses at c=16"),
        (promoted(decision="lab result"), "lab-fast", "lab", "says 'lab result'"),
        # Judged against another seat than the one the alias serves now.
        (promoted(), "lab-fast", "lab-tp2", "judged against lab, but alias production is served by lab-tp2"),
        (promoted(comparisons=[{"incumbent": "lab", "comparable": False}]), "lab-fast", "lab", "no comparable"),
    ],
)
def test_promotion_refused(record, candidate, incumbent, fragment):
    assert fragment in rollout.promotion_refusal(record, candidate, "production", incumbent)


def test_promotion_allowed():
    assert rollout.promotion_refusal(promoted(), "lab-fast", "production", "lab") is None


def test_litellm_steps_move_by_weight_and_drain_last():
    steps = rollout.rollout_steps("litellm", "production", "lab", "lab-fast", shares=(10, 50), hold_s=30)
    assert [s["step"] for s in steps] == [
        "register",
        "baseline",
        "canary 10%",
        "canary 50%",
        "all",
        "drain",
        "deregister",
    ]
    assert steps[0]["targets"] == {"lab": 100}
    # The incumbent is measured carrying the alias alone, for as long as a gated hold.
    assert steps[1] == {"step": "baseline", "action": "baseline", "seat": "lab", "targets": {"lab": 100}, "hold_s": 30}
    assert steps[2]["targets"] == {"lab": 90, "lab-fast": 10}
    assert steps[3]["targets"] == {"lab": 50, "lab-fast": 50}
    assert steps[4]["targets"] == {"lab-fast": 100}
    assert [s.get("gate") for s in steps] == [None, None, True, True, True, None, None]
    assert steps[5]["seat"] == steps[6]["seat"] == "lab"
    # Nothing is ever stopped by a rollout.
    assert {s["action"] for s in steps} == {"register", "baseline", "set_alias", "drain", "deregister"}


def test_smg_steps_have_one_canary_of_one_worker_in_two():
    steps = rollout.rollout_steps("smg", "production", "lab", "lab-fast", shares=(10,), hold_s=30)
    assert [s["step"] for s in steps] == ["register", "baseline", "canary 50%", "all", "drain", "deregister"]
    assert "no weights" in steps[2]["note"]


@pytest.mark.parametrize(
    "kwargs, fragment",
    [
        ({"shares": (50, 10)}, "rising"),
        ({"shares": (0,)}, "between 1 and 99"),
        ({"shares": (100,)}, "between 1 and 99"),
        ({"shares": (10, 10)}, "each once"),
        ({"hold_s": 0}, "1 s or more"),
    ],
)
def test_rollout_steps_refuse_bad_settings(kwargs, fragment):
    with pytest.raises(RouterError, match=fragment):
        rollout.rollout_steps("litellm", "production", "lab", "lab-fast", **kwargs)


def test_rollout_steps_refuse_an_unknown_router():
    with pytest.raises(RouterError, match="not known"):
        rollout.rollout_steps("nginx", "production", "lab", "lab-fast")


def test_a_clean_hold_passes_against_the_lab_benchmark():
    verdict = rollout.judge_hold(RECORDS, SPAN_S, LAB, {"min_requests": 10})
    assert verdict["verdict"] == rollout.PASS, verdict
    figures = verdict["figures"]
    assert figures["requests"] == 16 and figures["error_rate"] == 0
    # 2.3 requests in flight on average, and no baseline: judged against the lab's c=4 level, the
    # nearest at or above.
    assert figures["expected_from"] == "the benchmark at c=4"
    assert figures["expected_visible_tok_s_p50"] == pytest.approx(19.85, abs=0.01)


def test_failed_requests_fail_the_gate():
    broken = [dict(r, ok=False, error="connection refused") if i % 4 == 0 else r for i, r in enumerate(RECORDS)]
    verdict = rollout.judge_hold(broken, SPAN_S, LAB, {"min_requests": 10, "min_visible_ratio": 0.5})
    assert verdict["verdict"] == rollout.FAIL
    assert any("error rate 25.0 % (4 of 16)" in r for r in verdict["reasons"]), verdict["reasons"]


def slowed(records, factor):
    """The same requests with their decode stretched `factor` times: a candidate streaming slower."""
    return [dict(r, latency_ms=r["ttfo_ms"] + factor * (r["latency_ms"] - r["ttfo_ms"])) for r in records]


@pytest.mark.parametrize(
    "records, gates, fragment",
    [
        (RECORDS, {"ttft_ms_p95": 500.0}, "TTFT p95 624.1 ms over the gate's 500 ms"),
        # 111 tok/s per stream here; 20 times slower is under 80 % of the lab's 19.8 at c=4.
        (slowed(RECORDS, 20), {}, "under 80 % of the 19.8 of the benchmark at c=4"),
    ],
)
def test_slow_answers_fail_the_gate(records, gates, fragment):
    verdict = rollout.judge_hold(records, SPAN_S, LAB, dict(gates, min_requests=10))
    assert verdict["verdict"] == rollout.FAIL
    assert any(fragment in r for r in verdict["reasons"]), verdict["reasons"]


def test_a_thin_hold_asks_for_synthetic_load():
    verdict = rollout.judge_hold(RECORDS[:3], SPAN_S, LAB)
    assert verdict["verdict"] == rollout.THIN
    assert "fewer than the 20 a verdict needs" in verdict["reasons"][0]


def test_a_candidate_without_a_benchmark_cannot_pass():
    verdict = rollout.judge_hold(RECORDS, SPAN_S, {}, {"min_requests": 10})
    assert verdict["verdict"] == rollout.FAIL
    assert "no baseline hold and no benchmark visible tok/s figure" in verdict["reasons"][0]


@pytest.mark.parametrize("in_flight, level", [(0.5, 1), (1, 1), (2.3, 4), (16, 16), (40, 16)])
def test_expected_visible_uses_the_nearest_level_at_or_above(in_flight, level):
    assert rollout.expected_visible(LAB, in_flight)[1] == level


def test_answered_by():
    assert rollout.answered_by(["lab-fast", "lab-fast", None, "lab"], "lab-fast") == (2, 2)


def test_the_baseline_hold_measures_the_incumbent_and_judges_nothing():
    broken = [dict(r, ok=False, error="HTTP 500") if i == 0 else r for i, r in enumerate(RECORDS)]
    verdict = rollout.judge_baseline(broken, SPAN_S, {"min_requests": 10})
    # The incumbent's own failure is recorded, not held against the promotion.
    assert verdict["verdict"] == rollout.PASS, verdict
    assert verdict["figures"]["failed"] == 1 and verdict["figures"]["visible_tok_s_p50"] > 0
    assert verdict["reasons"][0].startswith("baseline: the incumbent's visible tok/s per stream p50 ")


def test_a_thin_baseline_asks_for_synthetic_load():
    assert rollout.judge_baseline(RECORDS[:3], SPAN_S)["verdict"] == rollout.THIN


@pytest.mark.parametrize(
    "factor, ratio, verdict",
    [
        # The same answers as the baseline: 100 % of it.
        (1, 0.8, rollout.PASS),
        # Decode twice as slow: about 52 % of the baseline per stream, under 80 %, over 30 %.
        (2, 0.8, rollout.FAIL),
        (2, 0.3, rollout.PASS),
        # 20 times slower fails even a lenient 30 %.
        (20, 0.3, rollout.FAIL),
    ],
)
def test_a_hold_is_judged_against_the_baseline_not_the_benchmark(factor, ratio, verdict):
    baseline = rollout.judge_baseline(RECORDS, SPAN_S, {"min_requests": 10})["figures"]
    gates = {"min_requests": 10, "min_visible_ratio": ratio}
    # An empty benchmark: with a baseline the benchmark is not needed.
    judged = rollout.judge_hold(slowed(RECORDS, factor), SPAN_S, {}, gates, baseline=baseline)
    assert judged["verdict"] == verdict, judged
    assert judged["figures"]["expected_visible_tok_s_p50"] == baseline["visible_tok_s_p50"]
    assert judged["figures"]["expected_from"].startswith("the incumbent's baseline hold")
    if verdict == rollout.FAIL:
        assert "of the incumbent's baseline hold" in judged["reasons"][0]


def test_a_node_slower_than_the_benchmark_is_not_the_candidates_fault():
    # The field's case behind the baseline (the lab's make lab-promote-test): everything through the
    # alias runs far slower than the candidate's benchmark alone, for the incumbent as much as for the
    # candidate. Against the benchmark it fails; against the baseline under the same traffic it passes.
    busy = slowed(RECORDS, 20)
    gates = {"min_requests": 10}
    assert rollout.judge_hold(busy, SPAN_S, LAB, gates)["verdict"] == rollout.FAIL
    baseline = rollout.judge_baseline(slowed(RECORDS, 24), SPAN_S, gates)["figures"]
    assert rollout.judge_hold(busy, SPAN_S, LAB, gates, baseline=baseline)["verdict"] == rollout.PASS


@pytest.mark.parametrize(
    "candidate, incumbent, verdict",
    [
        # make lab-promote-test, 2026-12-04: in the canary the whole node slowed under AIPerf and the two
        # engines sharing its cores. Both seats slowed alike: judged beside the incumbent, it passes.
        (20, 20, rollout.PASS),
        # The candidate alone slowed, 20 times against the incumbent beside it: it fails.
        (20, 1, rollout.FAIL),
        # The same per-stream rate as the incumbent beside it, whatever the baseline hold showed.
        (1, 1, rollout.PASS),
    ],
)
def test_a_canary_is_judged_beside_the_incumbent_in_the_same_hold(candidate, incumbent, verdict):
    # The baseline hold ran on an idle node: 24 times faster than the canary's node.
    gates = {"min_requests": 10, "min_visible_ratio": 0.3}
    baseline = rollout.judge_baseline(RECORDS, SPAN_S, gates)["figures"]
    judged = rollout.judge_hold(
        slowed(RECORDS, candidate), SPAN_S, LAB, gates, baseline=baseline, beside=slowed(RECORDS, incumbent)
    )
    assert judged["verdict"] == verdict, judged
    assert judged["figures"]["expected_from"] == "the incumbent beside it in this hold (16 answers, 2.3 in flight)"
    assert judged["figures"]["incumbent_beside"]["requests"] == 16
    if verdict == rollout.FAIL:
        assert "of the incumbent beside it in this hold" in judged["reasons"][0]
    # Against the idle baseline alone, a node slowed 20 times fails the candidate.
    alone = rollout.judge_hold(slowed(RECORDS, 20), SPAN_S, LAB, gates, baseline=baseline)
    assert alone["verdict"] == rollout.FAIL


def test_an_incumbent_too_thin_beside_the_candidate_leaves_the_baseline_as_reference():
    gates = {"min_requests": 10}
    baseline = rollout.judge_baseline(RECORDS, SPAN_S, gates)["figures"]
    judged = rollout.judge_hold(RECORDS, SPAN_S, LAB, gates, baseline=baseline, beside=RECORDS[:9])
    assert judged["figures"]["expected_from"].startswith("the incumbent's baseline hold")
    assert "incumbent_beside" not in judged["figures"]


def test_a_hold_through_a_router_names_the_incumbents_answers_beside_the_candidates():
    # LiteLLM names who answered: the canary's other answers are the incumbent's. smg names nobody:
    # every answer is judged as the candidate's and the baseline stays the reference.
    gates = hold.gates_of({"min_requests": 10})
    baseline = rollout.judge_baseline(RECORDS, SPAN_S, gates)["figures"]
    named = [dict(r, seat="lab-fast") for r in slowed(RECORDS, 20)] + [dict(r, seat="lab") for r in slowed(RECORDS, 20)]
    verdict = hold.judge(named, "lab-fast", SPAN_S, LAB, gates, baseline=baseline)
    assert verdict["verdict"] == rollout.PASS, verdict
    assert verdict["figures"]["answered_by"] == {"lab-fast": 16, "lab": 16}
    assert verdict["figures"]["expected_from"].startswith("the incumbent beside it in this hold")
    unnamed = [dict(r, seat=None) for r in slowed(RECORDS, 20)]
    verdict = hold.judge(unnamed, "lab-fast", SPAN_S, LAB, gates, baseline=baseline)
    assert verdict["figures"]["expected_from"].startswith("the incumbent's baseline hold")


@pytest.mark.parametrize(
    "baseline, carried, streams",
    [
        # The baseline runs the synthetic load from its first second, and each later hold runs what it ran.
        (hold.BASELINE, 0, 4),
        ({"visible_tok_s_p50": 39.4}, 4, 4),
        ({"visible_tok_s_p50": 39.4}, 0, 0),
        # With no baseline a hold adds its load only when too thin to judge.
        (None, 4, 0),
    ],
)
def test_holds_start_with_the_baselines_load(baseline, carried, streams):
    assert hold.starting_streams(baseline, carried) == streams


def test_a_gate_seen_failing_stands_when_the_last_answers_arrive():
    # make lab, 2026-12-04: the canary failed at 15 s, and the answers still in flight at the end
    # turned the verdict over all of them into a pass. A failure ends the hold and stands.
    seen = {"verdict": rollout.FAIL, "reasons": ["visible tok/s per stream p50 9.1, under 30 %"], "figures": {}}
    final = {"verdict": rollout.PASS, "reasons": ["every gate held"], "figures": {}}
    assert hold.settled(seen, final)["verdict"] == rollout.FAIL
    assert hold.settled(seen, final)["reasons"] == seen["reasons"]
    assert hold.settled({"verdict": rollout.PASS}, final) is final
    forced = dict(final, verdict=rollout.FAIL, reasons=[hold.FORCED])
    assert hold.settled({"verdict": rollout.PASS}, forced) is forced


@pytest.mark.parametrize(
    "candidate, incumbent, shared",
    [
        # The lab (2026-12-04 plans): lab and lab-allcores both on node-a, no GPUs: the node's cores.
        ([{"host": "node-a", "gpus": []}], [{"host": "node-a", "gpus": []}], "node-a's CPU cores"),
        # lab-allcores beside the two-node lab-tp2: node-a's cores are still both seats'.
        ([{"host": "node-a", "gpus": []}], [{"host": "node-a"}, {"host": "node-b"}], "node-a's CPU cores"),
        # GPU seats on one workstation: shared only where their GPUs overlap.
        ([{"host": "ws1", "gpus": [0, 1]}], [{"host": "ws1", "gpus": [1]}], "ws1's GPUs 1"),
        ([{"host": "ws1", "gpus": [0]}], [{"host": "ws1", "gpus": [1]}], None),
        ([{"host": "ws1", "gpus": [0, 1]}], [{"host": "ws2", "gpus": [0, 1]}], None),
        # A CPU seat beside a GPU seat on one host: the GPU seat's compute is its GPUs.
        ([{"host": "ws1", "gpus": []}], [{"host": "ws1", "gpus": [0]}], None),
        # No plan for one of them: nothing known to be shared.
        ([{"host": "node-a", "gpus": []}], None, None),
        ([{"serve": "172.30.99.11:8003"}], [{"host": "node-a", "gpus": []}], None),
    ],
)
def test_shared_compute(candidate, incumbent, shared):
    assert rollout.shared_compute(candidate, incumbent) == shared


def test_a_canary_on_shared_cores_records_its_visible_rate_and_judges_errors_and_ttft():
    # make lab, 2026-12-04 (bare machine): in the canary lab-allcores streamed 6.0 tok/s per stream
    # against the lab seat's 33.2 beside it, both engines on node-a's two cores. That is their
    # contention, not the candidate: recorded, not judged; errors and TTFT still are.
    gates = {"min_requests": 10, "min_visible_ratio": 0.3}
    baseline = rollout.judge_baseline(RECORDS, SPAN_S, gates)["figures"]
    args = (slowed(RECORDS, 20), SPAN_S, LAB, gates)
    kwargs = {"baseline": baseline, "beside": RECORDS}
    assert rollout.judge_hold(*args, **kwargs)["verdict"] == rollout.FAIL
    judged = rollout.judge_hold(*args, contended="node-a's CPU cores", **kwargs)
    assert judged["verdict"] == rollout.PASS, judged
    assert judged["figures"]["visible_not_judged"] == "both seats compute on node-a's CPU cores in this hold"
    assert judged["reasons"][0].startswith("error rate and TTFT held; visible tok/s recorded, not judged")
    assert judged["figures"]["visible_tok_s_p50"] is not None
    failed = [dict(r, ok=False) for r in RECORDS[:2]] + slowed(RECORDS, 20)[2:]
    assert rollout.judge_hold(failed, SPAN_S, LAB, gates, contended="node-a's CPU cores")["verdict"] == rollout.FAIL
    ttft = rollout.judge_hold(RECORDS, SPAN_S, LAB, dict(gates, ttft_ms_p95=500.0), contended="node-a's CPU cores")
    assert ttft["verdict"] == rollout.FAIL and "TTFT p95" in ttft["reasons"][0]


def test_only_the_canaries_are_marked_contended():
    steps = rollout.rollout_steps("litellm", "production", "lab", "lab-allcores", (10, 50), 30, "node-a's CPU cores")
    marked = [s["step"] for s in steps if s.get("contended")]
    assert marked == ["canary 10%", "canary 50%"]
    assert not any(s.get("contended") for s in rollout.rollout_steps("litellm", "production", "lab", "lab-fast"))
