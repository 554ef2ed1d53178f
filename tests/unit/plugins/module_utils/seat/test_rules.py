"""Compatibility rules (plugins/module_utils/seat/rules.py): conditions, effects, overrides, refusals."""

import copy
import json

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError
from ansible_collections.seatwright.fleet.plugins.module_utils.images.facts import recipe_with_image
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.recipe import validate_recipe
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.rules import (
    RULE_IDS,
    RULES,
    describe_effect,
    evaluate,
    launch_text,
    table_rows,
)
from conftest import ROOT
from seat_cases import FIXTURE_SEATS, SCHEMA, h200_gpus, mutated, profile_gpus, seat_data

# The facts make images read from the built vllm-sm120 image, its in-image check included.
VLLM_SM120_FACTS = json.loads((ROOT / "images" / "facts" / "vllm-sm120.json").read_text())


def recipe(name, folder=None, changes=()):
    data = seat_data(name) if folder is None else seat_data(name, folder)
    for path, value in changes:
        data = mutated(data, path, value)
    return validate_recipe(data, SCHEMA, "seats/%s.yml" % name, RULE_IDS)


gpus = profile_gpus


SM120_X4 = gpus("rtx-pro-6000-maxq", 2) + gpus("rtx-pro-6000-ws", 2)
SM120_X2 = gpus("rtx-pro-6000-maxq", 2)


def applied(result):
    return [entry["id"] for entry in result["applied"]]


def test_rule_ids_are_unique_and_every_rule_is_complete():
    assert len(set(RULE_IDS)) == len(RULE_IDS)
    for rule in RULES:
        assert rule["when"] and rule["reason"] and rule["sources"] and rule["effects"] and launch_text(rule)
        assert any("[%s]" % source in rule["reason"] for source in rule["sources"] if source.isdigit()) or not any(
            source.isdigit() for source in rule["sources"]
        )


# Without the image's facts the recipe alone cannot show the fix-2 patch and its in-image check.
MLA_BACKEND_UNVERIFIED_OF = (
    "no facts of %s were read, so patch sm120-nope-mla-fa2 and in-image check nope-mla-sm120 "
    "cannot be seen; build it and read its facts (make images, or playbooks/images.yml with "
    "engine_image_read_facts) (rule nope-mla-backend-gate)"
)
MLA_BACKEND_UNVERIFIED = MLA_BACKEND_UNVERIFIED_OF % "seatwright/vllm-sm120"


def test_the_issue_names_these_rules():
    assert set(RULE_IDS) >= {
        "custom-allreduce-off",
        "allreduce-fusion-off",
        "no-cross-node-speculation",
        "distributed-timeout",
        "cudagraph-capture-cap",
        "gpu-memory-cotenants",
        "nope-mla-backend-gate",
        "nope-mla-block-size",
        "nope-mla-flashinfer",
        "nope-mla-marlin-moe",
    }


def test_glm53_two_nodes_gets_every_multi_node_and_nope_fix():
    result = evaluate(recipe("glm53"), SM120_X4, "seats/glm53.yml")
    assert applied(result) == [
        "custom-allreduce-off",
        "allreduce-fusion-off",
        "nope-mla-backend-gate",
        "nope-mla-block-size",
        "nope-mla-flashinfer",
        "nope-mla-marlin-moe",
    ]
    serving = result["settings"]["serving"]
    assert (
        serving["custom_all_reduce"],
        serving["allreduce_fusion"],
        serving["distributed_timeout_s"],
        serving["max_cudagraph_capture_size"],
        serving["block_size"],
        serving["moe_backend"],
    ) == (False, False, None, None, 2304, "marlin")
    # The one-hour timeout was given for the Nemotron Ultra seat only [000] section 2, and the capture cap
    # was seen only with the community SM120 image [000] section 6: warnings here.
    assert [w["id"] for w in result["warnings"]] == ["distributed-timeout", "cudagraph-capture-cap"]
    assert result["settings"]["topology"]["executor"] == "mp"
    assert result["refusals"] == [] and result["undecided"] == []
    # The recipe alone (no image facts read) cannot show the fix-2 patch ran its check: unverified.
    assert result["unverified"] == [MLA_BACKEND_UNVERIFIED]
    assert result["settings"]["engine"]["patches"] == ["sm120-nope-mla-fa2"]


