"""Functional gates. Each gate is a generator: it yields the requests it needs, receives each
response record, and returns its verdict. No I/O here: the runner (io/qualify_run.py) sends the
requests; tests drive the same generators with recorded responses.

A request is {"method", "path" (under the base URL, e.g. "/chat/completions"), "body", "stream"}.
A response record is {"status", "json", "text", "chunks", "error", "elapsed_s", ...} as
io/openai_http.py returns it.
A verdict is {"verdict": one of VERDICTS, "reason": one line for people, "detail": {...}}.
"""

import json

from ansible_collections.seatwright.fleet.plugins.module_utils.qualify import detectors
from ansible_collections.seatwright.fleet.plugins.module_utils.qualify.reading import (
    STATE_EMPTY,
    STATE_REASONING_EXHAUSTED,
    STATE_REASONING_ONLY,
    STATE_TOOL_CALL,
    STATE_TRUNCATED,
    assemble_stream,
    error_message,
    read_chat,
    read_responses,
    reply_state,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.qualify.settings import reasoning_fields, token_budget

PASS, FAIL, ERROR = "pass", "fail", "error"
REASONING_EXHAUSTED, REASONING_ONLY, NOT_SERVED = "reasoning-exhausted", "reasoning-only", "not-served"
VERDICTS = (PASS, FAIL, ERROR, REASONING_EXHAUSTED, REASONING_ONLY, NOT_SERVED)

WEATHER_TOOL = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city.",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string", "description": "the city name"}},
            "required": ["city"],
        },
    },
}
CITIES = ("Paris", "Tokyo", "Lima", "Oslo", "Nairobi", "Toronto", "Hanoi", "Madrid", "Cairo", "Perth")


def request(path, body=None, method="POST", stream=False):
    return {"method": method, "path": path, "body": body, "stream": stream}


def verdict(kind, reason, **detail):
    return {"verdict": kind, "reason": reason, "detail": detail}


def http_problem(response):
    """One line when the exchange failed at the transport or HTTP level, else None."""
    if response.get("error"):
        return "no answer: %s" % response["error"]
    status = response.get("status")
    if status != 200:
        return "HTTP %s: %s" % (status, error_message(response.get("text") or "")[:300])
    return None


def chat_body(ctx, messages, mode=None, visible=None, **extra):
    """A chat completion body with the seat's model, sampling, reasoning mode and token budget."""
    settings = ctx["settings"]
    body = {
        "model": ctx["model"],
        "messages": messages,
        "max_tokens": token_budget(settings, mode, visible),
        "temperature": settings["temperature"],
    }
    body.update(reasoning_fields(settings, mode))
    body.update(extra)
    return body


def tool_choice_value(choice, name):
    """The request's tool_choice for the recipe's setting: auto, required, or named (this tool)."""
    if choice == "named":
        return {"type": "function", "function": {"name": name}}
    return choice


def reply_of(response):
    if response.get("chunks") is not None:
        return assemble_stream(response["chunks"])
    return read_chat(response.get("json"))


def judge_text(reply, check):
    """(verdict kind, reason) for a reply whose visible answer `check(text) -> (ok, why)` judges.

    A reply with no visible answer is judged by where its tokens went: all to reasoning at the
    token limit is REASONING_EXHAUSTED; a finished reply with the answer only in the reasoning
    field is REASONING_ONLY (the reason says whether the answer is there).
    """
    state = reply_state(reply)
    if state == STATE_REASONING_EXHAUSTED:
        return REASONING_EXHAUSTED, (
            "no visible answer: the token budget went to reasoning (%d characters in %r, "
            "finish_reason length, %s completion tokens)"
            % (len(reply["reasoning"]), reply["reasoning_field"], reply["completion_tokens"])
        )
    if state == STATE_REASONING_ONLY:
        ok, why = check(reply["reasoning"])
        return REASONING_ONLY, (
            "no visible answer; the reply is only in the reasoning field %r, where the answer "
            "is %s (%s)" % (reply["reasoning_field"], "present" if ok else "absent", why)
        )
    if state == STATE_EMPTY:
        return FAIL, "empty reply: %s completion tokens and no text (finish_reason %r)" % (
            reply["completion_tokens"],
            reply["finish_reason"],
        )
    if state == STATE_TOOL_CALL and not reply["content"].strip():
        return FAIL, "answered with a tool call (%s) instead of text" % reply["tool_calls"][0]["name"]
    ok, why = check(reply["content"])
    if not ok and state == STATE_TRUNCATED:
        why += " (the reply was cut at the token limit: %s completion tokens)" % reply["completion_tokens"]
    return (PASS if ok else FAIL), why


