"""A candidate benchmarked in turns with the incumbent (bench/pairing.py, promotion.turn_verdict).

On the two-core lab one seat's output moved by 11-42 % from pass to pass and by a factor of three
from one day to the next (bench/results/router/lab-2026-12-02/noise-floor.md): records made hours
apart compared the host. In turns both seats run each level back to back with the same prompts,
and the decision judges the per-turn ratio, which drift that both seats share does not move.
"""

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.bench import analysis, pairing, promotion, records
from ansible_collections.seatwright.fleet.plugins.module_utils.evidence import report
from ansible_collections.seatwright.fleet.plugins.module_utils.io.bench import runner
from ansible_collections.seatwright.fleet.plugins.module_utils.io.bench.runner import run_sweep
from ansible_collections.seatwright.fleet.plugins.module_utils.io.evidence import writer
from ansible_collections.seatwright.fleet.plugins.module_utils.router import deploy
from evidence_cases import AIPERF_C4, NOW
from test_bench import bench_cli
from test_promotion import DAY, record

RECS = records.parse_profile_export(AIPERF_C4.read_text())
VISIBLE = sum(r["output_tokens"] for r in RECS)
# The host's speed in passes 1-3: both seats run at these shares of their own rate.
DRIFT = (0.6, 1.0, 1.4)


def levels_at(rates, drift=DRIFT, jitter=None):
    """Every pass of every level at `rates` (output tok/s) times the host's drift in that pass;
    `jitter` {(concurrency, pass): factor} moves one seat alone in one turn."""
    levels = []
    for concurrency, rate in rates.items():
        for index, host in enumerate(drift, start=1):
            speed = rate * host * (jitter or {}).get((concurrency, index), 1.0)
            level = analysis.analyse_level(
                concurrency,
                index,
                RECS,
                {"prefix_cache_queries": 0.0, "prefix_cache_hits": 0.0},
                {"prefix_cache_queries": 2000.0, "prefix_cache_hits": 0.0},
                VISIBLE / speed,
            )
            level["window"] = [NOW + index, NOW + index + 1]
            levels.append(level)
    return levels


def candidate_in_turns(cand_rates, inc_rates, jitter=None, incumbent="lab"):
    """A candidate record whose benchmark measured `incumbent` in turns, as tools/seatwright-bench writes it."""
    cand_levels, inc_levels = levels_at(cand_rates, jitter=jitter), levels_at(inc_rates)
    turns = pairing.turns_part(incumbent, {"base_url": "http://i/v1", "model": "m"}, cand_levels, inc_levels, {})
    turns["warmup"] = {"settled": True, "generated_tok_s": [1.0, 1.0]}
    turns["verdict"] = analysis.verdict(turns["summary"], turns["warmup"])
    summary = pairing.restate_drift(analysis.summarise_sweep(cand_levels), turns["pairs"])
    candidate = record("candidate", cand_rates)
    bench = candidate["benchmark"]
    bench.update(levels=cand_levels, summary=summary, turns=turns)
    bench["verdict"] = analysis.verdict(summary, bench["warmup"])
    return candidate


@pytest.mark.parametrize("pass_index, first", [(1, "incumbent"), (2, "candidate"), (3, "incumbent"), (4, "candidate")])
def test_turns_alternate_which_seat_goes_first(pass_index, first):
    assert pairing.turn_order(pass_index)[0] == first
    assert sorted(pairing.turn_order(pass_index)) == ["candidate", "incumbent"]


@pytest.mark.parametrize(
    "ratios, verdict",
    [
        ([1.30, 1.28, 1.35], promotion.WIN),
        ([1.0], promotion.WIN),
        ([0.97, 0.95, 0.99], promotion.LOSS),
        # Slower in two turns, faster in one: the median loses, but not in every turn.
        ([0.95, 1.02, 0.97], promotion.WITHIN_NOISE),
        ([0.99, 1.01], promotion.WIN),
        ([], promotion.NO_FIGURE),
        ([float("nan"), None], promotion.NO_FIGURE),
    ],
)
def test_turn_verdict(ratios, verdict):
    assert promotion.turn_verdict(ratios) == verdict


def test_drift_both_seats_share_is_not_instability():
    cand_levels, inc_levels = levels_at({1: 130.0, 4: 520.0}), levels_at({1: 100.0, 4: 400.0})
    own = analysis.summarise_sweep(cand_levels)
    # On its own, each level moved 80 % with the host: flagged unstable.
    assert not own[0]["stable"] and any(f["id"] == "unstable" for f in own[0]["flags"])
    pairs = pairing.pair_levels(cand_levels, inc_levels)
    ratio = pairs[0]["figures"]["output_tok_s"]["ratio"]
    assert ratio["median"] == pytest.approx(1.3, rel=1e-6) and ratio["spread"] == pytest.approx(0.0, abs=1e-9)
    assert pairs[0]["unstable"] == []
    restated = pairing.restate_drift(own, pairs)
    assert restated[0]["stable"] and not [f for f in restated[0]["flags"] if f["id"] == "unstable"]
    assert any("output_tok_s spread 80 %" in note and "ratio" in note for note in restated[0]["drift"])


