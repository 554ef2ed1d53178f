"""Promotion through the router (issue 26 item 2): the holds' decisions, a hold and a rollback's
confirmation against fake seats behind a fake router on 127.0.0.1, the modules, the CLI, and
promotion-rollout.json in the evidence (redacted, with its section of the report)."""

import importlib.machinery
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time

import jinja2
import pytest
import router_hold
import router_rollout
import yaml
from ansible.module_utils.testing import patch_module_args
from ansible_collections.seatwright.fleet.plugins.filter.router_kind import router_kind
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import RouterError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.evidence import writer
from ansible_collections.seatwright.fleet.plugins.module_utils.io.router import hold as io_hold
from ansible_collections.seatwright.fleet.plugins.module_utils.router import hold
from conftest import ROOT
from promote_setup import GATES, KEY, Fleet, evidence_folder, start_seat


@pytest.fixture(scope="module")
def fleet():
    fleet = Fleet()
    yield fleet
    fleet.close()


@pytest.fixture
def lab_targets(fleet):
    fleet.router.targets["production"] = {"lab": {"api_base": fleet.bases["lab"], "weight": 100}}
    return fleet.router.targets["production"]


def run_module(capsys, module, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            module.main()
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    "overrides, fragment",
    [
        ({"p99": 1}, "unknown gate p99"),
        ({"ttft_ms_p95": "fast"}, "give a number"),
        ({"max_error_rate": -1}, "give a number"),
        ({"min_requests": 0}, "at least 1 answer"),
    ],
)
def test_gates_refused(overrides, fragment):
    with pytest.raises(RouterError, match=fragment):
        hold.gates_of(overrides)


@pytest.mark.parametrize(
    "answer, ok, tokens, seat",
    [
        (
            {
                "status": 200,
                "elapsed_s": 0.5,
                "ttft_s": 0.1,
                "headers": {"x-litellm-model-id": "lab-fast"},
                "chunks": [
                    {"choices": [{"delta": {"content": "a"}}]},
                    {"choices": [{"delta": {"content": "b"}}]},
                    {"choices": [], "usage": {"completion_tokens": 2, "prompt_tokens": 9}},
                ],
            },
            True,
            2,
            "lab-fast",
        ),
        ({"status": 200, "elapsed_s": 0.5, "ttft_s": None, "chunks": [{"choices": [{"delta": {}}]}]}, False, 0, None),
        ({"status": 502, "elapsed_s": 0.01, "error": None, "chunks": None}, False, 0, None),
    ],
)
def test_request_record(answer, ok, tokens, seat):
    record = hold.request_record(answer, 1000.0)
    assert (record["ok"], record["output_tokens"], record["seat"]) == (ok, tokens, seat)
    assert record["end_ns"] - record["start_ns"] == int(answer["elapsed_s"] * 1e9)


@pytest.mark.parametrize(
    "records, named, expected",
    [
        ([{"seat": "lab"}, {"seat": "lab-fast"}], True, [{"seat": "lab-fast"}]),
        # smg names no seat: every answer is judged.
        ([{"seat": None}, {"seat": None}], False, [{"seat": None}, {"seat": None}]),
    ],
)
def test_candidate_records(records, named, expected):
    assert hold.candidate_records(records, "lab-fast", named) == expected


@pytest.mark.parametrize("hold_s, overtime", [(1, 30.0), (8, 30.0), (60, 60.0), (300, 300.0)])
def test_overtime(hold_s, overtime):
    assert hold.overtime_s(hold_s) == overtime


@pytest.mark.parametrize(
    "elapsed_s, verdict, force_fail, ends",
    [
        (2, "fail", False, True),  # a failed gate ends the hold at once
        (2, "pass", False, False),
        (2, "too thin to judge", False, False),
        (8, "pass", False, True),
        (8, "too thin to judge", False, False),  # thin at its time: holds on
        (37.9, "too thin to judge", False, False),
        (38, "too thin to judge", False, True),  # end of the overtime: final judge() fails it
        (20, "pass", False, True),  # enough answers in the overtime
        (8, "too thin to judge", True, True),  # failing on purpose: no overtime to wait for
    ],
)
def test_hold_ends(elapsed_s, verdict, force_fail, ends):
    assert hold.hold_ends(elapsed_s, 8, {"verdict": verdict}, force_fail) is ends


