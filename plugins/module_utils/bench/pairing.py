"""Turns: a candidate benchmarked side by side with an incumbent in one run, pass by pass.

On a shared host the speed of a seat drifts from one pass to the next (on the two-core lab one
seat's output moved by 11-42 % between passes, and by a factor of three from one day to the next),
so two records made hours apart compare the host as much as the seats. In turns, every level of
every pass runs on both seats back to back with the same prompts (the same seed), the incumbent
first in odd passes and the candidate first in even ones, so that a steady drift favours neither.
Drift that both seats share cancels in each pass's ratio, and the ratio is what is judged:
- a figure is stable across passes when its ratios agree within the stability spread, even if
  each seat's own figures moved with the host (that movement is kept as drift, not as a flag);
- the level's verdict on the ratios is promotion.turn_verdict's.
"""

import json

from ansible_collections.seatwright.fleet.plugins.module_utils.bench.analysis import (
    DEFAULT_STABILITY_SPREAD,
    STABILITY_FIGURES,
    summarise_sweep,
    verdict,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.bench.stats import across_passes

CANDIDATE, INCUMBENT = "candidate", "incumbent"


def turn_order(pass_index):
    """Which seat runs first in a pass: the incumbent in odd passes, the candidate in even ones."""
    return (INCUMBENT, CANDIDATE) if pass_index % 2 else (CANDIDATE, INCUMBENT)


def _by_level(levels):
    table = {}
    for level in levels:
        table.setdefault(level["concurrency"], {})[level["pass"]] = level
    return table


def _value(level, key):
    value = ((level or {}).get("figures") or {}).get(key)
    return float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else None


def pair_figure(cand_passes, inc_passes, key):
    """Each pass's candidate and incumbent figure and their ratio, with the ratios' median and range."""
    turns = []
    for pass_index in sorted(set(cand_passes) | set(inc_passes)):
        a, b = _value(cand_passes.get(pass_index), key), _value(inc_passes.get(pass_index), key)
        turns.append({"pass": pass_index, CANDIDATE: a, INCUMBENT: b, "ratio": a / b if a is not None and b else None})
    return {"turns": turns, "ratio": across_passes([t["ratio"] for t in turns])}


def pair_levels(candidate_levels, incumbent_levels, threshold=DEFAULT_STABILITY_SPREAD):
    """Per concurrency both seats measured: every stability figure's turns and ratio, and whether
    the ratios of each agree within `threshold` across passes (one pass: not known, so not stable)."""
    cand, inc = _by_level(candidate_levels), _by_level(incumbent_levels)
    rows = []
    for concurrency in sorted(set(cand) & set(inc)):
        figures = {key: pair_figure(cand[concurrency], inc[concurrency], key) for key in STABILITY_FIGURES}
        unstable = sorted(
            key
            for key, fig in figures.items()
            if fig["ratio"]["spread"] is None or fig["ratio"]["spread"] > threshold
            if any(t["ratio"] is not None for t in fig["turns"])
        )
        rows.append({"concurrency": concurrency, "figures": figures, "unstable": unstable})
    return rows


def restate_drift(summary, rows, threshold=DEFAULT_STABILITY_SPREAD):
    """A seat's level summary with the host's drift told apart from instability: an `unstable` flag on
    a figure whose turn ratios agree within `threshold` becomes a `drift` note (both seats moved
    together); one whose ratios disagree stays, saying so. Levels without turns keep their flags."""
    by_c = {row["concurrency"]: row for row in rows}
    out = []
    for level in summary:
        row = by_c.get(level["concurrency"])
        if row is None:
            out.append(level)
            continue
        flags, drift = [], []
        for flag in level["flags"]:
            key = flag.get("figure")
            if flag["id"] != "unstable" or key not in row["figures"]:
                flags.append(flag)
            elif key in row["unstable"]:
                flags.append(dict(flag, reason=flag["reason"] + "; " + _ratio_text(row, key, threshold, "and")))
            else:
                drift.append("%s; %s" % (flag["reason"].split(":")[0], _ratio_text(row, key, threshold, "yet")))
        stable = not any(f["id"] in ("unstable", "single-pass") for f in flags)
        out.append(dict(level, flags=flags, drift=drift, stable=stable))
    return out


def _ratio_text(row, key, threshold, joiner):
    ratio = row["figures"][key]["ratio"]
    values = ", ".join("n/a" if v is None else "%.3g" % v for v in ratio["values"])
    spread = "n/a" if ratio["spread"] is None else "%.0f %%" % (100 * ratio["spread"])
    return "%s its ratio to the other seat, turn by turn, spread %s (%s) against the %.0f %% threshold" % (
        joiner,
        spread,
        values,
        100 * threshold,
    )


def turns_part(seat, endpoint, candidate_levels, incumbent_levels, incumbent_warmup, options=None):
    """benchmark.json's `turns`: the incumbent's levels measured in turns, its summary and verdict with
    the drift told apart, and the per-level ratios (`pairs`) the decision judges."""
    options = options or {}
    threshold = options.get("stability_spread", DEFAULT_STABILITY_SPREAD)
    pairs = pair_levels(candidate_levels, incumbent_levels, threshold)
    summary = restate_drift(summarise_sweep(incumbent_levels, options), pairs, threshold)
    return {
        "seat": seat,
        "endpoint": endpoint,
        "order": "the incumbent first in odd passes, the candidate first in even ones; same seed per level",
        "warmup": incumbent_warmup,
        "levels": incumbent_levels,
        "summary": summary,
        "verdict": verdict(summary, incumbent_warmup),
        "pairs": pairs,
    }


def incumbent_problem(status, text, model, problem=None):
    """Why the incumbent cannot be measured in turns, from its /v1/models answer (None: it serves `model`)."""
    if problem:
        return "it does not answer (%s)" % problem
    if status != 200:
        return "its /v1/models answered HTTP %s" % status
    try:
        served = [entry.get("id") for entry in json.loads(text or "").get("data") or [] if isinstance(entry, dict)]
    except (ValueError, AttributeError):
        return "its /v1/models answer is not an OpenAI model list"
    if model not in served:
        return "it serves %s, not %s" % (", ".join(map(str, served)) or "no model", model)
    return None
