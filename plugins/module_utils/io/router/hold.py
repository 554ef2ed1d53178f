"""A promotion's I/O on the controller: the holds' traffic through the alias, the rollback's
confirmation, the course read from the candidate's evidence, and promotion-rollout.json written.

The decisions are in router/hold.py and router/rollout.py; this file sends requests, keeps time
and reads and writes files. Progress goes through io/common/progress.py (stderr and, when set,
SEATWRIGHT_PROGRESS_LOG), so a person watching a hold knows how far it has come.
"""

import json
import os
import threading
import time

from ansible_collections.seatwright.fleet.plugins.module_utils import defaults
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import RouterError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common import openai_http
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.progress import emit as progress_emit
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.progress import use_redactor
from ansible_collections.seatwright.fleet.plugins.module_utils.io.evidence import writer
from ansible_collections.seatwright.fleet.plugins.module_utils.router import deploy, hold, rollout
from ansible_collections.seatwright.fleet.plugins.module_utils.router.adapter import LITELLM_SEAT_HEADER

# A failed request is retried after this pause, so a dead alias is not hammered in a tight loop.
RETRY_PAUSE_S = 0.2


def endpoint(router_url, api_key=None, timeout_s=60.0):
    """The alias's OpenAI-compatible endpoint at the router (base URL ending in /v1)."""
    return openai_http.Endpoint(deploy.openai_base(router_url), api_key, timeout_s, timeout_s)


def ask(point, alias):
    """One streamed request through the alias, as a benchmark request record with who answered."""
    started = time.time()
    answer = openai_http.call(
        point,
        {
            "method": "POST",
            "path": "/chat/completions",
            "body": dict(hold.PROBE_REQUEST, model=alias),
            "stream": True,
            "keep_headers": (LITELLM_SEAT_HEADER,),
        },
    )
    return hold.request_record(answer, started)


class _Lanes:
    """Streams sending requests through the alias one after another until stopped."""

    def __init__(self, point, alias):
        self.point, self.alias = point, alias
        self.records, self.lock, self.stop = [], threading.Lock(), threading.Event()
        self.threads = []

    def add(self, count):
        for _ in range(count):
            thread = threading.Thread(target=self._lane, daemon=True)
            thread.start()
            self.threads.append(thread)

    def _lane(self):
        while not self.stop.is_set():
            record = ask(self.point, self.alias)
            with self.lock:
                self.records.append(record)
            if not record["ok"]:
                self.stop.wait(RETRY_PAUSE_S)

    def snapshot(self):
        with self.lock:
            return list(self.records)

    def finish(self):
        self.stop.set()
        for thread in self.threads:
            thread.join()
        return self.snapshot()