def _shown(text, limit=160):
    text = " ".join((text or "").split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def word_check(word):
    def check(text):
        found = detectors.contains_word(text, word)
        return found, "%s %r in %r" % ("found" if found else "no", word, _shown(text))

    return check


def reply_facts(reply, thresholds=None):
    """What the evidence keeps about every reply: its state, sizes and the degenerate check."""
    facts = {
        "state": reply_state(reply),
        "finish_reason": reply["finish_reason"],
        "content_chars": len(reply["content"]),
        "reasoning_chars": len(reply["reasoning"]),
        "reasoning_field": reply["reasoning_field"],
        "completion_tokens": reply["completion_tokens"],
        "reasoning_tokens": reply["reasoning_tokens"],
        "tool_calls": [{"name": c["name"], "arguments": c["arguments"]} for c in reply["tool_calls"]],
    }
    text = reply["content"] + "\n" + reply["reasoning"]
    facts["degenerate"] = detectors.degenerate(text, thresholds)["degenerate"] if text.strip() else False
    return facts


# ---- the gates ----------------------------------------------------------------------------------

SMOKE_QUESTION = "What is the capital of France? Answer in one word."


def gate_smoke(ctx):
    """The endpoint lists the served model and answers a one-word question correctly."""
    models = yield request("/models", method="GET")
    problem = http_problem(models)
    if problem:
        return verdict(ERROR, "GET /models: " + problem)
    listed = [m.get("id") for m in (models.get("json") or {}).get("data") or [] if isinstance(m, dict)]
    if ctx["model"] not in listed:
        return verdict(FAIL, "GET /models does not list %r (it lists %s)" % (ctx["model"], listed))
    response = yield request(
        "/chat/completions", chat_body(ctx, [{"role": "user", "content": SMOKE_QUESTION}], visible=16)
    )
    problem = http_problem(response)
    if problem:
        return verdict(ERROR, problem)
    reply = reply_of(response)
    kind, why = judge_text(reply, word_check("Paris"))
    return verdict(kind, why, answer=reply["content"], state=reply_state(reply))


PERSON_SCHEMA = {
    "type": "object",
    "properties": {
        "name": {"type": "string"},
        "age": {"type": "integer"},
        "city": {"type": "string"},
    },
    "required": ["name", "age", "city"],
    "additionalProperties": False,
}
PERSON_TEXT = "Ana Ribeiro is 34 years old and has lived in Porto since 2019."
PERSON_FACTS = {"name": "Ana Ribeiro", "age": 34, "city": "Porto"}


def gate_json(ctx):
    """JSON-schema structured output: the reply parses, validates against the schema (jsonschema)
    and carries the facts of the text it was asked to extract."""
    messages = [
        {"role": "user", "content": "Extract the person's name, age and city from this text as JSON: " + PERSON_TEXT}
    ]
    body = chat_body(
        ctx,
        messages,
        visible=128,
        response_format={
            "type": "json_schema",
            "json_schema": {"name": "person", "schema": PERSON_SCHEMA, "strict": True},
        },
    )
    response = yield request("/chat/completions", body)
    problem = http_problem(response)
    if problem:
        return verdict(ERROR, problem)
    reply = reply_of(response)
    parsed = {}

    def check(text):
        value, why = detectors.parse_json_answer(text)
        if why:
            return False, "%s: %r" % (why, _shown(text))
        errors = detectors.schema_errors(value, PERSON_SCHEMA)
        if errors:
            return False, "does not match the schema: %s" % "; ".join(errors[:5])
        parsed.update(value)
        wrong = [
            "%s=%r (text says %r)" % (k, value[k], v)
            for k, v in PERSON_FACTS.items()
            if not detectors.same_value(value[k], v)
        ]
        if wrong:
            return False, "valid against the schema but the values are wrong: " + ", ".join(wrong)
        return True, "valid against the schema with the text's values: %s" % json.dumps(value, sort_keys=True)

    kind, why = judge_text(reply, check)
    return verdict(kind, why, answer=reply["content"], parsed=parsed or None)


def _tool_run(ctx, city, stream):
    settings = ctx["settings"]
    messages = [{"role": "user", "content": "What's the weather like in %s right now?" % city}]
    body = chat_body(
        ctx,
        messages,
        visible=128,
        tools=[WEATHER_TOOL],
        tool_choice=tool_choice_value(settings["tool_choice"], "get_weather"),
    )
    if stream:
        body["stream"] = True
        body["stream_options"] = {"include_usage": True}
    response = yield request("/chat/completions", body, stream=stream)
    problem = http_problem(response)
    if problem:
        return {"city": city, "ok": False, "problems": [problem], "reply": None}
    reply = reply_of(response)
    problems = detectors.check_tool_call(reply, "get_weather", {"city": city})
    if stream and not problems and reply.get("tool_call_chunks", 0) < 1:
        problems.append("the call did not arrive as tool_calls deltas")
    if problems and reply_state(reply) == STATE_REASONING_EXHAUSTED:
        problems.append("the token budget went to reasoning")
    return {"city": city, "ok": not problems, "problems": problems, "reply": reply}


def _tool_gate(ctx, gate, stream):
    settings = ctx["settings"]
    runs = settings["runs"][gate]
    results = []
    for index in range(runs):
        outcome = yield from _tool_run(ctx, CITIES[index % len(CITIES)], stream)
        results.append(outcome)
    passed = sum(1 for r in results if r["ok"])
    failures = ["%s: %s" % (r["city"], "; ".join(r["problems"])) for r in results if not r["ok"]]
    detail = {"passed": passed, "runs": runs, "tool_choice": settings["tool_choice"], "failures": failures}
    if stream:
        detail["tool_call_chunks"] = [r["reply"].get("tool_call_chunks") if r["reply"] else None for r in results]
    if passed == runs:
        return verdict(
            PASS,
            "%d/%d calls named get_weather with the asked city (tool_choice %s)"
            % (passed, runs, settings["tool_choice"]),
            **detail,
        )
    return verdict(FAIL, "%d/%d right; first failure: %s" % (passed, runs, failures[0]), **detail)


def gate_tool_calls(ctx):
    """Tool calls: `runs` questions over different cities, each must call get_weather(city)."""
    return (yield from _tool_gate(ctx, "tool-calls", stream=False))


def gate_streaming_tool_calls(ctx):
    """Streamed tool calls: the call is assembled from the deltas (by index) and must be right."""
    return (yield from _tool_gate(ctx, "streaming-tool-calls", stream=True))


WEATHER_RESULT = {"city": "Paris", "temperature_c": 17, "conditions": "light rain"}


def gate_tool_result_continuation(ctx):
    """After its own tool call gets a result, the model answers from the result (says 17 degrees)."""
    first = yield from _tool_run(ctx, "Paris", stream=False)
    if not first["ok"]:
        return verdict(FAIL, "step 1 (tool call): " + "; ".join(first["problems"]))
    call = first["reply"]["tool_calls"][0]
    call_id = call["id"] or "call_0"
    messages = [
        {"role": "user", "content": "What's the weather like in Paris right now?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": call_id, "type": "function", "function": {"name": call["name"], "arguments": call["arguments"]}}
            ],
        },
        {"role": "tool", "tool_call_id": call_id, "content": json.dumps(WEATHER_RESULT)},
    ]
    body = chat_body(ctx, messages, visible=128, tools=[WEATHER_TOOL], tool_choice="auto")
    response = yield request("/chat/completions", body)
    problem = http_problem(response)
    if problem:
        return verdict(ERROR, "step 2 (answer from the result): " + problem)
    reply = reply_of(response)

    def check(text):
        found = 17.0 in detectors.numbers_in(text)
        return found, "%s the result's 17 degrees: %r" % ("uses" if found else "does not use", _shown(text))

    kind, why = judge_text(reply, check)
    return verdict(kind, why, answer=reply["content"])