@pytest.mark.parametrize("hold_s, every", [(1, 0.5), (10, 2.0), (60, 5.0)])
def test_check_every(hold_s, every):
    assert hold.check_every_s(hold_s) == every


def current(fleet_bases=None):
    return {"lab": {"api_base": "http://127.0.0.1:1/v1", "weight": 100}}


@pytest.mark.parametrize(
    "targets, decision, against, fragment",
    [
        ({}, "promote", "lab", "has no seat behind it"),
        ({"lab": {"api_base": "x", "weight": 50}, "old": {"api_base": "y", "weight": 50}}, "promote", "lab", "split"),
        (current(), "do not promote", "lab", "says 'do not promote'"),
        (current(), "promote", "lab-tp2", "judged against lab-tp2, but alias production is served by lab"),
    ],
)
def test_plan_refused(tmp_path, targets, decision, against, fragment):
    folder = evidence_folder(tmp_path, decision=decision, against=against)
    record, _ = writer.latest_record(str(tmp_path / "evidence"), "lab-fast")
    course = hold.plan("production", "litellm", targets, "lab-fast", "http://c/v1", record, folder, {})
    assert fragment in course["refusal"] and course["steps"] == []


def test_plan_steps_and_lines(tmp_path):
    folder = evidence_folder(tmp_path)
    record, _ = writer.latest_record(str(tmp_path / "evidence"), "lab-fast")
    options = {"shares": [10, 50], "hold_s": 30, "gates": {"ttft_ms_p95": 2000}, "force_gate_failure": True}
    course = hold.plan("production", "litellm", current(), "lab-fast", "http://c/v1", record, folder, options)
    assert course["refusal"] is None and course["incumbent"] == "lab"
    assert [s["step"] for s in course["steps"]] == [
        "register",
        "baseline",
        "canary 10%",
        "canary 50%",
        "all",
        "drain",
        "deregister",
    ]
    assert course["steps"][2]["router_targets"] == {
        "lab": {"api_base": "http://127.0.0.1:1/v1", "weight": 90},
        "lab-fast": {"api_base": "http://c/v1", "weight": 10},
    }
    text = "\n".join(course["lines"])
    assert "2. baseline: measure lab carrying production alone for 30 s, the visible tok/s every later hold" in text
    assert "canary 10%: set_alias; production -> lab weight 90, lab-fast weight 10; hold 30 s" in text
    assert "ttft_ms_p95 2000" in text and "failed on purpose" in text
    assert "a gate that fails puts production back on lab weight 100" in text


@pytest.mark.parametrize(
    "kind, base, metrics",
    [
        ("litellm", "http://127.0.0.1:1/v1", "http://127.0.0.1:1/metrics"),
        # smg lists a worker's URL without /v1: the drain reads the same engine page.
        ("smg", "http://127.0.0.1:1", "http://127.0.0.1:1/metrics"),
    ],
)
def test_the_drain_step_names_the_old_seats_gauge(tmp_path, kind, base, metrics):
    # The move to the candidate already took the old seat out, so the role can no longer find its
    # address: the course carries it (the real role's deregister, tests/integration/test_promote_real.py).
    folder = evidence_folder(tmp_path)
    record, _ = writer.latest_record(str(tmp_path / "evidence"), "lab-fast")
    targets = {"lab": {"api_base": base, "weight": 100}}
    course = hold.plan("production", kind, targets, "lab-fast", "http://c/v1", record, folder, {})
    drain = next(step for step in course["steps"] if step["action"] == "drain")
    assert drain.get("metrics_url") == metrics


