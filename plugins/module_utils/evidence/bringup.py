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


RANK_TRANSPORT_KEYS = ("kind", "backend", "source", "channels", "nics", "gid_index", "problem")
# Worst first: the seat's transport is the worst any rank showed.
KINDS_WORST_FIRST = ("socket", "rdma", "rdma-gdr")


def transport_record(plan, ranks):
    """The seat's transport as its ranks' logs showed it (seat/verify: fabric/transport.py), with the
    plan's requirement; null for a one-node seat. kind is the worst any rank showed (None: none did)."""
    required = _dict(_dict(plan).get("transport"))
    if not required.get("required"):
        return None
    per_rank = []
    for rank in ranks:
        seen = _dict(_dict(rank).get("transport"))
        if seen:
            per_rank.append(dict({key: seen.get(key) for key in RANK_TRANSPORT_KEYS}, host=rank.get("host")))
    shown = [item for item in per_rank if item["kind"] in KINDS_WORST_FIRST]
    worst = min(shown, key=lambda item: KINDS_WORST_FIRST.index(item["kind"])) if shown else None
    return {
        "required": required.get("required"),
        "required_source": required.get("source"),
        "required_reason": required.get("reason"),
        "kind": worst["kind"] if worst else None,
        "backend": worst["backend"] if worst else None,
        "source": worst["source"] if worst else None,
        "ranks": per_rank,
    }


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
            # What the ranks talked over, read from their own logs, against what the plan required.
            "transport": transport_record(plan, [r for r in outcome.get("ranks") or [] if isinstance(r, dict)]),
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
