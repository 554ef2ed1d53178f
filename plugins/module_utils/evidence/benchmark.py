"""benchmark.json of one sweep (pure): the shape the record schema's `$defs/benchmark` checks."""


def benchmark_part(harness, workload, workload_id, endpoint, options, started, finished, passes, sweep, commands):
    """benchmark.json from a finished sweep.

    `sweep` holds what the runner and the analysis produced: `concurrency` (the levels asked for),
    `warmup`, `levels` (every pass of every level), `summary` (per level) and `verdict`.
    """
    return {
        "harness": harness,
        "workload": workload,
        "workload_id": workload_id,
        "endpoint": endpoint,
        "options": options,
        "started_at_epoch": started,
        "finished_at_epoch": finished,
        "concurrency": list(sweep["concurrency"]),
        "passes": passes,
        "warmup": sweep["warmup"],
        "levels": sweep["levels"],
        "summary": sweep["summary"],
        "verdict": sweep["verdict"],
        "commands": [list(argv) for argv in commands],
    }
