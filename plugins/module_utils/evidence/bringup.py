"""bringup.json of one seat bring-up, one shape whatever the outcome (pure).

A served seat, a Ray cluster started on its own and a failed bring-up all write the same keys
(schemas/record.schema.json, `$defs/bringup`): what the plan launched (endpoint, served name, image,
model revision) is read from the plan here, once; what happened (ranks read back, evictions,
readiness, the first answer, the logs and restorations of a failure) comes from the run. A value
the run did not reach is null or empty, never left out, so a reader never has to guess a shape.
"""

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import EvidenceError

BRINGUP_SCHEMA = "seatwright-bringup/1"
SERVING, CLUSTER_UP, FAILED = "serving", "cluster-up", "failed"
STATES = (SERVING, CLUSTER_UP, FAILED)
# What a playbook may say about the run; everything else in bringup.json is derived here.
OUTCOME_KEYS = (
    "state",
    "reason",
    "image_id",
    "ranks",
    "evicted",
    "restored",
    "ready",
    "ray",
    "answer",
    "log_tails",
    "started_at_epoch",
)


def _dict(value):
    return value if isinstance(value, dict) else {}


def _plan_facts(plan):
    """Endpoint, served name, model revision and image reference, as the plan launched them."""
    plan = _dict(plan)
    ranks = plan.get("ranks") or []
    head = ranks[0] if isinstance(ranks, list) and ranks and isinstance(ranks[0], dict) else {}
    model, engine = _dict(plan.get("model")), _dict(plan.get("engine"))
    image = _dict(engine.get("image_checked")).get("reference") or _dict(engine.get("image")).get("reference")
    return {
        "endpoint": "http://%s/v1" % head["serve"] if head.get("serve") else None,
        "served_name": model.get("served_name"),
        "model_revision": model.get("revision"),
        "image": image,
    }


def _epoch(value):
    """Epoch seconds as a number (a template may hand over its text), or None."""
    try:
        return None if value in (None, "") else float(value)
    except (TypeError, ValueError):
        raise EvidenceError("bring-up outcome: started_at_epoch %r is not a time in epoch seconds" % (value,))


def _answer(response):
    """The first choice and the usage of the bring-up's question, or nulls when none was asked."""
    response = _dict(response)
    choices = response.get("choices")
    first = choices[0] if isinstance(choices, list) and choices and isinstance(choices[0], dict) else None
    return first, response.get("usage") if isinstance(response.get("usage"), dict) else None


def bringup_record(seat, plan, outcome, finished_at_epoch):
    """bringup.json from the plan and what the run reports (`outcome`, keys in OUTCOME_KEYS)."""
    outcome = dict(outcome or {})
    unknown = sorted(set(outcome) - set(OUTCOME_KEYS))
    if unknown:
        raise EvidenceError(
            "bring-up outcome: %s not known; a bring-up reports %s" % (", ".join(unknown), ", ".join(OUTCOME_KEYS))
        )
    state = outcome.get("state")
    if state not in STATES:
        raise EvidenceError("bring-up outcome: state %r is not one of %s" % (state, ", ".join(STATES)))
    reason = outcome.get("reason") or None
    if state == FAILED and not reason:
        raise EvidenceError("bring-up outcome: a failed bring-up must say why (reason is empty)")
    first_answer, usage = _answer(outcome.get("answer"))
    record = {"schema": BRINGUP_SCHEMA, "seat": seat, "state": state, "reason": reason}
    record.update(_plan_facts(plan))
    record.update(
        {
            "image_id": outcome.get("image_id") or None,
            # Each rank as read back from its running process; a rank never read back has no record.
            "ranks": [r for r in outcome.get("ranks") or [] if r],
            "evicted": [e for e in outcome.get("evicted") or [] if e],
            "restored": _dict(outcome.get("restored")),
            "ready": outcome.get("ready") or None,
            "ray": outcome.get("ray") or None,
            "first_answer": first_answer,
            "first_answer_usage": usage,
            "log_tails": _dict(outcome.get("log_tails")),
            "started_at_epoch": _epoch(outcome.get("started_at_epoch")),
            "finished_at_epoch": finished_at_epoch,
        }
    )
    return record
