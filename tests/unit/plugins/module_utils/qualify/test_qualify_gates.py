"""Gates, the quality protocol, soak statistics and the verdict, driven with scripted responses.

Every gate is a generator; these tests answer its requests the way an engine would and check the
verdict, so each verdict is shown to be decided by what came back and not by construction.
"""

import copy
import json
import re

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.qualify import gates, quality, soak, verdict
from ansible_collections.seatwright.fleet.plugins.module_utils.qualify.settings import (
    qualification_settings,
    reasoning_fields,
    token_budget,
)
from conftest import FIXTURES


def ctx_for(**block):
    block.setdefault("gates", ["smoke"])
    served = block.pop("served_context", 2048)
    return {"model": "m", "engine": "vllm", "settings": qualification_settings(block, served)}


def chat(content=None, reasoning=None, finish="stop", tool_calls=None, prompt_tokens=10, field="reasoning"):
    message = {"role": "assistant", "content": content, "tool_calls": tool_calls or []}
    if reasoning is not None:
        message[field] = reasoning
    return {
        "status": 200,
        "error": None,
        "text": None,
        "chunks": None,
        "json": {
            "choices": [{"index": 0, "message": message, "finish_reason": finish}],
            "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": 5},
        },
    }


def call(name, arguments, call_id="call_1"):
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}


def http(status, text):
    return {"status": status, "error": None, "text": text, "json": None, "chunks": None}


def run(gate, ctx, answers):
    """Drive `gate` answering its requests from `answers` (a list, or a function of the request)."""
    sent = []
    queue = list(answers) if isinstance(answers, list) else None

    def send(request):
        sent.append(copy.deepcopy(request))
        return queue.pop(0) if queue is not None else answers(request)

    result, exchanges = gates.drive(gate(ctx), send)
    return result, sent


MODELS = {"status": 200, "error": None, "json": {"data": [{"id": "m"}]}, "text": None, "chunks": None}


# ---- smoke, json -----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "answers, want",
    [
        ([MODELS, chat("Paris")], gates.PASS),
        ([MODELS, chat("The capital of France is Paris.")], gates.PASS),
        ([MODELS, chat("Lyon")], gates.FAIL),
        ([MODELS, chat(None, reasoning="The capital is Paris.")], gates.REASONING_ONLY),
        (
            [MODELS, chat(None, reasoning="Hmm, let me think about France...", finish="length")],
            gates.REASONING_EXHAUSTED,
        ),
        ([MODELS, chat("")], gates.FAIL),
        ([MODELS, http(503, '{"error": {"message": "overloaded"}}')], gates.ERROR),
        ([{"status": 200, "error": None, "json": {"data": [{"id": "other"}]}}], gates.FAIL),
    ],
)
def test_smoke(answers, want):
    result, _ = run(gates.gate_smoke, ctx_for(), answers)
    assert result["verdict"] == want, result


@pytest.mark.parametrize(
    "content, want, why",
    [
        ('{"name": "Ana Ribeiro", "age": 34, "city": "Porto"}', gates.PASS, "valid against the schema"),
        ('{"name": "Ana Ribeiro", "age": 43, "city": "Porto"}', gates.FAIL, "values are wrong"),
        ('{"name": "Ana Ribeiro", "age": "34", "city": "Porto"}', gates.FAIL, "does not match the schema"),
        ('{"name": "Ana Ribeiro", "age": 34}', gates.FAIL, "does not match the schema"),
        ('Sure! {"name": "Ana Ribeiro"}', gates.FAIL, "not JSON"),
    ],
)
def test_json_gate(content, want, why):
    result, sent = run(gates.gate_json, ctx_for(), [chat(content)])
    assert result["verdict"] == want and why in result["reason"]
    assert sent[0]["body"]["response_format"]["json_schema"]["schema"] == gates.PERSON_SCHEMA


# ---- tool gates ----------------------------------------------------------------------------------


def answer_weather(miss_city=None):
    def answer(request):
        city = request["body"]["messages"][0]["content"].split(" in ")[1].split(" right")[0]
        if city == miss_city:
            return chat("I cannot check the weather.")
        return chat(None, finish="tool_calls", tool_calls=[call("get_weather", json.dumps({"city": city}))])

    return answer


