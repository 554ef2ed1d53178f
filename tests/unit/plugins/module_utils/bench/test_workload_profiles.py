"""Workloads by name (issue 22, items 4 and 5): records compare only within one profile, and the
field's figures in a recipe are shown beside a run's own only when the run measured the field's profile.

The field measured with its own contracts: 512-token answers at c=1/4/8/16 [002]; c1 at a requested
32K context [003]. A lab run (128 in / 32 out) set beside those figures would read as a regression or a
triumph that neither is.
"""

import json
import subprocess
import sys

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.bench import promotion
from ansible_collections.seatwright.fleet.plugins.module_utils.bench import workload as wl
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError
from ansible_collections.seatwright.fleet.plugins.module_utils.evidence import record as rec
from ansible_collections.seatwright.fleet.plugins.module_utils.evidence import report
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.recipe import validate_recipe
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.rules import RULE_IDS
from conftest import ROOT
from evidence_cases import NOW, benchmark
from seat_cases import SCHEMA, seat_data

# The lab's workload and [002]'s, built from the workload settings alone (as a record written before
# profiles had names holds them).
LAB = wl.workload()
ANSWERS_512 = wl.workload(output_tokens=512)


def plan(seat, host="node-a"):
    """plan.json as seat_plan writes it, with the recipe's qualification (its field figures among it)."""
    qualification = dict(seat_data(seat)["qualification"])
    return {
        "seat": seat,
        "fits": True,
        "model": {"served_name": "m", "revision": "781dac1f55540a048a8efb9ac343c771b6fa7ad4"},
        "reasons": [],
        "ranks": [{"host": host, "rank": 0, "argv": ["vllm", "serve", "/models/m"], "env": {}}],
        "qualification": qualification,
    }


def record(seat, rates, load, profile_of_field=None):
    parts = {
        "plan": plan(seat),
        "qualification": {"result": {"verdict": "qualified", "reasons": []}},
        "benchmark": benchmark(rates, load=load),
    }
    if profile_of_field:
        parts["plan"]["qualification"]["workload_profile"] = profile_of_field
    return rec.assemble(seat, "20261130T120000Z", parts, "2026-11-30T12:00:00Z")


# ---------------------------------------------------------------- item 4: profiles and comparisons


def test_a_candidate_is_not_compared_with_an_incumbent_measured_on_another_profile():
    # The candidate ran the lab's workload; the incumbent [002]'s 512-token answers. Twice as fast on paper.
    candidate = record("glm53-vendor", {1: 240.0, 16: 1800.0}, LAB)
    incumbent = record("qwen38-flash-next", {1: 112.8, 16: 940.0}, ANSWERS_512)
    out = promotion.decide(candidate, {"qwen38-flash-next": incumbent}, NOW, 14, 0.10)
    assert out["decision"] == promotion.DO_NOT_PROMOTE
    comparison = out["comparisons"][0]
    assert comparison["comparable"] is False and comparison["rows"] == []
    assert comparison["problems"] == [
        "measured on workload profile field-answers-512, the candidate on lab: records compare only within "
        "one profile; re-measure the incumbent with --profile lab"
    ]


def test_two_records_of_one_profile_still_compare():
    candidate = record("glm53-vendor", {1: 240.0, 16: 1800.0}, ANSWERS_512)
    incumbent = record("qwen38-flash-next", {1: 112.8, 16: 940.0}, ANSWERS_512)
    assert promotion.comparability(candidate, incumbent, NOW, 14) == []


def test_two_custom_workloads_are_still_told_apart_by_their_workload():
    candidate = record("lab", {1: 100.0}, wl.workload(output_tokens=64))
    incumbent = record("lab-tp2", {1: 100.0}, wl.workload(output_tokens=96))
    problems = promotion.comparability(candidate, incumbent, NOW, 14)
    assert [p for p in problems if "another workload" in p] and not [p for p in problems if "profile" in p]


def _write_run(root, seat, run_id, data):
    folder = root / seat / run_id
    folder.mkdir(parents=True)
    for part in ("plan", "qualification", "benchmark"):
        (folder / ("%s.json" % part)).write_text(json.dumps(data[part]))
    return folder