def test_promote_gives_the_roles_deregister_its_alias_and_the_gauge():
    steps = yaml.safe_load((ROOT / "playbooks" / "tasks" / "promote_step.yml").read_text())
    tasks = [task for step in steps for task in step.get("block", [])]
    deregister = next(t for t in tasks if t.get("ansible.builtin.include_role", {}).get("tasks_from") == "deregister")
    assert {"router_alias", "router_seat", "router_metrics_url"} <= set(deregister["vars"])
    holds = [
        t
        for step in steps
        for t in step.get("block", []) + step.get("rescue", [])
        if "seatwright.fleet.router_hold" in t
    ]
    assert holds and all("__promote_client_key" in t["seatwright.fleet.router_hold"]["api_key"] for t in holds)
    play = yaml.safe_load((ROOT / "playbooks" / "promote.yml").read_text())[0]
    # LiteLLM without a database answers only its master key: the holds carry it there, smg nothing;
    # which kind's clients send it is the kind's description's (router/kinds/), through router_kind.
    expression = jinja2.Environment(undefined=jinja2.Undefined).from_string(play["vars"]["__promote_client_key"])

    def client_key(kind, **given):
        return expression.render(dict(given, __promote_kind=router_kind(kind), router_admin_key="ADMIN"))

    assert client_key("litellm") == "ADMIN" and client_key("smg") == ""
    assert client_key("litellm", router_api_key="CLIENTS") == client_key("smg", router_api_key="CLIENTS") == "CLIENTS"


def test_plan_without_the_candidates_address_is_refused_by_name(tmp_path):
    folder = evidence_folder(tmp_path)
    record, _ = writer.latest_record(str(tmp_path / "evidence"), "lab-fast")
    with pytest.raises(RouterError, match="no address for seat lab-fast"):
        hold.plan("production", "litellm", current(), "lab-fast", None, record, folder, {})


def test_a_hold_through_the_alias_passes_and_sees_both_seats(fleet, lab_targets):
    fleet.router.targets["production"] = {
        "lab": {"api_base": fleet.bases["lab"], "weight": 50},
        "lab-fast": {"api_base": fleet.bases["lab-fast"], "weight": 50},
    }
    lines = []
    point = io_hold.endpoint(fleet.router.url)
    verdict = io_hold.run_hold(
        point, "production", "lab-fast", "canary 50%", 3, bench_record(), GATES, emit=lines.append
    )
    assert verdict["verdict"] == "pass", verdict
    assert verdict["figures"]["all_failed"] == 0
    assert set(verdict["figures"]["answered_by"]) == {"lab", "lab-fast"}
    # Too thin at first: synthetic load was added, and the person watching was told how far it came.
    assert verdict["synthetic_streams"] == 4
    assert any("of 3 s" in line and "%" in line for line in lines)


def test_a_hold_too_thin_at_its_time_holds_on_for_a_verdict(fleet, lab_targets):
    # One probe stream, no synthetic load, answers of ~0.8 s: 1 s holds one answer, 3 need overtime.
    lines = []
    point = io_hold.endpoint(fleet.router.url)
    gates = dict(GATES, min_requests=3)
    verdict = io_hold.run_hold(
        point, "production", "lab", "all", 1, bench_record(), gates, synthetic_streams=0, emit=lines.append
    )
    assert verdict["verdict"] == "pass", verdict
    assert 0 < verdict["overtime_s"] < hold.overtime_s(1)
    assert verdict["figures"]["requests"] >= 3
    assert any("holding on up to" in line for line in lines)


