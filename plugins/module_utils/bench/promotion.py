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
- it was measured at every concurrency level the fleet declares it serves, and its TTFT p95 stays
  within the fleet's bound at each of them;
- at no judged level (the declared ones, or else every level both seats measured) does it lose
  beyond the benchmark's own noise: every pass of it slower than every pass of the incumbent there or, when
  the candidate's run measured the incumbent in turns with it (bench/pairing.py), slower in every
  turn; turns are judged on their ratios, which the host's drift between passes does not move. A mean
  over levels cannot buy back a loss at the level the fleet serves (x1.25 overall, x0.85 at c=16).
  A loss and a win need the same separation, the exact one-sided rank test's 1 in 20 at three passes
  each: a median below the incumbent's slowest pass happens to two seats of equal speed 1 time in 5
  per level (the lab's lab-seqs4, the lab seat's very setting at one stream, "lost" so);
- it beats each incumbent on aggregate output throughput (the geometric mean over the judged
  levels, kept as the summary); by the declared margin when it costs the fleet more (more nodes,
  or co-tenant services evicted). A multi-node seat that evicts co-tenants and does not clear the
  margin is a lab result, not a seat;
- and it wins beyond the noise at one judged level at least: there every pass of the candidate is
  faster than every pass of the incumbent or, in turns, the candidate is faster in every turn. A
  mean that no level's passes separate may be the host's noise: of two seats of equal speed,
  either beats the other on the mean about half the time.
A qualification pass alone never promotes. An incumbent record that is malformed (wrong types,
missing fields, NaN) or dated in the future is not comparable, with the reason, never a crash.
"""

import math

from ansible_collections.seatwright.fleet.plugins.module_utils.bench.analysis import DEFAULT_STABILITY_SPREAD
from ansible_collections.seatwright.fleet.plugins.module_utils.bench.workload import record_workload_profile
from ansible_collections.seatwright.fleet.plugins.module_utils.node.contract import BY_NAME

PROMOTE = "promote"
DO_NOT_PROMOTE = "do not promote"
LAB_RESULT = "lab result"
# The fleet contract holds the defaults, so the playbook, the CLI and the README cannot disagree.
DEFAULT_MAX_AGE_DAYS = BY_NAME["seatwright_fleet_incumbent_max_age_days"].default
DEFAULT_MARGIN = BY_NAME["seatwright_fleet_promotion_margin"].default
DEFAULT_LEVELS = tuple(BY_NAME["seatwright_fleet_promotion_levels"].default)
DEFAULT_TTFT_P95_MS = BY_NAME["seatwright_fleet_promotion_ttft_p95_ms"].default
# A record's clock may run a little ahead of the controller's; beyond this it is dated in the future.
FUTURE_SLACK_S = 300.0
TTFT_BOUND = "ttft_ms_p95"
WIN, WITHIN_NOISE, LOSS, NO_FIGURE = "win", "loss within noise", "loss", "no figure"
HEADLINE = "output_tok_s"
SIDE_BY_SIDE = (
    ("output_tok_s", "output tok/s", True),
    ("ttft_ms_p50", "TTFT p50 ms", False),
    ("decode_tok_s_p50", "decode tok/s/stream p50", True),
)


def parse_levels(text):
    """'1,4,16' -> (1, 4, 16); '' -> () (every level both seats measured); a sentence for anything else."""
    try:
        levels = tuple(int(part) for part in str(text or "").split(",") if part.strip())
    except ValueError:
        levels = None
    if levels is None or any(c < 1 for c in levels) or len(set(levels)) != len(levels):
        raise ValueError(
            "--levels takes the concurrency levels the fleet serves, whole numbers from 1 separated by commas "
            "(like 1,4,16), each once; got %r" % text
        )
    return tuple(sorted(levels))


def qualification_status(record):
    """'passed', 'failed', 'incomplete' or 'missing', from the record's qualification summary."""
    summary = (record.get("summary") or {}).get("qualification")
    return summary if summary in ("passed", "failed", "incomplete") else "missing"


def levels_by_concurrency(record):
    return {lv["concurrency"]: lv for lv in ((record.get("benchmark") or {}).get("summary") or [])}


