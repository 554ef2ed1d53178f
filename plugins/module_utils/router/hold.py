"""A promotion's holds and its record, as pure decisions (issue 26); io/router/hold.py does the I/O.

A hold watches the alias for `hold_s`: the controller sends a steady probe through the alias (one
stream at a time) and reads who answered from the router's header. The controller cannot see the
clients' own requests, so a verdict rests on the requests it sent; when judge_hold calls them too
thin to judge, synthetic load is added through the alias (more streams), as the issue asks. A gate
that fails ends the hold at once, so the rollback starts as early as it can.
"""

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import RouterError
from ansible_collections.seatwright.fleet.plugins.module_utils.router import deploy, rollout
from ansible_collections.seatwright.fleet.plugins.module_utils.router.adapter import LITELLM_SEAT_HEADER, header

ROLLOUT_PART = "promotion-rollout"
ROLLOUT_SCHEMA = "seatwright-rollout/1"
# One request of the probe and of the synthetic load: a short question with a bounded answer, so a
# hold of a minute holds many answers even on a slow seat.
PROBE_REQUEST = {
    "max_tokens": 16,
    "temperature": 0,
    "stream": True,
    "stream_options": {"include_usage": True},
    "messages": [{"role": "user", "content": "Count from one to twenty in words."}],
}
# Streams of synthetic load added beside the probe when the answers are too thin to judge.
DEFAULT_SYNTHETIC_STREAMS = 4
# A rollback is confirmed when this many answers in a row come from the previous targets.
CONFIRM_ANSWERS = 5
# A hold still too thin to judge when its time is up holds on for up to its own length again, and at
# least this long: a loaded router that answers slowly must not fail a sound candidate for want of answers.
MIN_OVERTIME_S = 30.0
# What `judge` is told in place of a baseline's figures when the hold measures the baseline itself.
BASELINE = "measure"
FORCED = "forced by the operator (force_gate_failure): the gate is failed on purpose to show the rollback"


def gates_of(overrides):
    """The hold's gates: rollout.DEFAULT_GATES with the operator's overrides, each checked."""
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(rollout.DEFAULT_GATES))
    if unknown:
        raise RouterError(
            "unknown gate %s: the gates are %s" % (", ".join(unknown), ", ".join(sorted(rollout.DEFAULT_GATES)))
        )
    for name, value in overrides.items():
        if value is not None and (isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0):
            raise RouterError("gate %s=%r: give a number of 0 or more (or null for no bound)" % (name, value))
    if overrides.get("min_requests") is not None and overrides["min_requests"] < 1:
        raise RouterError("gate min_requests=%r: a verdict needs at least 1 answer" % overrides["min_requests"])
    return dict(rollout.DEFAULT_GATES, **overrides)


def request_record(answer, started_epoch):
    """One request in the benchmark's record shape (bench/records.py) from an openai_http answer,
    with `seat`, who the router said answered. Tokens are the server's usage count, else the chunks
    that carried text (one token each, as engines stream)."""
    chunks = answer.get("chunks") or []
    usage = next((c.get("usage") for c in reversed(chunks) if isinstance(c, dict) and c.get("usage")), None) or {}
    streamed = sum(
        1
        for c in chunks
        if isinstance(c, dict) and any((ch.get("delta") or {}).get("content") for ch in c.get("choices") or [])
    )
    ok = answer.get("status") == 200 and not answer.get("error") and streamed > 0
    elapsed = answer.get("elapsed_s")
    ttft = answer.get("ttft_s")
    start_ns = int(started_epoch * 1e9)
    generated = usage.get("completion_tokens") or streamed
    return {
        "ok": ok,
        "error": None if ok else (answer.get("error") or "HTTP %s with no streamed text" % answer.get("status")),
        "status": answer.get("status"),
        "seat": header(answer.get("headers") or {}, LITELLM_SEAT_HEADER),
        "start_ns": start_ns,
        "end_ns": start_ns + int((elapsed or 0) * 1e9),
        "ttft_ms": None if ttft is None else ttft * 1000.0,
        "ttfo_ms": None if ttft is None else ttft * 1000.0,
        "latency_ms": None if elapsed is None else elapsed * 1000.0,
        "input_tokens": usage.get("prompt_tokens"),
        "output_tokens": generated if ok else 0,
        "reasoning_tokens": 0,
        "generated_tokens": generated if ok else 0,
    }