def test_a_slow_candidate_fails_against_the_incumbents_baseline(fleet, lab_targets):
    lines = []
    point = io_hold.endpoint(fleet.router.url)
    base = io_hold.run_hold(
        point, "production", "lab", "baseline", 2, {}, GATES, baseline=hold.BASELINE, emit=lines.append
    )
    assert base["verdict"] == "pass", base
    assert base["figures"]["answered_by"] == {"lab": base["figures"]["all_requests"]}
    assert base["synthetic_streams"] == 4 and any("judging the baseline of lab" in line for line in lines)
    # A candidate streaming six times slower than the incumbent did under the same probe.
    proc, slow = start_seat("lab-slow", "--chunk-s", "0.3")
    try:
        fleet.router.targets["production"] = {"lab-slow": {"api_base": slow, "weight": 100}}
        verdict = io_hold.run_hold(
            point,
            "production",
            "lab-slow",
            "all",
            2,
            {},
            dict(GATES, min_visible_ratio=0.5),
            baseline=base["figures"],
            synthetic_at_start=base["synthetic_streams"],
            emit=lines.append,
        )
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    assert verdict["verdict"] == "fail", verdict
    assert "of the incumbent's baseline hold" in verdict["reasons"][0], verdict["reasons"]
    # The candidate ran under the baseline's traffic from its first second.
    assert verdict["synthetic_streams"] == 4 and any("synthetic load at 4 streams" in line for line in lines[-8:])


def test_a_forced_failure_fails_the_gate(fleet, lab_targets):
    point = io_hold.endpoint(fleet.router.url)
    verdict = io_hold.run_hold(point, "production", "lab", "all", 1, bench_record(), GATES, force_fail=True, emit=print)
    assert verdict["verdict"] == "fail" and hold.FORCED in verdict["reasons"]
    assert verdict["failed_at_epoch"]


def test_a_dead_candidate_fails_the_gate_early(fleet, lab_targets):
    fleet.router.targets["production"] = {"lab-fast": {"api_base": "http://127.0.0.1:9/v1", "weight": 100}}
    point = io_hold.endpoint(fleet.router.url)
    verdict = io_hold.run_hold(point, "production", "lab-fast", "all", 30, bench_record(), GATES, emit=print)
    assert verdict["verdict"] == "fail" and "error rate" in verdict["reasons"][0]
    # A failed gate ends the hold at once, long before its 30 s.
    assert verdict["ended_at_epoch"] - verdict["started_at_epoch"] < 20


def test_confirm_serving_measures_the_rollback(fleet, lab_targets):
    point = io_hold.endpoint(fleet.router.url)
    since = time.time()
    result = io_hold.confirm_serving(point, "production", ["lab"], since, emit=print)
    assert 0 < result["rollback_s"] < 10 and result["answers"] >= hold.CONFIRM_ANSWERS


_BENCH = {}


def bench_record():
    """The candidate's record with a real benchmark part, made once."""
    if not _BENCH:
        root = tempfile.mkdtemp()
        evidence_folder(root)
        _BENCH["record"] = writer.latest_record(os.path.join(root, "evidence"), "lab-fast")[0]
    return _BENCH["record"]


def test_router_hold_module_in_check_mode_sends_nothing(capsys, fleet):
    before = len(fleet.router.admin_calls)
    args = {
        "router_url": "http://127.0.0.1:9",
        "alias": "production",
        "candidate": "lab-fast",
        "_ansible_check_mode": True,
    }
    out = run_module(capsys, router_hold, args)
    assert out["verdict"] == "not run" and len(fleet.router.admin_calls) == before


def test_router_hold_module_confirms(capsys, fleet, lab_targets):
    args = {
        "mode": "confirm",
        "router_url": fleet.router.url,
        "alias": "production",
        "seats": ["lab"],
        "since_epoch": 1.0,
    }
    out = run_module(capsys, router_hold, args)
    assert out["rollback_s"] > 0