@pytest.mark.parametrize(
    "name,hardware,expected",
    [
        # One SM120 node: the SM12x rules, none of the multi-node ones.
        ("qwen35-122b", SM120_X2, ["custom-allreduce-off", "allreduce-fusion-off"]),
        # The recorded H200 pair (capability 9.0) at TP2 on one node: no rule at all.
        ("qwen35-122b", h200_gpus(), []),
        # A CPU seat has no GPU and one node.
        ("lab", [], []),
        # Nemotron Ultra is not MLA: multi-node and SM12x rules only.
        ("nemotron3-ultra", SM120_X4, ["custom-allreduce-off", "allreduce-fusion-off", "distributed-timeout"]),
        # The vendor GLM runs on the community SM120 image: the capture cap was seen there; the NoPE fixes of the
        # stock image were not needed there [000] section 6.
        (
            "glm53-vendor",
            SM120_X4,
            ["custom-allreduce-off", "allreduce-fusion-off", "cudagraph-capture-cap"],
        ),
        # The FP8 attempt keeps co-tenants resident on a stock image: utilisation capped, the NoPE fixes required.
        (
            "glm53-fp8",
            SM120_X4,
            [
                "custom-allreduce-off",
                "allreduce-fusion-off",
                "gpu-memory-cotenants",
                "nope-mla-backend-gate",
                "nope-mla-block-size",
                "nope-mla-flashinfer",
                "nope-mla-marlin-moe",
            ],
        ),
    ],
)
def test_which_rules_apply(name, hardware, expected):
    assert applied(evaluate(recipe(name), hardware, name)) == expected


def test_nope_rules_do_not_apply_off_sm12x():
    data = recipe("glm53")
    assert "nope-mla-block-size" not in applied(evaluate(data, h200_gpus() * 2, "glm53"))


def test_unknown_attention_leaves_the_nope_rules_undecided():
    data = recipe("qwen35-122b", changes=[(("model", "architecture", "attention"), "unknown")])
    result = evaluate(data, SM120_X2, "qwen35")
    assert [item["id"] for item in result["undecided"]] == [
        "nope-mla-backend-gate",
        "nope-mla-block-size",
        "nope-mla-flashinfer",
        "nope-mla-marlin-moe",
    ]
    assert "model.architecture.attention unknown" in result["undecided"][0]["reason"]


def test_unknown_engine_leaves_engine_scoped_rules_undecided():
    data = recipe("qwen38-flash-next", changes=[(("topology", "nodes"), 2), (("topology", "tensor_parallel"), 4)])
    undecided = [item["id"] for item in evaluate(data, SM120_X4, "q")["undecided"]]
    assert "cudagraph-capture-cap" in undecided


def test_unknown_image_makes_mla_backend_and_flashinfer_unverified_not_errors():
    result = evaluate(recipe("glm53-fp8"), SM120_X4, "v")
    assert result["unverified"] == [
        MLA_BACKEND_UNVERIFIED_OF % "the seat's image",
        "engine.flashinfer_version is unknown; the rule needs 0.6.18 or newer (rule nope-mla-flashinfer)",
    ]


