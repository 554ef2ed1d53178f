"""The benchmark's workload and harness identity: what makes two records comparable.

Two records compare only when the same harness version drove the same workload. The workload id
is a digest of everything that shapes the load (prompt and answer lengths, requests per stream,
endpoint, streaming, cache-bust), not of the concurrency list or the number of passes, which
change how much is measured, not what.
"""

import hashlib
import json

HARNESS_NAME = "seatwright-bench"
# Bump when the analysis or the way load is generated changes what a figure means.
# 2: the closed loop refills a freed stream on a 1 ms timer instead of AIPerf's busy loop (CLOSED_LOOP_POLL_HZ).
# 3: visible tokens are counted from the visible text (no longer completion minus reasoning, which went
#    negative), reasoning and visible rates are reported apart, warm-up settles on generated tokens, and
#    a level under the visible-share minimum is flagged reasoning-only (issue 22).
HARNESS_VERSION = "3"
LOAD_GENERATOR = "aiperf"
LOAD_GENERATOR_VERSION = "0.13.0"
DEFAULT_CONCURRENCY = (1, 4, 8, 16)
# AIPerf's cache-bust target that makes every prompt differ from its first token.
CACHE_BUST = "first_turn_prefix"

# AIPerf 0.13 run with --concurrency alone re-checks for a free stream in a busy loop: its timing_manager
# process takes a whole core for the whole run (474 of 500 CPU ticks over 5 s, bench/results/fidelity.md).
# On a small controller that core is taken from AIPerf's own HTTP worker (and, on a shared host, from the
# engine). Adding a request rate far above anything a seat serves turns the busy loop into a timer: a freed
# stream is refilled at the next tick, at most 1/rate later (1 ms here), for 55 of 500 ticks, with the
# same requests in flight (3.97 against 3.98 of 4). 0 leaves AIPerf's busy loop.
CLOSED_LOOP_POLL_HZ = 1000

DEFAULTS = {
    "endpoint": "chat",
    "streaming": True,
    "input_tokens": 128,
    "output_tokens": 32,
    "ignore_eos": True,
    "requests_per_stream": 4,
    "min_requests": 8,
    "cache_bust": CACHE_BUST,
}
# How much a sweep measures, not what (so not part of the workload id); the seat_bench role's defaults
# and tools/seatwright-bench's options both read these.
SWEEP_DEFAULTS = {
    "concurrency": list(DEFAULT_CONCURRENCY),
    "passes": 3,
    "warmup_max": 4,
    "telemetry_interval_s": 1.0,
}
IDENTITY_KEYS = (
    "endpoint",
    "streaming",
    "input_tokens",
    "output_tokens",
    "ignore_eos",
    "requests_per_stream",
    "min_requests",
    "cache_bust",
)


def harness():
    return {
        "name": HARNESS_NAME,
        "version": "%s/%s-%s" % (HARNESS_VERSION, LOAD_GENERATOR, LOAD_GENERATOR_VERSION),
        "load_generator": "%s %s" % (LOAD_GENERATOR, LOAD_GENERATOR_VERSION),
    }


def workload(**overrides):
    """The workload with defaults filled in; unknown keys are refused with their names."""
    unknown = sorted(set(overrides) - set(DEFAULTS))
    if unknown:
        raise ValueError("unknown workload setting(s): %s (known: %s)" % (", ".join(unknown), ", ".join(DEFAULTS)))
    out = dict(DEFAULTS)
    out.update({k: v for k, v in overrides.items() if v is not None})
    for key in ("input_tokens", "output_tokens", "requests_per_stream", "min_requests"):
        if not isinstance(out[key], int) or out[key] < 1:
            raise ValueError("workload %s must be a whole number of at least 1, got %r" % (key, out[key]))
    return out


def workload_id(load):
    blob = json.dumps({k: load[k] for k in IDENTITY_KEYS}, sort_keys=True, separators=(",", ":"))
    return "wl-" + hashlib.sha256(blob.encode("utf-8")).hexdigest()[:12]


def requests_for(load, concurrency):
    """Requests at one concurrency: enough for every stream to send several, never fewer than the floor."""
    return max(load["min_requests"], load["requests_per_stream"] * concurrency)


def parse_concurrency(text):
    """'1,4,8,16' -> (1, 4, 8, 16); a person-readable error for anything else."""
    try:
        levels = tuple(int(part) for part in str(text).split(",") if part.strip())
    except ValueError:
        raise ValueError("--concurrency takes whole numbers separated by commas, like 1,4,8,16; got %r" % text)
    if not levels or any(c < 1 for c in levels):
        raise ValueError("--concurrency needs at least one level, each 1 or more; got %r" % text)
    return tuple(sorted(set(levels)))


def seed_for(base_seed, pass_index, concurrency):
    """A different prompt seed for every pass and level, so no level replays another's prompts."""
    return base_seed + 1000 * pass_index + concurrency
