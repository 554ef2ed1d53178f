"""Records, reports and the promotion decision: a candidate seat against the fleet's incumbents.

The field's "fastest seat ever measured" had been compared only with its own history; the
incumbent one-node seat beat it on half the hardware, and adopting it would have evicted seven
services. These tests hold the decision to the rules in bench/promotion.py.
"""

import json
import os
import subprocess
import sys

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.bench import promotion
from ansible_collections.seatwright.fleet.plugins.module_utils.bench import workload as wl
from ansible_collections.seatwright.fleet.plugins.module_utils.evidence import record as rec
from ansible_collections.seatwright.fleet.plugins.module_utils.evidence import report
from ansible_collections.seatwright.fleet.plugins.module_utils.evidence.bringup import bringup_record
from ansible_collections.seatwright.fleet.plugins.module_utils.evidence.folder import evidence_dir_parts
from ansible_collections.seatwright.fleet.plugins.module_utils.evidence.redact import Redactor
from ansible_collections.seatwright.fleet.plugins.module_utils.io.evidence import writer as evidence
from conftest import ROOT
from evidence_cases import NOW, benchmark

DAY = 86400.0


def plan(hosts):
    return {
        "seat": "x",
        "fits": True,
        "model": {"served_name": "m", "revision": "781dac1f55540a048a8efb9ac343c771b6fa7ad4"},
        "reasons": [],
        "ranks": [
            {
                "host": h,
                "rank": i,
                "argv": ["vllm", "serve", "/models/m", "--tensor-parallel-size", str(len(hosts))],
                "env": {"VLLM_HOST_IP": "172.30.99.%d" % (11 + i)},
            }
            for i, h in enumerate(hosts)
        ],
    }


def record(seat, rates, hosts=("node-a",), evicted=(), qualification=True, **bench_kw):
    parts = {
        "plan": plan(list(hosts)),
        "bringup": bringup_record(
            seat,
            plan(list(hosts)),
            {
                "state": "serving",
                "ranks": plan(list(hosts))["ranks"],
                "image_id": "sha256:" + "ab" * 32,
                "evicted": [{"host": h, "name": n, "kind": "container"} for h, n in evicted],
            },
            NOW - 3700,
        ),
        "qualification": None
        if qualification is None
        else {
            "result": {
                "verdict": {True: "qualified", False: "not-qualified", "incomplete": "incomplete"}[qualification],
                "reasons": [] if qualification is True else ["gate json: fail"],
            }
        },
        "benchmark": benchmark(rates, **bench_kw) if rates else None,
    }
    return rec.assemble(seat, "20261130T120000Z", parts, "2026-11-30T12:00:00Z")


INCUMBENT_RATES = {1: 112.8, 4: 400.0, 16: 940.0}


def test_two_node_seat_that_evicts_and_loses_is_a_lab_result():
    # The field's case: the two-node seat is faster single-stream only and evicts seven services.
    evicted = [("node-a", "agent-27b")] + [("node-b", n) for n in ("27b", "reasoner", "doc-1", "doc-2", "embed", "ocr")]
    candidate = record("glm53-vendor", {1: 117.9, 4: 380.0, 16: 763.9}, hosts=("node-a", "node-b"), evicted=evicted)
    incumbent = record("qwen38", INCUMBENT_RATES)
    out = promotion.decide(candidate, {"qwen38": incumbent}, NOW, 14, 0.10)
    assert out["decision"] == promotion.LAB_RESULT
    comp = out["comparisons"][0]
    assert comp["comparable"] and [r["concurrency"] for r in comp["rows"]] == [1, 4, 16]
    assert comp["rows"][2]["output_tok_s"]["ratio"] == pytest.approx(763.9 / 940.0, rel=1e-6)
    assert comp["cost"]["candidate"]["evicted_count"] == 7 and comp["cost"]["incumbent"]["evicted_count"] == 0
    assert any("does not beat incumbent qwen38" in r for r in out["reasons"])
    assert any("lab result, not a seat" in r for r in out["reasons"])


