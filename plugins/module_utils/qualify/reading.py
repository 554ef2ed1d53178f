"""Reading what an OpenAI-compatible engine answered, the same way for vLLM and SGLang.

A reply is read into one shape (`Reply` dict) whether it came whole or as streamed deltas:
visible `content`, the `reasoning` text and the field it came in (vLLM >= 0.11 says `reasoning`,
SGLang and older vLLM `reasoning_content`), tool calls, the finish reason and token counts.
`reply_state` then says what kind of reply it is, so that a reply whose budget went to reasoning
is reported as that, not as a broken model.
"""

import json

REASONING_FIELDS = ("reasoning_content", "reasoning")

# What a reply is, before any gate judges its answer.
STATE_ANSWERED = "answered"  # visible content
STATE_TOOL_CALL = "tool-call"  # tool calls (content may be empty)
STATE_REASONING_EXHAUSTED = "reasoning-exhausted"  # stopped at the token limit while reasoning
STATE_REASONING_ONLY = "reasoning-only"  # finished, but everything it said is in the reasoning field
STATE_TRUNCATED = "truncated"  # visible content cut at the token limit
STATE_EMPTY = "empty"  # nothing at all


def _text(value):
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list):  # content parts: [{"type": "text", "text": ...}]
        return "".join(part.get("text", "") for part in value if isinstance(part, dict))
    return str(value)


def _reasoning_of(message):
    """(text, field name) of the reasoning a message or delta carries; ('', None) when none."""
    for field in REASONING_FIELDS:
        value = message.get(field)
        if value:
            return _text(value), field
    return "", None


def _usage(body):
    usage = body.get("usage") if isinstance(body, dict) else None
    if not isinstance(usage, dict):
        return {"prompt_tokens": None, "completion_tokens": None, "reasoning_tokens": None}
    details = usage.get("completion_tokens_details") or {}
    return {
        "prompt_tokens": usage.get("prompt_tokens"),
        "completion_tokens": usage.get("completion_tokens"),
        "reasoning_tokens": details.get("reasoning_tokens") if isinstance(details, dict) else None,
    }


def _empty_reply():
    reply = {"content": "", "reasoning": "", "reasoning_field": None, "tool_calls": [], "finish_reason": None}
    reply.update(_usage({}))
    return reply


def read_chat(body):
    """The Reply of a whole (non-streamed) chat completion body; a body without choices reads empty."""
    reply = _empty_reply()
    if not isinstance(body, dict):
        return reply
    choices = body.get("choices") or []
    choice = choices[0] if choices and isinstance(choices[0], dict) else {}
    message = choice.get("message") or {}
    reply["content"] = _text(message.get("content"))
    reply["reasoning"], reply["reasoning_field"] = _reasoning_of(message)
    calls = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        calls.append(
            {"id": call.get("id"), "name": function.get("name") or "", "arguments": function.get("arguments") or ""}
        )
    reply["tool_calls"] = calls
    reply["finish_reason"] = choice.get("finish_reason")
    reply.update(_usage(body))
    return reply


def assemble_stream(chunks):
    """The Reply that a list of streamed chat completion chunks (parsed JSON) adds up to.

    Tool calls are joined by their `index`: SGLang gives every argument fragment a fresh `id`
    and sends the name only once, vLLM sends the id and name on the first fragment only.
    Also returns how many chunks carried tool-call fragments (`tool_call_chunks`), so a gate can
    tell a streamed call from one that arrived in a single piece.
    """
    reply = _empty_reply()
    calls = {}
    order = []
    fragments = 0
    content, reasoning = [], []
    for chunk in chunks:
        if not isinstance(chunk, dict):
            continue
        if chunk.get("usage"):
            reply.update({k: v for k, v in _usage(chunk).items() if v is not None})
        for choice in chunk.get("choices") or []:
            delta = choice.get("delta") or {}
            content.append(_text(delta.get("content")))
            text, field = _reasoning_of(delta)
            if text:
                reasoning.append(text)
                reply["reasoning_field"] = reply["reasoning_field"] or field
            for position, call in enumerate(delta.get("tool_calls") or []):
                fragments += 1
                key = call.get("index")
                if key is None:
                    key = call.get("id") or position
                if key not in calls:
                    calls[key] = {"id": None, "name": "", "arguments": ""}
                    order.append(key)
                entry = calls[key]
                entry["id"] = entry["id"] or call.get("id")
                function = call.get("function") or {}
                if function.get("name") and not entry["name"]:
                    entry["name"] = function["name"]
                entry["arguments"] += function.get("arguments") or ""
            if choice.get("finish_reason"):
                reply["finish_reason"] = choice["finish_reason"]
    reply["content"] = "".join(content)
    reply["reasoning"] = "".join(reasoning)
    reply["tool_calls"] = [calls[key] for key in order]
    reply["tool_call_chunks"] = fragments
    return reply


def read_responses(body):
    """The Reply of a Responses API body: output_text parts as content, reasoning items as reasoning."""
    reply = _empty_reply()
    if not isinstance(body, dict):
        return reply
    content, reasoning, calls = [], [], []
    for item in body.get("output") or []:
        if not isinstance(item, dict):
            continue
        kind = item.get("type")
        if kind == "message":
            for part in item.get("content") or []:
                if isinstance(part, dict) and part.get("type") in ("output_text", "text"):
                    content.append(part.get("text") or "")
        elif kind == "reasoning":
            for part in (item.get("content") or []) + (item.get("summary") or []):
                if isinstance(part, dict):
                    reasoning.append(part.get("text") or "")
        elif kind == "function_call":
            calls.append(
                {"id": item.get("call_id"), "name": item.get("name") or "", "arguments": item.get("arguments") or ""}
            )
    reply["content"] = "".join(content)
    reply["reasoning"] = "".join(reasoning)
    reply["reasoning_field"] = "output[type=reasoning]" if reasoning else None
    reply["tool_calls"] = calls
    status = body.get("status")
    incomplete = (body.get("incomplete_details") or {}).get("reason")
    reply["finish_reason"] = "length" if incomplete == "max_output_tokens" else status
    usage = body.get("usage") or {}
    details = usage.get("output_tokens_details") or {}
    reply.update(
        {
            "prompt_tokens": usage.get("input_tokens"),
            "completion_tokens": usage.get("output_tokens"),
            "reasoning_tokens": details.get("reasoning_tokens"),
        }
    )
    return reply


def reply_state(reply):
    """What kind of reply this is (STATE_*), judged on the visible content first."""
    has_content = bool(reply["content"].strip())
    has_reasoning = bool(reply["reasoning"].strip())
    length = reply["finish_reason"] == "length"
    if reply["tool_calls"]:
        return STATE_TOOL_CALL
    if has_content:
        return STATE_TRUNCATED if length else STATE_ANSWERED
    if has_reasoning:
        return STATE_REASONING_EXHAUSTED if length else STATE_REASONING_ONLY
    return STATE_EMPTY


def error_message(body_text):
    """The message of an error body in the shape vLLM ({"error": {...}}) or SGLang ({"object": "error",
    "message": ...}) uses; the raw text (shortened) when it is not JSON."""
    try:
        body = json.loads(body_text)
    except (TypeError, ValueError):
        return (body_text or "").strip()[:500]
    if isinstance(body, dict):
        inner = body.get("error")
        if isinstance(inner, dict) and inner.get("message"):
            return str(inner["message"])
        if isinstance(inner, str):
            return inner
        if body.get("message"):
            return str(body["message"])
        if body.get("detail"):
            return str(body["detail"])
    return (body_text or "").strip()[:500]
