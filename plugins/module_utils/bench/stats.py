"""Percentiles, medians and spreads, computed the way numpy and the reference harnesses do.

Percentiles interpolate linearly between order statistics (numpy's default), so p50 here is the
median AIPerf and vLLM's benchmark print for the same samples.
"""

PERCENTILES = (50, 95, 99)


def percentile(values, q):
    """The q-th percentile (0..100) of `values` by linear interpolation; None for no values."""
    data = sorted(v for v in values if v is not None)
    if not data:
        return None
    if len(data) == 1:
        return float(data[0])
    rank = (len(data) - 1) * (q / 100.0)
    low = int(rank)
    high = min(low + 1, len(data) - 1)
    return float(data[low] + (data[high] - data[low]) * (rank - low))


def median(values):
    return percentile(values, 50)


def distribution(values):
    """count, mean, min, max and p50/p95/p99 of the non-None values."""
    data = [float(v) for v in values if v is not None]
    out = {"count": len(data), "mean": None, "min": None, "max": None}
    if data:
        out.update(mean=sum(data) / len(data), min=min(data), max=max(data))
    for q in PERCENTILES:
        out["p%d" % q] = percentile(data, q)
    return out


def spread(values):
    """(max - min) / median of the non-None values: how far passes disagree; None under two values."""
    data = [float(v) for v in values if v is not None]
    if len(data) < 2:
        return None
    mid = median(data)
    if not mid:
        return None
    return (max(data) - min(data)) / abs(mid)


def across_passes(values):
    """Median, range and spread of one figure measured in several passes."""
    data = [v for v in values if v is not None]
    return {
        "values": data,
        "median": median(data),
        "min": min(data) if data else None,
        "max": max(data) if data else None,
        "spread": spread(data),
    }


def figure_text(value, fmt="%.1f"):
    """A figure for a progress line: '—' when it is missing (a missing rate is not a rate of 0.0)."""
    return "—" if value is None else fmt % value