def test_costlier_seat_must_clear_the_margin():
    candidate = record(
        "big",
        {c: r * 1.05 for c, r in INCUMBENT_RATES.items()},
        hosts=("node-a", "node-b"),
        evicted=[("node-b", "ocr")],
    )
    out = promotion.decide(candidate, {"qwen38": record("qwen38", INCUMBENT_RATES)}, NOW, 14, 0.10)
    assert out["decision"] == promotion.LAB_RESULT
    candidate = record(
        "big", {c: r * 1.2 for c, r in INCUMBENT_RATES.items()}, hosts=("node-a", "node-b"), evicted=[("node-b", "ocr")]
    )
    out = promotion.decide(candidate, {"qwen38": record("qwen38", INCUMBENT_RATES)}, NOW, 14, 0.10)
    assert out["decision"] == promotion.PROMOTE
    assert any("x1.20" in r and "needs x1.10" in r for r in out["reasons"])


def test_same_cost_seat_promotes_when_faster():
    candidate = record("fast", {c: r * 1.03 for c, r in INCUMBENT_RATES.items()})
    out = promotion.decide(candidate, {"qwen38": record("qwen38", INCUMBENT_RATES)}, NOW, 14, 0.10)
    assert out["decision"] == promotion.PROMOTE
    assert "qualification passed (necessary, not sufficient)" in out["reasons"]


@pytest.mark.parametrize(
    "qualification, text",
    [(False, "qualification failed"), (None, "no qualification record"), ("incomplete", "qualification incomplete")],
)
def test_qualification_failure_or_absence_blocks(qualification, text):
    candidate = record("fast", {c: r * 2 for c, r in INCUMBENT_RATES.items()}, qualification=qualification)
    out = promotion.decide(candidate, {"qwen38": record("qwen38", INCUMBENT_RATES)}, NOW, 14, 0.10)
    assert out["decision"] == promotion.DO_NOT_PROMOTE
    assert any(text in r for r in out["reasons"])


@pytest.mark.parametrize("spread, decision", [(0.0, promotion.PROMOTE), (0.2, promotion.DO_NOT_PROMOTE)])
def test_a_flagged_incumbent_is_shown_but_a_win_over_it_does_not_promote(spread, decision):
    candidate = record("fast", {c: r * 1.3 for c, r in INCUMBENT_RATES.items()})
    incumbent = record("qwen38", INCUMBENT_RATES, spread=spread)
    out = promotion.decide(candidate, {"qwen38": incumbent}, NOW, 14, 0.10)
    comp = out["comparisons"][0]
    assert out["decision"] == decision
    assert comp["comparable"] and [r["concurrency"] for r in comp["rows"]] == [1, 4, 16]
    assert bool(comp["incumbent_flags"]) is (spread > 0)
    noted = [r for r in out["reasons"] if "incumbent qwen38: its benchmark is flagged (unstable)" in r]
    assert len(noted) == (1 if spread else 0)
    assert out["actions"] == (["re-measure incumbent qwen38 until its benchmark is clean"] if spread else [])
    text = "\n".join(report.decision_lines(out))
    assert ("The incumbent's own benchmark is flagged (unstable)" in text) is (spread > 0)
    assert "| 16 |" in text


def test_a_pass_alone_never_promotes():
    candidate = record("passed-only", None)
    out = promotion.decide(candidate, {}, NOW, 14, 0.10)
    assert out["decision"] == promotion.DO_NOT_PROMOTE
    assert any("a qualification pass alone never promotes" in r for r in out["reasons"])


def test_flagged_benchmark_blocks():
    candidate = record("noisy", {c: r * 2 for c, r in INCUMBENT_RATES.items()}, spread=0.2)
    out = promotion.decide(candidate, {"qwen38": record("qwen38", INCUMBENT_RATES)}, NOW, 14, 0.10)
    assert out["decision"] == promotion.DO_NOT_PROMOTE
    assert any("the benchmark is flagged (unstable)" in r for r in out["reasons"])


@pytest.mark.parametrize(
    "kw, text",
    [
        ({"started": NOW - 30 * DAY}, "days old"),
        ({"harness": {"name": "seatwright-bench", "version": "0/aiperf-0.12.0"}}, "re-measure the incumbent"),
        ({"load": wl.workload(output_tokens=512)}, "records compare only within one profile"),
    ],
)
def test_stale_or_other_harness_incumbent_is_marked_for_remeasurement(kw, text):
    candidate = record("fast", {c: r * 2 for c, r in INCUMBENT_RATES.items()})
    incumbent = record("qwen38", INCUMBENT_RATES, **kw)
    out = promotion.decide(candidate, {"qwen38": incumbent}, NOW, 14, 0.10)
    assert out["decision"] == promotion.DO_NOT_PROMOTE
    assert out["comparisons"][0]["comparable"] is False
    assert any(text in p for p in out["comparisons"][0]["problems"])
    assert out["actions"] == ["re-measure incumbent qwen38 with this harness and workload"]


