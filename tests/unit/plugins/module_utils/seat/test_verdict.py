"""Issue 21 item 7: bring-up's verdict on a plan (seat/verdict.py), the one a real run and --check share."""

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.plan import make_plan
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.verdict import bringup_verdict
from seat_cases import SCHEMA, SEAT_NAMES, example_nodes, lab_image_facts, lab_node, seat_data


def shaped(ready=False, blockers=(), unknowns=(), ranks=({"rank": 0},), launchable=True):
    return {
        "ready": ready,
        "blockers": list(blockers),
        "unknowns": list(unknowns),
        "ranks": list(ranks),
        "launchable": launchable,
        "verdict": "fits",
    }


@pytest.mark.parametrize(
    "plan, serve, summary",
    [
        (shaped(ready=True), True, "would serve"),
        (shaped(unknowns=["model.revision: not pinned"]), False, "would be refused: model.revision: not pinned"),
        (
            shaped(blockers=["refused by rule x: y"], unknowns=["image flags not checked: z"], launchable=False),
            False,
            "would be refused: refused by rule x: y; image flags not checked: z",
        ),
        # A plan marked ready that still lists something open is not served.
        (shaped(ready=True, unknowns=["engine.image: unknown"]), False, "would be refused: engine.image: unknown"),
        # Not ready with nothing worded: still refused, and says why.
        (shaped(ranks=()), False, "would be refused: the plan is not ready: no rank's launch is rendered"),
    ],
)
def test_the_verdict_serves_only_a_ready_plan_and_names_every_refusal(plan, serve, summary):
    verdict = bringup_verdict(plan)
    assert (verdict["serve"], verdict["summary"]) == (serve, summary)
    assert bool(verdict["refusals"]) is not serve


@pytest.mark.parametrize("name", SEAT_NAMES)
def test_every_shipped_seats_plan_carries_the_verdict_bring_up_acts_on(name):
    plan = make_plan(seat_data(name), SCHEMA, name, example_nodes(), "seats/%s.yml" % name)
    assert plan["bringup"] == bringup_verdict(plan)
    # No shipped seat is served on the example fleet: each has something unknown (no image facts at least).
    assert plan["bringup"]["serve"] is False
    assert set(plan["unknowns"]) <= set(plan["bringup"]["refusals"])


def test_the_lab_seat_with_its_image_read_would_serve():
    node = lab_node(seatwright_engine_images={"lab-vllm-cpu": lab_image_facts()})
    plan = make_plan(seat_data("lab"), SCHEMA, "lab", [node], "seats/lab.yml")
    assert plan["bringup"] == {"serve": True, "refusals": [], "summary": "would serve"}