@pytest.mark.parametrize(
    "path,value,fragment",
    [
        (("serving", "block_size"), 1152, "serving.block_size is 1152; the rule needs a multiple of 256"),
        (
            ("serving", "moe_backend"),
            "flashinfer_cutlass",
            "serving.moe_backend is flashinfer_cutlass; the rule needs marlin",
        ),
        (("serving", "custom_all_reduce"), True, "serving.custom_all_reduce is true; the rule needs false"),
        (("serving", "max_cudagraph_capture_size"), 512, "allows at most 256"),
        (("engine", "flashinfer_version"), "0.6.17", "engine.flashinfer_version is '0.6.17'; the rule needs 0.6.18"),
        # A 0.6.18 nightly dated before the field's of 28 August lacks the fix; the field's own passes
        # (tests/unit/plugins/module_utils/seat/test_plan_numbers.py).
        (
            ("engine", "flashinfer_version"),
            "0.6.18.dev20260801",
            "engine.flashinfer_version is '0.6.18.dev20260801'; the rule needs 0.6.18 or newer, or a nightly of "
            "that line or later dated 2026-08-28 or after; seen: too-early nightly",
        ),
    ],
)
def test_a_recipe_contradicting_a_rule_is_an_error_naming_field_rule_and_fix(path, value, fragment):
    changes = [(path, value)]
    if path == ("serving", "max_cudagraph_capture_size"):
        changes.append((("engine", "image", "sm120_kernels"), True))
    with pytest.raises(SeatError) as caught:
        evaluate(recipe("glm53", changes=changes), SM120_X4, "seats/glm53.yml")
    message = str(caught.value)
    assert fragment in message
    assert "add to overrides" in message and "Rule reason:" in message


def with_image(data, facts):
    return recipe_with_image(data, facts)[0]


def test_the_built_images_patch_and_check_meet_the_backend_gate():
    result = evaluate(with_image(recipe("glm53"), VLLM_SM120_FACTS), SM120_X4, "glm53")
    entry = next(item for item in result["applied"] if item["id"] == "nope-mla-backend-gate")
    assert not any("nope-mla-backend-gate" in line for line in result["unverified"])
    assert entry["overridden"] is None
    assert "patch sm120-nope-mla-fa2 applied; check nope-mla-sm120 passed" in entry["details"][0]
    assert "FlashInferMLASparseSM90Backend" in entry["details"][0] and "need an SM120 GPU" in entry["details"][0]


@pytest.mark.parametrize(
    "change,fragment",
    [
        # The fix-2 patch taken out of the image: nothing else opens the backend to capability 12.
        (lambda facts: facts.update(patches=[]), "holds patches [none], not sm120-nope-mla-fa2"),
        (lambda facts: facts.update(checks={}), "hold no in-image check nope-mla-sm120"),
        (
            lambda facts: facts["checks"]["nope-mla-sm120"].update(passed=False, problems=["the selector chose X"]),
            "in-image check nope-mla-sm120 failed: the selector chose X",
        ),
    ],
    ids=["patch-removed", "no-check", "check-failed"],
)
def test_an_image_without_the_patch_or_a_passing_check_is_refused_by_the_gate(change, fragment):
    facts = copy.deepcopy(VLLM_SM120_FACTS)
    change(facts)
    with pytest.raises(SeatError) as caught:
        evaluate(with_image(recipe("glm53"), facts), SM120_X4, "seats/glm53.yml")
    assert "seats/glm53.yml: rule nope-mla-backend-gate: " in str(caught.value)
    assert fragment in str(caught.value)


def test_an_override_names_the_backend_that_ran_and_clears_the_unverified_line():
    reason = "FLASHINFER_MLA_SPARSE ran the smoke and nan-logits gates on these GPUs (bench/results/x)"
    changes = [(("overrides",), [{"rule": "nope-mla-backend-gate", "reason": reason}])]
    result = evaluate(recipe("glm53", changes=changes), SM120_X4, "glm53")
    entry = next(item for item in result["applied"] if item["id"] == "nope-mla-backend-gate")
    assert entry["overridden"] == reason
    assert not any("nope-mla-backend-gate" in line for line in result["unverified"])