def test_a_seat_that_moves_alone_stays_unstable():
    # In pass 2 the candidate alone ran at half speed: its ratio moved, so the flag stays and says so.
    cand_levels = levels_at({1: 130.0}, jitter={(1, 2): 0.5})
    inc_levels = levels_at({1: 100.0})
    pairs = pairing.pair_levels(cand_levels, inc_levels)
    assert "output_tok_s" in pairs[0]["unstable"]
    restated = pairing.restate_drift(analysis.summarise_sweep(cand_levels), pairs)
    flag = [f for f in restated[0]["flags"] if f["id"] == "unstable" and f["figure"] == "output_tok_s"][0]
    assert not restated[0]["stable"] and "turn by turn" in flag["reason"]


def test_a_candidate_that_wins_every_turn_is_promoted_through_the_hosts_drift():
    candidate = candidate_in_turns({1: 104.0, 4: 520.0, 16: 1200.0}, {1: 100.0, 4: 400.0, 16: 940.0})
    # The incumbent's own latest record is a month old: without turns it would be re-measured first.
    incumbent = record("lab", {1: 100.0, 4: 400.0, 16: 940.0}, started=NOW - 30 * DAY)
    out = promotion.decide(candidate, {"lab": incumbent}, NOW, 14, 0.10, levels=(1, 4, 16))
    assert out["decision"] == promotion.PROMOTE, out["reasons"]
    comp = out["comparisons"][0]
    assert comp["basis"] == "turns" and comp["comparable"]
    assert [row["verdict"] for row in comp["levels"]] == [promotion.WIN] * 3
    assert comp["levels"][0]["turn_ratios"] == pytest.approx([1.04] * 3)
    # Without the turns the same records are not comparable (the incumbent's record is too old).
    del candidate["benchmark"]["turns"]
    again = promotion.decide(candidate, {"lab": incumbent}, NOW, 14, 0.10, levels=(1, 4, 16))
    assert again["decision"] == promotion.DO_NOT_PROMOTE and again["comparisons"][0]["basis"] == "latest record"


def test_slower_in_every_turn_at_a_served_level_blocks_whatever_the_mean():
    candidate = candidate_in_turns({1: 97.0, 4: 600.0, 16: 1400.0}, {1: 100.0, 4: 400.0, 16: 940.0})
    out = promotion.decide(candidate, {"lab": record("lab", {1: 100.0})}, NOW, 14, 0.10, levels=(1, 4, 16))
    assert out["decision"] == promotion.DO_NOT_PROMOTE
    assert any("c=1 turn by turn" in r and "slower in every turn" in r for r in out["reasons"]), out["reasons"]
    assert out["comparisons"][0]["throughput_ratio"] > 1.2


def test_in_turns_a_win_on_the_median_needs_a_level_faster_in_every_turn():
    # The candidate 8 % faster at each level, but slower in the turn of pass 3: no level is beyond the noise.
    jitter = {(c, 3): 0.9 for c in (1, 4, 16)}
    rates = {1: 108.0, 4: 432.0, 16: 1015.2}
    base = {1: 100.0, 4: 400.0, 16: 940.0}
    out = promotion.decide(
        candidate_in_turns(rates, base, jitter=jitter), {"lab": record("lab", base)}, NOW, 14, 0.10, levels=(1, 4, 16)
    )
    assert out["decision"] == promotion.DO_NOT_PROMOTE
    assert any("wins beyond the noise at no level" in r and "slower in one turn" in r for r in out["reasons"])
    assert [row["beyond_noise"] for row in out["comparisons"][0]["levels"]] == [False] * 3
    # Faster in every turn at c=16 alone is enough.
    del jitter[(16, 3)]
    again = promotion.decide(
        candidate_in_turns(rates, base, jitter=jitter), {"lab": record("lab", base)}, NOW, 14, 0.10, levels=(1, 4, 16)
    )
    assert [row["beyond_noise"] for row in again["comparisons"][0]["levels"]] == [False, False, True]


def test_turns_with_another_incumbent_leave_the_others_on_their_records():
    candidate = candidate_in_turns({1: 130.0}, {1: 100.0}, incumbent="lab")
    old = record("other", {1: 100.0}, started=NOW - 30 * DAY)
    out = promotion.decide(candidate, {"lab": record("lab", {1: 100.0}), "other": old}, NOW, 14, 0.10, levels=(1,))
    bases = {c["incumbent"]: c["basis"] for c in out["comparisons"]}
    assert bases == {"lab": "turns", "other": "latest record"}
    assert out["decision"] == promotion.DO_NOT_PROMOTE
    assert "re-measure incumbent other with this harness and workload" in out["actions"]