def candidate_records(records, candidate, named):
    """The requests the candidate answered. A router that names no seat (smg) leaves every answer
    unnamed: then all of them are judged, since the candidate's share cannot be told apart."""
    if not named:
        return list(records)
    return [r for r in records if r.get("seat") == candidate]


def judge(
    records, seat, duration_s, benchmark_record, gates, force_fail=False, final=False, baseline=None, contended=None
):
    """The hold's verdict so far, plus what every answer through the alias showed: `all_requests`,
    `all_failed` and `answered_by` {seat: count}. `seat` is the candidate (rollout.judge_hold on its
    answers, against `baseline`; `contended` as it says), or the incumbent in the baseline hold
    (`baseline` is BASELINE: rollout.judge_baseline)."""
    named = any(r.get("seat") for r in records)
    mine, span = candidate_records(records, seat, named), max(duration_s, 0.001)
    if baseline == BASELINE:
        verdict = rollout.judge_baseline(mine, span, gates)
        force_fail = False
    else:
        # A canary's other answers are the incumbent's, in the same window: its reference when enough.
        beside = [r for r in records if named and r.get("seat") and r.get("seat") != seat]
        verdict = rollout.judge_hold(
            mine, span, benchmark_record, gates, baseline=baseline, beside=beside, contended=contended
        )
    by = {}
    for r in records:
        by[r.get("seat") or "not named"] = by.get(r.get("seat") or "not named", 0) + 1
    verdict["figures"].update(
        all_requests=len(records), all_failed=sum(1 for r in records if not r.get("ok")), answered_by=by
    )
    if final and verdict["verdict"] == rollout.THIN:
        verdict = dict(
            verdict,
            verdict=rollout.FAIL,
            reasons=verdict["reasons"]
            + ["still too thin to judge at the end of the hold and its overtime, synthetic load included"],
        )
    if final and force_fail:
        verdict = dict(verdict, verdict=rollout.FAIL, reasons=[FORCED] + verdict["reasons"])
    return verdict


def settled(seen, final):
    """The hold's verdict from the last one seen while holding and the one over every answer: a gate
    seen failing ends the hold, and the answers still in flight when it ended do not overturn it."""
    if seen and seen.get("verdict") == rollout.FAIL and final.get("verdict") != rollout.FAIL:
        return dict(seen, reasons=list(seen.get("reasons") or []))
    return final


def starting_streams(baseline, carried, streams=DEFAULT_SYNTHETIC_STREAMS):
    """Synthetic streams a hold runs from its first second. A baseline hold starts with `streams`, and
    each later hold with what the baseline ran (`carried`): per-stream speed falls as the streams
    rise, so the candidate is judged under the load its baseline was measured at. A canary's share
    of the same load is smaller, which errs lenient. Without a baseline, none until too thin."""
    if baseline == BASELINE:
        return streams
    return max(0, int(carried or 0)) if baseline else 0


def progress_line(step, elapsed_s, hold_s, verdict, synthetic):
    """One line a person watching a hold reads: how far, how many answers, from whom, the verdict so far."""
    figs = verdict["figures"]
    who = ", ".join("%s %d" % (seat, n) for seat, n in sorted(figs.get("answered_by", {}).items())) or "none yet"
    return "hold %s: %.0f s of %d s (%d%%), %d answers (%s), %d failed, %s; so far: %s" % (
        step,
        elapsed_s,
        hold_s,
        min(100, int(100 * elapsed_s / hold_s)) if hold_s else 100,
        figs.get("all_requests", 0),
        who,
        figs.get("all_failed", 0),
        "synthetic load at %d streams" % synthetic if synthetic else "probe only",
        verdict["verdict"],
    )


def overtime_s(hold_s):
    """How much longer than `hold_s` a hold that is still too thin to judge may go on."""
    return max(float(hold_s), MIN_OVERTIME_S)


