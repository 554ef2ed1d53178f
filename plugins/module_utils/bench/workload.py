"""The benchmark's workload and harness identity: what makes two records comparable.

Two records compare only when the same harness version drove the same workload. The workload id
is a digest of everything that shapes the load (prompt and answer lengths, requests per stream,
endpoint, streaming, cache-bust), not of the concurrency list or the number of passes, which
change how much is measured, not what.

Workloads have names (PROFILES): `lab`, the small one the lab's test seats run, and the field's own
contracts, so a seat is measured the way its report measured it and records compare only within one
profile. A workload that departs from its profile's identity keys is recorded as `custom`.
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


DEFAULT_PROFILE = "lab"
CUSTOM_PROFILE = "custom"
UNRECORDED_PROFILE = "field-unrecorded"
# A field request asked for the context and left this much of it for the answer ([003]: one DeepSeek request
# spent "the full 2,048-token completion allowance"), so a requested 32K is a 30,720-token prompt.
FIELD_ANSWER_ALLOWANCE = 2048
_K = 1024
# Each profile fixes the workload's identity keys (its `workload`, over DEFAULTS) and the concurrency levels a
# sweep runs by default. `workload: None`: the report measured without recording its workload, so its
# figures compare with no run and a benchmark cannot be run on it.
PROFILES = {
    "lab": {
        "summary": "128-token prompts, 32-token answers, c=1/4/8/16: quick, for the lab's test seats",
        "source": "seatwright's choice",
        "workload": {},
        "concurrency": DEFAULT_CONCURRENCY,
    },
    "field-answers-512": {
        "summary": "512-token answers generated to the end, c=1/4/8/16",
        "source": "[002] section 2: 'All runs used 512-token answers', concurrency 1, 4, 8 and 16; the prompt "
        "length of its sweep is not recorded, so the lab's 128 tokens stand in",
        "workload": {"output_tokens": 512},
        "concurrency": (1, 4, 8, 16),
    },
    "field-c1-32k": {
        "summary": "one stream at a requested 32K context (prompt plus a 2,048-token answer allowance), answers "
        "end at EOS, 12 requests; TTFT from the first visible content and first output from the first "
        "reasoning or visible delta",
        "source": "[003] capacity-v3 and capacity-v4-reasoning: c1, requested 32K context, 12 requests",
        "workload": {
            "input_tokens": 32 * _K - FIELD_ANSWER_ALLOWANCE,
            "output_tokens": FIELD_ANSWER_ALLOWANCE,
            "ignore_eos": False,
            "requests_per_stream": 12,
            "min_requests": 12,
        },
        "concurrency": (1,),
    },
    "field-c1-128k": {
        "summary": "the longer-context check at a requested 128K context, one stream, 4 requests",
        "source": "[003] longer-context checks: Qwen3.5 at requested 128K, 4/4",
        "workload": {
            "input_tokens": 128 * _K - FIELD_ANSWER_ALLOWANCE,
            "output_tokens": FIELD_ANSWER_ALLOWANCE,
            "ignore_eos": False,
            "requests_per_stream": 4,
            "min_requests": 4,
        },
        "concurrency": (1,),
    },
    "field-c1-240k": {
        "summary": "the longer-context check at a requested 240K context, one stream, 4 requests",
        "source": "[003] longer-context checks: Laguna S at requested 240K, 4/4",
        "workload": {
            "input_tokens": 240 * _K - FIELD_ANSWER_ALLOWANCE,
            "output_tokens": FIELD_ANSWER_ALLOWANCE,
            "ignore_eos": False,
            "requests_per_stream": 4,
            "min_requests": 4,
        },
        "concurrency": (1,),
    },
    UNRECORDED_PROFILE: {
        "summary": "the report does not record the workload of its figures: they compare with no run",
        "source": "[000] records throughput without its prompt or answer lengths",
        "workload": None,
        "concurrency": DEFAULT_CONCURRENCY,
    },
}


def profile_problem(name):
    """Why `name` is not a workload profile (None when it is), naming the known ones."""
    if name in PROFILES:
        return None
    return "%r is not a workload profile; known: %s (plugins/module_utils/bench/workload.py)" % (
        name,
        ", ".join(PROFILES),
    )


def profile(name):
    """The named profile: its full workload (None when unrecorded) and default concurrency levels."""
    problem = profile_problem(name)
    if problem:
        raise ValueError(problem)
    spec = PROFILES[name]
    load = None if spec["workload"] is None else workload(**spec["workload"])
    return dict(spec, name=name, workload=load, concurrency=tuple(spec["concurrency"]))


def bench_profile_for(recipe_profile):
    """The profile a seat is benchmarked on: its recipe's, or the lab's where the report recorded none."""
    return DEFAULT_PROFILE if profile(recipe_profile)["workload"] is None else recipe_profile


def _identity(load):
    return {k: load.get(k) for k in IDENTITY_KEYS}


def profile_of(load, requested=None):
    """The name of the profile whose identity keys `load` has (`requested` first), else CUSTOM_PROFILE."""
    if not isinstance(load, dict):
        return None
    names = ([requested] if requested in PROFILES else []) + list(PROFILES)
    for name in names:
        known = profile(name)["workload"]
        if known is not None and _identity(known) == _identity(dict(DEFAULTS, **load)):
            return name
    return CUSTOM_PROFILE


def workload_profile_of(benchmark):
    """The benchmark's named workload; a part written before profiles had names gets the one its workload matches."""
    if not isinstance(benchmark, dict):
        return None
    return benchmark.get("workload_profile") or profile_of(benchmark.get("workload"))


def record_workload_profile(record):
    """A seat record's named workload, from the record or else its benchmark part (None without a benchmark)."""
    return (record or {}).get("workload_profile") or workload_profile_of((record or {}).get("benchmark"))


def named_workload(name, **overrides):
    """(profile name, workload) for a profile with explicit settings over it; a departure makes it `custom`."""
    spec = profile(name)
    if spec["workload"] is None:
        raise ValueError(
            "workload profile %s has no workload to run (%s): pick one of %s"
            % (name, spec["summary"], ", ".join(n for n in PROFILES if PROFILES[n]["workload"] is not None))
        )
    load = workload(**dict(spec["workload"], **{k: v for k, v in overrides.items() if v is not None}))
    return profile_of(load, name), load


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
