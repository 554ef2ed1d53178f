"""What bring-up decides from a seat's plan: serve it, or refuse it and say why.

Pure, and the one home of that decision: the plan carries it (plan['bringup']), a real bring-up
(playbooks/bringup.yml) refuses by it before any node is touched, and a --check run ends with the
same verdict instead of guessing. A seat is served only when its plan is ready: it fits, no rule
or check refuses it, every rank's launch is rendered, and nothing is unknown (an unpinned revision
or image, unchecked image flags, a parser left open...).
"""


def bringup_verdict(plan):
    """{serve, refusals, summary} for a plan (seat/plan.py make_plan's result).

    refusals: every blocker, then every unknown, as the plan words them; summary: one line,
    'would serve' or 'would be refused: <refusals>'.
    """
    refusals = list(plan.get("blockers") or []) + list(plan.get("unknowns") or [])
    serve = bool(plan.get("ready")) and not refusals
    if not serve and not refusals:
        # ready is false for a reason the plan did not word (no rank rendered, say): still refused.
        refusals = ["the plan is not ready: %s" % _state(plan)]
    summary = "would serve" if serve else "would be refused: %s" % "; ".join(refusals)
    return {"serve": serve, "refusals": refusals, "summary": summary}


def _state(plan):
    if not plan.get("ranks"):
        return "no rank's launch is rendered"
    if not plan.get("launchable"):
        return "it is not launchable (fit verdict %s)" % plan.get("verdict")
    return "it is not marked ready"
