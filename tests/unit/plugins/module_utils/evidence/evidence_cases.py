"""Records shared by the evidence and bench tests: a benchmark part built the way tools/seatwright-bench
builds it, from a real AIPerf 0.13.0 export, its levels scaled to the output rates a test asks for."""

from ansible_collections.seatwright.fleet.plugins.module_utils.bench import analysis, records
from ansible_collections.seatwright.fleet.plugins.module_utils.bench import workload as wl
from ansible_collections.seatwright.fleet.plugins.module_utils.evidence.benchmark import benchmark_part
from conftest import FIXTURES

AIPERF_C4 = FIXTURES / "bench" / "aiperf-0.13.0-profile_export-vllm-tiny-c4.jsonl"
NOW = 1_796_050_000.0


def benchmark(rates, started=NOW - 3600, harness=None, load=None, spread=0.0):
    """A benchmark part whose levels run at the given output tok/s (three passes each)."""
    recs = records.parse_profile_export(AIPERF_C4.read_text())
    visible = sum(r["output_tokens"] for r in recs)
    clean = {"prefix_cache_queries": 0.0, "prefix_cache_hits": 0.0}
    done = {"prefix_cache_queries": 2000.0, "prefix_cache_hits": 0.0}
    levels = []
    for concurrency, rate in rates.items():
        for index, factor in enumerate((1.0 - spread, 1.0, 1.0 + spread), start=1):
            level = analysis.analyse_level(concurrency, index, recs, clean, done, visible / (rate * factor))
            level["window"] = [started + index, started + index + 1]
            levels.append(level)
    summary = analysis.summarise_sweep(levels)
    load = load or wl.workload()
    warm = {"concurrency": max(rates), "output_tok_s": [1.0, 1.0], "settled": True}
    sweep = {
        "concurrency": list(rates),
        "warmup": warm,
        "levels": levels,
        "summary": summary,
        "verdict": analysis.verdict(summary, warm),
    }
    # As tools/seatwright-bench writes it: through the one builder of benchmark.json.
    return benchmark_part(
        harness or wl.harness(),
        load,
        wl.workload_id(load),
        {"base_url": "http://127.0.0.1:8000/v1", "model": "m"},
        {},
        started,
        started + 600,
        3,
        sweep,
        [],
    )