def run_hold(
    point,
    alias,
    candidate,
    step,
    hold_s,
    benchmark_record,
    gates,
    force_fail=False,
    synthetic_streams=None,
    emit=None,
    baseline=None,
    synthetic_at_start=0,
    contended=None,
):
    """Hold the alias for hold_s, judging as it goes; returns the verdict with its times.

    A probe stream runs throughout, with synthetic streams from the start as hold.starting_streams
    says (a baseline hold's, and then what the baseline ran: `synthetic_at_start`), so that the
    candidate is judged under the traffic its baseline saw; a hold that starts with none adds them once
    its answers are too thin to judge. A failed gate ends the hold at once, and stands (hold.settled)
    (`failed_at_epoch` is when it was seen); a hold still too thin at its time holds on for its
    overtime (hold.overtime_s) before it is called a failure. With `baseline` hold.BASELINE,
    `candidate` is the incumbent and the hold measures it (hold.judge); `contended` is the compute a
    canary's two seats share (rollout.shared_compute)."""
    emit = emit or progress_emit
    force_fail = force_fail and baseline != hold.BASELINE
    synthetic_streams = hold.DEFAULT_SYNTHETIC_STREAMS if synthetic_streams is None else synthetic_streams
    gates = hold.gates_of(gates)
    lanes = _Lanes(point, alias)
    started_epoch, t0 = time.time(), time.monotonic()
    synthetic = hold.starting_streams(baseline, synthetic_at_start, synthetic_streams)
    every, told_overtime = hold.check_every_s(hold_s), False
    lanes.add(1 + synthetic)
    judged = "the baseline of %s" % candidate if baseline == hold.BASELINE else candidate
    emit(
        "hold %s: %d s through alias %s, judging %s every %.1f s%s"
        % (step, hold_s, alias, judged, every, ", synthetic load at %d streams" % synthetic if synthetic else "")
    )
    limit_s = hold_s + hold.overtime_s(hold_s)
    while True:
        elapsed = time.monotonic() - t0
        time.sleep(max(0.0, min(every, (hold_s if elapsed < hold_s else limit_s) - elapsed)))
        elapsed = time.monotonic() - t0
        verdict = hold.judge(
            lanes.snapshot(), candidate, elapsed, benchmark_record, gates, baseline=baseline, contended=contended
        )
        emit(hold.progress_line(step, elapsed, hold_s, verdict, synthetic))
        if hold.hold_ends(elapsed, hold_s, verdict, force_fail):
            break
        if elapsed >= hold_s and not told_overtime:
            told_overtime = True
            emit(
                "hold %s: too thin to judge at its %d s; holding on up to %.0f s more for a verdict"
                % (step, hold_s, limit_s - elapsed)
            )
        if verdict["verdict"] == rollout.THIN and not synthetic and synthetic_streams:
            synthetic = synthetic_streams
            lanes.add(synthetic)
            emit("hold %s: too thin to judge; synthetic load through %s at %d streams" % (step, alias, synthetic))
    records = lanes.finish()
    elapsed = time.monotonic() - t0
    verdict = hold.settled(
        verdict,
        hold.judge(
            records,
            candidate,
            elapsed,
            benchmark_record,
            gates,
            force_fail=force_fail,
            final=True,
            baseline=baseline,
            contended=contended,
        ),
    )
    ended = time.time()
    verdict.update(
        step=step,
        started_at_epoch=round(started_epoch, 3),
        ended_at_epoch=round(ended, 3),
        hold_s=hold_s,
        overtime_s=round(max(0.0, elapsed - hold_s), 1) if told_overtime else 0.0,
        synthetic_streams=synthetic,
        failed_at_epoch=round(ended, 3) if verdict["verdict"] == rollout.FAIL else None,
    )
    emit("hold %s: %s (%s)" % (step, verdict["verdict"], "; ".join(verdict["reasons"])))
    return verdict


def run_from(params):
    """The router_hold module's work from its parameters: a hold, a baseline hold, or a confirmation."""
    point = endpoint(params["router_url"], params["api_key"])
    if params["mode"] == "confirm":
        return confirm_serving(point, params["alias"], params["seats"], params["since_epoch"])
    return run_hold(
        point,
        *(params[key] for key in ("alias", "candidate", "step", "hold_s", "benchmark_record", "gates")),
        force_fail=params["force_fail"],
        synthetic_streams=params["synthetic_streams"],
        synthetic_at_start=params["synthetic_at_start"],
        baseline=hold.BASELINE if params["mode"] == "baseline" else (params["baseline"] or None),
        contended=params.get("contended") or None,
    )


def confirm_serving(point, alias, seats, since_epoch, needed=hold.CONFIRM_ANSWERS, timeout_s=120.0, emit=None):
    """Ask through the alias until `needed` answers in a row come from `seats` (or, on a router that names
    none, succeed); returns {rollback_s, confirmed_at_epoch, answers}: rollback_s runs from since_epoch
    (the gate's failure) to the end of the first answer of that run."""
    emit = emit or progress_emit
    seats, run, answers = set(seats), [], 0
    deadline = time.monotonic() + timeout_s
    while len(run) < needed:
        if time.monotonic() > deadline:
            raise RouterError(
                "alias %s did not answer from %s %d times in a row within %.0f s of the rollback: check the router "
                "by hand (its targets now) and put the alias back"
                % (alias, ", ".join(sorted(seats)), needed, timeout_s)
            )
        record = ask(point, alias)
        answers += 1
        back = record["ok"] and (record["seat"] in seats or record["seat"] is None)
        run = run + [record] if back else []
        if not back:
            time.sleep(RETRY_PAUSE_S)
    confirmed = run[0]["end_ns"] / 1e9
    result = {
        "rollback_s": round(confirmed - since_epoch, 3),
        "confirmed_at_epoch": round(confirmed, 3),
        "answers": answers,
    }
    emit(
        "rollback: alias %s served by %s again %.2f s after the gate failed"
        % (alias, ", ".join(sorted(seats)), result["rollback_s"])
    )
    return result


