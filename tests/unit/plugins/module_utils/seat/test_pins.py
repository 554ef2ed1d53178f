"""The operator's checkpoint pins (plugins/module_utils/seat/pins.py), alone and through the plan."""

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.seat.plan import plan_seat
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.pins import pin_model
from seat_cases import ROOT, SCHEMA, example_nodes, seat_data

REVISION = "0123456789abcdef0123456789abcdef01234567"
REPO = "example-org/GLM-5.3-Flash-NVFP4"


@pytest.mark.parametrize(
    "repo,revision,words",
    [
        ("GLM-5.3-Flash", None, "seat_model_repo is 'GLM-5.3-Flash'; give the checkpoint's Hugging Face repository"),
        (None, "main", "seat_model_revision is 'main'; give the checkpoint's full 40-hex commit"),
        (None, REVISION[:12], "seat_model_revision is '0123456789ab'"),
        (None, REVISION.upper(), "full 40-hex commit, lowercase"),
    ],
)
def test_a_malformed_pin_is_refused_naming_the_variable(repo, revision, words):
    with pytest.raises(SeatError) as caught:
        pin_model(seat_data("glm53"), SCHEMA, repo, revision)
    assert words in str(caught.value)


def test_no_pin_leaves_the_recipe_as_it_is():
    data = seat_data("glm53")
    assert pin_model(data, SCHEMA, None, "") == (data, [])


def test_pins_fill_what_the_field_left_unknown_and_say_so():
    data = seat_data("glm53")
    pinned, notes = pin_model(data, SCHEMA, REPO, REVISION)
    assert (pinned["model"]["repo"], pinned["model"]["revision"], pinned["model"]["revision_status"]) == (
        REPO,
        REVISION,
        "pinned",
    )
    assert notes == [
        "model.repo %s given by the operator (seat_model_repo)" % REPO,
        "model.revision %s given by the operator (seat_model_revision)" % REVISION,
    ]
    assert pinned["notes"][-2:] == notes and data["model"]["revision"] is None  # the recipe is not changed


def test_a_pin_that_replaces_the_recipes_own_says_what_it_replaced():
    data = seat_data("glm53")
    data["model"].update(repo="org/older", revision="f" * 40, revision_status="pinned")
    _, notes = pin_model(data, SCHEMA, None, REVISION)
    assert notes == ["seat_model_revision %s replaces the recipe's model.revision %s" % (REVISION, "f" * 40)]


def _plan(pins):
    return plan_seat(
        "glm53",
        str(ROOT / "seats" / "glm53.yml"),
        str(ROOT / "schemas" / "seat.schema.json"),
        example_nodes(),
        str(ROOT / "images" / "facts"),
        pins=pins,
    )


def test_glm53_with_the_operators_pins_plans_with_no_unknown_left():
    plan = _plan({"repo": REPO, "revision": REVISION})
    assert plan["unknowns"] == [] and plan["refusals"] == []
    assert plan["model"]["revision"] == REVISION and plan["model"]["repo"] == REPO


def test_glm53_without_pins_names_only_the_two_pins():
    plan = _plan(None)
    assert [item.split(":")[0] for item in plan["unknowns"]] == ["model.revision", "model.repo"]
