"""The field's figures beside a run's own (pure): a recipe's qualification.anchors against its record.

A recipe keeps what its field report measured (throughput, TTFT, decode, prefill, scores). They are
read only when the run measured the same workload profile the report did; otherwise a ratio would
compare two different loads, so the comparison says why it is not made instead.
"""

from ansible_collections.seatwright.fleet.plugins.module_utils.bench.workload import (
    PROFILES,
    UNRECORDED_PROFILE,
    record_workload_profile,
)

# Anchor metric -> (the run's figure in a level's summary, label). None: seatwright does not measure it.
METRICS = {
    "aggregate_tok_s": ("output_tok_s", "output tok/s, all streams"),
    "decode_tok_s": ("decode_tok_s_p50", "decode tok/s/stream p50"),
    "ttft_ms": ("ttft_ms_p50", "TTFT p50 ms (first visible)"),
    "ttfo_ms": ("ttfo_ms_p50", "first output p50 ms (reasoning or visible)"),
    "prefill_tok_s": ("prefill_tok_s_p50", "prefill tok/s p50"),
    "flat_score": (None, "flat score"),
}


def _run_figure(levels, anchor):
    """(the run's figure for an anchor, or None, and why it is missing when it is)."""
    key, _label = METRICS.get(anchor["metric"], (None, anchor["metric"]))
    if key is None:
        return None, "seatwright does not run this benchmark"
    level = levels.get(anchor.get("concurrency") or 1)
    if level is None:
        return None, "this run has no level at c=%s" % (anchor.get("concurrency") or 1)
    if key == "prefill_tok_s_p50" and not level.get("prefill_valid"):
        return None, "this run's prefill figure is not valid (prefix-cache hits or unverified)"
    value = ((level.get("figures") or {}).get(key) or {}).get("median")
    return value, None if value is not None else "not measured in this run"


def field_comparison(record):
    """{comparable, reason, field_profile, run_profile, sources, rows}: the recipe's field figures and the run's.

    Each row: metric, label, concurrency, context_tokens, field, run, ratio (run / field), source, note.
    """
    qualification = ((record or {}).get("plan") or {}).get("qualification") or {}
    anchors = [a for a in qualification.get("anchors") or [] if isinstance(a, dict)]
    field_profile = qualification.get("workload_profile")
    run_profile = record_workload_profile(record)
    out = {
        "comparable": False,
        "reason": None,
        "field_profile": field_profile,
        "run_profile": run_profile,
        "count": len(anchors),
        "rows": [],
    }
    if not (record or {}).get("plan"):
        out["reason"] = "this record has no plan, so the recipe's field figures are not at hand"
    elif not anchors:
        out["reason"] = "the recipe records no field figures"
    elif not (record or {}).get("benchmark"):
        out["reason"] = "no benchmark in this run to set them beside"
    elif field_profile == UNRECORDED_PROFILE:
        out["reason"] = "the report did not record the workload they were measured on (profile %s)" % field_profile
    elif field_profile != run_profile:
        out["reason"] = "they were measured on workload profile %s (%s), this run on %s" % (
            field_profile,
            (PROFILES.get(field_profile) or {}).get("summary", "unknown"),
            run_profile,
        )
    if out["reason"]:
        return out
    levels = {lv.get("concurrency"): lv for lv in (record["benchmark"].get("summary") or [])}
    for anchor in anchors:
        run, note = _run_figure(levels, anchor)
        field = anchor.get("value")
        out["rows"].append(
            {
                "metric": anchor["metric"],
                "label": METRICS.get(anchor["metric"], (None, anchor["metric"]))[1],
                "concurrency": anchor.get("concurrency"),
                "context_tokens": anchor.get("context_tokens"),
                "field": field,
                "run": run,
                "ratio": (run / field) if (run is not None and field) else None,
                "source": anchor.get("source"),
                "note": note,
            }
        )
    out["comparable"] = True
    return out