@pytest.mark.parametrize(
    "miss, want, reason",
    [
        (None, gates.PASS, "20/20"),
        ("Oslo", gates.FAIL, "18/20 right; first failure: Oslo: no tool call"),  # Oslo comes twice in 20
    ],
)
def test_tool_calls_gate_counts_every_city(miss, want, reason):
    result, sent = run(gates.gate_tool_calls, ctx_for(), answer_weather(miss))
    assert result["verdict"] == want and reason in result["reason"]
    assert len(sent) == 20 and len({r["body"]["messages"][0]["content"] for r in sent}) == len(gates.CITIES)


@pytest.mark.parametrize(
    "setting, sent_choice",
    [
        ("auto", "auto"),
        ("required", "required"),
        ("named", {"type": "function", "function": {"name": "get_weather"}}),
    ],
)
def test_tool_choice_comes_from_the_recipe(setting, sent_choice):
    _, sent = run(gates.gate_tool_calls, ctx_for(tool_choice=setting, runs={"tool-calls": 1}), answer_weather())
    assert sent[0]["body"]["tool_choice"] == sent_choice


def test_tool_call_with_the_wrong_city_fails():
    def answer(request):
        return chat(None, finish="tool_calls", tool_calls=[call("get_weather", '{"city": "Paris"}')])

    result, _ = run(gates.gate_tool_calls, ctx_for(runs={"tool-calls": 3}), answer)
    assert result["verdict"] == gates.FAIL and result["detail"]["passed"] == 1


def stream_of(chunks):
    return {
        "status": 200,
        "error": None,
        "text": None,
        "json": None,
        "chunks": chunks,
        "chunk_times": [0.01 * (i + 1) for i in range(len(chunks))],
    }


def test_streaming_gate_needs_deltas():
    fragments = ['{"city": ', '"Paris"}']
    chunks = [
        {
            "choices": [
                {
                    "delta": {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "c1" if i == 0 else None,
                                "function": {"name": "get_weather" if i == 0 else None, "arguments": f},
                            }
                        ]
                    }
                }
            ]
        }
        for i, f in enumerate(fragments)
    ]
    chunks.append({"choices": [{"delta": {}, "finish_reason": "tool_calls"}]})
    result, sent = run(gates.gate_streaming_tool_calls, ctx_for(runs={"streaming-tool-calls": 1}), [stream_of(chunks)])
    assert result["verdict"] == gates.PASS and result["detail"]["tool_call_chunks"] == [2]
    assert sent[0]["stream"] is True and sent[0]["body"]["stream"] is True


@pytest.mark.parametrize(
    "final, want",
    [
        (chat("It is 17 degrees with light rain in Paris."), gates.PASS),
        (chat("It is sunny in Paris."), gates.FAIL),
        (chat(None, finish="tool_calls", tool_calls=[call("get_weather", '{"city": "Paris"}')]), gates.FAIL),
    ],
)
def test_tool_result_continuation_uses_the_result(final, want):
    first = chat(None, finish="tool_calls", tool_calls=[call("get_weather", '{"city": "Paris"}', "call_9")])
    result, sent = run(gates.gate_tool_result_continuation, ctx_for(), [first, final])
    assert result["verdict"] == want, result
    tool_message = sent[1]["body"]["messages"][2]
    assert tool_message == {"role": "tool", "tool_call_id": "call_9", "content": json.dumps(gates.WEATHER_RESULT)}


def test_tool_result_continuation_stops_when_there_is_no_call():
    result, sent = run(gates.gate_tool_result_continuation, ctx_for(), [chat("Sunny.")])
    assert result["verdict"] == gates.FAIL and result["reason"].startswith("step 1") and len(sent) == 1


# ---- needle -----------------------------------------------------------------------------------------