def course(
    alias,
    kind,
    seat,
    current_targets,
    evidence_root,
    options,
    candidate_api_base=None,
    plan_dir=None,
    candidate_model=None,
):
    """The promotion's course (router/hold.plan) from the candidate's latest record, its address and
    the name it serves (given, else from its plan)."""
    record, folder = writer.latest_record(evidence_root, seat)
    planned = _plan_target(_plan_file(plan_dir, seat), seat)
    address = candidate_api_base or planned.get("api_base")
    model = candidate_model or planned.get("model")
    # The recipe's gates (qualification.rollout_gates), under what the operator gives (-e promote_gates).
    declared = dict(planned.get("gates") or {})
    reason = declared.pop("reason", None)
    options = dict(options, gates=dict(declared, **(options.get("gates") or {})))
    options["contended"] = _contended(plan_dir, planned, current_targets, alias)
    found = hold.plan(alias, kind, current_targets, seat, address, record, folder, options, candidate_model=model)
    unserved = rollout.smg_alias_refusal(kind, alias, seat, planned.get("served_aliases")) if planned else None
    if unserved and not found.get("refusal"):
        found = dict(found, refusal=unserved, steps=[], lines=["refused: %s" % unserved])
    if reason and not found.get("refusal"):
        found["gates_reason"] = reason
        found["lines"] = found["lines"] + ["gates from seat %s's recipe: %s" % (seat, reason)]
    return dict(found, record=record)


def course_from(params):
    """course() from the router_rollout module's parameters."""
    args = [params[key] for key in ("alias", "kind", "seat", "current_targets", "evidence_root", "options")]
    return course(*args, **{key: params[key] for key in ("candidate_api_base", "plan_dir", "candidate_model")})


def _plan_file(plan_dir, seat):
    """The seat's plan in the plan folder (defaults.plan_file), or None without a folder."""
    if not plan_dir:
        return None
    try:
        return defaults.plan_file(plan_dir, seat)
    except ValueError as exc:
        raise RouterError(str(exc))


def _contended(plan_dir, planned, current_targets, alias):
    """What the candidate and the alias's current seat both compute on (rollout.shared_compute), from
    their plans side by side in the plan folder; None when either plan is not there."""
    try:
        incumbent = rollout.current_seat(alias, hold.weights_of(current_targets))
    except RouterError:
        return None
    try:
        theirs = _plan_file(plan_dir, incumbent)
    except RouterError:
        return None
    if not planned or not theirs or not os.path.isfile(theirs):
        return None
    try:
        with open(theirs, encoding="utf-8") as handle:
            ranks = json.load(handle).get("ranks")
    except (OSError, ValueError, AttributeError):
        return None
    return rollout.shared_compute(planned.get("ranks"), ranks)


def _plan_target(plan_file, seat):
    """The candidate's OpenAI base URL (rank 0's serve address, as bring-up used it), served model
    name and declared rollout gates from its plan; {} without a plan."""
    if not plan_file or not os.path.isfile(plan_file):
        return {}
    try:
        with open(plan_file, encoding="utf-8") as handle:
            found = json.load(handle)
        serve = found["ranks"][0]["serve"]
        model = (found.get("model") or {}).get("served_name")
        gates = (found.get("qualification") or {}).get("rollout_gates")
        served_aliases = (found.get("model") or {}).get("served_aliases")
        ranks = [{"host": r.get("host"), "gpus": r.get("gpus") or []} for r in found["ranks"]]
    except (OSError, ValueError, KeyError, IndexError, TypeError, AttributeError) as exc:
        raise RouterError(
            "seat %s's plan %s has no rank 0 serve address (%s): re-plan it or give candidate_api_base"
            % (seat, plan_file, exc)
        )
    return {
        "api_base": serve if "://" in serve else "http://%s/v1" % serve,
        "model": model,
        "gates": gates,
        "served_aliases": served_aliases,
        "ranks": ranks,
    }


def record(evidence_dir, course, events, started_epoch, secrets=(), root=None, check_mode=False):
    """Write promotion-rollout.json into the candidate's folder and re-render its record and report."""
    redactor = writer.evidence_redactor(secrets=[s for s in secrets if s])
    use_redactor(redactor)
    document = hold.document(course, events, hold.outcome_of(events, course), started_epoch, round(time.time(), 3))
    path = os.path.join(evidence_dir, hold.ROLLOUT_PART + ".json")
    if not check_mode:
        writer.write_part(evidence_dir, hold.ROLLOUT_PART, document, redactor)
        writer.assemble(evidence_dir, redactor, plots=False, root=root or writer.PROJECT_ROOT)
    return {"path": path, "report": os.path.join(evidence_dir, "report.md"), "outcome": document["outcome"]}