def test_missing_incumbent_record_is_marked_for_measurement():
    candidate = record("fast", {c: r * 2 for c, r in INCUMBENT_RATES.items()})
    out = promotion.decide(candidate, {"qwen38": None}, NOW, 14, 0.10)
    assert out["decision"] == promotion.DO_NOT_PROMOTE
    assert "no benchmark record of the incumbent" in out["comparisons"][0]["problems"][0]


# ------------------------------------------------------------------------------------ records and reports


def test_record_matches_its_schema_and_carries_the_launch():
    out = record("lab", INCUMBENT_RATES, hosts=("node-a", "node-b"), evicted=[("node-b", "ocr")])
    assert evidence.validate_record(out) == []
    assert out["launch"]["source"] == "bringup.json"
    assert out["launch"]["ranks"][1]["argv"][-1] == "2"
    assert out["fleet_cost"]["nodes"] == ["node-a", "node-b"]
    assert out["summary"] == {
        "qualification": "passed",
        "qualification_failures": [],
        "benchmark": "clean",
        "benchmark_flags": [],
        "decision": None,
    }


@pytest.mark.parametrize(
    "declared, stopped, cost, source",
    [
        # The co-tenant was already down: bring-up stopped nothing, the seat still costs it.
        ([{"host": "node-a", "name": "omni", "kind": "container"}], [], ["omni"], "plan.json"),
        (
            [{"host": "node-a", "name": "omni", "kind": "container"}],
            [{"host": "node-a", "name": "omni"}],
            ["omni"],
            "plan.json",
        ),
        ([], [], [], "plan.json"),
        # A plan without a fleet cost (older plans): bring-up's list stands in.
        (None, [{"host": "node-a", "name": "omni"}], ["omni"], "bringup.json"),
        (None, None, [], None),
    ],
)
def test_fleet_cost_is_what_the_plan_evicts_not_what_happened_to_run(declared, stopped, cost, source):
    plan_part = plan(["node-a"])
    if declared is not None:
        plan_part["fleet_cost"] = {"cotenants": {"evicted": declared, "stay_resident": []}}
    bringup = {"ranks": plan_part["ranks"]}
    if stopped is not None:
        bringup["evicted"] = stopped
    out = rec.fleet_cost_of(plan_part, bringup)
    assert [e["name"] for e in out["evicted"]] == cost
    assert out["source"] == source and out["evicted_known"] is (source is not None)
    assert out["stopped_at_bringup"] == stopped
    text = report.render(
        rec.assemble("x", "20261130T120000Z", {"plan": plan_part, "bringup": bringup}, "2026-11-30T12:00:00Z")
    )
    named = ", ".join("omni on node-a" for _ in cost) or ("none" if source else "not recorded")
    assert "- Co-tenant services evicted: %s%s\n" % (named, " (from %s)" % source if source else "") in text


@pytest.mark.parametrize(
    "qualification, status, failures",
    [
        ({"result": {"verdict": "qualified", "reasons": []}}, "passed", []),
        ({"result": {"verdict": "not-qualified", "reasons": ["gate json: fail"]}}, "failed", ["gate json: fail"]),
        ({"result": {"verdict": "incomplete", "reasons": ["not run: soak"]}}, "incomplete", ["not run: soak"]),
        ({"passed": True}, "passed", []),
        ({"verdict": "FAIL"}, "failed", []),
        ({"gates": [{"id": "smoke", "passed": True}, {"id": "tools", "verdict": "failed"}]}, "failed", ["tools"]),
        ({"gates": [{"id": "smoke", "passed": True}]}, "passed", []),
        ({"notes": "nothing"}, "missing", []),
        (None, "missing", []),
    ],
)
def test_qualification_summary(qualification, status, failures):
    assert rec.qualification_summary(qualification) == (status, failures)


def test_report_ends_with_the_decision_and_side_by_side(tmp_path):
    candidate = record("lab-two-node", {1: 40.0, 4: 120.0}, hosts=("node-a", "node-b"), evicted=[("node-b", "ocr")])
    incumbent = record("lab", {1: 45.0, 4: 150.0})
    decision = promotion.decide(candidate, {"lab": incumbent}, NOW, 14, 0.10)
    candidate["promotion"] = decision
    text = report.render(candidate, ["throughput.png"])
    assert text.rstrip().splitlines()[-1].startswith("| 4 | 120 / 150 (x0.80)")
    assert "**Decision: lab result.**" in text
    assert "![Output throughput" in text and "ttft.png" not in text
    assert "| nodes | 2 | 1 |" in text