class Seat:
    """A runner that answers every request at a fixed speed and logs what it was asked, in order."""

    def __init__(self, name, log, load):
        self.name, self.log, self.load = name, log, load

    def run(self, label, concurrency, requests, seed):
        self.log.append((self.name, label, concurrency, seed))
        recs = [dict(r, ok=True) for r in RECS[:requests]]
        return {
            "records": recs,
            "before": {},
            "after": {},
            "duration_s": 2.0,
            "window": [1.0, 3.0],
            "artefacts": "/tmp/%s" % label,
        }


def test_the_sweep_in_turns_runs_both_seats_back_to_back_with_the_same_prompts():
    log, load = [], {"requests_per_stream": 2, "min_requests": 2}
    warm, levels, incomplete, turns = run_sweep(
        Seat("candidate", log, load),
        (1, 4),
        2,
        2,
        7,
        {},
        progress=lambda line: None,
        incumbent=Seat("incumbent", log, load),
    )
    assert incomplete is None and len(levels) == 4 and len(turns["levels"]) == 4
    measured = [entry for entry in log if not entry[1].startswith("warmup")]
    assert [(who, label) for who, label, _c, _s in measured] == [
        ("incumbent", "incumbent-pass1-c1"),
        ("candidate", "pass1-c1"),
        ("incumbent", "incumbent-pass1-c4"),
        ("candidate", "pass1-c4"),
        ("candidate", "pass2-c1"),
        ("incumbent", "incumbent-pass2-c1"),
        ("candidate", "pass2-c4"),
        ("incumbent", "incumbent-pass2-c4"),
    ]
    # Each turn's two runs use the same seed: the same prompts on both seats.
    for first, second in zip(measured[::2], measured[1::2]):
        assert first[2:] == second[2:]
    # Both seats were warmed up, the candidate first.
    warmups = [who for who, label, _c, _s in log if label.startswith("warmup")]
    assert warmups[0] == "candidate" and "incumbent" in warmups


def test_bench_tool_needs_both_turns_options(tmp_path):
    out = bench_cli(tmp_path, "--turns-with", "lab")
    assert out.returncode == 2 and "--turns-with SEAT and --turns-url URL go together" in out.stderr
    assert "Traceback" not in out.stderr


def test_the_report_says_the_comparison_was_made_in_turns():
    candidate = candidate_in_turns({1: 104.0, 4: 520.0}, {1: 100.0, 4: 400.0})
    candidate["promotion"] = promotion.decide(candidate, {"lab": record("lab", {1: 100.0})}, NOW, 14, 0.10, (1, 4))
    text = report.render(candidate, [])
    assert "Against incumbent **lab** (measured in turns with the candidate in its own run):" in text
    assert "a loss is the candidate slower in every turn" in text
    assert "| 1 | x1.04 | " in text and "(1.04, 1.04, 1.04)" in text
    assert "In turns with incumbent **lab**" in text and "| 4 | 312 / 240, 520 / 400, 728 / 560 | x1.30" in text
    assert "yes, in turns (host drift)" in text


def test_a_benchmark_with_turns_matches_the_record_schema_and_one_without_pairs_does_not():
    bench = candidate_in_turns({1: 104.0}, {1: 100.0})["benchmark"]
    assert writer.validate_part("benchmark", bench) == []
    del bench["turns"]["pairs"]
    assert any("pairs" in problem for problem in writer.validate_part("benchmark", bench))


@pytest.mark.parametrize(
    "status, text, problem, expected",
    [
        (200, '{"object": "list", "data": [{"id": "m"}, {"id": "alias"}]}', None, None),
        (200, '{"data": [{"id": "other"}]}', None, "it serves other, not m"),
        (200, '{"data": []}', None, "it serves no model, not m"),
        (401, "", None, "its /v1/models answered HTTP 401"),
        (200, "<html>", None, "its /v1/models answer is not an OpenAI model list"),
        (200, "[1, 2]", None, "its /v1/models answer is not an OpenAI model list"),
        (None, None, "ConnectionRefusedError: refused", "it does not answer (ConnectionRefusedError: refused)"),
    ],
)
def test_an_incumbent_that_cannot_take_turns_is_named_with_the_reason(status, text, problem, expected):
    assert pairing.incumbent_problem(status, text, "m", problem) == expected


def test_a_dead_incumbent_is_named_before_any_load():
    # The incumbent's port is closed: the tool says so before any load, and runs the seat alone.
    assert runner.turns_problem("http://127.0.0.1:9/v1", "m").startswith("it does not answer (")


@pytest.mark.parametrize(
    "listed, base",
    [
        # LiteLLM lists a seat's api_base as given; smg lists its workers at the engine's root.
        ("http://10.0.0.11:8000/v1", "http://10.0.0.11:8000/v1"),
        ("http://10.0.0.11:8000/v1/", "http://10.0.0.11:8000/v1"),
        ("http://10.0.0.11:8000", "http://10.0.0.11:8000/v1"),
        ("http://10.0.0.11:8000/", "http://10.0.0.11:8000/v1"),
    ],
)
def test_the_incumbent_listed_by_either_router_is_reached_at_its_openai_base(listed, base):
    assert deploy.openai_base(listed) == base
    assert deploy.smg_url(deploy.openai_base(listed)) == base[: -len("/v1")]
