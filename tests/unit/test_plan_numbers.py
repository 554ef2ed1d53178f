"""Issue 48 parts 2 to 4: the field's FlashInfer nightly, a plan's numbers equal to its launch, strict YAML,
and a container py-spy can attach to. Each test goes through today's entry points: rules.evaluate,
make_plan, recipe loading and the container spec with its read-back."""

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError
from ansible_collections.seatwright.fleet.plugins.module_utils.node.hardware import GPU_PROFILES
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.recipe import validate_recipe
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.rules import RULE_IDS, evaluate
from seat_cases import SCHEMA, mutated, seat_data


def _gpus(profile, count):
    spec = GPU_PROFILES[profile]
    return [
        {
            "index": i,
            "name": spec["name"],
            "compute_capability": spec["compute_capability"],
            "memory_total_mib": spec["memory_mib"],
        }
        for i in range(count)
    ]


SM120_X4 = _gpus("rtx-pro-6000-maxq", 2) + _gpus("rtx-pro-6000-ws", 2)


def _glm53(flashinfer):
    data = mutated(seat_data("glm53"), ("engine", "flashinfer_version"), flashinfer)
    return validate_recipe(data, SCHEMA, "seats/glm53.yml", RULE_IDS)


# ------------------------------------------------------------------ the field's FlashInfer nightly


@pytest.mark.parametrize(
    "version,case",
    [("0.6.18.dev20260828", "dated nightly"), ("0.6.18", "release"), ("0.6.19.dev20260901", "dated nightly")],
)
def test_the_fields_nightly_and_the_release_meet_the_flashinfer_rule(version, case):
    result = evaluate(_glm53(version), SM120_X4, "seats/glm53.yml")
    entry = next(item for item in result["applied"] if item["id"] == "nope-mla-flashinfer")
    assert entry["details"][0].startswith("engine.flashinfer_version: %s (%s: %s is " % (version, case, version))
    assert not any("nope-mla-flashinfer" in line for line in result["unverified"])


@pytest.mark.parametrize(
    "version,case",
    [
        ("0.6.18.dev20260801", "too-early nightly"),
        ("0.6.17", "older release"),
        ("0.6.18rc1", "pre-release"),
        ("0.6.18.dev7", "undated dev build"),
    ],
)
def test_earlier_builds_are_refused_saying_which_case_was_seen(version, case):
    with pytest.raises(SeatError) as caught:
        evaluate(_glm53(version), SM120_X4, "seats/glm53.yml")
    message = str(caught.value)
    assert "seats/glm53.yml: rule nope-mla-flashinfer: engine.flashinfer_version is %r" % version in message
    assert "or a nightly of that line or later dated 2026-08-28 or after; seen: %s (" % case in message