def test_router_rollout_module_plans_and_records_redacted(capsys, tmp_path, fleet, lab_targets):
    folder = evidence_folder(tmp_path)
    args = {
        "alias": "production",
        "kind": "litellm",
        "seat": "lab-fast",
        "current_targets": {"lab": {"api_base": fleet.bases["lab"], "weight": 100}},
        "candidate_api_base": fleet.bases["lab-fast"],
        "evidence_root": str(tmp_path / "evidence"),
        "options": {"hold_s": 5},
    }
    course = run_module(capsys, router_rollout, args)
    assert course["refusal"] is None and course["evidence_dir"] == folder
    # A key that leaked into a step (an error message, say) is not in the evidence.
    events = [{"step": "register", "action": "register", "targets": {"lab": 100}, "note": "Bearer " + KEY}]
    events.append({"step": "rollback", "action": "set_alias", "rollback_s": 1.25, "reasons": ["key %s" % KEY]})
    args = {"action": "record", "evidence_dir": folder, "course": course, "events": events, "started_epoch": 1.0}
    out = run_module(capsys, router_rollout, dict(args, secrets=[KEY]))
    text = open(out["path"]).read()
    assert KEY not in text and KEY not in open(os.path.join(folder, "report.md")).read()
    document = json.loads(text)
    assert document["outcome"] == "rolled back" and document["rollback_s"] == 1.25


def test_the_report_has_a_rollout_section(tmp_path):
    """Through today's entry point (writer.assemble): a promotion-rollout.json becomes the record's
    `rollout` and the report's Rollout section."""
    folder = evidence_folder(tmp_path)
    document = {
        "schema": "seatwright-rollout/1",
        "alias": "production",
        "router": "litellm",
        "candidate": "lab-fast",
        "incumbent": "lab",
        "outcome": "rolled back",
        "rollback_s": 0.84,
        "steps": [
            {
                "step": "canary 10%",
                "targets": {"lab": 90, "lab-fast": 10},
                "started_at_epoch": 10.0,
                "ended_at_epoch": 40.0,
                "verdict": {
                    "verdict": "fail",
                    "reasons": ["TTFT p95 900 ms over the gate's 500 ms"],
                    "figures": {"all_requests": 40, "all_failed": 0, "ttft_ms_p95": 900.0},
                },
            }
        ],
    }
    with open(os.path.join(folder, "promotion-rollout.json"), "w") as handle:
        json.dump(document, handle)
    record = writer.assemble(folder, plots=False)
    assert record.get("rollout", {}).get("outcome") == "rolled back"
    report = open(os.path.join(folder, "report.md")).read()
    assert "## Rollout" in report
    assert "Rolled back in 0.84 s" in report
    assert "| canary 10% | lab 90, lab-fast 10 | 30.0 | fail | 40 (0) | 900 |" in report
    assert "TTFT p95 900 ms over the gate's 500 ms" in report