def test_the_promotion_tool_refuses_a_comparison_across_profiles(tmp_path):
    root = tmp_path / "evidence"
    inc = _write_run(
        root, "qwen38-flash-next", "20261130T100000Z", record("qwen38-flash-next", {1: 112.8}, ANSWERS_512)
    )
    cand = _write_run(root, "glm53-vendor", "20261130T110000Z", record("glm53-vendor", {1: 240.0}, LAB))
    # The incumbent's record is assembled first, as its own seat run would have done.
    subprocess.run(
        [sys.executable, str(ROOT / "tools" / "seatwright-bench"), "--evidence-dir", str(inc), "--assemble-only"],
        check=True,
        capture_output=True,
    )
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "seatwright-promote"),
            "--evidence-dir",
            str(cand),
            "--incumbent",
            "qwen38-flash-next",
            "--max-age-days",
            "100000",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 3, proc.stderr
    assert (
        "incumbent qwen38-flash-next: measured on workload profile field-answers-512, the candidate on lab: "
        "records compare only within one profile" in proc.stdout
    )
    saved = json.loads((cand / "record.json").read_text())
    assert saved["workload_profile"] == "lab"
    assert "workload profile **lab**" in (cand / "report.md").read_text()


@pytest.mark.parametrize(
    "seat, profile",
    [
        ("glm53-vendor", "field-answers-512"),  # "All runs used 512-token answers" [002]
        ("qwen38-flash-next", "field-answers-512"),  # re-benchmarked "with identical scripts" [002]
        ("glm53-community", "field-answers-512"),  # [002]'s harness "unchanged from our 2 September" run
        ("qwen35-122b", "field-c1-32k"),  # [003]'s matched baseline: c1 at a requested 32K
        ("laguna-s21", "field-c1-32k"),
        ("nemotron3-super", "field-c1-32k"),
        ("deepseek-v4-flash", "field-c1-32k"),
        ("inkling-small", "field-c1-32k"),
        ("glm53", "field-unrecorded"),  # [000] records no prompt or answer length
        ("nemotron3-ultra", "field-unrecorded"),
        ("glm53-fp8", "field-unrecorded"),
        ("lab", "lab"),
        ("lab-tp2", "lab"),
        ("lab-seqs4", "lab"),
    ],
)
def test_each_seat_names_the_workload_profile_of_its_report(seat, profile):
    assert seat_data(seat)["qualification"].get("workload_profile") == profile


def _recipe_problems(data):
    try:
        validate_recipe(data, SCHEMA, "seats/qwen35-122b.yml", RULE_IDS)
    except SeatError as exc:
        return str(exc)
    return ""


def test_an_unknown_profile_in_a_recipe_is_refused_by_name():
    data = seat_data("qwen35-122b")
    data["qualification"]["workload_profile"] = "field-c1-23k"
    assert "qualification.workload_profile: 'field-c1-23k' is not a workload profile; known: lab, " in (
        _recipe_problems(data)
    )


def test_field_figures_without_a_profile_are_refused():
    data = seat_data("qwen35-122b")
    data["qualification"].pop("workload_profile", None)
    assert "qualification.workload_profile: missing; qualification.anchors hold the field's figures" in (
        _recipe_problems(data)
    )


def test_the_benchmark_tool_refuses_an_unknown_profile(tmp_path):
    proc = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "seatwright-bench"),
            "--evidence-dir",
            str(tmp_path / "lab" / "20261130T100000Z"),
            "--profile",
            "field-512",
            "--base-url",
            "http://127.0.0.1:9/v1",
            "--model",
            "m",
            "--tokenizer",
            str(tmp_path),
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 2
    assert proc.stderr.startswith("seatwright-bench: --profile 'field-512' is not a workload profile; known: lab, ")


@pytest.mark.parametrize(
    "name, overrides, recorded",
    [
        ("lab", {}, "lab"),
        ("field-answers-512", {}, "field-answers-512"),
        ("lab", {"output_tokens": 512}, "field-answers-512"),  # exactly [002]'s workload
        ("lab", {"output_tokens": 24}, "custom"),
        ("field-c1-32k", {"ignore_eos": True}, "custom"),
    ],
)
def test_a_departure_from_a_profile_is_recorded_as_custom(name, overrides, recorded):
    profile, load = wl.named_workload(name, **overrides)
    assert profile == recorded
    assert wl.profile_of(load) == recorded


def test_a_profile_without_a_workload_cannot_be_run_and_the_seat_runs_the_lab_one():
    with pytest.raises(ValueError, match="field-unrecorded has no workload to run"):
        wl.named_workload("field-unrecorded")
    assert wl.bench_profile_for("field-unrecorded") == "lab"
    assert wl.bench_profile_for("field-c1-32k") == "field-c1-32k"
    assert wl.profile("field-c1-32k")["concurrency"] == (1,)
    assert wl.profile("field-c1-32k")["workload"]["input_tokens"] + wl.FIELD_ANSWER_ALLOWANCE == 32768


