"""Detectors that turn an engine's answer into facts, each decided by code.

- NaN logits: an error body about out-of-range floats (vLLM answers a prompt-logprobs request on
  NaN logits with HTTP 400 "Out of range float values are not JSON compliant"; SGLang's handler
  raises the same ValueError inside the response encoder and answers a bare HTTP 500), or a
  NaN/infinite log-probability in a body that was encoded with NaN allowed.
- Degenerate output: one token repeated in a long run ("lock lock lock ...") or a loop, an
  n-gram sequence repeating back to back.
- Structured output checked with jsonschema; tool calls checked against the tool and the
  arguments the prompt implies.
"""

import json
import math
import re

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import QualifyError
from ansible_collections.seatwright.fleet.plugins.module_utils.qualify.reading import error_message

try:
    from jsonschema import Draft202012Validator

    HAS_JSONSCHEMA = True
except ImportError:
    Draft202012Validator = None
    HAS_JSONSCHEMA = False

NAN_MESSAGE = re.compile(r"out of range float|not json compliant|\bnan\b|\binf(inity)?\b", re.IGNORECASE)
# a run of punctuation ("-----", "...") is one token, so rulers and ellipses are not repetition
_TOKEN = re.compile(r"\w+|[^\w\s]+")
_NUMBER = re.compile(r"-?\d[\d,]*(?:\.\d+)?")

DEFAULT_THRESHOLDS = {
    # a token repeated this many times in a row is degenerate ("lock" x 400 in the field)
    "max_token_run": 12,
    # a sequence of up to `loop_max_period` tokens repeated back to back at least `loop_min_repeats`
    # times, covering at least `loop_min_tokens` tokens, is a loop
    "loop_max_period": 40,
    "loop_min_repeats": 4,
    "loop_min_tokens": 24,
}


# ---- NaN ----------------------------------------------------------------------------------------


def nan_from_error(status, body_text):
    """A finding when an HTTP error answers a logprobs request the way NaN logits do, else None.

    Returns {"nan": True|None, "status": ..., "message": ...}: True when the message names an
    out-of-range float (proof), None when the server failed with a bare 500 (suspected only).
    """
    if status is None or status < 400:
        return None
    message = error_message(body_text)
    if NAN_MESSAGE.search(message or ""):
        return {"nan": True, "status": status, "message": message}
    if status >= 500:
        return {"nan": None, "status": status, "message": message}
    return None


def _bad_float(value):
    return isinstance(value, float) and (math.isnan(value) or math.isinf(value) and value > 0)


def _walk_logprobs(value, path, found):
    if len(found) >= 5:
        return
    if isinstance(value, dict):
        for key, item in value.items():
            if key == "logprob" and (_bad_float(item) or isinstance(item, str) and item.lower() in ("nan", "inf")):
                found.append({"path": path + "." + key, "value": str(item)})
            else:
                _walk_logprobs(item, "%s.%s" % (path, key), found)
    elif isinstance(value, list):
        for index, item in enumerate(value):
            _walk_logprobs(item, "%s[%d]" % (path, index), found)


def logprob_summary(body):
    """What a 200 body says about log-probabilities: how many prompt and output ones came back,
    and the first NaN (or +inf) values with their paths."""
    choices = body.get("choices") if isinstance(body, dict) else None
    choice = choices[0] if choices else {}
    prompt = body.get("prompt_logprobs") if isinstance(body, dict) else None
    if prompt is None and isinstance(choice, dict):
        prompt = choice.get("prompt_logprobs")
    output = ((choice.get("logprobs") or {}).get("content") or []) if isinstance(choice, dict) else []
    found = []
    _walk_logprobs(prompt, "prompt_logprobs", found)
    _walk_logprobs(output, "choices[0].logprobs.content", found)
    return {
        "prompt_logprobs": len([p for p in prompt or [] if p]) if isinstance(prompt, list) else 0,
        "output_logprobs": len(output),
        "bad_values": found,
    }


# ---- degenerate output -------------------------------------------------------------------------


def tokens_of(text):
    """Words and punctuation marks: a tokenizer-free stand-in good enough to see repetition."""
    return _TOKEN.findall((text or "").lower())


def longest_run(tokens):
    """(token, count) of the longest run of one token repeated back to back."""
    best, best_count, current, count = None, 0, None, 0
    for token in tokens:
        if token == current:
            count += 1
        else:
            current, count = token, 1
        if count > best_count:
            best, best_count = current, count
    return best, best_count


def longest_loop(tokens, max_period):
    """The longest stretch where tokens repeat with a period of 2..max_period tokens.

    Returns {"period", "start", "span"} where span counts the tokens from the loop's start to its
    end (period tokens plus every repeated token), or None when nothing repeats.
    """
    best = None
    size = len(tokens)
    for period in range(2, max(2, max_period) + 1):
        run = 0
        for index in range(size - period):
            if tokens[index] == tokens[index + period]:
                run += 1
                span = run + period
                if best is None or span > best["span"]:
                    best = {"period": period, "start": index - run + 1, "span": span}
            else:
                run = 0
    return best


