"""AIPerf's per-request records (profile_export.jsonl) as seatwright's request records.

AIPerf and seatwright name the two first-token times the other way round, so the mapping lives
here and nowhere else:
- AIPerf `time_to_first_token` is the first streamed token of any kind, reasoning included:
  seatwright's `ttfo_ms` (time to first output);
- AIPerf `time_to_first_output_token` is the first non-reasoning token: seatwright's `ttft_ms`
  (first-visible TTFT), the one a user waits for.
Token counts, each from one counter, never as a difference of two:
- `generated_tokens` is the server's `usage.completion_tokens` (reasoning and answer alike);
- `reasoning_tokens` is AIPerf's count of the streamed reasoning text with the served tokenizer
  (vLLM 0.32 reports `reasoning_tokens: 0` in its usage however much it reasoned); the server's
  `reasoning_tokens` only when no reasoning text was streamed;
- `output_tokens` (visible) is AIPerf's count of the streamed visible text with the served
  tokenizer, 0 when no visible text came. When no reasoning text came at all, every generated
  token is visible and the server's count is kept: a random-weight model's byte soup re-tokenises
  to more tokens than it generated, and the engine's own count is the exact one.
Failed requests stay, with their error.
"""

import json

AIPERF_TTFO = "time_to_first_token"
AIPERF_TTFT = "time_to_first_output_token"


def _value(metrics, *names):
    for name in names:
        entry = metrics.get(name)
        if isinstance(entry, dict) and entry.get("value") is not None:
            return entry["value"]
    return None


def _ms(metrics, name):
    entry = metrics.get(name)
    if not isinstance(entry, dict) or entry.get("value") is None:
        return None
    value, unit = float(entry["value"]), entry.get("unit", "ms")
    return {"ns": value / 1e6, "us": value / 1e3, "ms": value, "s": value * 1e3, "sec": value * 1e3}.get(unit, value)


def request_from_aiperf(entry, texts=None):
    """One seatwright request record from one AIPerf MetricRecordInfo (a parsed JSONL line)."""
    meta = entry.get("metadata") or {}
    metrics = entry.get("metrics") or {}
    error = entry.get("error")
    generated = _value(metrics, "usage_completion_tokens", "output_sequence_length")
    counted_visible = _value(metrics, "output_token_count")
    # The server's reasoning count only where no reasoning text was streamed to count (a hidden one).
    reasoning = _value(metrics, "reasoning_token_count") or _value(metrics, "usage_reasoning_tokens") or 0
    if reasoning:
        visible = counted_visible or 0
    else:
        visible = generated if counted_visible and generated is not None else counted_visible or 0
    start, end = meta.get("request_start_ns"), meta.get("request_end_ns")
    request_id = meta.get("x_request_id")
    return {
        "id": request_id,
        "ok": error is None and not meta.get("was_cancelled", False),
        "error": None
        if error is None
        else (
            "%s%s: %s"
            % (error.get("type") or "error", " %s" % error["code"] if error.get("code") else "", error.get("message"))
        ),
        "status": None if error is None else error.get("code"),
        "start_ns": start,
        "end_ns": end,
        "ttft_ms": _ms(metrics, AIPERF_TTFT),
        "ttfo_ms": _ms(metrics, AIPERF_TTFO),
        "latency_ms": _ms(metrics, "request_latency"),
        "input_tokens": _value(metrics, "usage_prompt_tokens", "input_sequence_length"),
        "output_tokens": visible,
        "reasoning_tokens": reasoning,
        "generated_tokens": generated if generated is not None else visible + reasoning,
        "text": (texts or {}).get(request_id),
    }


def parse_profile_export(text, texts=None):
    """Every request of one AIPerf run (profiling phase only; warm-up requests are AIPerf's own)."""
    out = []
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            raise ValueError("AIPerf record line %d is not JSON: %r" % (number, line[:120]))
        phase = (entry.get("metadata") or {}).get("benchmark_phase")
        if phase not in (None, "profiling"):
            continue
        out.append(request_from_aiperf(entry, texts))
    return out


def texts_from_raw_export(text, limit_chars=4000):
    """The streamed visible text of each request in AIPerf's raw export, by request id (for loop checks)."""
    texts = {}
    for line in text.splitlines():
        if not line.strip():
            continue
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        request_id = (entry.get("metadata") or {}).get("x_request_id")
        parts = []
        for response in entry.get("responses") or []:
            for packet in response.get("packets") or []:
                value = packet.get("value")
                if packet.get("name") != "data" or not value or value == "[DONE]":
                    continue
                try:
                    chunk = json.loads(value)
                except ValueError:
                    continue
                for choice in chunk.get("choices") or []:
                    delta = choice.get("delta") or {}
                    parts.append(delta.get("content") or choice.get("text") or "")
        if request_id:
            texts[request_id] = "".join(parts)[:limit_chars]
    return texts


def window(records):
    """(first request start, last request end) in epoch seconds, or None without timestamps."""
    starts = [r["start_ns"] for r in records if r.get("start_ns")]
    ends = [r["end_ns"] for r in records if r.get("end_ns")]
    if not starts or not ends:
        return None
    return min(starts) / 1e9, max(ends) / 1e9


def mean_in_flight(records):
    """Requests in flight on average over the records' window: the sum of their durations / the window.

    A closed loop at concurrency c that keeps its streams busy reads close to c; a load generator
    starved of CPU (gaps between one request's end and the next one's start) reads less, and then
    measures a lighter load than it was asked for. None without timestamps.
    """
    spans = [(r["start_ns"], r["end_ns"]) for r in records if r.get("start_ns") and r.get("end_ns")]
    if not spans:
        return None
    width = max(end for _, end in spans) - min(start for start, _ in spans)
    if width <= 0:
        return None
    return sum(end - start for start, end in spans) / float(width)


def strip_text(records):
    """The records without their text (the record keeps figures; text only feeds the loop check)."""
    return [{k: v for k, v in r.items() if k != "text"} for r in records]