def load_tool():
    path = str(ROOT / "tools" / "seatwright-hold")
    loader = importlib.machinery.SourceFileLoader("seatwright_hold", path)
    spec = importlib.util.spec_from_loader("seatwright_hold", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module


@pytest.mark.parametrize("extra, code", [([], 0), (["--force-fail"], 3), (["--gate", "nope=1"], 2)])
def test_the_hold_cli(tmp_path, capsys, fleet, lab_targets, extra, code):
    evidence_folder(tmp_path, seat="lab")
    argv = ["--router-url", fleet.router.url, "--alias", "production", "--candidate", "lab", "--hold-s", "2"]
    argv += [
        "--evidence-root",
        str(tmp_path / "evidence"),
        "--gate",
        "min_requests=2",
        "--gate",
        "min_visible_ratio=0.1",
    ]
    assert load_tool().main(argv + extra) == code
    out = capsys.readouterr()
    if code != 2:
        assert "verdict: %s" % ("pass" if code == 0 else "fail") in out.out
        assert "hold hold:" in out.err


def test_the_hold_cli_measures_a_baseline_and_judges_against_it(tmp_path, capsys, fleet, lab_targets):
    argv = ["--router-url", fleet.router.url, "--alias", "production", "--candidate", "lab", "--hold-s", "2"]
    argv += ["--evidence-root", str(tmp_path / "evidence"), "--gate", "min_requests=2", "--json"]
    # No evidence folder: a baseline and a hold judged against it need no benchmark.
    assert load_tool().main(argv + ["--measure-baseline"]) == 0
    measured = json.loads(capsys.readouterr().out)
    assert measured["verdict"] == "pass" and measured["reasons"][0].startswith("baseline: ")
    baseline = tmp_path / "baseline.json"
    baseline.write_text(json.dumps(measured))
    assert load_tool().main(argv + ["--baseline", str(baseline)]) == 0
    judged = json.loads(capsys.readouterr().out)
    assert judged["figures"]["expected_visible_tok_s_p50"] == measured["figures"]["visible_tok_s_p50"]
    assert judged["synthetic_streams"] == measured["synthetic_streams"]
    baseline.write_text(json.dumps({"verdict": "fail", "figures": {}}))
    assert load_tool().main(argv + ["--baseline", str(baseline)]) == 2
    assert "is not a passed baseline verdict" in capsys.readouterr().err


def write_plan(tmp_path, gates=None):
    plan = {
        "ranks": [{"serve": "172.30.99.11:8003"}],
        "model": {"served_name": "smollm2-135m-instruct"},
        "qualification": {"rollout_gates": gates} if gates else {},
    }
    path = tmp_path / "lab-fast.json"
    path.write_text(json.dumps(plan))
    return str(path)


def test_the_course_takes_the_candidates_address_name_and_declared_gates_from_its_plan(tmp_path):
    evidence_folder(tmp_path)
    declared = {"min_visible_ratio": 0.3, "ttft_ms_p95": 20000, "reason": "a two-core node shared during the move"}
    write_plan(tmp_path, declared)
    course = io_hold.course(
        "production", "litellm", "lab-fast", current(), str(tmp_path / "evidence"), {}, plan_dir=str(tmp_path)
    )
    register, canary = course["steps"][0], course["steps"][2]
    assert canary["router_targets"]["lab-fast"] == {
        "api_base": "http://172.30.99.11:8003/v1",
        "weight": 10,
        "model": "smollm2-135m-instruct",
    }
    assert register["action"] == "register"
    assert course["gates"]["min_visible_ratio"] == 0.3 and course["gates"]["ttft_ms_p95"] == 20000
    assert course["gates_reason"] == declared["reason"]
    assert course["lines"][-1] == "gates from seat lab-fast's recipe: " + declared["reason"]
    # What the operator gives on the command line wins over the recipe.
    options = {"gates": {"min_visible_ratio": 0.9}}
    course = io_hold.course(
        "production", "litellm", "lab-fast", current(), str(tmp_path / "evidence"), options, plan_dir=str(tmp_path)
    )
    assert course["gates"]["min_visible_ratio"] == 0.9 and course["gates"]["ttft_ms_p95"] == 20000


def test_the_course_marks_a_canary_on_the_incumbents_cores_from_both_plans(tmp_path):
    evidence_folder(tmp_path)
    plan_file = write_plan(tmp_path)
    plan = json.loads(open(plan_file, encoding="utf-8").read())
    plan["ranks"][0].update(host="node-a", gpus=[])
    open(plan_file, "w", encoding="utf-8").write(json.dumps(plan))
    args = ("production", "litellm", "lab-fast", current(), str(tmp_path / "evidence"), {})
    # Without the incumbent's plan beside it nothing is known to be shared.
    assert not any(s.get("contended") for s in io_hold.course(*args, plan_dir=str(tmp_path))["steps"])
    (tmp_path / "lab.json").write_text(json.dumps({"ranks": [{"host": "node-a", "gpus": [], "serve": "x:8000"}]}))
    course = io_hold.course(*args, plan_dir=str(tmp_path))
    canary = next(s for s in course["steps"] if s["step"].startswith("canary"))
    assert canary["contended"] == "node-a's CPU cores"
    assert next(s for s in course["steps"] if s["step"] == "all").get("contended") is None
    assert any("not judged: both seats compute on node-a's CPU cores" in line for line in course["lines"])


def test_a_refusal_is_recorded_as_refused_with_nothing_moved(tmp_path):
    folder = evidence_folder(tmp_path, decision="do not promote")
    course = io_hold.course("production", "litellm", "lab-fast", current(), str(tmp_path / "evidence"), {})
    assert course["refusal"] and course["evidence_dir"] == folder and course["incumbent"] == "lab"
    written = io_hold.record(folder, course, [], time.time(), root=str(ROOT))
    rollout_doc = json.loads(open(written["path"], encoding="utf-8").read())
    assert rollout_doc["outcome"] == "refused" and rollout_doc["steps"] == []
    assert rollout_doc["previous_targets"] == {"lab": 100}
    report = open(os.path.join(folder, "report.md"), encoding="utf-8").read()
    assert "**refused**" in report and "Refused: seat lab-fast's latest record says 'do not promote'" in report


@pytest.mark.parametrize(
    "doc, line",
    [
        ({"outcome": "moved"}, "alias production: moved from lab to lab-fast"),
        (
            {"outcome": "rolled back", "rollback_s": 2.98},
            "alias production: rolled back to lab in 2.98 s, lab-fast not promoted",
        ),
        ({"outcome": "refused", "refusal": "no"}, "alias production: stays on lab, lab-fast refused: no"),
        ({"outcome": "stopped"}, "alias production: stopped (a step failed before the move ended"),
    ],
)
def test_the_alias_line_says_where_the_rollout_left_the_alias(doc, line):
    doc = dict(doc, alias="production", incumbent="lab", candidate="lab-fast")
    assert hold.alias_line(doc).startswith(line)


def test_lab_alias_tool_prints_the_recorded_outcome(tmp_path):
    folder = evidence_folder(tmp_path, decision="do not promote")
    course = io_hold.course("production", "litellm", "lab-fast", current(), str(tmp_path / "evidence"), {})
    io_hold.record(folder, course, [], time.time(), root=str(ROOT))
    tool = [os.path.join(str(ROOT), "tools", "lab-alias")]
    done = subprocess.run(
        [sys.executable] + tool + [str(tmp_path / "evidence"), "lab-fast"], capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("alias production: stays on lab, lab-fast refused: seat lab-fast's latest record")
    expected = subprocess.run(
        [sys.executable] + tool + [str(tmp_path / "evidence"), "lab-fast", "--expect", "refused"],
        capture_output=True,
        text=True,
    )
    assert expected.returncode == 0, expected.stderr
    other = subprocess.run(
        [sys.executable] + tool + [str(tmp_path / "evidence"), "lab-fast", "--expect", "moved"],
        capture_output=True,
        text=True,
    )
    assert other.returncode == 1 and "expected 'moved', the rollout says 'refused'" in other.stderr
    none = subprocess.run([sys.executable] + tool + [str(tmp_path / "evidence"), "lab"], capture_output=True, text=True)
    assert none.returncode in (1, 2) and "lab" in none.stdout + none.stderr


@pytest.mark.parametrize(
    "served_aliases, refused",
    [
        (["production"], False),
        ([], True),
        (None, True),  # a plan made before served aliases were recorded
        (["staging"], True),
    ],
)
def test_an_smg_move_needs_a_candidate_that_serves_the_alias_first(tmp_path, served_aliases, refused):
    evidence_folder(tmp_path)
    plan_file = write_plan(tmp_path)
    plan = json.loads(open(plan_file, encoding="utf-8").read())
    plan["model"]["served_aliases"] = served_aliases
    open(plan_file, "w", encoding="utf-8").write(json.dumps(plan))
    course = io_hold.course(
        "production", "smg", "lab-fast", current(), str(tmp_path / "evidence"), {}, plan_dir=str(tmp_path)
    )
    if refused:
        assert course["steps"] == [] and "seat_alias=production" in course["refusal"]
        assert course["lines"] == ["refused: " + course["refusal"]]
    else:
        assert course["refusal"] is None and course["steps"]
    # LiteLLM sends each seat its own name: the same plans move there.
    assert (
        io_hold.course(
            "production", "litellm", "lab-fast", current(), str(tmp_path / "evidence"), {}, plan_dir=str(tmp_path)
        )["refusal"]
        is None
    )