def degenerate(text, thresholds=None):
    """Facts about repetition in `text` and whether it is degenerate.

    {"degenerate": bool, "reasons": [...], "tokens": n, "longest_run": {...},
     "loop": {...} or None, "distinct_ratio": unique/total}
    """
    limits = dict(DEFAULT_THRESHOLDS)
    limits.update(thresholds or {})
    tokens = tokens_of(text)
    token, count = longest_run(tokens)
    loop = longest_loop(tokens, limits["loop_max_period"])
    reasons = []
    if count >= limits["max_token_run"]:
        reasons.append("the token %r repeats %d times in a row" % (token, count))
    loop_fact = None
    if loop:
        repeats = loop["span"] / float(loop["period"])
        sample = " ".join(tokens[loop["start"] : loop["start"] + loop["period"]])
        loop_fact = {
            "period": loop["period"],
            "repeats": round(repeats, 1),
            "span_tokens": loop["span"],
            "sample": sample[:200],
        }
        repeated = tokens[loop["start"] : loop["start"] + loop["period"]]
        if (
            repeats >= limits["loop_min_repeats"]
            and loop["span"] >= limits["loop_min_tokens"]
            and len(set(repeated)) > 1
        ):  # one token over and over is the run above
            reasons.append(
                "a %d-token sequence (%r) repeats %.1f times back to back over %d tokens"
                % (loop["period"], sample[:60], repeats, loop["span"])
            )
    return {
        "degenerate": bool(reasons),
        "reasons": reasons,
        "tokens": len(tokens),
        "longest_run": {"token": token, "count": count},
        "loop": loop_fact,
        "distinct_ratio": round(len(set(tokens)) / float(len(tokens)), 3) if tokens else None,
    }


# ---- structured output and tool calls -----------------------------------------------------------


def parse_json_answer(text):
    """(value, None) for a text that is one JSON value (surrounding whitespace allowed), else (None, why)."""
    try:
        return json.loads(text.strip()), None
    except ValueError as exc:
        return None, "not JSON: %s" % exc


def find_json_object(text):
    """The first JSON object inside free text (for instructions followed without constrained decoding)."""
    decoder = json.JSONDecoder()
    for match in re.finditer(r"\{", text or ""):
        try:
            value, _ = decoder.raw_decode(text[match.start() :])
        except ValueError:
            continue
        if isinstance(value, dict):
            return value
    return None


def schema_errors(value, schema):
    """Every way `value` breaks `schema`, as 'path: message' lines (empty when valid)."""
    if not HAS_JSONSCHEMA:
        raise QualifyError(
            "the Python package jsonschema is missing on the controller; install the pinned "
            "versions with `pip install -r requirements.txt`"
        )
    errors = []
    for error in sorted(Draft202012Validator(schema).iter_errors(value), key=lambda e: list(e.absolute_path)):
        path = "/".join(str(p) for p in error.absolute_path) or "(root)"
        errors.append("%s: %s" % (path, error.message))
    return errors


def check_tool_call(reply, name, expected_args):
    """Problems with the reply's tool call (empty list when it is right).

    `expected_args` maps each required argument to the value the prompt implies; strings compare
    case-insensitively after trimming, numbers by value.
    """
    calls = reply["tool_calls"]
    if not calls:
        return ["no tool call (finish_reason %r; content %r)" % (reply["finish_reason"], reply["content"][:120])]
    problems = []
    if reply["finish_reason"] == "length":
        problems.append("the reply was cut at the token limit after %d call(s)" % len(calls))
    if len(calls) > 1 and len({(c["name"], c["arguments"]) for c in calls}) < len(calls):
        problems.append(
            "%d calls where one was asked, %d of them repeats"
            % (len(calls), len(calls) - len({(c["name"], c["arguments"]) for c in calls}))
        )
    call = calls[0]
    if call["name"] != name:
        problems.append("called %r instead of %r" % (call["name"], name))
    try:
        arguments = json.loads(call["arguments"] or "")
    except ValueError as exc:
        return problems + ["arguments are not JSON (%s): %r" % (exc, call["arguments"][:200])]
    if not isinstance(arguments, dict):
        return problems + ["arguments are %s, not an object" % type(arguments).__name__]
    for key, want in expected_args.items():
        if key not in arguments:
            problems.append("argument %r missing (got %s)" % (key, sorted(arguments)))
        elif not same_value(arguments[key], want):
            problems.append("argument %r is %r, expected %r" % (key, arguments[key], want))
    return problems


def same_value(got, want):
    """Loose equality for answers: strings trimmed and case-folded, numbers by value."""
    if isinstance(want, (int, float)) and not isinstance(want, bool):
        number = to_number(got)
        return number is not None and abs(number - want) < 1e-9
    got_text, want_text = str(got).strip().casefold(), str(want).strip().casefold()
    # "Paris, France" answers "Paris"; "Paris Hilton" does not
    return got_text == want_text or got_text.split(",")[0].strip() == want_text


def to_number(value):
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    match = _NUMBER.search(str(value))
    return float(match.group(0).replace(",", "")) if match else None


def numbers_in(text):
    """Every number written in `text`, in order, as floats ('1,234.5' -> 1234.5)."""
    return [float(m.group(0).replace(",", "")) for m in _NUMBER.finditer(text or "")]


def contains_word(text, word):
    """True when `word` appears in `text` as a whole word, case-insensitively."""
    return re.search(r"(?<!\w)%s(?!\w)" % re.escape(word), text or "", re.IGNORECASE) is not None