NEEDLE_FILLER = (
    "The river town kept its ledgers in a stone house by the bridge.",
    "Every spring the ferry schedule changed and the posters were reprinted.",
    "A cooperative of weavers sold blankets at the Thursday market.",
    "The old observatory on the hill opened to visitors on clear evenings.",
    "Apprentice carpenters learned joinery by repairing the chapel benches.",
    "Grain prices were chalked on a board outside the mill each morning.",
    "The school choir rehearsed in the library because the hall leaked.",
    "Fishermen mended nets on the quay while gulls circled overhead.",
)
NEEDLE_CODE = "AMBER-4718"
NEEDLE = "Remember this: the passphrase for the archive room is %s." % NEEDLE_CODE
NEEDLE_QUESTION = "What is the passphrase for the archive room? Reply with the passphrase only."


def needle_haystack(sentences, depth):
    """Numbered filler sentences with the needle placed at `depth` (0 start .. 1 end)."""
    lines = ["%d. %s" % (i + 1, NEEDLE_FILLER[i % len(NEEDLE_FILLER)]) for i in range(sentences)]
    lines.insert(int(round(depth * sentences)), NEEDLE)
    return "\n".join(lines)


def _needle_messages(sentences, depth):
    return [
        {
            "role": "user",
            "content": "Read the notes below, then answer the question after them.\n\n"
            + needle_haystack(sentences, depth)
            + "\n\n"
            + NEEDLE_QUESTION,
        }
    ]


