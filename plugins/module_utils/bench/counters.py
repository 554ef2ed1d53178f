"""The engine's own counters from its Prometheus `/metrics` text, and what changed between two scrapes.

The benchmark reads these before and after each concurrency level: the prefix-cache counters say
whether the "fresh" prompts really missed the cache (a hit makes the prefill figure a cache read),
and the speculative-decoding counters give the draft acceptance the engine saw.
"""

import math
import re

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import MetricsFormatError

# One home for the counter names each engine exposes (prometheus_client adds `_total` to counters).
ENGINE_COUNTERS = {
    "prefix_cache_queries": ("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
    "prefix_cache_hits": ("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
    "prompt_tokens": ("vllm:prompt_tokens_total", "sglang:prompt_tokens_total"),
    "generation_tokens": ("vllm:generation_tokens_total", "sglang:generation_tokens_total"),
    "spec_drafts": ("vllm:spec_decode_num_drafts_total",),
    "spec_draft_tokens": ("vllm:spec_decode_num_draft_tokens_total",),
    "spec_accepted_tokens": ("vllm:spec_decode_num_accepted_tokens_total",),
    "preemptions": ("vllm:num_preemptions_total",),
}

_SAMPLE = re.compile(r'^(?P<name>[A-Za-z_:][A-Za-z0-9_:]*)(?:\{(?P<labels>.*)\})?\s+(?P<value>\S+)(?:\s+\S+)?$')
_LABEL = re.compile(r'([A-Za-z_][A-Za-z0-9_]*)="((?:[^"\\]|\\.)*)"')


def parse_exposition(text):
    """Samples of a Prometheus text exposition: {name: [(labels dict, float value), ...]}."""
    samples = {}
    for number, raw in enumerate(text.splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if match is None:
            raise MetricsFormatError("line %d is not a Prometheus sample: %r" % (number, raw[:120]))
        try:
            value = float(match.group("value"))
        except ValueError:
            raise MetricsFormatError("line %d has a value that is not a number: %r" % (number, raw[:120]))
        labels = dict(_LABEL.findall(match.group("labels") or ""))
        samples.setdefault(match.group("name"), []).append((labels, value))
    return samples


def engine_counters(samples, model=None):
    """The counters in ENGINE_COUNTERS summed over engines and label sets (None where absent).

    With `model`, only series whose `model_name` label is that model (or that have none) count.
    """
    out = {}
    for key, names in ENGINE_COUNTERS.items():
        total = None
        for name in names:
            for labels, value in samples.get(name, ()):
                if model is not None and labels.get("model_name") not in (None, model):
                    continue
                if math.isnan(value):
                    continue
                total = value if total is None else total + value
            if total is not None:
                break
        out[key] = total
    return out


def counter_delta(before, after):
    """What each counter moved by between two engine_counters() readings (None where unknown).

    A counter that went down means the engine restarted between the scrapes: that is None too,
    with the key listed in `reset`.
    """
    delta, reset = {}, []
    for key in ENGINE_COUNTERS:
        a, b = before.get(key), after.get(key)
        if a is None or b is None:
            delta[key] = None
        elif b < a:
            delta[key] = None
            reset.append(key)
        else:
            delta[key] = b - a
    delta["reset"] = reset
    return delta


def prefix_cache_hit_rate(delta):
    """Share of prompt tokens the prefix cache answered during a level, or None when not counted."""
    queries, hits = delta.get("prefix_cache_queries"), delta.get("prefix_cache_hits")
    if queries is None or hits is None or queries <= 0:
        return None
    return hits / queries


def spec_acceptance(delta):
    """Accepted draft tokens / proposed draft tokens during a level, with the mean accepted length.

    None when the engine proposed no drafts (speculative decoding off).
    """
    drafted, accepted = delta.get("spec_draft_tokens"), delta.get("spec_accepted_tokens")
    if not drafted or accepted is None:
        return None
    drafts = delta.get("spec_drafts")
    return {
        "draft_tokens": drafted,
        "accepted_tokens": accepted,
        "rate": accepted / drafted,
        "mean_accepted_length": (accepted / drafts) if drafts else None,
        "mean_draft_length": (drafted / drafts) if drafts else None,
    }
