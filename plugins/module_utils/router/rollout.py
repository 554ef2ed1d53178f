"""Moving an alias from its seat to a candidate: the refusal, the steps, the live gates and the
rollback, as pure decisions (issue 26). The promotion playbook and io/router drive them.

The order is the one a careful operator follows by hand. The candidate is registered first and
takes no traffic. Then it gets a canary share, is held, and is judged on the answers it gave.
Then it gets all of the alias, and is held and judged again. Only then is the old seat drained
(its engine's running gauge at 0) and deregistered. A gate that fails puts back the targets the
alias had before the first step. A seat is never stopped by a rollout.

The gates are computed with the benchmark's own per-level analysis (bench/analysis.py
analyse_level) on the requests the candidate answered in the hold, so a live window and a
benchmark level mean the same thing by "error rate", "TTFT p95" and "visible tok/s".

The visible tok/s gate compares like with like. Before the first move the incumbent carries the
alias alone for a hold (the baseline): the same probe, the same router, the clients' own traffic.
Each later hold judges the candidate's answers against that figure, as canary analysis compares a
canary with its baseline (Kayenta, Flagger). A seat's benchmark was measured alone, without the
router, other seats or the clients' traffic on the node; it is the reference only when no baseline
was measured.

In a canary the incumbent still answers its share beside the candidate, in the same window, on
the same nodes and router, under the same traffic. When it gave enough answers there, the
candidate is judged against those (Kayenta runs its baseline beside the canary for this reason):
whatever else loads the fleet during the canary, it loads both seats, which a baseline measured a
hold earlier cannot show.
"""