def _finite(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def figure(level, key, stat="median"):
    value = ((level or {}).get("figures") or {}).get(key, {}).get(stat)
    return value if _finite(value) else None


def _non_finite(value, where):
    """The first place in a parsed JSON value holding NaN or Infinity (None when there is none)."""
    if isinstance(value, float) and not math.isfinite(value):
        return where or "(top)"
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        found = _non_finite(item, "%s/%s" % (where, key) if where else str(key))
        if found:
            return found
    return None


# What the harness can measure (issue 50): a level runs minutes and its clocks count microseconds, so
# a rate below a token in 1000 s or above 1e8 tok/s, or a time below a microsecond or beyond a day, is
# no measurement. Such a figure (1e-300 tok/s made any candidate "win") refuses its record. Zero is a
# measurement (no reasoning tokens).
MEASURABLE = (
    ("_tok_s", 1e-3, 1e8, "tok/s"),
    ("_ms_", 1e-3, 86400e3, "ms"),
    ("_ms", 1e-3, 86400e3, "ms"),
    ("request_s", 1e-6, 86400.0, "s"),
)
_MEASURED_STATS = ("values", "median", "min", "max")


def _bounds(name):
    for part, low, high, unit in MEASURABLE:
        if part in name or name.endswith(part):
            return low, high, unit
    return None


def _unmeasurable(stats, low, high):
    """The first (stat, value) of a figure outside (0 or low..high), or None."""
    for stat in _MEASURED_STATS:
        found = stats.get(stat)
        for value in found if isinstance(found, list) else [found]:
            if _finite(value) and value != 0 and not low <= value <= high:
                return stat, value
    return None


def figure_problems(record):
    """Why a record's benchmark figures are not measurements (empty list: each is within what the
    harness measures), as sentences naming the level, the figure and the bounds."""
    bench = record.get("benchmark") if isinstance(record, dict) else None
    summary = bench.get("summary") if isinstance(bench, dict) else None
    problems = []
    for level in summary if isinstance(summary, list) else []:
        figures = level.get("figures") if isinstance(level, dict) else None
        for name, stats in sorted(figures.items()) if isinstance(figures, dict) else ():
            bounds = _bounds(name)
            found = _unmeasurable(stats, *bounds[:2]) if bounds and isinstance(stats, dict) else None
            if found:
                problems.append(
                    "level c=%s: %s %s is %r %s, outside what the harness measures (0, or %g to %g %s): "
                    "the record is not a measurement; re-measure the seat"
                    % (level.get("concurrency"), name, found[0], found[1], bounds[2], bounds[0], bounds[1], bounds[2])
                )
    return problems


def record_problems(record):
    """Why a record's shape cannot be read by the decision (empty list: it can), as sentences."""
    if not isinstance(record, dict):
        return ["its record is not a JSON object (%s): re-assemble or re-measure it" % type(record).__name__]
    problems = []
    for key, kinds, text in (
        ("harness", (dict, type(None)), "an object"),
        ("benchmark", (dict, type(None)), "an object"),
        ("fleet_cost", (dict, type(None)), "an object"),
        ("measured_at_epoch", (int, float, type(None)), "a number"),
    ):
        if not isinstance(record.get(key), kinds) or isinstance(record.get(key), bool):
            problems.append("its record's %s is %r, not %s: re-measure the incumbent" % (key, record.get(key), text))
    bench = record.get("benchmark") if isinstance(record.get("benchmark"), dict) else {}
    if not isinstance(bench.get("verdict") or {}, dict) or not isinstance(
        (bench.get("verdict") or {}).get("flags") or [], list
    ):
        problems.append("its benchmark verdict is not an object with a list of flags: re-measure the incumbent")
    summary = bench.get("summary") or []
    if not isinstance(summary, list):
        problems.append("its benchmark summary is %r, not a list of levels: re-measure the incumbent" % (summary,))
        summary = []
    for position, level in enumerate(summary):
        concurrency = level.get("concurrency") if isinstance(level, dict) else None
        figures = level.get("figures") if isinstance(level, dict) else None
        if not (isinstance(concurrency, int) and not isinstance(concurrency, bool) and concurrency >= 1) or not (
            isinstance(figures, dict) and all(isinstance(f, dict) for f in figures.values())
        ):
            problems.append(
                "level %d of its benchmark summary has no whole concurrency or no figures: re-measure the incumbent"
                % position
            )
    cost = record.get("fleet_cost") if isinstance(record.get("fleet_cost"), dict) else {}
    if not all(isinstance(cost.get(k) or [], list) for k in ("nodes", "evicted")):
        problems.append("its fleet cost's nodes and evicted are not lists: re-assemble the incumbent's record")
    odd = _non_finite(record, "")
    if odd:
        problems.append("its record holds NaN or Infinity (at %s), which no measurement is: re-measure it" % odd)
    problems.extend("its benchmark's " + problem for problem in figure_problems(record)[:3])
    return problems


def fleet_cost(record):
    cost = record.get("fleet_cost") if isinstance(record.get("fleet_cost"), dict) else {}
    nodes = cost.get("nodes") if isinstance(cost.get("nodes"), list) else []
    evicted = cost.get("evicted") if isinstance(cost.get("evicted"), list) else []
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
    shape = record_problems(incumbent)
    if shape:
        return shape
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
    c_spread, i_spread = stability_spread(candidate), stability_spread(incumbent)
    if c_spread != i_spread:
        problems.append(
            "its levels were held to a %.0f %% spread across passes, the candidate's to %.0f %%: re-measure "
            "the incumbent under the fleet's seatwright_fleet_stability_spread" % (100 * i_spread, 100 * c_spread)
        )
    measured = incumbent.get("measured_at_epoch")
    if not isinstance(measured, (int, float)):
        problems.append("its record has no measurement time: re-measure the incumbent")
    elif measured > now_epoch + FUTURE_SLACK_S:
        problems.append(
            "its record is dated %.1f days in the future (run %s): a record from the future never ages, so it "
            "is not compared; fix the clock that wrote it, remove the run and re-measure the incumbent"
            % ((measured - now_epoch) / 86400.0, incumbent.get("run_id"))
        )
    elif now_epoch - measured > max_age_days * 86400:
        problems.append(
            "its latest record is %.1f days old (limit %g days): re-measure the incumbent"
            % ((now_epoch - measured) / 86400.0, max_age_days)
        )
    if not levels_by_concurrency(incumbent):
        problems.append("its record has no benchmark sweep: re-measure the incumbent")
    return problems


def stability_spread(record):
    """The spread across passes the record's levels were held to (records from before it was kept: the default)."""
    options = (record.get("benchmark") or {}).get("options") or {}
    return options.get("stability_spread", DEFAULT_STABILITY_SPREAD)


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


def candidate_levels(candidate, levels=DEFAULT_LEVELS, ttft_p95_ms=DEFAULT_TTFT_P95_MS):
    """The candidate's own state at each declared level (every level it measured when none is declared):
    whether it was measured there and its TTFT p95 against the fleet's bound, with the blocking reasons."""
    measured = levels_by_concurrency(candidate) if isinstance(candidate.get("benchmark"), dict) else {}
    rows, blocking = [], []
    for concurrency in sorted(set(levels) if levels else set(measured)):
        level = measured.get(concurrency)
        ttft = figure(level, TTFT_BOUND)
        row = {"concurrency": concurrency, "measured": level is not None, "ttft_ms_p95": ttft, "ttft_verdict": None}
        if level is None:
            blocking.append(
                "c=%d is a level the fleet serves (seatwright_fleet_promotion_levels) and the candidate's "
                "benchmark has no c=%d: benchmark it at every declared level" % (concurrency, concurrency)
            )
        elif ttft_p95_ms is not None:
            row["ttft_verdict"] = "within" if ttft is not None and ttft <= ttft_p95_ms else "over"
            if ttft is None:
                row["ttft_verdict"] = NO_FIGURE
                blocking.append(
                    "c=%d: no TTFT p95 to hold to the fleet's %g ms bound: re-measure" % (concurrency, ttft_p95_ms)
                )
            elif ttft > ttft_p95_ms:
                blocking.append(
                    "c=%d: TTFT p95 %.0f ms is over the fleet's %g ms bound (seatwright_fleet_promotion_ttft_p95_ms)"
                    % (concurrency, ttft, ttft_p95_ms)
                )
        rows.append(row)
    return rows, blocking


def level_verdict(candidate_median, incumbent_median, incumbent_lowest, candidate_highest=None):
    """Win, loss within the two seats' pass-to-pass noise, or loss (the candidate's fastest pass below
    the incumbent's slowest; a missing pass figure falls back to the median)."""
    if candidate_median is None or incumbent_median is None:
        return NO_FIGURE
    if candidate_median >= incumbent_median:
        return WIN
    lowest = incumbent_median if incumbent_lowest is None else incumbent_lowest
    fastest = candidate_median if candidate_highest is None else candidate_highest
    return WITHIN_NOISE if fastest >= lowest else LOSS


def apart(candidate_lowest, incumbent_highest):
    """Whether a win is beyond the noise of both seats' passes: the candidate's slowest pass faster
    than the incumbent's fastest (either missing: not known, so not apart)."""
    return candidate_lowest is not None and incumbent_highest is not None and candidate_lowest > incumbent_highest


def judged_levels(candidate, incumbent, levels=DEFAULT_LEVELS):
    """Output throughput at each judged level (the declared ones, else every level both measured):
    ratio, both medians, the incumbent's lowest and highest pass, the verdict and whether the win
    is beyond the noise (`beyond_noise`)."""
    cand, inc = levels_by_concurrency(candidate), levels_by_concurrency(incumbent)
    rows = []
    for concurrency in sorted(set(levels) if levels else set(cand) & set(inc)):
        a, b = figure(cand.get(concurrency), HEADLINE), figure(inc.get(concurrency), HEADLINE)
        lowest = figure(inc.get(concurrency), HEADLINE, "min")
        highest = figure(inc.get(concurrency), HEADLINE, "max")
        slowest = figure(cand.get(concurrency), HEADLINE, "min")
        fastest = figure(cand.get(concurrency), HEADLINE, "max")
        both = concurrency in cand and concurrency in inc
        rows.append(
            {
                "concurrency": concurrency,
                "in_incumbent": concurrency in inc,
                "candidate": a,
                "incumbent": b,
                "incumbent_lowest": lowest,
                "incumbent_highest": highest,
                "candidate_lowest": slowest,
                "candidate_highest": fastest,
                "ratio": (a / b) if (a is not None and b) else None,
                "verdict": level_verdict(a, b, lowest, fastest) if both else NO_FIGURE,
                "beyond_noise": both and apart(slowest, highest),
            }
        )
    return rows


def turn_verdict(ratios):
    """The verdict on one level's turn-by-turn ratios (candidate over incumbent, same prompts, back to
    back): a win when their median is 1 or more, a loss when the candidate was slower in every turn,
    else a loss within noise."""
    ratios = [r for r in ratios if _finite(r)]
    if not ratios:
        return NO_FIGURE
    ordered = sorted(ratios)
    middle = len(ordered) // 2
    median = ordered[middle] if len(ordered) % 2 else (ordered[middle - 1] + ordered[middle]) / 2.0
    if median >= 1.0:
        return WIN
    return LOSS if ordered[-1] < 1.0 else WITHIN_NOISE


def paired_turns(candidate, name):
    """The candidate benchmark's turns with incumbent `name` (measured in the same run), or None."""
    turns = (candidate.get("benchmark") or {}).get("turns")
    if isinstance(turns, dict) and turns.get("seat") == name and isinstance(turns.get("pairs"), list):
        return turns
    return None


def judged_turns(candidate, turns, levels=DEFAULT_LEVELS):
    """judged_levels' rows from turns: both seats' medians in this run, the median of the per-turn
    output ratios, their range, and turn_verdict's verdict."""
    pairs = {row["concurrency"]: row for row in turns["pairs"]}
    own = levels_by_concurrency(candidate)
    inc = {lv["concurrency"]: lv for lv in turns.get("summary") or []}
    rows = []
    for concurrency in sorted(set(levels) if levels else set(pairs)):
        ratio = ((pairs.get(concurrency) or {}).get("figures") or {}).get(HEADLINE, {}).get("ratio") or {}
        values = [v for v in ratio.get("values") or [] if _finite(v)]
        rows.append(
            {
                "concurrency": concurrency,
                "in_incumbent": concurrency in pairs,
                "candidate": figure(own.get(concurrency), HEADLINE),
                "incumbent": figure(inc.get(concurrency), HEADLINE),
                "incumbent_lowest": figure(inc.get(concurrency), HEADLINE, "min"),
                "ratio": ratio.get("median") if _finite(ratio.get("median")) else None,
                "turn_ratios": values,
                "verdict": turn_verdict(values) if concurrency in pairs else NO_FIGURE,
                "beyond_noise": concurrency in pairs and bool(values) and min(values) > 1.0,
            }
        )
    return rows


def _loss_text(name, row):
    if "turn_ratios" in row:
        return (
            "loses to incumbent %s at c=%d turn by turn: output x%.2f (ratios %s in this run, the candidate "
            "slower in every turn): a loss at a level the fleet serves blocks promotion, whatever the mean"
            % (name, row["concurrency"], row["ratio"], ", ".join("%.3g" % v for v in row["turn_ratios"]))
        )
    fastest = row.get("candidate_highest")
    return (
        "loses to incumbent %s at c=%d: output x%.2f (%.4g tok/s%s against its median %.4g and lowest "
        "pass %.4g): a loss beyond the benchmark's noise at a level the fleet serves blocks "
        "promotion, whatever the mean"
        % (
            name,
            row["concurrency"],
            row["ratio"],
            row["candidate"],
            "" if fastest is None else ", fastest pass %.4g," % fastest,
            row["incumbent"],
            row["incumbent_lowest"],
        )
    )


def _no_clear_win_text(name, judged):
    in_turns = any("turn_ratios" in row for row in judged)
    return (
        "wins beyond the noise at no level against incumbent %s: at every judged level %s; a mean that "
        "no level's passes separate may be the host's noise"
        % (
            name,
            "the candidate was slower in one turn at least"
            if in_turns
            else "the candidate's slowest pass is no faster than the incumbent's fastest",
        )
    )


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


def decide(
    candidate,
    incumbents,
    now_epoch,
    max_age_days=DEFAULT_MAX_AGE_DAYS,
    margin=DEFAULT_MARGIN,
    levels=DEFAULT_LEVELS,
    ttft_p95_ms=DEFAULT_TTFT_P95_MS,
):
    """The decision with its reasons and the side-by-side comparison with each incumbent.

    `incumbents` maps each incumbent seat name to its latest record (None when there is none);
    `levels` are the concurrency levels the fleet serves (empty: every level both seats measured)
    and `ttft_p95_ms` its TTFT p95 bound at each of them (None: no bound).
    """
    levels = tuple(sorted(set(levels or ())))
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
        unmeasured = figure_problems(candidate)
        if unmeasured:
            blocked = True
            reasons.extend("the candidate's benchmark: " + problem for problem in unmeasured[:3])
    level_rows, level_blocks = candidate_levels(candidate, levels, ttft_p95_ms) if bench else ([], [])
    if level_blocks:
        blocked = True
        reasons.extend(level_blocks)
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
        # Turns measured in the candidate's own run compare by construction (same harness, workload,
        # spread and hour); the incumbent's latest record then only tells its cost.
        turns = paired_turns(candidate, name)
        if turns is not None:
            problems = []
            readable = record if isinstance(record, dict) and not record_problems(record) else {}
        else:
            problems = comparability(candidate, record, now_epoch, max_age_days)
            readable = record if isinstance(record, dict) and not problems else {}
        i_cost = fleet_cost(readable)
        entry = {
            "incumbent": name,
            "run": readable.get("run_id"),
            "comparable": not problems,
            "basis": "turns" if turns is not None else "latest record",
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
        rows = side_by_side(candidate, {"benchmark": {"summary": turns["summary"]}} if turns else record)
        entry["rows"] = rows
        # A win over figures that moved between the incumbent's own passes may be its noise: shown, not decisive.
        i_flags = benchmark_flags({"benchmark": turns} if turns else record)
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
        judged = judged_turns(candidate, turns, levels) if turns else judged_levels(candidate, record, levels)
        entry["levels"] = judged
        missing = [r["concurrency"] for r in judged if not r["in_incumbent"]]
        if missing:
            beats_all = False
            actions.append("re-measure incumbent %s at every level the fleet serves" % name)
            reasons.append(
                "incumbent %s has no c=%s, a level the fleet serves: it cannot be compared there"
                % (name, ", c=".join(str(c) for c in missing))
            )
        for row in judged:
            if row["verdict"] == LOSS:
                beats_all = False
                reasons.append(_loss_text(name, row))
            elif (
                row["verdict"] == NO_FIGURE
                and row["in_incumbent"]
                and row["concurrency"] in levels_by_concurrency(candidate)
            ):
                beats_all = False
                reasons.append("incumbent %s: no output throughput to compare at c=%d" % (name, row["concurrency"]))
        if not any(row["beyond_noise"] for row in judged):
            beats_all = False
            reasons.append(_no_clear_win_text(name, judged))
        compared = [r for r in judged if r["ratio"] is not None]
        ratio = _geomean([r["ratio"] for r in compared])
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
                "beats incumbent %s on the mean: output throughput x%.2f over concurrency %s (geometric mean; "
                "needs x%.2f; %s)"
                % (name, ratio, "/".join(str(r["concurrency"]) for r in compared), required, cost_text)
            )
        else:
            beats_all = False
            reasons.append(
                "does not beat incumbent %s: output throughput x%.2f over concurrency %s (geometric mean), "
                "needs x%.2f (%s)"
                % (name, ratio, "/".join(str(r["concurrency"]) for r in compared), required, cost_text)
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
        "policy": {
            "max_age_days": max_age_days,
            "margin": margin,
            "levels": list(levels),
            "ttft_p95_ms": ttft_p95_ms,
        },
        "levels": level_rows,
        "needs_margin": needs_margin_overall,
    }
