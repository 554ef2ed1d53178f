"""The promotion decision: a candidate seat's record against the fleet's incumbent seats.

A field write-up once called a two-node seat "the fastest ever measured" after comparing it only
with its own history; the incumbent one-node seat beat it on half the hardware, and adopting it
would have evicted seven services. So a candidate is promoted only when:
- it passed qualification (a failure blocks; a missing record blocks) and its benchmark is clean
  (no unstable level, no invalidated figure, no failed request, no loop replay);
- it was compared, level by level, with every incumbent's latest record measured by the same
  harness version on the same workload, no older than the declared age (otherwise the incumbent
  is marked for re-measurement and nothing is promoted), and whose own benchmark is clean (a
  flagged incumbent is still shown side by side, but a win over its noise does not promote);
- it beats each incumbent on aggregate output throughput; by the declared margin when it costs
  the fleet more (more nodes, or co-tenant services evicted). A multi-node seat that evicts
  co-tenants and does not clear the margin is a lab result, not a seat.
A qualification pass alone never promotes.
"""

import math

from ansible_collections.seatwright.fleet.plugins.module_utils.evidence.record import record_workload_profile
from ansible_collections.seatwright.fleet.plugins.module_utils.node.contract import BY_NAME

PROMOTE = "promote"
DO_NOT_PROMOTE = "do not promote"
LAB_RESULT = "lab result"
# The fleet contract holds the defaults, so the playbook, the CLI and the README cannot disagree.
DEFAULT_MAX_AGE_DAYS = BY_NAME["seatwright_fleet_incumbent_max_age_days"].default
DEFAULT_MARGIN = BY_NAME["seatwright_fleet_promotion_margin"].default
HEADLINE = "output_tok_s"
SIDE_BY_SIDE = (
    ("output_tok_s", "output tok/s", True),
    ("ttft_ms_p50", "TTFT p50 ms", False),
    ("decode_tok_s_p50", "decode tok/s/stream p50", True),
)


def qualification_status(record):
    """'passed', 'failed', 'incomplete' or 'missing', from the record's qualification summary."""
    summary = (record.get("summary") or {}).get("qualification")
    return summary if summary in ("passed", "failed", "incomplete") else "missing"


def levels_by_concurrency(record):
    return {lv["concurrency"]: lv for lv in ((record.get("benchmark") or {}).get("summary") or [])}


def figure(level, key):
    return ((level or {}).get("figures") or {}).get(key, {}).get("median")


def fleet_cost(record):
    cost = record.get("fleet_cost") or {}
    nodes = cost.get("nodes") or []
    evicted = cost.get("evicted") or []
    return {
        "nodes": list(nodes),
        "node_count": len(nodes) or None,
        "evicted": list(evicted),
        "evicted_count": len(evicted),
    }


def comparability(candidate, incumbent, now_epoch, max_age_days):
    """Why an incumbent record cannot be compared with the candidate (empty list: it can)."""
    problems = []
    if incumbent is None:
        return ["no benchmark record of the incumbent: measure it with this harness"]
    c_h, i_h = candidate.get("harness") or {}, incumbent.get("harness") or {}
    if (c_h.get("name"), c_h.get("version")) != (i_h.get("name"), i_h.get("version")):
        problems.append(
            "measured with harness %s %s, the candidate with %s %s: re-measure the incumbent"
            % (i_h.get("name"), i_h.get("version"), c_h.get("name"), c_h.get("version"))
        )
    c_p, i_p = record_workload_profile(candidate), record_workload_profile(incumbent)
    if c_p != i_p:
        problems.append(
            "measured on workload profile %s, the candidate on %s: records compare only within one profile; "
            "re-measure the incumbent with --profile %s" % (i_p, c_p, c_p)
        )
    elif candidate.get("workload_id") != incumbent.get("workload_id"):
        problems.append(
            "measured on another workload (%s, the candidate %s): re-measure the incumbent on the "
            "candidate's workload" % (incumbent.get("workload_id"), candidate.get("workload_id"))
        )
    measured = incumbent.get("measured_at_epoch")
    if not isinstance(measured, (int, float)):
        problems.append("its record has no measurement time: re-measure the incumbent")
    elif now_epoch - measured > max_age_days * 86400:
        problems.append(
            "its latest record is %.1f days old (limit %g days): re-measure the incumbent"
            % ((now_epoch - measured) / 86400.0, max_age_days)
        )
    if not levels_by_concurrency(incumbent):
        problems.append("its record has no benchmark sweep: re-measure the incumbent")
    return problems


def benchmark_flags(record):
    """The flags on a record's benchmark verdict (empty when it is clean), for candidate and incumbent alike."""
    verdict = (record.get("benchmark") or {}).get("verdict") or {}
    return [] if verdict.get("clean") else list(verdict.get("flags") or ["unknown"])


def side_by_side(candidate, incumbent):
    """Rows per common concurrency: each headline figure for both seats and their ratio."""
    cand, inc = levels_by_concurrency(candidate), levels_by_concurrency(incumbent)
    rows = []
    for concurrency in sorted(set(cand) & set(inc)):
        row = {"concurrency": concurrency}
        for key, _label, _higher in SIDE_BY_SIDE:
            a, b = figure(cand[concurrency], key), figure(inc[concurrency], key)
            row[key] = {"candidate": a, "incumbent": b, "ratio": (a / b) if (a is not None and b) else None}
        rows.append(row)
    return rows


def _geomean(values):
    values = [v for v in values if v and v > 0]
    if not values:
        return None
    return math.exp(sum(math.log(v) for v in values) / len(values))