def needle_engine(per_sentence=12, base=40, answer="AMBER-4718"):
    def answer_for(request):
        text = request["body"]["messages"][0]["content"]
        sentences = len(re.findall(r"^\d+\. ", text, re.MULTILINE))
        tokens = base + per_sentence * sentences
        return chat(answer if request["body"]["max_tokens"] > 1 else "x", prompt_tokens=tokens)

    return answer_for


@pytest.mark.parametrize(
    "answer, want", [("AMBER-4718", gates.PASS), ("amber 4718", gates.PASS), ("I don't know.", gates.FAIL)]
)
def test_needle_sizes_the_prompt_from_measured_tokens(answer, want):
    ctx = ctx_for(served_context=32768, needle={"fraction": 0.9})
    result, sent = run(gates.gate_needle, ctx, needle_engine(answer=answer))
    assert result["verdict"] == want
    detail = result["detail"]
    assert detail["target_tokens"] == int(0.9 * 32768)
    assert abs(detail["prompt_tokens"] - detail["target_tokens"]) <= 2 * 12
    assert gates.NEEDLE in sent[-1]["body"]["messages"][0]["content"]


def test_needle_leaves_room_for_the_answer():
    ctx = ctx_for(served_context=2048, needle={"fraction": 1.0})
    result, _ = run(gates.gate_needle, ctx, needle_engine())
    assert result["detail"]["prompt_tokens"] + token_budget(ctx["settings"], visible=32) <= 2048


def test_needle_without_served_context_is_an_error():
    result, sent = run(gates.gate_needle, ctx_for(served_context=None), [])
    assert result["verdict"] == gates.ERROR and "max_model_len" in result["reason"] and not sent


# ---- responses API, reasoning variants, degenerate --------------------------------------------------


def responses_body(text=None, reasoning=None, status="completed"):
    output = []
    if reasoning:
        output.append({"type": "reasoning", "content": [{"type": "reasoning_text", "text": reasoning}]})
    if text is not None:
        output.append({"type": "message", "content": [{"type": "output_text", "text": text}]})
    return {"status": 200, "error": None, "json": {"status": status, "output": output}, "text": None}


@pytest.mark.parametrize(
    "answer, want",
    [
        (responses_body("Paris"), gates.PASS),
        (responses_body(None, reasoning="France's capital is Paris."), gates.REASONING_ONLY),
        (http(404, '{"detail": "Not Found"}'), gates.NOT_SERVED),
        (responses_body("Rome"), gates.FAIL),
    ],
)
def test_responses_api(answer, want):
    result, sent = run(gates.gate_responses_api, ctx_for(), [answer])
    assert result["verdict"] == want and sent[0]["path"] == "/responses"


def test_reasoning_variants_catch_leaked_reasoning_in_mode_none():
    ctx = ctx_for(
        reasoning="low",
        reasoning_variants=["none", "low"],
        reasoning_request={"none": {"chat_template_kwargs": {"enable_thinking": False}}},
    )
    answers = [chat("Paris", reasoning="thinking anyway"), chat("Paris", reasoning="short thought")]
    result, sent = run(gates.gate_reasoning_variants, ctx, answers)
    assert result["verdict"] == gates.FAIL and "mode none leaked" in result["reason"]
    assert sent[0]["body"]["chat_template_kwargs"] == {"enable_thinking": False}
    assert sent[1]["body"]["reasoning_effort"] == "low"
    assert sent[0]["body"]["max_tokens"] == 16 and sent[1]["body"]["max_tokens"] == 16 + 4096


@pytest.mark.parametrize(
    "content, want",
    [
        (
            "A suspension bridge hangs its deck from vertical cables that carry the load up to two main cables, "
            "which pass over towers and are anchored in the ground at each end.",
            gates.PASS,
        ),
        ("the cables the cables the cables " * 20, gates.FAIL),
        ("lock " * 400, gates.FAIL),
    ],
)
def test_degenerate_gate(content, want):
    result, _ = run(gates.gate_degenerate_output, ctx_for(), [chat(content)])
    assert result["verdict"] == want