def write_run(root, seat, run_id, rec_data):
    folder = root / seat / run_id
    folder.mkdir(parents=True)
    for part in ("plan", "bringup", "qualification", "benchmark"):
        if rec_data.get(part) is not None:
            (folder / ("%s.json" % part)).write_text(json.dumps(rec_data[part]))
    return folder


def test_promote_tool_writes_the_decision_into_the_report(tmp_path):
    root = tmp_path / "evidence"
    inc = write_run(root, "lab", "20261130T100000Z", record("lab", {1: 45.0, 4: 150.0}))
    cand = write_run(
        root,
        "lab-two-node",
        "20261130T110000Z",
        record("lab-two-node", {1: 40.0, 4: 120.0}, hosts=("node-a", "node-b"), evicted=[("node-b", "ocr")]),
    )
    # The incumbent's record is assembled first, as its own seat run would have done.
    tool = str(ROOT / "tools" / "seatwright-bench")
    subprocess.run(
        [sys.executable, tool, "--evidence-dir", str(inc), "--assemble-only"], check=True, capture_output=True
    )
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "seatwright-promote"),
            "--evidence-dir",
            str(cand),
            "--incumbents-json",
            '["lab"]',
            "--max-age-days",
            "100000",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 3, proc.stderr
    assert "decision for lab-two-node: LAB RESULT" in proc.stdout
    saved = json.loads((cand / "record.json").read_text())
    assert saved["summary"]["decision"] == "lab result"
    report_text = (cand / "report.md").read_text()
    assert "Against incumbent **lab**" in report_text
    for plot in ("throughput.png", "ttft.png"):
        assert (cand / plot).stat().st_size > 1000


def test_assemble_refuses_a_zero_byte_part(tmp_path):
    folder = tmp_path / "lab" / "20261130T100000Z"
    folder.mkdir(parents=True)
    (folder / "benchmark.json").write_text("")
    with pytest.raises(Exception, match="benchmark.json"):
        evidence.assemble(str(folder), Redactor())


def test_evidence_folder_name_must_be_a_utc_stamp(tmp_path):
    with pytest.raises(Exception, match="evidence/<seat>/<UTC"):
        evidence_dir_parts(str(tmp_path / "lab" / "yesterday"))


def test_report_of_emulated_telemetry_says_so():
    base = record("lab", {1: 45.0, 16: 150.0})
    gpus = [
        {
            "index": 0,
            "power_w": 22.5,
            "power_limit_w": 300.0,
            "sm_clock_mhz": 180,
            "sm_clock_max_mhz": 3090,
            "util_pct": 0,
            "temp_c": 31,
        }
    ]
    start = base["benchmark"]["started_at_epoch"]
    parts = {
        "benchmark": base["benchmark"],
        "telemetry": {
            "hosts": {
                "node-a": {
                    "source": "nvidia-smi",
                    "emulated": True,
                    "interval_s": 1.0,
                    "samples": [{"t": start + i * 0.5, "gpus": gpus} for i in range(10)],
                }
            }
        },
    }
    out = rec.assemble("lab", "20261130T120000Z", parts, "2026-11-30T12:00:00Z")
    assert evidence.validate_record(out) == []
    text = report.render(out)
    assert "**Emulated test equipment:**" in text
    assert "Power verdict: **not judged**" in text
    assert "software-bound" not in out["summary"]["benchmark_flags"]


def test_latest_record_skips_unbenchmarked_runs(tmp_path):
    root = tmp_path
    older = write_run(root, "lab", "20261129T100000Z", record("lab", {1: 45.0}))
    newer = write_run(root, "lab", "20261130T100000Z", record("lab", None))
    for folder in (older, newer):
        evidence.assemble(str(folder), Redactor(), plots=False)
    data, folder = evidence.latest_record(str(root), "lab")
    assert folder == str(older)
    assert data["benchmark"]["summary"][0]["concurrency"] == 1
    assert os.path.exists(os.path.join(folder, "report.md"))