def costs_more(c_cost, i_cost):
    """Whether the candidate costs the fleet more than the incumbent (nodes or evictions)."""
    return (c_cost["node_count"] or 0) > (i_cost["node_count"] or 0) or c_cost["evicted_count"] > i_cost[
        "evicted_count"
    ]


def decide(candidate, incumbents, now_epoch, max_age_days=DEFAULT_MAX_AGE_DAYS, margin=DEFAULT_MARGIN):
    """The decision with its reasons and the side-by-side comparison with each incumbent.

    `incumbents` maps each incumbent seat name to its latest record (None when there is none).
    """
    seat = candidate.get("seat")
    reasons, actions, comparisons = [], [], []
    blocked = False
    qual = qualification_status(candidate)
    failures = (candidate.get("summary") or {}).get("qualification_failures") or ["see qualification.json"]
    if qual == "failed":
        blocked = True
        reasons.append("qualification failed: a seat that fails its gates is never promoted (%s)" % "; ".join(failures))
    elif qual == "incomplete":
        blocked = True
        reasons.append("qualification incomplete (%s): run every part before promotion" % "; ".join(failures))
    elif qual == "missing":
        blocked = True
        reasons.append("no qualification record: a benchmark alone never promotes; qualify the seat first")
    else:
        reasons.append("qualification passed (necessary, not sufficient)")
    bench = candidate.get("benchmark")
    if not bench:
        blocked = True
        reasons.append("no benchmark record: a qualification pass alone never promotes")
    else:
        flags = benchmark_flags(candidate)
        if flags:
            blocked = True
            reasons.append("the benchmark is flagged (%s): its figures cannot carry a promotion" % ", ".join(flags))
    if seat in incumbents:
        return {
            "decision": DO_NOT_PROMOTE,
            "seat": seat,
            "reasons": ["%s is already an incumbent: this record refreshes its figures" % seat] + reasons,
            "actions": [],
            "comparisons": [],
        }
    c_cost = fleet_cost(candidate)
    needs_margin_overall = False
    beats_all = True
    if not incumbents:
        reasons.append("the inventory names no incumbent seat (seatwright_fleet_incumbents): nothing to compare with")
    for name in sorted(incumbents):
        record = incumbents[name]
        problems = comparability(candidate, record, now_epoch, max_age_days)
        i_cost = fleet_cost(record or {})
        entry = {
            "incumbent": name,
            "run": (record or {}).get("run_id"),
            "comparable": not problems,
            "problems": problems,
            "rows": [],
            "cost": {"candidate": c_cost, "incumbent": i_cost},
        }
        comparisons.append(entry)
        if problems:
            beats_all = False
            actions.append("re-measure incumbent %s with this harness and workload" % name)
            reasons.extend("incumbent %s: %s" % (name, p) for p in problems)
            continue
        rows = side_by_side(candidate, record)
        entry["rows"] = rows
        # A win over figures that moved between the incumbent's own passes may be its noise: shown, not decisive.
        i_flags = benchmark_flags(record)
        entry["incumbent_flags"] = i_flags
        if i_flags:
            beats_all = False
            actions.append("re-measure incumbent %s until its benchmark is clean" % name)
            reasons.append(
                "incumbent %s: its benchmark is flagged (%s), so the ratios below carry its noise and "
                "cannot carry a promotion" % (name, ", ".join(i_flags))
            )
        if not rows:
            beats_all = False
            reasons.append("incumbent %s shares no concurrency level with the candidate" % name)
            continue
        ratio = _geomean([row[HEADLINE]["ratio"] for row in rows])
        extra = costs_more(c_cost, i_cost)
        needs_margin_overall = needs_margin_overall or extra
        required = 1.0 + (margin if extra else 0.0)
        entry.update(throughput_ratio=ratio, required_ratio=required, costs_more=extra)
        cost_text = "%s node(s), %d service(s) evicted against %s node(s), %d evicted" % (
            c_cost["node_count"] or "?",
            c_cost["evicted_count"],
            i_cost["node_count"] or "?",
            i_cost["evicted_count"],
        )
        if ratio is None:
            beats_all = False
            reasons.append("incumbent %s: no output throughput to compare" % name)
        elif ratio >= required:
            reasons.append(
                "beats incumbent %s: output throughput x%.2f over concurrency %s (needs x%.2f; %s)"
                % (name, ratio, "/".join(str(r["concurrency"]) for r in rows), required, cost_text)
            )
        else:
            beats_all = False
            reasons.append(
                "does not beat incumbent %s: output throughput x%.2f over concurrency %s, needs x%.2f "
                "(%s)" % (name, ratio, "/".join(str(r["concurrency"]) for r in rows), required, cost_text)
            )
    multi_node_evicting = (c_cost["node_count"] or 0) > 1 and c_cost["evicted_count"] > 0
    if blocked or not beats_all:
        decision = DO_NOT_PROMOTE
        if multi_node_evicting and not blocked:
            decision = LAB_RESULT
            reasons.append(
                "a %d-node seat that evicts %d co-tenant service(s) and does not beat the incumbents "
                "by the %.0f %% margin is a lab result, not a seat"
                % (c_cost["node_count"], c_cost["evicted_count"], 100 * margin)
            )
    else:
        decision = PROMOTE
    return {
        "decision": decision,
        "seat": seat,
        "reasons": reasons,
        "actions": actions,
        "comparisons": comparisons,
        "policy": {"max_age_days": max_age_days, "margin": margin},
        "needs_margin": needs_margin_overall,
    }