def test_a_gate_that_raises_is_an_error_verdict_not_a_traceback():
    def broken(ctx):
        yield gates.request("/models", method="GET")
        raise KeyError("choices")

    result, exchanges = gates.drive(broken(ctx_for()), lambda request: MODELS)
    assert result["verdict"] == gates.ERROR and "KeyError" in result["reason"] and len(exchanges) == 1


# ---- settings -----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "mode, declared, want",
    [
        ("none", {}, {}),
        ("low", {}, {"reasoning_effort": "low"}),
        ("model-default", {}, {}),
        (
            "none",
            {"none": {"chat_template_kwargs": {"enable_thinking": False}}},
            {"chat_template_kwargs": {"enable_thinking": False}},
        ),
    ],
)
def test_reasoning_fields(mode, declared, want):
    settings = qualification_settings({"gates": ["smoke"], "reasoning": mode, "reasoning_request": declared})
    assert reasoning_fields(settings) == want


def test_budget_adds_reasoning_headroom_only_when_reasoning():
    settings = qualification_settings(
        {"gates": ["smoke"], "reasoning": "low", "budget": {"visible_tokens": 512, "reasoning_tokens": 4096}}
    )
    assert token_budget(settings) == 4608 and token_budget(settings, mode="none") == 512


# ---- quality protocol ----------------------------------------------------------------------------------


def quality_engine(arithmetic_right=True):
    def answer(request):
        body = request["body"]
        text = body["messages"][-1]["content"]
        if body.get("tools"):
            return chat(
                None,
                finish="tool_calls",
                tool_calls=[call("convert_currency", '{"amount": 250, "from_currency": "USD", "to_currency": "EUR"}')],
            )
        if "23 multiplied by 17" in text:
            return chat("391" if arithmetic_right else "23 times 17 is a big number, roughly 400.")
        if "12 pencils" in text:
            return chat("12 pencils are 4 packs, so 180")
        if "Extract the order" in text:
            return chat(
                '```json\n{"order": "58213", "customer": "Priya Natarajan", "city": "Ghent", "total": 1284.50}\n```'
            )
        if "locker number" in text and "remember" not in text:
            return chat("Your locker number is 4172 and your manager is Okafor.")
        return chat("OK, noted.")

    return answer


@pytest.mark.parametrize(
    "right, want, counts",
    [
        (True, gates.PASS, {"arithmetic": (6, 6), "extraction": (3, 3), "session": (3, 3), "tools": (3, 3)}),
        (False, "fail", {"arithmetic": (3, 6), "extraction": (3, 3), "session": (3, 3), "tools": (3, 3)}),
    ],
)
def test_quality_protocol_counts_passes(right, want, counts):
    settings = qualification_settings({"gates": ["smoke"]})
    ctx = {"model": "m", "engine": "vllm", "settings": settings}
    results = []
    for category, item, number, function in quality.plan(settings):
        outcome, _ = gates.drive(function(ctx), quality_engine(right))
        results.append(dict(outcome, category=category, item=item, run=number))
    summary = quality.tally(results, settings)
    assert summary["verdict"] == want
    assert {k: (v["passed"], v["runs"]) for k, v in summary["categories"].items()} == counts


def test_session_item_keeps_the_models_own_replies():
    settings = qualification_settings({"gates": ["smoke"]})
    sent = []

    def answer(request):
        sent.append(copy.deepcopy(request["body"]["messages"]))
        return quality_engine()(request)

    outcome, _ = gates.drive(quality.session_item({"model": "m", "engine": "vllm", "settings": settings}), answer)
    assert outcome["ok"]
    assert [m["role"] for m in sent[-1]] == ["user", "assistant", "user", "assistant", "user"]
    assert sent[-1][1]["content"] == "OK, noted."


def test_quality_uses_its_own_temperature():
    settings = qualification_settings({"gates": ["smoke"], "quality": {"temperature": 0.3}})
    sent = []
    gates.drive(
        quality.extraction_item({"model": "m", "engine": "vllm", "settings": settings}),
        lambda request: sent.append(request) or chat("{}"),
    )
    assert sent[0]["body"]["temperature"] == 0.3


# ---- soak -----------------------------------------------------------------------------------------------


