"""Detectors and reply reading against recorded vLLM responses and transcribed SGLang shapes.

Each detector must fire on the response that shows its failure and stay quiet on a clean one.
Where every fixture comes from is written inside it (`source`) and in tests/fixtures/qualify/README.md.
"""

import json

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.qualify import detectors
from ansible_collections.seatwright.fleet.plugins.module_utils.qualify.gates import (
    ERROR,
    FAIL,
    PASS,
    REASONING_EXHAUSTED,
    drive,
    gate_nan_logits,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.qualify.reading import (
    STATE_ANSWERED,
    STATE_REASONING_EXHAUSTED,
    STATE_TOOL_CALL,
    assemble_stream,
    read_chat,
    reply_state,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.qualify.settings import qualification_settings
from conftest import FIXTURES

QUALIFY = FIXTURES / "qualify"


def fixture(name):
    return json.loads((QUALIFY / name).read_text())


def reply_of(name):
    response = fixture(name)["response"]
    if response.get("chunks") is not None:
        return assemble_stream(response["chunks"])
    return read_chat(response["json"])


def nan_verdict(name):
    ctx = {"model": "m", "engine": "vllm", "settings": qualification_settings({"gates": ["nan-logits"]})}
    result, _ = drive(gate_nan_logits(ctx), lambda request: fixture(name)["response"])
    return result


# ---- NaN ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, want, proven",
    [
        ("vllm/nan_prompt_logprobs_400.json", FAIL, True),
        ("sglang/nan_logprobs_500.json", FAIL, None),
    ],
)
def test_nan_detector_fires_on_nan_bodies(name, want, proven):
    response = fixture(name)["response"]
    finding = detectors.nan_from_error(response["status"], response["text"])
    assert finding is not None and finding["nan"] is proven
    result = nan_verdict(name)
    assert result["verdict"] == want
    assert ("NaN logits" in result["reason"]) == bool(proven)


@pytest.mark.parametrize("name", ["vllm/prompt_logprobs_clean.json"])
def test_nan_detector_quiet_on_clean_logprobs(name):
    response = fixture(name)["response"]
    assert detectors.nan_from_error(response["status"], response["text"]) is None
    summary = detectors.logprob_summary(response["json"])
    assert summary["bad_values"] == [] and summary["prompt_logprobs"] > 0 and summary["output_logprobs"] > 0
    assert nan_verdict(name)["verdict"] == PASS


def test_an_ordinary_refusal_is_not_nan():
    response = fixture("sglang/error_400.json")["response"]
    assert detectors.nan_from_error(response["status"], response["text"]) is None
    assert nan_verdict("sglang/error_400.json")["verdict"] == ERROR


def test_nan_literal_inside_a_200_body_is_found():
    body = json.loads(
        '{"choices": [{"logprobs": {"content": [{"token": "a", "logprob": NaN}]}}],'
        ' "prompt_logprobs": [null, {"11": {"logprob": -1.5}}]}'
    )
    summary = detectors.logprob_summary(body)
    assert summary["bad_values"] == [{"path": "choices[0].logprobs.content[0].logprob", "value": "nan"}]


# ---- degenerate output ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["vllm/repeat_loop.json", "sglang/repeat_loop.json"])
def test_degenerate_detector_fires_on_repeat_loops(name):
    reply = reply_of(name)
    facts = detectors.degenerate(reply["content"])
    assert facts["degenerate"], facts


@pytest.mark.parametrize(
    "name", ["vllm/paragraph_said_twice.json", "vllm/smoke_answer.json", "sglang/reasoning_then_answer.json"]
)
def test_degenerate_detector_quiet_on_clean_replies(name):
    # paragraph_said_twice: SmolLM2 says one 34-token sentence twice and stops; not a loop
    reply = reply_of(name)
    facts = detectors.degenerate(reply["content"])
    assert not facts["degenerate"], facts


@pytest.mark.parametrize(
    "text, fires",
    [
        ("lock " * 400, True),
        ("the cat sat on the mat and " * 8, True),  # 7-token loop, 8 times
        ("the cat sat on the mat and " * 2, False),  # said twice is not a loop
        ("Step 1. Mix.\nStep 2. Bake.\nStep 3. Cool.\n", False),
        ("=" * 60 + "\nTitle\n" + "-" * 60, False),  # rulers are one punctuation token each
        ("I think, " * 3 + "therefore I am.", False),
    ],
)
def test_degenerate_thresholds(text, fires):
    assert detectors.degenerate(text)["degenerate"] is fires


# ---- reasoning-aware reading -------------------------------------------------------------------------


@pytest.mark.parametrize(
    "name, field",
    [
        ("sglang/reasoning_exhausted.json", "reasoning_content"),
        ("vllm/reasoning_exhausted.json", "reasoning"),
    ],
)
def test_reasoning_only_reply_is_read_as_budget_spent_on_reasoning(name, field):
    reply = reply_of(name)
    assert reply["content"] == "" and reply["reasoning"]
    assert reply["reasoning_field"] == field
    assert reply_state(reply) == STATE_REASONING_EXHAUSTED


@pytest.mark.parametrize("name", ["sglang/reasoning_then_answer.json", "vllm/smoke_answer.json"])
def test_answered_reply_reads_as_answered(name):
    assert reply_state(reply_of(name)) == STATE_ANSWERED


def test_smoke_gate_reports_reasoning_exhaustion_not_a_broken_model():
    from ansible_collections.seatwright.fleet.plugins.module_utils.qualify.gates import gate_smoke

    ctx = {"model": "m", "engine": "sglang", "settings": qualification_settings({"gates": ["smoke"]})}
    answers = iter(
        [{"status": 200, "json": {"data": [{"id": "m"}]}}, fixture("sglang/reasoning_exhausted.json")["response"]]
    )
    result, exchanges = drive(gate_smoke(ctx), lambda request: next(answers))
    assert result["verdict"] == REASONING_EXHAUSTED
    assert "reasoning" in result["reason"] and len(exchanges) == 2


# ---- streamed tool calls ------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["vllm/stream_tool_call.json", "sglang/stream_tool_call.json"])
def test_streamed_tool_call_is_assembled_from_deltas(name):
    reply = reply_of(name)
    assert reply_state(reply) == STATE_TOOL_CALL
    assert len(reply["tool_calls"]) == 1
    assert reply["tool_call_chunks"] >= 2
    assert detectors.check_tool_call(reply, "get_weather", {"city": "Paris"}) == []


def test_sglang_fresh_ids_per_fragment_still_make_one_call():
    chunks = fixture("sglang/stream_tool_call.json")["response"]["chunks"]
    ids = {c["id"] for ch in chunks for choice in ch["choices"] for c in choice["delta"].get("tool_calls") or []}
    assert len(ids) > 1  # the shape really does change ids
    assert len(assemble_stream(chunks)["tool_calls"]) == 1


def test_required_tool_choice_that_repeats_the_call_until_the_limit_is_caught():
    # vLLM guides tool_choice=required as a JSON array; SmolLM2 never closes it
    reply = reply_of("vllm/stream_tool_call_required.json")
    assert reply["tool_calls"][0]["name"] == "get_weather" and reply["finish_reason"] == "length"
    problems = detectors.check_tool_call(reply, "get_weather", {"city": "Paris"})
    assert problems[0].startswith("the reply was cut at the token limit after 5 call(s)")
    assert "repeats" in problems[1]


def test_nan_logits_that_decode_to_nothing_fail_the_degenerate_gate():
    from ansible_collections.seatwright.fleet.plugins.module_utils.qualify.gates import gate_degenerate_output

    ctx = {"model": "m", "engine": "vllm", "settings": qualification_settings({"gates": ["degenerate-output"]})}
    result, _ = drive(gate_degenerate_output(ctx), lambda request: fixture("vllm/nan_paragraph.json")["response"])
    assert result["verdict"] == FAIL and "300 completion tokens and no text" in result["reason"]


def test_streamed_text_reply_has_no_tool_call():
    reply = reply_of("vllm/stream_text.json")
    problems = detectors.check_tool_call(reply, "get_weather", {"city": "Paris"})
    assert problems and problems[0].startswith("no tool call")


@pytest.mark.parametrize(
    "arguments, problem",
    [
        ('{"city": "Paris"}', None),
        ('{"city": "Paris, France"}', None),
        ('{"city": "Lyon"}', "argument 'city' is 'Lyon'"),
        ('{"town": "Paris"}', "argument 'city' missing"),
        ('{"city": "Par', "arguments are not JSON"),
        ('["Paris"]', "arguments are list"),
    ],
)
def test_tool_call_arguments_are_checked(arguments, problem):
    reply = {
        "tool_calls": [{"id": "x", "name": "get_weather", "arguments": arguments}],
        "finish_reason": "tool_calls",
        "content": "",
    }
    problems = detectors.check_tool_call(reply, "get_weather", {"city": "Paris"})
    if problem is None:
        assert problems == []
    else:
        assert problems and problem in problems[0]


def test_schema_errors_name_the_field():
    schema = {"type": "object", "properties": {"age": {"type": "integer"}}, "required": ["age", "name"]}
    errors = detectors.schema_errors({"age": "34"}, schema)
    assert any(e.startswith("age:") for e in errors) and any("'name' is a required property" in e for e in errors)