def hold_ends(elapsed_s, hold_s, verdict, force_fail=False):
    """Whether a hold ends now: at a failed gate at once; at its time when it has a verdict or is to
    fail anyway (force_fail); too thin to judge, at the end of its overtime (then judge() with
    final=True calls it a failure)."""
    if verdict["verdict"] == rollout.FAIL:
        return True
    if elapsed_s < hold_s:
        return False
    return force_fail or verdict["verdict"] != rollout.THIN or elapsed_s >= hold_s + overtime_s(hold_s)


def check_every_s(hold_s):
    """How often a hold judges what it has: five times a hold, at most every 5 s, at least every 0.5 s."""
    return min(5.0, max(0.5, hold_s / 5.0))


def step_targets(targets, addresses, models=None):
    """A step's {seat: weight} as the router role's targets {seat: {api_base, weight, model?}}; `models`
    {seat: the name it serves} where that is not the alias's group."""
    models = models or {}
    missing = sorted(seat for seat in targets if not addresses.get(seat))
    if missing:
        raise RouterError("no address for seat %s: give its api_base (candidate_api_base, or its plan)" % missing[0])
    return {
        seat: dict(
            {"api_base": addresses[seat], "weight": weight}, **({"model": models[seat]} if models.get(seat) else {})
        )
        for seat, weight in sorted(targets.items())
    }


def weights_of(targets):
    """{seat: weight} of the router role's targets {seat: {api_base, weight}}."""
    return {seat: int((value or {}).get("weight") or 0) for seat, value in sorted((targets or {}).items())}


def plan(alias, kind, current, candidate, candidate_api_base, record, evidence_dir, options, candidate_model=None):
    """The course of one promotion: refusal or steps, each with router targets, and the lines --check prints.

    `current` is the alias's targets now {seat: {api_base, weight}}; `record` the candidate's latest
    record (its `promotion` decided the move); options: shares, hold_s, gates, force_gate_failure,
    stop_old, and contended (rollout.shared_compute of the candidate and the incumbent)."""
    weights = weights_of(current)
    # What a refusal keeps: enough for promotion-rollout.json to say which move was refused and why.
    refused = {
        "alias": alias,
        "kind": kind,
        "candidate": candidate,
        "evidence_dir": evidence_dir,
        "previous_targets": dict(current),
        "steps": [],
    }
    try:
        incumbent = rollout.current_seat(alias, weights)
    except RouterError as exc:
        return dict(refused, refusal=str(exc), incumbent=None, lines=["refused: %s" % exc])
    refusal = rollout.promotion_refusal((record or {}).get("promotion"), candidate, alias, incumbent)
    if refusal:
        return dict(refused, refusal=refusal, incumbent=incumbent, lines=["refused: %s" % refusal])
    gates = gates_of(options.get("gates"))
    addresses = {seat: (value or {}).get("api_base") for seat, value in current.items()}
    addresses[candidate] = candidate_api_base
    models = {seat: (value or {}).get("model") for seat, value in current.items()}
    models[candidate] = candidate_model
    steps = []
    for step in rollout.rollout_steps(
        kind,
        alias,
        incumbent,
        candidate,
        options.get("shares") or rollout.DEFAULT_CANARY_SHARES,
        options.get("hold_s") or rollout.DEFAULT_HOLD_S,
        options.get("contended"),
    ):
        if "targets" in step:
            step = dict(step, router_targets=step_targets(step["targets"], addresses, models))
        if step["action"] == "drain" and addresses.get(step["seat"]):
            # The old seat's engine gauge, read until 0 even after the move has taken it out of the alias.
            step = dict(step, metrics_url=deploy.metrics_url(addresses[step["seat"]]))
        steps.append(step)
    if options.get("stop_old"):
        steps.append({"step": "stop", "action": "stop", "seat": incumbent})
    result = {
        "refusal": None,
        "alias": alias,
        "kind": kind,
        "incumbent": incumbent,
        "candidate": candidate,
        "previous_targets": dict(current),
        "previous_weights": weights,
        "evidence_dir": evidence_dir,
        "gates": gates,
        "force_gate_failure": bool(options.get("force_gate_failure")),
        "steps": steps,
    }
    result["lines"] = plan_lines(result)
    return result