def soak_response(times, tokens=20, status=200, error=None):
    chunks = [{"choices": [{"delta": {"content": "x"}}]} for _ in times]
    chunks.append({"choices": [], "usage": {"completion_tokens": tokens}})
    return {
        "status": status,
        "error": error,
        "chunks": chunks,
        "chunk_times": list(times) + [times[-1]],
        "started_at": 0.0,
        "elapsed_s": times[-1],
        "ttft_s": times[0],
        "text": None,
        "json": None,
    }


@pytest.mark.parametrize(
    "times, stalled",
    [
        ([0.2, 0.3, 0.4], False),
        ([0.2, 0.3, 40.0], True),  # 39.7 s without a token
        ([35.0, 35.1], True),  # no first token for 35 s
    ],
)
def test_soak_stall_is_a_gap_longer_than_the_threshold(times, stalled):
    facts = soak.exchange_facts(soak_response(times), stall_s=30)
    assert facts["stalled"] is stalled and facts["ok"]


def test_soak_summary_counts_and_percentiles():
    settings = qualification_settings({"gates": ["smoke"], "soak": {"duration_s": 60, "concurrency": 2}})
    facts = [soak.exchange_facts(soak_response([0.1, float(i)]), 30) for i in range(1, 11)]
    facts.append(
        soak.exchange_facts({"status": 500, "error": None, "text": "boom", "chunks": None, "elapsed_s": 0.1}, 30)
    )
    summary = soak.summarise(facts, settings, wall_s=60.0)
    assert (summary["requests"], summary["completed"], summary["errors"], summary["stalls"]) == (11, 10, 1, 0)
    assert summary["output_tokens"] == 200 and summary["latency_s"]["p50"] == 5.5
    assert summary["verdict"] == "fail" and "1 errors (allowed 0)" in summary["reason"]


def recorded_soak_exchange(name, engine="vllm"):
    """A recorded streamed reply as the soak's client returns it."""
    return json.loads((FIXTURES / "qualify" / engine / name).read_text())["response"]


def test_soak_counts_answers_not_tokens_on_recorded_reasoning_exhausted_streams():
    # vLLM 0.32 with a reasoning parser: 24 completion tokens, all in `reasoning`, content empty.
    settings = qualification_settings({"gates": ["smoke"], "soak": {"duration_s": 60, "concurrency": 2}})
    facts = [soak.exchange_facts(recorded_soak_exchange("reasoning_exhausted_stream.json"), 30) for _ in range(12)]
    summary = soak.summarise(facts, settings, wall_s=12.0)
    assert summary["verdict"] == "fail" and summary["completed"] == 0  # main: 12 of 12 completed, pass
    assert summary["reasoning_exhausted"] == 12 and summary["errors"] == 0
    assert summary["output_tokens"] == 0 and summary["reasoning_tokens"] == 12 * 24
    assert summary["output_tok_s"] == 0 and summary["reasoning_tok_s"] == 24.0
    assert "12 replies without a visible answer (12 reasoning-exhausted)" in summary["reason"]


def test_soak_answer_counts_all_its_tokens_visible():
    settings = qualification_settings({"gates": ["smoke"], "soak": {"duration_s": 60, "concurrency": 1}})
    facts = [soak.exchange_facts(recorded_soak_exchange("stream_text.json"), 30)]
    summary = soak.summarise(facts, settings, wall_s=1.0)
    assert summary["verdict"] == "pass" and summary["completed"] == 1
    assert (summary["output_tokens"], summary.get("reasoning_tokens")) == (128, 0)


@pytest.mark.parametrize(
    "values, q, want",
    [([1, 2, 3, 4], 50, 2.5), ([5], 95, 5), ([], 50, None), ([1, 2, 3, 4, 5, 6, 7, 8, 9, 10], 95, 9.55)],
)
def test_percentile(values, q, want):
    got = soak.percentile(values, q)
    assert got == pytest.approx(want) if want is not None else got is None


