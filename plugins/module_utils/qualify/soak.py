"""Soak: a time-bounded run at a set concurrency, counted request by request.

Pure parts only: the requests a soak sends, what one streamed exchange says (latency, first
token, output tokens, the longest silence between chunks, whether it stalled) and the summary
with latency percentiles. The runner in io/qualify_run.py keeps the workers busy and the clock.
"""

import math

from ansible_collections.seatwright.fleet.plugins.module_utils.qualify.gates import PASS, http_problem
from ansible_collections.seatwright.fleet.plugins.module_utils.qualify.reading import assemble_stream

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
    """The streamed chat request of soak request `number` (prompts rotate)."""
    soak = settings["soak"]
    return {
        "method": "POST",
        "path": "/chat/completions",
        "stream": True,
        "body": {
            "model": model,
            "messages": [{"role": "user", "content": SOAK_PROMPTS[number % len(SOAK_PROMPTS)]}],
            "max_tokens": soak["max_tokens"],
            "temperature": 0.7,
            "stream": True,
            "stream_options": {"include_usage": True},
        },
    }


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
        "stalled": bool(response.get("stalled")) or (max_gap is not None and max_gap > stall_s),
    }
    if problem is None:
        reply = assemble_stream(response.get("chunks") or [])
        facts["output_tokens"] = reply["completion_tokens"] or 0
        facts["finish_reason"] = reply["finish_reason"]
    return facts


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
    done = [f for f in facts if f["ok"]]
    errors = [f for f in facts if not f["ok"]]
    stalls = [f for f in facts if f["stalled"]]
    tokens = sum(f["output_tokens"] for f in done)
    summary = {
        "duration_s": soak["duration_s"],
        "wall_s": round(wall_s, 1),
        "concurrency": soak["concurrency"],
        "stall_s": soak["stall_s"],
        "max_tokens": soak["max_tokens"],
        "requests": len(facts),
        "completed": len(done),
        "errors": len(errors),
        "stalls": len(stalls),
        "output_tokens": tokens,
        "output_tok_s": round(tokens / wall_s, 2) if wall_s > 0 else None,
        "latency_s": _spread([f["latency_s"] for f in done]),
        "ttft_s": _spread([f["ttft_s"] for f in done]),
        "max_gap_s": _spread([f["max_gap_s"] for f in done]),
        "error_samples": sorted(set(f["error"] for f in errors))[:5],
    }
    problems = []
    if not done:
        problems.append("no request completed")
    if len(errors) > soak["max_errors"]:
        problems.append("%d errors (allowed %d)" % (len(errors), soak["max_errors"]))
    if len(stalls) > soak["max_stalls"]:
        problems.append(
            "%d stalls over %s s without a token (allowed %d)" % (len(stalls), soak["stall_s"], soak["max_stalls"])
        )
    summary["verdict"] = PASS if not problems else "fail"
    counts = "%d/%d requests completed, %d output tokens, %d errors, %d stalls" % (
        len(done),
        len(facts),
        tokens,
        len(errors),
        len(stalls),
    )
    summary["reason"] = counts if not problems else "; ".join(problems) + " (" + counts + ")"
    return summary