def test_an_override_with_a_reason_keeps_the_recipe_value_and_says_why():
    reason = "the image derives 4608 for this build, also a multiple of 256 [test]"
    changes = [(("serving", "block_size"), 1152), (("overrides",), [{"rule": "nope-mla-block-size", "reason": reason}])]
    result = evaluate(recipe("glm53", changes=changes), SM120_X4, "glm53")
    entry = next(item for item in result["applied"] if item["id"] == "nope-mla-block-size")
    assert entry["overridden"] == reason
    assert result["settings"]["serving"]["block_size"] == 1152
    assert result["unused_overrides"] == []


def test_an_override_that_is_not_needed_is_reported_unused():
    changes = [(("overrides",), [{"rule": "gpu-memory-cotenants", "reason": "co-tenants are evicted anyway"}])]
    assert evaluate(recipe("glm53", changes=changes), SM120_X4, "glm53")["unused_overrides"] == ["gpu-memory-cotenants"]


def test_two_node_mtp_at_concurrency_16_is_refused_with_its_reason():
    result = evaluate(recipe("glm53-b12x-mtp", FIXTURE_SEATS), SM120_X4, "glm53-b12x-mtp")
    assert len(result["refusals"]) == 1
    refusal = result["refusals"][0]
    assert refusal["id"] == "no-cross-node-speculation"
    assert "serving.max_num_seqs is 16, topology.nodes is 2" in refusal["detail"]
    assert "sampling collective stalls" in refusal["reason"] and "[000]" in refusal["reason"]


@pytest.mark.parametrize(
    "changes,refused",
    [
        ([(("serving", "max_num_seqs"), 1), (("qualification", "concurrency"), [1])], False),
        ([(("serving", "max_num_seqs"), None)], True),
        ([(("serving", "speculation"), None)], False),
    ],
)
def test_speculation_refusal_boundaries(changes, refused):
    data = recipe("glm53-b12x-mtp", FIXTURE_SEATS, changes)
    assert bool(evaluate(data, SM120_X4, "x")["refusals"]) is refused


def test_one_node_speculation_at_concurrency_is_allowed():
    # One node, so no Ray: a one-node seat that names Ray is refused (issue 22).
    changes = [(("topology", "nodes"), 1), (("topology", "tensor_parallel"), 2), (("topology", "executor"), None)]
    data = recipe("glm53-b12x-mtp", FIXTURE_SEATS, changes)
    assert evaluate(data, SM120_X2, "x")["refusals"] == []


def test_a_refusal_cannot_be_overridden():
    changes = [(("overrides",), [{"rule": "no-cross-node-speculation", "reason": "we feel lucky today"}])]
    with pytest.raises(SeatError, match="a refusal cannot be overridden; drop serving.speculation"):
        evaluate(recipe("glm53-b12x-mtp", FIXTURE_SEATS, changes), SM120_X4, "x")


def test_evaluate_leaves_the_recipe_untouched():
    data = recipe("glm53")
    before = repr(data)
    evaluate(data, SM120_X4, "glm53")
    assert repr(data) == before


@pytest.mark.parametrize(
    "effect,words",
    [
        ({"kind": "set", "field": "serving.custom_all_reduce", "value": False}, "serving.custom_all_reduce = false"),
        ({"kind": "at_most", "field": "a.b", "value": 256}, "a.b at most 256 (set to 256 when unset)"),
        ({"kind": "multiple_of", "field": "a.b", "value": 256, "default": 2304}, "a multiple of 256 (set to 2304"),
        ({"kind": "refuse"}, "refuse the seat"),
    ],
)
def test_describe_effect(effect, words):
    assert words in describe_effect(effect)


def test_table_rows_come_from_the_rules_data():
    rows = table_rows()
    assert [row["id"] for row in rows] == list(RULE_IDS)
    for row, rule in zip(rows, RULES):
        assert row["reason"] == rule["reason"] and row["when"] == rule["when"]