def gate_needle(ctx):
    """Long-context retrieval: a passphrase hidden at `depth` in a prompt filling `fraction` of the
    served context must come back. Two short requests first measure tokens per filler sentence."""
    settings = ctx["settings"]
    served = settings["served_context"]
    if not served:
        return verdict(
            ERROR,
            "the served context length is unknown: set serving.max_model_len in the recipe "
            "or serve /v1/models with max_model_len",
        )
    fraction, depth = settings["needle"]["fraction"], settings["needle"]["depth"]
    answer_budget = token_budget(settings, visible=32)
    probes = {}
    for count in (0, 64):
        response = yield request(
            "/chat/completions", chat_body(ctx, _needle_messages(count, depth), visible=1, max_tokens=1)
        )
        problem = http_problem(response)
        if problem:
            return verdict(ERROR, "measuring prompt tokens: " + problem)
        probes[count] = read_chat(response.get("json"))["prompt_tokens"]
    if not probes[0] or not probes[64] or probes[64] <= probes[0]:
        return verdict(ERROR, "the engine did not report usage.prompt_tokens; cannot size the prompt")
    per_sentence = (probes[64] - probes[0]) / 64.0
    target = min(int(fraction * served), served - answer_budget - 8)
    sentences = max(1, int((target - probes[0]) / per_sentence))
    response = yield request("/chat/completions", chat_body(ctx, _needle_messages(sentences, depth), visible=32))
    problem = http_problem(response)
    detail = {
        "served_context": served,
        "fraction": fraction,
        "depth": depth,
        "target_tokens": target,
        "tokens_per_sentence": round(per_sentence, 2),
        "sentences": sentences,
    }
    if problem:
        return verdict(ERROR, problem, **detail)
    reply = reply_of(response)
    detail["prompt_tokens"] = reply["prompt_tokens"]

    def check(text):
        found = NEEDLE_CODE.replace("-", "").lower() in text.replace("-", "").replace(" ", "").lower()
        return found, "%s %s at %s prompt tokens: %r" % (
            "found" if found else "no",
            NEEDLE_CODE,
            reply["prompt_tokens"],
            _shown(text),
        )

    kind, why = judge_text(reply, check)
    return verdict(kind, why, answer=reply["content"], **detail)