def test_soak_requests_rotate_prompts_and_stream_usage():
    settings = qualification_settings({"gates": ["smoke"], "soak": {"max_tokens": 64}})
    first, second = soak.soak_request("m", settings, 0), soak.soak_request("m", settings, 1)
    assert first["body"]["messages"] != second["body"]["messages"]
    assert first["body"]["stream_options"] == {"include_usage": True} and first["body"]["max_tokens"] == 64


@pytest.mark.parametrize(
    "qualification, fields, budget",
    [
        ({"reasoning": "none"}, {}, 64),
        ({"reasoning": "high"}, {"reasoning_effort": "high"}, 64 + 4096),
        (
            {"reasoning": "on", "reasoning_request": {"on": {"chat_template_kwargs": {"enable_thinking": True}}}},
            {"chat_template_kwargs": {"enable_thinking": True}},
            64 + 4096,
        ),
    ],
)
def test_soak_asks_in_the_seats_reasoning_mode_with_its_headroom(qualification, fields, budget):
    """A reasoning seat soaked with a visible-only budget thinks it away and reads as unanswered."""
    settings = qualification_settings(dict(qualification, gates=["smoke"], soak={"max_tokens": 64}))
    body = soak.soak_request("m", settings, 0)["body"]
    assert body["max_tokens"] == budget
    assert {k: body[k] for k in fields} == fields
    assert "reasoning_effort" not in body or fields


# ---- the verdict ------------------------------------------------------------------------------------------


def gate_result(kind):
    return {"verdict": kind, "reason": "r", "detail": {}}


@pytest.mark.parametrize(
    "results, expect_fail, skipped, want",
    [
        ({"smoke": gate_result("pass")}, [], [], verdict.QUALIFIED),
        ({"smoke": gate_result("pass"), "json": gate_result("fail")}, [], [], verdict.NOT_QUALIFIED),
        ({"degenerate-output": gate_result("fail")}, ["degenerate-output"], [], verdict.QUALIFIED),
        ({"degenerate-output": gate_result("pass")}, ["degenerate-output"], [], verdict.NOT_QUALIFIED),
        ({"smoke": gate_result("reasoning-exhausted")}, [], [], verdict.NOT_QUALIFIED),
        ({"smoke": gate_result("pass")}, [], ["soak"], verdict.INCOMPLETE),
        ({"smoke": gate_result("fail")}, [], ["soak"], verdict.NOT_QUALIFIED),
    ],
)
def test_overall_verdict(results, expect_fail, skipped, want):
    assert verdict.overall(results, expect_fail, skipped=skipped)["verdict"] == want


def test_failed_quality_or_soak_fails_the_seat():
    result = verdict.overall(
        {"smoke": gate_result("pass")},
        [],
        quality={"verdict": "fail", "reason": "arith 3/6"},
        soak={"verdict": "pass", "reason": "ok"},
    )
    assert result["verdict"] == verdict.NOT_QUALIFIED and result["reasons"] == ["quality: arith 3/6"]


def test_a_wrong_answer_cut_at_the_limit_says_so():
    result, _ = run(
        gates.gate_smoke, ctx_for(), [MODELS, chat("The capital of France is a city that", finish="length")]
    )
    assert result["verdict"] == gates.FAIL and "cut at the token limit" in result["reason"]


# ---- the contract with evidence/record.py ------------------------------------------------------------


@pytest.mark.parametrize(
    "results, expect_fail, want",
    [
        ({"smoke": gate_result("pass"), "json": gate_result("fail")}, [], ("failed", ["json"])),
        (
            {"smoke": gate_result("pass"), "degenerate-output": gate_result("fail")},
            ["degenerate-output"],
            ("passed", []),
        ),
        ({"smoke": gate_result("reasoning-exhausted")}, [], ("failed", ["smoke"])),
    ],
)
def test_record_reader_reads_the_qualification_as_written(results, expect_fail, want):
    from ansible_collections.seatwright.fleet.plugins.module_utils.evidence.record import qualification_summary

    result = verdict.overall(results, expect_fail)
    written = {
        "verdict": result["verdict"],
        "passed": result["verdict"] == verdict.QUALIFIED,
        "gates": verdict.gate_records(results, expect_fail),
    }
    assert qualification_summary(written) == want