# ---------------------------------------------------------------- item 5: the field's figures in the report


def _assembled_report(tmp_path, seat, load, rates, field_profile):
    """report.md as tools/seatwright-bench --assemble-only writes it from plan.json and benchmark.json."""
    data = record(seat, rates, load, profile_of_field=field_profile)
    folder = _write_run(tmp_path / "evidence", seat, "20261130T120000Z", data)
    subprocess.run(
        [sys.executable, str(ROOT / "tools" / "seatwright-bench"), "--evidence-dir", str(folder), "--assemble-only"],
        check=True,
        capture_output=True,
    )
    return (folder / "report.md").read_text()


def test_field_figures_appear_beside_the_run_when_the_profiles_match(tmp_path):
    text = _assembled_report(tmp_path, "glm53-vendor", ANSWERS_512, {1: 117.9, 16: 763.9 * 1.2}, "field-answers-512")
    assert "Measured on workload profile field-answers-512, as this run was" in text
    # [002]'s aggregate at c=16 and c=1, this run's, their ratio and the source.
    assert "| output tok/s, all streams | 16 | — | 764 | 917 | x1.20 | [002] |" in text
    assert "| output tok/s, all streams | 1 | — | 118 | 118 | x1.00 | [002] |" in text
    assert "| TTFT p50 ms (first visible) | 16 | — | 796 | " in text
    assert "| prefill tok/s p50 | 1 | 31,000 | 4,711 | " in text
    assert "not comparable" not in text


def test_field_figures_are_not_set_beside_a_run_of_another_profile(tmp_path):
    text = _assembled_report(tmp_path, "glm53-vendor", LAB, {1: 117.9, 16: 763.9}, "field-answers-512")
    assert (
        "- not comparable: 6 field figure(s) in the recipe, but they were measured on workload profile "
        "field-answers-512 (512-token answers generated to the end, c=1/4/8/16), this run on lab." in text
    )
    assert "| output tok/s, all streams |" not in text
    assert "workload profile **lab**" in text


def test_field_figures_of_an_unrecorded_workload_are_never_compared(tmp_path):
    text = _assembled_report(tmp_path, "glm53", LAB, {1: 95.2, 16: 175.5}, "field-unrecorded")
    assert "but the report did not record the workload they were measured on (profile field-unrecorded)" in text


def test_a_lab_run_shows_its_profile_and_says_its_recipe_has_no_field_figures(tmp_path):
    text = _assembled_report(tmp_path, "lab", LAB, {1: 45.0, 4: 150.0}, "lab")
    assert "- none: the recipe records no field figures." in text
    assert "workload profile **lab**, workload `%s`" % wl.workload_id(LAB) in text


@pytest.mark.parametrize("candidate_spread,incumbent_spread,compared", [(0.4, 0.4, True), (0.4, None, False)])
def test_records_compare_only_under_one_stability_spread(candidate_spread, incumbent_spread, compared):
    candidate = record("glm53-vendor", {1: 240.0, 16: 1800.0}, LAB)
    incumbent = record("qwen38-flash-next", {1: 112.8, 16: 940.0}, LAB)
    candidate["benchmark"]["options"] = {"stability_spread": candidate_spread, "stability_reason": "a noisy lab"}
    if incumbent_spread is not None:
        incumbent["benchmark"]["options"] = {"stability_spread": incumbent_spread}
    problems = [p for p in promotion.comparability(candidate, incumbent, NOW, 14) if "spread" in p]
    if compared:
        assert problems == []
    else:
        # An incumbent benchmarked before the fleet loosened its spread was judged at the default 10 %.
        assert problems == [
            "its levels were held to a 10 % spread across passes, the candidate's to 40 %: re-measure the "
            "incumbent under the fleet's seatwright_fleet_stability_spread"
        ]


def test_the_report_says_which_spread_held_and_why():
    assert report.stability_line({}) == "A level is stable when its passes spread at most 10 %."
    line = report.stability_line({"stability_spread": 0.4, "stability_reason": "two cores: 7-42 % measured"})
    assert (
        line
        == "A level is stable when its passes spread at most 40 % (the fleet's spread: two cores: 7-42 % measured)."
    )
