"""The recipe's qualification block: schema, defaults, and every seat's block read into settings."""

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.qualify.settings import (
    DEFAULTS,
    GATES,
    qualification_settings,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.recipe import SeatError, validate_recipe
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.rules import RULE_IDS
from seat_cases import SCHEMA, SEAT_NAMES, mutated, seat_data


def validate(data):
    return validate_recipe(data, SCHEMA, "seats/test.yml", RULE_IDS)


def test_schema_gate_names_are_the_gates_the_code_runs():
    assert tuple(SCHEMA["$defs"]["gate"]["enum"]) == GATES


FULL_BLOCK = {
    "reasoning": "low",
    "budget": {"visible_tokens": 512, "reasoning_tokens": 4096},
    "reasoning_request": {"none": {"chat_template_kwargs": {"enable_thinking": False}}},
    "reasoning_variants": ["none", "low"],
    "temperature": 0,
    "tool_choice": "required",
    "runs": {"tool-calls": 20, "streaming-tool-calls": 5},
    "needle": {"fraction": 0.9, "depth": 0.25},
    "degenerate": {"max_token_run": 16},
    "request_timeout_s": 900,
    "quality": {"runs": 3, "temperature": 0.6, "min_pass_fraction": 1.0, "categories": ["arithmetic", "tools"]},
    "soak": {"duration_s": 5400, "concurrency": 4, "stall_s": 30, "max_tokens": 384, "max_errors": 0, "max_stalls": 0},
}


def test_a_full_qualification_block_validates_and_reads_back():
    data = seat_data("lab")
    data["qualification"].update(FULL_BLOCK)
    # Reasoning asked of a model with no reasoning parser: the recipe must say so (issue 21 item 4).
    data["serving"].update(
        reasoning_parser=None,
        reasoning_parser_status="unknown",
        reasoning_parser_source="SmolLM2 has no reasoning format; this block only checks the qualification fields",
    )
    recipe = validate(data)
    settings = qualification_settings(recipe["qualification"], 2048)
    assert settings["needle"] == {"fraction": 0.9, "depth": 0.25}
    assert settings["degenerate"]["max_token_run"] == 16 and settings["degenerate"]["loop_min_repeats"] == 4
    assert settings["quality"]["categories"] == ["arithmetic", "tools"] and settings["served_context"] == 2048


@pytest.mark.parametrize(
    "path, value, message",
    [
        (("qualification", "tool_choice"), "sometimes", "qualification.tool_choice: 'sometimes' is not valid"),
        (("qualification", "needle"), {"fraction": 1.5}, "qualification.needle.fraction: 1.5 is not valid"),
        (
            ("qualification", "soak"),
            {"duration": 60},
            "qualification.soak.duration: unknown field (did you mean duration_s?)",
        ),
        (("qualification", "reasoning_request"), {"lots": {}}, "qualification.reasoning_request"),
        (("qualification", "quality"), {"categories": ["vibes"]}, "qualification.quality.categories[0]: 'vibes'"),
    ],
)
def test_bad_qualification_fields_are_named(path, value, message):
    with pytest.raises(SeatError) as error:
        validate(mutated(seat_data("lab"), path, value))
    assert message in str(error.value)


@pytest.mark.parametrize("name", SEAT_NAMES)
def test_every_seat_reads_into_settings(name):
    recipe = validate(seat_data(name))
    settings = qualification_settings(recipe["qualification"], recipe["serving"]["max_model_len"])
    assert set(settings["gates"]) <= set(GATES)
    assert settings["soak"]["concurrency"] >= 1 and settings["reasoning_variants"]


def test_defaults_are_the_fields_contract():
    # The field's campaign: 512 visible + 4,096 reasoning tokens, 20 tool calls, a 90-minute soak at 4.
    assert DEFAULTS["budget"] == {"visible_tokens": 512, "reasoning_tokens": 4096}
    assert DEFAULTS["runs"]["tool-calls"] == 20
    assert (DEFAULTS["soak"]["duration_s"], DEFAULTS["soak"]["concurrency"]) == (5400, 4)


@pytest.mark.parametrize(
    "block, max_num_seqs, want",
    [
        ({}, None, 4),
        ({}, 1, 1),  # a one-sequence seat is soaked with one stream
        ({"soak": {"concurrency": 2}}, 8, 2),
        ({"soak": {"concurrency": 8}}, 1, 8),  # declared values are the recipe check's business
    ],
)
def test_default_soak_concurrency_respects_max_num_seqs(block, max_num_seqs, want):
    block = dict(block, gates=["smoke"])
    assert qualification_settings(block, None, max_num_seqs)["soak"]["concurrency"] == want


def test_a_soak_wider_than_the_engine_is_refused():
    data = mutated(seat_data("deepseek-v4-flash"), ("qualification", "soak"), {"concurrency": 4})
    with pytest.raises(SeatError) as error:
        validate(data)
    assert "qualification.soak.concurrency: 4 streams exceed serving.max_num_seqs 1" in str(error.value)