def plan_lines(course):
    """What a promotion would do, step by step (what --check prints)."""
    gates = ", ".join("%s %s" % (k, "none" if v is None else v) for k, v in sorted(course["gates"].items()))
    lines = [
        "promote %s on alias %s (%s), from %s; evidence: %s"
        % (course["candidate"], course["alias"], course["kind"], course["incumbent"], course["evidence_dir"])
    ]
    for number, step in enumerate(course["steps"], start=1):
        if step["action"] == "baseline":
            lines.append(
                "%d. %s: measure %s carrying %s alone for %d s, the visible tok/s every later hold is judged against"
                % (number, step["step"], step["seat"], course["alias"], step["hold_s"])
            )
            continue
        text = "%d. %s: %s" % (number, step["step"], step["action"])
        if step.get("seat"):
            text += " %s" % step["seat"]
        if step.get("targets"):
            text += "; %s -> %s" % (
                course["alias"],
                ", ".join("%s weight %d" % (seat, w) for seat, w in sorted(step["targets"].items())),
            )
        if step.get("hold_s"):
            text += "; hold %d s, gates: %s" % (step["hold_s"], gates)
            if step.get("contended"):
                text += " (visible tok/s recorded, not judged: both seats compute on %s)" % step["contended"]
            if course.get("force_gate_failure"):
                text += " (failed on purpose: force_gate_failure)"
        lines.append(text)
    lines.append(
        "a gate that fails puts %s back on %s"
        % (
            course["alias"],
            ", ".join("%s weight %d" % kv for kv in sorted(weights_of(course["previous_targets"]).items())),
        )
    )
    return lines


def document(course, events, outcome, started_epoch, ended_epoch):
    """promotion-rollout.json: the course, each step as it ran (targets, times, verdicts, figures) and
    the outcome (moved, rolled back, refused) with the rollback's measured seconds."""
    rollback = next((e for e in events if e.get("step") == "rollback"), None)
    return {
        "schema": ROLLOUT_SCHEMA,
        "alias": course.get("alias"),
        "router": course.get("kind"),
        "candidate": course.get("candidate"),
        "incumbent": course.get("incumbent"),
        "outcome": outcome,
        "refusal": course.get("refusal"),
        "started_at_epoch": started_epoch,
        "ended_at_epoch": ended_epoch,
        "previous_targets": weights_of(course.get("previous_targets")),
        "gates": course.get("gates"),
        "gates_reason": course.get("gates_reason"),
        "force_gate_failure": bool(course.get("force_gate_failure")),
        "rollback_s": (rollback or {}).get("rollback_s"),
        "steps": [_event(e) for e in events],
    }


# What a hold's verdict keeps in the record (a registered module result also carries its invocation).
VERDICT_KEYS = ("verdict", "reasons", "figures", "hold_s", "overtime_s", "synthetic_streams", "failed_at_epoch")


def _event(event):
    verdict = event.get("verdict")
    if isinstance(verdict, dict):
        event = dict(event, verdict={k: verdict[k] for k in VERDICT_KEYS if k in verdict})
    return {k: v for k, v in event.items() if v is not None and v != ""}


def alias_line(rollout_doc):
    """One line on where a rollout left its alias, from promotion-rollout.json."""
    alias, outcome = rollout_doc.get("alias"), rollout_doc.get("outcome")
    incumbent, candidate = rollout_doc.get("incumbent"), rollout_doc.get("candidate")
    if outcome == "moved":
        return "alias %s: moved from %s to %s" % (alias, incumbent, candidate)
    if outcome == "rolled back":
        return "alias %s: rolled back to %s in %s s, %s not promoted" % (
            alias,
            incumbent,
            rollout_doc.get("rollback_s"),
            candidate,
        )
    if outcome == "refused":
        return "alias %s: stays on %s, %s refused: %s" % (alias, incumbent, candidate, rollout_doc.get("refusal"))
    return "alias %s: %s (a step failed before the move ended; see the report's Rollout section)" % (alias, outcome)


def outcome_of(events, course=None):
    """moved, rolled back, refused (nothing was changed), or stopped (a step failed that was not a gate)."""
    if (course or {}).get("refusal"):
        return "refused"
    if any(e.get("step") == "rollback" for e in events):
        return "rolled back"
    return "moved" if any(e.get("step") == "deregister" for e in events) else "stopped"
