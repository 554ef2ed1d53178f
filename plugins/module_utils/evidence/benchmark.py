"""benchmark.json of one sweep (pure): the shape the record schema's `$defs/benchmark` checks."""

from ansible_collections.seatwright.fleet.plugins.module_utils.bench.workload import profile_of


def benchmark_part(
    harness,
    workload,
    workload_id,
    endpoint,
    options,
    started,
    finished,
    passes,
    sweep,
    commands,
    workload_profile=None,
    turns=None,
):
    """benchmark.json from a finished sweep.

    `sweep` holds what the runner and the analysis produced: `concurrency` (the levels asked for),
    `warmup`, `levels` (every pass of every level), `summary` (per level) and `verdict`.
    `workload_profile` names the workload (bench/workload.py); without it, the profile the workload matches.
    `turns` is the incumbent measured in turns with the seat (bench/pairing.py turns_part), when it was.
    """
    part = {
        "harness": harness,
        "workload": workload,
        "workload_id": workload_id,
        # The named workload (bench/workload.py PROFILES): records and field figures compare only within one.
        "workload_profile": workload_profile or profile_of(workload),
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
    if turns is not None:
        part["turns"] = turns
    return part