from ansible_collections.seatwright.fleet.plugins.module_utils.bench.analysis import analyse_level
from ansible_collections.seatwright.fleet.plugins.module_utils.bench.promotion import (
    PROMOTE,
    figure,
    levels_by_concurrency,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.bench.records import mean_in_flight
from ansible_collections.seatwright.fleet.plugins.module_utils.bench.stats import figure_text
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import RouterError
from ansible_collections.seatwright.fleet.plugins.module_utils.router import kinds
from ansible_collections.seatwright.fleet.plugins.module_utils.router.adapter import (
    WEIGHT_TOTAL,
    canary_weights,
    check_kind,
)

# Candidate shares (percent) held and judged before the whole alias moves.
DEFAULT_CANARY_SHARES = (10,)
DEFAULT_HOLD_S = 60
# What a hold must show. min_requests: fewer answers than this cannot be judged, so synthetic load
# is sent through the alias. min_visible_ratio: the candidate's per-stream visible tok/s p50 against
# the incumbent's in the baseline hold (else its own benchmark at the traffic seen).
DEFAULT_GATES = {"max_error_rate": 0.0, "ttft_ms_p95": None, "min_visible_ratio": 0.8, "min_requests": 20}
PASS, FAIL, THIN = "pass", "fail", "too thin to judge"


def current_seat(alias, targets):
    """The one seat `alias` sends everything to now; RouterError when it has none or is split."""
    live = sorted(seat for seat, weight in (targets or {}).items() if weight > 0)
    if not live:
        raise RouterError(
            "alias %s has no seat behind it: declare its first seat in the inventory's router aliases "
            "(%s: SEAT), which the router role sets up; a promotion moves an alias that serves" % (alias, alias)
        )
    if len(live) > 1:
        raise RouterError(
            "alias %s is split between %s: a rollout is unfinished. Finish it, or put the alias back on one "
            "seat, before another promotion" % (alias, " and ".join(live))
        )
    return live[0]


def promotion_refusal(promotion, candidate, alias, incumbent):
    """None when `promotion` (the candidate's latest promotion.json) allows moving `alias` from
    `incumbent` to `candidate`; otherwise the sentence that says why not and what to do."""
    if not isinstance(promotion, dict) or not promotion:
        return "seat %s has no promotion record: run its seat playbook (bring-up, qualify, benchmark, decide) first" % (
            candidate
        )
    if promotion.get("seat") != candidate:
        return "the promotion record given is seat %s's, not %s's" % (promotion.get("seat"), candidate)
    if candidate == incumbent:
        return "alias %s already sends everything to %s: nothing to move" % (alias, candidate)
    if promotion.get("decision") != PROMOTE:
        reasons = "; ".join((promotion.get("reasons") or [])[:3]) or "no reason recorded"
        return "seat %s's latest record says %r, not %r (%s)" % (candidate, promotion.get("decision"), PROMOTE, reasons)
    compared = sorted(
        c.get("incumbent") for c in promotion.get("comparisons") or [] if isinstance(c, dict) and c.get("comparable")
    )
    if incumbent not in compared:
        return (
            "seat %s was judged against %s, but alias %s is served by %s now: declare %s as an incumbent "
            "(seatwright_fleet_incumbents) and decide again"
            % (candidate, ", ".join(compared) or "no comparable incumbent", alias, incumbent, incumbent)
        )
    return None


def smg_alias_refusal(kind, alias, candidate, served_aliases):
    """Why an smg alias cannot move onto the candidate as planned, or None.

    smg sends a request to the workers whose first served name is the one asked for, so a candidate
    that does not lead with the alias's name would get none of its traffic (adapter.seat_aliases).
    `served_aliases` is the plan's model.served_aliases (None: a plan from before it was recorded)."""
    described = kinds.find(kind)
    if not (described and described["routes_by_first_served_name"]) or (served_aliases and served_aliases[0] == alias):
        return None
    return (
        "seat %s does not serve %s first (its plan serves %s), and %s routes by a seat's first served name: "
        "launch it again as the alias's candidate (playbooks/seat.yml -e seat=%s -e seat_alias=%s)"
        % (
            candidate,
            alias,
            ", ".join(served_aliases) + " then its own name" if served_aliases else "its own name",
            described["label"],
            candidate,
            alias,
        )
    )


def rollout_steps(
    kind, alias, incumbent, candidate, shares=DEFAULT_CANARY_SHARES, hold_s=DEFAULT_HOLD_S, contended=None
):
    """The ordered steps of one promotion, each {step, action, seat?, targets?, hold_s?, gate?, contended?}.

    On smg, which has no weights, a canary is the candidate serving the alias beside the incumbent:
    its share is one of two workers, whatever `shares` says, and the step says so. `contended`
    (shared_compute) marks the canaries, where both seats compute at once on what they share.
    """
    check_kind(kind)
    weighted = kinds.get(kind)["weights"]
    shares = _check_shares(shares)
    if hold_s < 1:
        raise RouterError("hold of %r s: give 1 s or more, enough answers to judge" % (hold_s,))
    before = {incumbent: WEIGHT_TOTAL}
    # The candidate is registered with no share, and the incumbent is measured carrying the alias: the
    # baseline every later hold is judged against.
    steps = [
        {"step": "register", "action": "register", "seat": candidate, "targets": before},
        {"step": "baseline", "action": "baseline", "seat": incumbent, "targets": before, "hold_s": hold_s},
    ]
    if not weighted:
        shares = (WEIGHT_TOTAL // 2,)
    for share in shares:
        step = {
            "step": "canary %d%%" % share,
            "action": "set_alias",
            "targets": canary_weights(incumbent, candidate, share),
        }
        if not weighted:
            step["note"] = (
                "%s has no weights: the candidate is one of two workers serving the alias name"
                % (kinds.get(kind)["label"])
            )
        if contended:
            step["contended"] = contended
        steps.append(dict(step, hold_s=hold_s, gate=True))
    steps.append(
        {"step": "all", "action": "set_alias", "targets": {candidate: WEIGHT_TOTAL}, "hold_s": hold_s, "gate": True}
    )
    steps.append({"step": "drain", "action": "drain", "seat": incumbent})
    steps.append({"step": "deregister", "action": "deregister", "seat": incumbent})
    return steps


def _check_shares(shares):
    shares = tuple(shares or ())
    if any(isinstance(s, bool) or not isinstance(s, int) or not 0 < s < WEIGHT_TOTAL for s in shares):
        raise RouterError("canary shares %r: give whole percentages between 1 and 99, rising" % (list(shares),))
    if list(shares) != sorted(set(shares)):
        raise RouterError("canary shares %r: give each once, rising (like 5,25)" % (list(shares),))
    return shares


def hold_figures(records, duration_s):
    """What a hold's answers show, by the benchmark's per-level analysis at the concurrency they ran."""
    seen = mean_in_flight(records) or 1.0
    level = analyse_level(max(1, int(round(seen))), 0, records, None, None, duration_s)
    count = level["requests"]
    return {
        "requests": count,
        "failed": level["failed"],
        "error_rate": level["failed"] / count if count else None,
        "ttft_ms_p95": level["figures"]["ttft_ms_p95"],
        "visible_tok_s_p50": level["figures"]["visible_tok_s_p50"],
        "output_tok_s": level["figures"]["output_tok_s"],
        "in_flight": round(seen, 2),
    }


def _thin(figures, duration_s, gates):
    count = figures["requests"]
    if count >= gates["min_requests"]:
        return None
    reason = "%d answers in %.0f s, fewer than the %d a verdict needs" % (count, duration_s, gates["min_requests"])
    return {"verdict": THIN, "reasons": [reason], "figures": figures}


def judge_baseline(records, duration_s, gates=None):
    """The baseline hold's verdict from the incumbent's answers while it carries the alias alone: PASS
    once they are enough to measure (their figures are the baseline), THIN before. The incumbent's own
    errors are recorded, not judged: the promotion is not the incumbent's to fail."""
    gates = dict(DEFAULT_GATES, **(gates or {}))
    figures = hold_figures(records, duration_s)
    thin = _thin(figures, duration_s, gates)
    if thin:
        return thin
    if figures["visible_tok_s_p50"] is None:
        return {
            "verdict": FAIL,
            "reasons": ["the incumbent's answers carry no visible tok/s to judge the candidate against"],
            "figures": figures,
        }
    reason = "baseline: the incumbent's visible tok/s per stream p50 %s at %.1f in flight" % (
        figure_text(figures["visible_tok_s_p50"]),
        figures["in_flight"],
    )
    return {"verdict": PASS, "reasons": [reason], "figures": figures}


def judge_hold(records, duration_s, benchmark_record, gates=None, baseline=None, beside=None, contended=None):
    """A hold's verdict from the requests the candidate answered in it (`records` in the benchmark's
    request shape). {verdict, reasons, figures}: PASS, FAIL (a gate failed: roll back) or THIN (too
    few answers: send synthetic load through the alias and judge again). `beside` is what the
    incumbent answered in the same hold (a canary); `baseline` is the baseline hold's figures
    (judge_baseline); without either the candidate's benchmark is the reference. `contended` (a
    canary on compute the incumbent shares, shared_compute) leaves the visible rate recorded, not
    judged: there it measures the two engines' contention, and the "all" hold judges it alone."""
    gates = dict(DEFAULT_GATES, **(gates or {}))
    figures = hold_figures(records, duration_s)
    incumbent = beside_figures(beside, duration_s, gates)
    if incumbent:
        figures["incumbent_beside"] = incumbent
    thin = _thin(figures, duration_s, gates)
    if thin:
        return thin
    count, reasons = figures["requests"], []
    if figures["error_rate"] > gates["max_error_rate"]:
        reasons.append(
            "error rate %.1f %% (%d of %d) over the gate's %.1f %%"
            % (100 * figures["error_rate"], figures["failed"], count, 100 * gates["max_error_rate"])
        )
    bound = gates["ttft_ms_p95"]
    if bound is not None and (figures["ttft_ms_p95"] is None or figures["ttft_ms_p95"] > bound):
        reasons.append("TTFT p95 %s ms over the gate's %.0f ms" % (figure_text(figures["ttft_ms_p95"]), bound))
    expected, source = visible_reference(benchmark_record, figures["in_flight"], baseline, incumbent)
    figures["expected_visible_tok_s_p50"], figures["expected_from"] = expected, source
    if contended:
        figures["visible_not_judged"] = "both seats compute on %s in this hold" % contended
    elif expected is None:
        reasons.append("no baseline hold and no benchmark visible tok/s figure to judge the candidate against")
    elif figures["visible_tok_s_p50"] is None or figures["visible_tok_s_p50"] < gates["min_visible_ratio"] * expected:
        reasons.append(
            "visible tok/s per stream p50 %s, under %.0f %% of the %.1f of %s"
            % (figure_text(figures["visible_tok_s_p50"]), 100 * gates["min_visible_ratio"], expected, source)
        )
    held = ["every gate held"]
    if contended:
        held = ["error rate and TTFT held; visible tok/s recorded, not judged: %s" % figures["visible_not_judged"]]
    return {"verdict": FAIL if reasons else PASS, "reasons": reasons or held, "figures": figures}


def shared_compute(candidate_ranks, incumbent_ranks):
    """What the candidate computes on that the incumbent computes on too, as text, or None.

    In a canary both seats answer at once, so on shared compute each slows the other: on the lab's two
    cores lab-allcores' second OpenMP thread waits on the core the lab seat's thread is bound to (6.0
    visible tok/s per stream against the lab seat's 33.2 in make lab's canary, 2026-12-04). A seat
    with no GPUs computes on its host's CPU cores; GPU seats share a host's GPUs they both list.
    Ranks are the plans' ({host, gpus}); a seat whose plan is missing shares nothing known.
    """
    mine, theirs = _compute_of(candidate_ranks), _compute_of(incumbent_ranks)
    shared = []
    for host in sorted(set(mine) & set(theirs)):
        if mine[host] is None and theirs[host] is None:
            shared.append("%s's CPU cores" % host)
        elif mine[host] and theirs[host] and mine[host] & theirs[host]:
            shared.append("%s's GPUs %s" % (host, ", ".join(str(g) for g in sorted(mine[host] & theirs[host]))))
    return " and ".join(shared) or None


def _compute_of(ranks):
    """{host: set of GPU indices, or None for a rank that computes on the CPU}."""
    found = {}
    for rank in ranks or ():
        if not isinstance(rank, dict) or not rank.get("host"):
            continue
        gpus = {str(g) for g in rank.get("gpus") or ()}
        if not gpus:
            found[rank["host"]] = None
        elif found.get(rank["host"], set()) is not None:
            found[rank["host"]] = found.get(rank["host"], set()) | gpus
    return found


def beside_figures(records, duration_s, gates):
    """The incumbent's figures from its answers in the candidate's hold, or None when it gave too few
    to stand as the reference (the gate's own min_requests) or none carry a visible tok/s."""
    if not records:
        return None
    figures = hold_figures(records, duration_s)
    if figures["requests"] < gates["min_requests"] or figures["visible_tok_s_p50"] is None:
        return None
    return figures


def visible_reference(benchmark_record, in_flight, baseline=None, beside=None):
    """(visible tok/s per stream p50, what it is) the candidate's answers are judged against: the
    incumbent's beside it in the same hold when it answered enough there, else the incumbent's in the
    baseline hold when one was measured, else the candidate's own benchmark."""
    if beside:
        return beside["visible_tok_s_p50"], "the incumbent beside it in this hold (%d answers, %.1f in flight)" % (
            beside["requests"],
            beside["in_flight"],
        )
    measured = (baseline or {}).get("visible_tok_s_p50")
    if measured is not None:
        return measured, "the incumbent's baseline hold (%.1f in flight)" % (baseline.get("in_flight") or 0)
    expected, at = expected_visible(benchmark_record, in_flight)
    return expected, None if expected is None else "the benchmark at c=%d" % at


def expected_visible(benchmark_record, in_flight):
    """(visible tok/s per stream p50, concurrency) from the benchmark level nearest at or above the
    traffic seen (a busier level expects less per stream, so the gate errs lenient), else the top one."""
    levels = levels_by_concurrency(benchmark_record or {})
    measured = sorted(c for c, lv in levels.items() if figure(lv, "visible_tok_s_p50") is not None)
    if not measured:
        return None, None
    at = next((c for c in measured if c >= in_flight), measured[-1])
    return figure(levels[at], "visible_tok_s_p50"), at


def answered_by(answers, seat):
    """(from the seat, from any other) counts of (seat name or None) answers; None counts as other."""
    mine = sum(1 for who in answers if who == seat)
    return mine, len(answers) - mine