@pytest.mark.parametrize(
    "factor, decision",
    [
        # Passes 4 % either side of the median: a 3 % faster median overlaps the incumbent's passes.
        (1.03, promotion.DO_NOT_PROMOTE),
        # 20 % faster: the candidate's slowest pass (x0.96) is above the incumbent's fastest (x1.04).
        (1.20, promotion.PROMOTE),
        # Just apart: 1.09 x 0.96 = 1.046 > 1.04.
        (1.09, promotion.PROMOTE),
        # Just overlapping: 1.08 x 0.96 = 1.037 < 1.04.
        (1.08, promotion.DO_NOT_PROMOTE),
    ],
)
def test_a_win_on_the_mean_needs_one_level_beyond_the_noise(factor, decision):
    candidate = record("fast", {c: r * factor for c, r in INCUMBENT_RATES.items()}, spread=0.04)
    incumbent = record("qwen38", INCUMBENT_RATES, spread=0.04)
    out = promotion.decide(candidate, {"qwen38": incumbent}, NOW, 14, 0.10)
    assert out["decision"] == decision, out["reasons"]
    rows = out["comparisons"][0]["levels"]
    assert all(row["verdict"] == promotion.WIN for row in rows)
    assert all(row["beyond_noise"] == (decision == promotion.PROMOTE) for row in rows)
    said = any("wins beyond the noise at no level against incumbent qwen38" in r for r in out["reasons"])
    assert said == (decision == promotion.DO_NOT_PROMOTE)


def test_one_level_beyond_the_noise_is_enough_when_no_level_loses():
    # x1.30 at c=16 apart from the incumbent's passes; c=1 and c=4 within them.
    rates = {1: INCUMBENT_RATES[1] * 0.99, 4: INCUMBENT_RATES[4] * 1.02, 16: INCUMBENT_RATES[16] * 1.3}
    out = promotion.decide(
        record("fast", rates, spread=0.04), {"qwen38": record("qwen38", INCUMBENT_RATES, spread=0.04)}, NOW, 14, 0.10
    )
    assert out["decision"] == promotion.PROMOTE, out["reasons"]
    assert [row["beyond_noise"] for row in out["comparisons"][0]["levels"]] == [False, False, True]
    text = "\n".join(report.decision_lines(out))
    assert "| 16 | x1.30 |" in text and "| win beyond the noise |" in text
    assert "a win beyond the noise every candidate pass above the incumbent's fastest" in text


@pytest.mark.parametrize(
    "low, high, expected",
    [(10.0, 9.9, True), (10.0, 10.0, False), (9.0, 10.0, False), (None, 1.0, False), (1.0, None, False)],
)
def test_apart(low, high, expected):
    assert promotion.apart(low, high) is expected


# ---------------------------------------------------------------- issue 50 item 5


@pytest.mark.parametrize("tiny", [1e-300, 1e-9], ids=["1e-300", "1e-9"])
def test_an_incumbent_figure_no_harness_measures_does_not_hand_a_promotion(tiny):
    # An incumbent throughput of 1e-300 tok/s made any candidate "win" by a factor of 1e302.
    candidate = record("fast", {1: 120.0, 4: 420.0, 16: 990.0})
    incumbent = record("qwen38", INCUMBENT_RATES)
    for level in incumbent["benchmark"]["summary"]:
        level["figures"]["output_tok_s"] = {"values": [tiny] * 3, "median": tiny, "min": tiny, "max": tiny}
    out = promotion.decide(candidate, {"qwen38": incumbent}, NOW, 14, 0.10)
    assert out["decision"] != promotion.PROMOTE, out["reasons"]
    assert any("outside what the harness measures" in r for r in out["reasons"]), out["reasons"]


def test_a_candidate_figure_no_harness_measures_blocks_its_promotion():
    candidate = record("fast", {1: 120.0, 4: 420.0, 16: 990.0})
    candidate["benchmark"]["summary"][1]["figures"]["output_tok_s"]["median"] = 1e300
    out = promotion.decide(candidate, {"qwen38": record("qwen38", INCUMBENT_RATES)}, NOW, 14, 0.10)
    assert out["decision"] == promotion.DO_NOT_PROMOTE
    assert any("c=4: output_tok_s median is 1e+300 tok/s" in r for r in out["reasons"]), out["reasons"]


def test_measured_figures_and_zero_are_within_what_the_harness_measures():
    assert promotion.figure_problems(record("qwen38", INCUMBENT_RATES)) == []
