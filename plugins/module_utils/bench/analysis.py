"""From per-request records and engine counters to figures that cannot mislead.

A level is one concurrency measured in one pass; a sweep is every level in every pass. The rules:
- a prefill figure counts only when the engine's prefix cache answered at most a threshold share of
  the prompt tokens during that level (a cache hit is a read, not a prefill: the field once reported
  95,941 tok/s that way);
- time to first output (reasoning included) and first-visible TTFT are kept apart, and reasoning
  tokens stay out of the visible decode rate;
- visible and reasoning output are counted apart (records.py counts each from its own text) and
  reported as two rates; a level whose visible share of the output is under a declared minimum
  is flagged reasoning-only: a seat that spends its budget thinking reads as fast decode and
  answers nothing;
- failed requests are counted and kept with their errors, never averaged away;
- each figure is the median over passes with its range; a spread over the stability threshold
  flags the level unstable (one pass is not a measurement);
- speculative-decoding acceptance near 1.0 on repetitive output is loop replay, not speed.

Every function here takes data and returns data; the runner (io/bench_runner.py) does the I/O.
"""

from ansible_collections.seatwright.fleet.plugins.module_utils.bench import counters as engine
from ansible_collections.seatwright.fleet.plugins.module_utils.bench.stats import (
    across_passes,
    distribution,
    median,
    spread,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.node.contract import BY_NAME

DEFAULT_PREFIX_HIT_THRESHOLD = 0.10
DEFAULT_STABILITY_SPREAD = BY_NAME["seatwright_fleet_stability_spread"].default
DEFAULT_LOOP_ACCEPTANCE = 0.95
# Share of distinct word 8-grams below which an output counts as repetitive (a loop).
DEFAULT_REPETITION_DISTINCT = 0.5
# Share of a level's output tokens that must be visible; under it the level is flagged reasoning-only.
# Low on purpose: a reasoning seat may think for 4,096 tokens before a 512-token answer (0.11).
DEFAULT_MIN_VISIBLE_SHARE = 0.02
REPETITION_NGRAM = 8

# The figures each level reports, and the ones the stability rule judges across passes.
LEVEL_FIGURES = (
    "output_tok_s",
    "reasoning_tok_s",
    "generated_tok_s",
    "visible_share",
    "request_s",
    "ttft_ms_p50",
    "ttfo_ms_p50",
    "ttft_ms_p95",
    "ttft_ms_p99",
    "decode_tok_s_p50",
    "visible_tok_s_p50",
    "prefill_tok_s_p50",
    "latency_ms_p50",
)
STABILITY_FIGURES = ("output_tok_s", "ttft_ms_p50", "decode_tok_s_p50")


def repetition(text, n=REPETITION_NGRAM):
    """Share of distinct word n-grams in a text (1.0: nothing repeats); None when too short to tell."""
    words = (text or "").split()
    if len(words) < 2 * n:
        chars = (text or "").strip()
        if len(chars) < 4 * n:
            return None
        grams = [chars[i : i + n] for i in range(len(chars) - n + 1)]
    else:
        grams = [tuple(words[i : i + n]) for i in range(len(words) - n + 1)]
    return len(set(grams)) / len(grams)


def request_figures(record):
    """Per-request derived figures: per-stream decode (all tokens) and visible rate (reasoning kept out)."""
    out = dict(record)
    latency, ttfo = record.get("latency_ms"), record.get("ttfo_ms")
    visible, reasoning = record.get("output_tokens") or 0, record.get("reasoning_tokens") or 0
    generated = record.get("generated_tokens") or (visible + reasoning)
    decode_ms = (latency - ttfo) if (latency is not None and ttfo is not None) else None
    out["decode_tok_s"] = ((generated - 1) / (decode_ms / 1000.0)) if decode_ms and generated > 1 else None
    # Tokens after the first output, as decode counts them: the first is visible when nothing was reasoned
    # (a reasoning stream opens with its thinking), so a plain stream's two rates agree.
    after_first = visible - 1 if not reasoning else visible
    out["visible_tok_s"] = (after_first / (decode_ms / 1000.0)) if decode_ms and after_first > 0 else None
    prompt, first = record.get("input_tokens"), record.get("ttfo_ms")
    out["prefill_tok_s"] = (prompt / (first / 1000.0)) if prompt and first else None
    return out


def analyse_level(concurrency, pass_index, records, before, after, duration_s, options=None):
    """One concurrency level of one pass: throughput, latency distributions, cache and spec checks."""
    options = options or {}
    threshold = options.get("prefix_hit_threshold", DEFAULT_PREFIX_HIT_THRESHOLD)
    rows = [request_figures(r) for r in records]
    ok = [r for r in rows if r.get("ok")]
    failed = [r for r in rows if not r.get("ok")]
    visible = sum(r.get("output_tokens") or 0 for r in ok)
    reasoning = sum(r.get("reasoning_tokens") or 0 for r in ok)
    generated = sum(
        r.get("generated_tokens") or (r.get("output_tokens") or 0) + (r.get("reasoning_tokens") or 0) for r in ok
    )
    share = visible_share(visible, reasoning)
    unanswered = sum(1 for r in ok if not r.get("output_tokens"))
    dists = {
        key: distribution([r.get(key) for r in ok])
        for key in (
            "ttft_ms",
            "ttfo_ms",
            "latency_ms",
            "decode_tok_s",
            "visible_tok_s",
            "prefill_tok_s",
            "input_tokens",
            "output_tokens",
            "reasoning_tokens",
        )
    }
    delta = engine.counter_delta(before or {}, after or {})
    hit_rate = engine.prefix_cache_hit_rate(delta)
    flags = []
    prefill_valid, prefill_reason = (
        True,
        "the prefix cache answered %s of the prompt tokens"
        % ("an unknown share" if hit_rate is None else "%.1f %%" % (100 * hit_rate)),
    )
    if hit_rate is None:
        prefill_valid = False
        prefill_reason = (
            "the engine's /metrics had no prefix-cache counters (or they reset): fresh prompts "
            "could not be verified, so the prefill figure is not a measurement"
        )
        flags.append({"id": "prefill-unverified", "reason": prefill_reason})
    elif hit_rate > threshold:
        prefill_valid = False
        prefill_reason = (
            "the prefix cache answered %.1f %% of the prompt tokens (over the %.0f %% threshold): "
            "the prefill figure is a cache read, not a prefill" % (100 * hit_rate, 100 * threshold)
        )
        flags.append({"id": "prefix-cache-hit", "reason": prefill_reason})
    if failed:
        flags.append(
            {
                "id": "failed-requests",
                "reason": "%d of %d requests failed (kept in the record)" % (len(failed), len(rows)),
            }
        )
    thinking = reasoning_only(share, visible, reasoning, unanswered, len(ok), options)
    if thinking:
        flags.append(thinking)
    spec = engine.spec_acceptance(delta)
    if spec is not None:
        spec["repetition"] = median([repetition(r.get("text")) for r in ok if r.get("text")])
        loop = loop_replay(spec, options)
        if loop:
            flags.append(loop)
    figures = {
        "output_tok_s": visible / duration_s if duration_s else None,
        "reasoning_tok_s": reasoning / duration_s if duration_s else None,
        "generated_tok_s": generated / duration_s if duration_s else None,
        "visible_share": share,
        "request_s": len(ok) / duration_s if duration_s else None,
        "ttft_ms_p50": dists["ttft_ms"]["p50"],
        "ttft_ms_p95": dists["ttft_ms"]["p95"],
        "ttft_ms_p99": dists["ttft_ms"]["p99"],
        "ttfo_ms_p50": dists["ttfo_ms"]["p50"],
        "decode_tok_s_p50": dists["decode_tok_s"]["p50"],
        "visible_tok_s_p50": dists["visible_tok_s"]["p50"],
        "prefill_tok_s_p50": dists["prefill_tok_s"]["p50"] if prefill_valid else None,
        "latency_ms_p50": dists["latency_ms"]["p50"],
    }
    if any(f["id"] == "loop-replay" for f in flags):
        for key in ("output_tok_s", "reasoning_tok_s", "generated_tok_s", "decode_tok_s_p50", "visible_tok_s_p50"):
            figures[key] = None
    return {
        "concurrency": concurrency,
        "pass": pass_index,
        "requests": len(rows),
        "succeeded": len(ok),
        "failed": len(failed),
        "failures": [{"error": r.get("error"), "status": r.get("status")} for r in failed],
        "duration_s": duration_s,
        "unanswered": unanswered,
        "figures": figures,
        "distributions": dists,
        "prefix_cache": {
            "hit_rate": hit_rate,
            "threshold": threshold,
            "queries": delta.get("prefix_cache_queries"),
            "hits": delta.get("prefix_cache_hits"),
            "prefill_valid": prefill_valid,
            "reason": prefill_reason,
        },
        "engine_counters": {k: v for k, v in delta.items() if k != "reset"},
        "counter_resets": delta["reset"],
        "spec_decode": spec,
        "flags": flags,
    }


def visible_share(visible, reasoning):
    """Visible tokens / all output tokens counted from the text (both with the served tokenizer); None with none."""
    total = visible + reasoning
    return visible / total if total > 0 else None


def reasoning_only(share, visible, reasoning, unanswered, answered_requests, options=None):
    """A flag when a level's visible output is zero or under the declared share of its output."""
    minimum = (options or {}).get("min_visible_share", DEFAULT_MIN_VISIBLE_SHARE)
    if not answered_requests or (visible > 0 and share is not None and share >= minimum):
        return None
    share = share or 0.0
    return {
        "id": "reasoning-only",
        "reason": "visible output was %.1f %% of the output tokens (%d visible, %d reasoning; %d of %d requests "
        "with no visible text), under the %.0f %% minimum: the seat spent its budget reasoning, so its output "
        "rate is not an answer rate" % (100 * share, visible, reasoning, unanswered, answered_requests, 100 * minimum),
    }


def loop_replay(spec, options=None):
    """A flag when draft acceptance is near 1.0 on repetitive output (or output that could not be checked)."""
    options = options or {}
    near_one = options.get("loop_acceptance", DEFAULT_LOOP_ACCEPTANCE)
    distinct = options.get("repetition_distinct", DEFAULT_REPETITION_DISTINCT)
    if spec["rate"] < near_one:
        return None
    rep = spec.get("repetition")
    if rep is None:
        return {
            "id": "loop-replay-unverified",
            "reason": "speculative acceptance %.2f with no output text to "
            "check for a repeat loop: treat the decode figure as suspect" % spec["rate"],
        }
    if rep < distinct:
        return {
            "id": "loop-replay",
            "reason": "speculative acceptance %.2f on repetitive output (%.0f %% distinct "
            "%d-grams): the drafts replay a loop, so the decode figures measure the loop, not the seat"
            % (spec["rate"], 100 * rep, REPETITION_NGRAM),
        }
    return None


def warmup_settled(throughputs, threshold=DEFAULT_STABILITY_SPREAD):
    """Whether the last two warm-up passes agree within the threshold (the engine has settled)."""
    if len(throughputs) < 2:
        return False
    last = throughputs[-2:]
    value = spread(last)
    return value is not None and value <= threshold


def summarise_sweep(levels, options=None):
    """Medians and ranges per concurrency over passes, the stability rule, and every flag raised."""
    options = options or {}
    threshold = options.get("stability_spread", DEFAULT_STABILITY_SPREAD)
    by_c = {}
    for level in levels:
        by_c.setdefault(level["concurrency"], []).append(level)
    summary = []
    for concurrency in sorted(by_c):
        runs = sorted(by_c[concurrency], key=lambda lv: lv["pass"])
        figures = {key: across_passes([r["figures"].get(key) for r in runs]) for key in LEVEL_FIGURES}
        flags = []
        for key in STABILITY_FIGURES:
            value = figures[key]["spread"]
            if value is not None and value > threshold:
                flags.append(
                    {
                        "id": "unstable",
                        "figure": key,
                        "reason": "%s spread %.0f %% across %d passes "
                        "(%s): over the %.0f %% stability threshold; report the median with its range, "
                        "not one pass"
                        % (
                            key,
                            100 * value,
                            len(runs),
                            ", ".join("%.4g" % v for v in figures[key]["values"]),
                            100 * threshold,
                        ),
                    }
                )
        if len(runs) < 2:
            flags.append({"id": "single-pass", "reason": "one pass only: no spread, so stability is unknown"})
        seen = set()
        for run in runs:
            for flag in run["flags"]:
                key = (flag["id"], flag["reason"])
                if key not in seen:
                    seen.add(key)
                    flags.append(dict(flag, **{"pass": run["pass"]}))
        summary.append(
            {
                "concurrency": concurrency,
                "passes": len(runs),
                "requests": sum(r["requests"] for r in runs),
                "failed": sum(r["failed"] for r in runs),
                "figures": figures,
                "prefill_valid": all(r["prefix_cache"]["prefill_valid"] for r in runs),
                "prefix_cache_hit_rate": across_passes([r["prefix_cache"]["hit_rate"] for r in runs]),
                "spec_acceptance": across_passes([(r["spec_decode"] or {}).get("rate") for r in runs]),
                "stable": not any(f["id"] in ("unstable", "single-pass") for f in flags),
                "flags": flags,
            }
        )
    return summary


def verdict(summary, warmup, telemetry_verdict=None):
    """The benchmark's headline: clean or flagged, and every reason a figure should not be trusted."""
    reasons = []
    if warmup and not warmup.get("settled"):
        judged = warmup.get("generated_tok_s", warmup.get("output_tok_s", []))
        reasons.append(
            "warm-up did not settle within %d passes (%s): the seat is unstable"
            % (len(judged), ", ".join("n/a" if v is None else "%.4g" % v for v in judged))
        )
    for level in summary:
        for flag in level["flags"]:
            reasons.append("c=%d: %s" % (level["concurrency"], flag["reason"]))
    if telemetry_verdict and telemetry_verdict.get("verdict") == "software-bound":
        reasons.extend(telemetry_verdict["reasons"])
    ids = sorted({f["id"] for level in summary for f in level["flags"]})
    return {
        "clean": not reasons,
        "flags": ids
        + (["warmup-unsettled"] if warmup and not warmup.get("settled") else [])
        + (["software-bound"] if telemetry_verdict and telemetry_verdict.get("verdict") == "software-bound" else []),
        "reasons": reasons,
    }