NAN_PROMPT = "Describe the colour of the sky on a clear day in one sentence."


def gate_nan_logits(ctx):
    """NaN logits: ask for prompt and output log-probabilities; an out-of-range-float error (vLLM's
    HTTP 400) or a NaN value fails, a bare HTTP 500 fails as suspected NaN (SGLang's shape)."""
    body = chat_body(
        ctx, [{"role": "user", "content": NAN_PROMPT}], visible=8, logprobs=True, top_logprobs=1, prompt_logprobs=1
    )
    response = yield request("/chat/completions", body)
    if response.get("error"):
        return verdict(ERROR, "no answer: %s" % response["error"])
    finding = detectors.nan_from_error(response.get("status"), response.get("text") or "")
    if finding and finding["nan"]:
        return verdict(
            FAIL, "NaN logits: HTTP %s %r on a prompt-logprobs request" % (finding["status"], finding["message"][:200])
        )
    if finding:
        return verdict(
            FAIL,
            "HTTP %s on a logprobs request (%r): how an engine whose encoder met a NaN "
            "log-probability answers; NaN suspected, not proven" % (finding["status"], finding["message"][:200]),
        )
    problem = http_problem(response)
    if problem:
        return verdict(ERROR, "the logprobs request was refused, so NaN was not checked: " + problem)
    summary = detectors.logprob_summary(response.get("json"))
    if summary["bad_values"]:
        return verdict(FAIL, "NaN or infinite log-probabilities: %s" % summary["bad_values"][:3], **summary)
    if not summary["prompt_logprobs"] and not summary["output_logprobs"]:
        return verdict(ERROR, "the engine returned no log-probabilities, so NaN was not checked", **summary)
    scope = (
        "%d prompt and %d output" % (summary["prompt_logprobs"], summary["output_logprobs"])
        if summary["prompt_logprobs"]
        else "%d output (the engine returned no prompt log-probabilities)" % summary["output_logprobs"]
    )
    return verdict(PASS, "%s log-probabilities, all finite" % scope, **summary)


DEGENERATE_PROMPT = (
    "Write a paragraph of about 150 words explaining how a suspension bridge carries the weight of the traffic on it."
)


def gate_degenerate_output(ctx):
    """Degenerate output: a free-form paragraph must not be one token repeated or an n-gram loop."""
    thresholds = ctx["settings"]["degenerate"]
    response = yield request(
        "/chat/completions", chat_body(ctx, [{"role": "user", "content": DEGENERATE_PROMPT}], visible=300)
    )
    problem = http_problem(response)
    if problem:
        return verdict(ERROR, problem)
    reply = reply_of(response)
    content = detectors.degenerate(reply["content"], thresholds)
    reasoning = detectors.degenerate(reply["reasoning"], thresholds)
    detail = {"content": content, "reasoning": reasoning, "answer": reply["content"]}
    if content["degenerate"] or reasoning["degenerate"]:
        where = "content" if content["degenerate"] else "reasoning"
        facts = content if content["degenerate"] else reasoning
        return verdict(FAIL, "degenerate %s: %s" % (where, "; ".join(facts["reasons"])), **detail)
    if not reply["content"].strip():
        kind, why = judge_text(reply, lambda text: (False, "no paragraph"))
        return verdict(kind if kind != PASS else FAIL, why, **detail)
    return verdict(
        PASS,
        "%d tokens, longest run %d x %r, distinct ratio %s"
        % (
            content["tokens"],
            content["longest_run"]["count"],
            content["longest_run"]["token"],
            content["distinct_ratio"],
        ),
        **detail,
    )


