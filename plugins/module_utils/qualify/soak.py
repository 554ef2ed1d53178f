"""Soak: a time-bounded run at a set concurrency, counted request by request.

Pure parts only: the requests a soak sends, what one streamed exchange says (latency, first
token, visible and reasoning tokens, the longest silence between chunks, whether it stalled) and
the summary with latency percentiles. The runner in io/qualify_run.py keeps the workers busy and
the clock.

A soak counts answers, not tokens: every soak prompt asks for prose, so a reply with no visible
content (all of it reasoning, or nothing) is not a completed request, whatever its token count;
`reasoning-exhausted` replies (the budget spent thinking) are counted and shown on their own.
"""

import math

from ansible_collections.seatwright.fleet.plugins.module_utils.qualify.gates import PASS, http_problem
from ansible_collections.seatwright.fleet.plugins.module_utils.qualify.reading import (
    REASONING_FIELDS,
    STATE_ANSWERED,
    STATE_REASONING_EXHAUSTED,
    STATE_TRUNCATED,
    assemble_stream,
    reply_state,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.qualify.settings import reasoning_fields, token_budget

# Reply states that carry a visible answer (a truncated answer is still an answer the user saw).
ANSWER_STATES = (STATE_ANSWERED, STATE_TRUNCATED)

SOAK_PROMPTS = (
    "Explain in a few paragraphs how a refrigerator moves heat out of its cabinet.",
    "Write a short story about a lighthouse keeper who finds a message in a bottle.",
    "Describe the water cycle to a ten-year-old, step by step.",
    "List the main differences between a bicycle and a motorcycle and explain each one.",
    "Summarise the rules of chess for someone who has never played.",
    "Explain why bread rises, from the yeast to the oven.",
    "Describe a walk through a busy morning market in a coastal town.",
    "Explain how a bill becomes a law in a parliamentary system, in general terms.",
)


def soak_request(model, settings, number):
    """The streamed chat request of soak request `number` (prompts rotate), in the seat's reasoning mode.

    The seat's reasoning mode and its headroom apply here as in the gates: a reasoning seat soaked
    with a visible-only budget would spend it thinking and read as unanswered for the request's fault.
    """
    soak = settings["soak"]
    body = {
        "model": model,
        "messages": [{"role": "user", "content": SOAK_PROMPTS[number % len(SOAK_PROMPTS)]}],
        "max_tokens": token_budget(settings, visible=soak["max_tokens"]),
        "temperature": 0.7,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    body.update(reasoning_fields(settings))
    return {"method": "POST", "path": "/chat/completions", "stream": True, "body": body}


def exchange_facts(response, stall_s):
    """What one soak exchange says: ok/error, latency, time to first token, tokens, longest gap."""
    problem = http_problem(response)
    times = response.get("chunk_times") or []
    start = response.get("started_at", 0.0)
    gaps = [b - a for a, b in zip([start] + times[:-1], times)] if times else []
    max_gap = max(gaps) if gaps else None
    facts = {
        "ok": problem is None,
        "error": problem,
        "latency_s": response.get("elapsed_s"),
        "ttft_s": response.get("ttft_s"),
        "max_gap_s": round(max_gap, 3) if max_gap is not None else None,
        "output_tokens": 0,
        "reasoning_tokens": 0,
        "answered": False,
        "state": None,
        "stalled": bool(response.get("stalled")) or (max_gap is not None and max_gap > stall_s),
    }
    if problem is None:
        chunks = response.get("chunks") or []
        reply = assemble_stream(chunks)
        facts["state"] = reply_state(reply)
        facts["answered"] = facts["state"] in ANSWER_STATES
        facts["output_tokens"], facts["reasoning_tokens"] = split_tokens(reply, chunks)
        facts["finish_reason"] = reply["finish_reason"]
    return facts


def _deltas(chunks):
    """(deltas with visible content, deltas with reasoning) of a stream."""
    visible = reasoning = 0
    for chunk in chunks:
        for choice in (chunk.get("choices") or []) if isinstance(chunk, dict) else []:
            delta = choice.get("delta") or {}
            visible += bool(delta.get("content"))
            reasoning += any(delta.get(field) for field in REASONING_FIELDS)
    return visible, reasoning


def split_tokens(reply, chunks):
    """(visible, reasoning) tokens of one reply, never one counter minus another.

    The engine's completion count covers both. A reply with text in only one of the two fields
    gives it the whole count; one with both shares it by the deltas that carried each (the engine
    streams a delta per decode step). vLLM 0.32 reports `reasoning_tokens: 0` however much it
    reasoned, so the usage's reasoning count is not read.
    """
    generated = reply["completion_tokens"] or 0
    has_visible, has_reasoning = bool(reply["content"].strip()), bool(reply["reasoning"].strip())
    if not has_reasoning:
        return (generated if has_visible else 0), 0
    if not has_visible:
        return 0, generated
    visible_deltas, reasoning_deltas = _deltas(chunks)
    visible = int(round(generated * visible_deltas / float(visible_deltas + reasoning_deltas)))
    return visible, generated - visible


def percentile(values, q):
    """The q-th percentile (0..100) by linear interpolation between closest ranks; None when empty."""
    data = sorted(v for v in values if v is not None)
    if not data:
        return None
    rank = (len(data) - 1) * q / 100.0
    low, high = int(math.floor(rank)), int(math.ceil(rank))
    return data[low] + (data[high] - data[low]) * (rank - low)


def _spread(values):
    return {
        name: (round(percentile(values, q), 3) if percentile(values, q) is not None else None)
        for name, q in (("p50", 50), ("p95", 95), ("p99", 99), ("max", 100))
    }


def summarise(facts, settings, wall_s):
    """Counts and percentiles of a soak from every exchange's facts, with its verdict."""
    soak = settings["soak"]
    replied = [f for f in facts if f["ok"]]
    done = [f for f in replied if f.get("answered")]
    unanswered = [f for f in replied if not f.get("answered")]
    exhausted = [f for f in unanswered if f.get("state") == STATE_REASONING_EXHAUSTED]
    errors = [f for f in facts if not f["ok"]]
    stalls = [f for f in facts if f["stalled"]]
    tokens = sum(f["output_tokens"] for f in replied)
    thought = sum(f.get("reasoning_tokens") or 0 for f in replied)
    states = {}
    for fact in replied:
        states[fact.get("state")] = states.get(fact.get("state"), 0) + 1
    summary = {
        "duration_s": soak["duration_s"],
        "wall_s": round(wall_s, 1),
        "concurrency": soak["concurrency"],
        "stall_s": soak["stall_s"],
        "max_tokens": soak["max_tokens"],
        "requests": len(facts),
        "completed": len(done),
        "errors": len(errors),
        "unanswered": len(unanswered),
        "reasoning_exhausted": len(exhausted),
        "reply_states": states,
        "stalls": len(stalls),
        "output_tokens": tokens,
        "reasoning_tokens": thought,
        "output_tok_s": round(tokens / wall_s, 2) if wall_s > 0 else None,
        "reasoning_tok_s": round(thought / wall_s, 2) if wall_s > 0 else None,
        "latency_s": _spread([f["latency_s"] for f in done]),
        "ttft_s": _spread([f["ttft_s"] for f in done]),
        "max_gap_s": _spread([f["max_gap_s"] for f in done]),
        "error_samples": sorted(set(f["error"] for f in errors))[:5],
    }
    problems = []
    if not done:
        problems.append("no request completed")
    if len(errors) + len(unanswered) > soak["max_errors"]:
        parts = ["%d errors" % len(errors)] if errors else []
        if unanswered:
            parts.append(
                "%d replies without a visible answer (%d reasoning-exhausted)" % (len(unanswered), len(exhausted))
            )
        problems.append("%s (allowed %d)" % (" and ".join(parts), soak["max_errors"]))
    if len(stalls) > soak["max_stalls"]:
        problems.append(
            "%d stalls over %s s without a token (allowed %d)" % (len(stalls), soak["stall_s"], soak["max_stalls"])
        )
    summary["verdict"] = PASS if not problems else "fail"
    counts = (
        "%d/%d requests answered, %d without a visible answer (%d reasoning-exhausted), %d visible and "
        "%d reasoning tokens, %d errors, %d stalls"
        % (len(done), len(facts), len(unanswered), len(exhausted), tokens, thought, len(errors), len(stalls))
    )
    summary["reason"] = counts if not problems else "; ".join(problems) + " (" + counts + ")"
    return summary