def gate_responses_api(ctx):
    """The Responses API subset: POST /responses answers the smoke question in output_text."""
    settings = ctx["settings"]
    body = {
        "model": ctx["model"],
        "input": SMOKE_QUESTION,
        "max_output_tokens": token_budget(settings, visible=16),
        "temperature": settings["temperature"],
    }
    effort = reasoning_fields(settings).get("reasoning_effort")
    if effort:
        body["reasoning"] = {"effort": effort}
    response = yield request("/responses", body)
    if response.get("status") in (404, 405, 501):
        return verdict(
            NOT_SERVED, "POST /responses: HTTP %s: the engine does not serve the Responses API" % response["status"]
        )
    problem = http_problem(response)
    if problem:
        return verdict(ERROR, problem)
    reply = read_responses(response.get("json"))
    kind, why = judge_text(reply, word_check("Paris"))
    return verdict(kind, why, answer=reply["content"], status=(response.get("json") or {}).get("status"))


def gate_reasoning_variants(ctx):
    """Each declared reasoning mode answers the smoke question visibly; mode none shows no reasoning."""
    settings = ctx["settings"]
    modes = {}
    for mode in settings["reasoning_variants"]:
        response = yield request(
            "/chat/completions", chat_body(ctx, [{"role": "user", "content": SMOKE_QUESTION}], mode=mode, visible=16)
        )
        problem = http_problem(response)
        if problem:
            modes[mode] = {"verdict": ERROR, "reason": problem}
            continue
        reply = reply_of(response)
        kind, why = judge_text(reply, word_check("Paris"))
        if kind == PASS and mode == "none" and reply["reasoning"].strip():
            kind, why = (
                FAIL,
                "mode none leaked %d characters of reasoning in %r"
                % (len(reply["reasoning"]), reply["reasoning_field"]),
            )
        modes[mode] = {
            "verdict": kind,
            "reason": why,
            "reasoning_chars": len(reply["reasoning"]),
            "reasoning_tokens": reply["reasoning_tokens"],
            "completion_tokens": reply["completion_tokens"],
        }
    bad = {m: r for m, r in modes.items() if r["verdict"] != PASS}
    if not bad:
        return verdict(PASS, "modes %s answered visibly" % ", ".join(modes), modes=modes)
    mode, first = sorted(bad.items())[0]
    kinds = set(r["verdict"] for r in bad.values())
    return verdict(kinds.pop() if len(kinds) == 1 else FAIL, "mode %s: %s" % (mode, first["reason"]), modes=modes)


GATE_FUNCTIONS = {
    "smoke": gate_smoke,
    "json": gate_json,
    "tool-calls": gate_tool_calls,
    "streaming-tool-calls": gate_streaming_tool_calls,
    "tool-result-continuation": gate_tool_result_continuation,
    "needle": gate_needle,
    "nan-logits": gate_nan_logits,
    "degenerate-output": gate_degenerate_output,
    "responses-api": gate_responses_api,
    "reasoning-variants": gate_reasoning_variants,
}


def drive(generator, send):
    """Run one gate generator with `send(request) -> response`; returns (verdict, exchanges).

    The runner passes a real sender; tests pass recorded responses. A gate that raises is an
    ERROR verdict naming the exception, never a traceback for the person reading the table.
    """
    exchanges = []
    try:
        req = next(generator)
        while True:
            response = send(req)
            exchanges.append({"request": req, "response": response})
            req = generator.send(response)
    except StopIteration as stop:
        return stop.value, exchanges
    except MemoryError:
        # The run's to handle (incomplete, with evidence): nothing of this gate can be trusted.
        raise
    except Exception as exc:  # a gate bug must not hide the other gates' verdicts
        # `internal`: the seat was not judged, so the run is incomplete, not the seat unqualified.
        found = verdict(ERROR, "the gate itself failed: %s: %s" % (type(exc).__name__, exc), internal=True)
        return found, exchanges
