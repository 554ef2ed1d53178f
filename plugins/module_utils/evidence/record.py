"""One seat run's record: the parts in its evidence folder assembled into record.json (pure).

An evidence folder `evidence/<seat>/<UTC>/` collects what each stage wrote: `plan.json`,
`bringup.json`, `qualification.json`, `benchmark.json`, and after a decision `promotion.json`.
`assemble` turns whichever of them exist into one record (schemas/record.schema.json) with the
launch (exact argv and env per rank, image id, model revision), the fleet cost (nodes used,
co-tenant services evicted) and a summary the promotion decision reads. A missing part is null
and listed, never guessed.
"""

from ansible_collections.seatwright.fleet.plugins.module_utils.bench.telemetry import summarise as summarise_telemetry
from ansible_collections.seatwright.fleet.plugins.module_utils.bench.workload import workload_profile_of

RECORD_SCHEMA = "seatwright-record/1"
PARTS = ("plan", "bringup", "qualification", "benchmark", "telemetry", "promotion")
# Parts only some runs have: in the record (under their key) only when their file exists.
OPTIONAL_PARTS = {"promotion-rollout": "rollout"}
_PASSED = ("pass", "passed", "ok", "success", True)
_FAILED = ("fail", "failed", "error", False)
_QUALIFY_VERDICTS = {"qualified": "passed", "not-qualified": "failed", "incomplete": "incomplete"}


def part_file(part):
    return "%s.json" % part


def _first(mapping, *keys):
    for key in keys:
        if isinstance(mapping, dict) and mapping.get(key) is not None:
            return mapping[key]
    return None


def qualification_summary(qualification):
    """'passed' / 'failed' / 'incomplete' / 'missing' and the reasons, from qualification.json.

    tools/seatwright-qualify writes `result: {verdict: qualified|not-qualified|incomplete, reasons}`;
    other shapes are read from `passed` (bool) or `verdict` at the top, else a `gates` list (each with
    `passed` or `verdict`): one failed gate fails the seat; no verdict at all counts as missing.
    """
    if not isinstance(qualification, dict):
        return "missing", []
    result = qualification.get("result")
    if isinstance(result, dict) and result.get("verdict") in _QUALIFY_VERDICTS:
        return _QUALIFY_VERDICTS[result["verdict"]], [str(r) for r in result.get("reasons") or []]
    gates = qualification.get("gates") or []
    failures = []
    for gate in gates if isinstance(gates, list) else []:
        if not isinstance(gate, dict):
            continue
        value = _first(gate, "passed", "verdict", "status")
        if isinstance(value, str):
            value = value.lower()
        if value in _FAILED:
            failures.append(str(_first(gate, "id", "name", "gate") or "unnamed gate"))
    top = _first(qualification, "passed", "verdict", "status")
    if isinstance(top, str):
        top = top.lower()
    if top in _FAILED or failures:
        return "failed", failures
    if top in _PASSED:
        return "passed", []
    if (
        gates
        and not failures
        and all(isinstance(g, dict) and _first(g, "passed", "verdict", "status") is not None for g in gates)
    ):
        return "passed", []
    return "missing", []


def launch_of(plan, bringup):
    """Exact argv and env per rank, the image id and the model revision (bring-up first, else the plan).

    bringup.json has one shape (evidence/bringup.py); the plan names the image it was checked
    against in engine.image_checked.
    """
    source = "bringup.json" if isinstance(bringup, dict) and bringup.get("ranks") else "plan.json"
    ranks = (_first(bringup, "ranks") if source == "bringup.json" else _first(plan, "ranks")) or []
    out_ranks = []
    for rank in ranks if isinstance(ranks, list) else []:
        if isinstance(rank, dict):
            out_ranks.append(
                {"host": rank.get("host"), "rank": rank.get("rank"), "argv": rank.get("argv"), "env": rank.get("env")}
            )
    image = _first(bringup, "image_id") or _first(_first(_first(plan, "engine") or {}, "image_checked") or {}, "id")
    revision = _first(bringup, "model_revision") or _first(_first(plan, "model") or {}, "revision")
    return {"source": source if out_ranks else None, "ranks": out_ranks, "image_id": image, "model_revision": revision}


def _evicted_in(part, *path):
    """The evicted list at `path` in a part, or None when the part does not say."""
    if not isinstance(part, dict):
        return None
    value = part
    for key in path:
        value = _first(value, key) if isinstance(value, dict) else None
    return value if isinstance(value, list) else None


def fleet_cost_of(plan, bringup):
    """Nodes the seat occupies and the co-tenant services adopting it evicts.

    The plan's declared evictions are the cost: a co-tenant that happened to be down when the seat
    came up would otherwise make the seat look free. Bring-up's own list (what it stopped this
    time) is kept beside it, and stands in only when the plan does not say.
    """
    nodes = sorted(
        {
            r.get("host")
            for r in (_first(bringup, "ranks") or _first(plan, "ranks") or [])
            if isinstance(r, dict) and r.get("host")
        }
    )
    declared = _evicted_in(plan, "fleet_cost", "cotenants", "evicted")
    stopped = _evicted_in(bringup, "evicted")
    if declared is not None:
        evicted, source = declared, "plan.json"
    elif stopped is not None:
        evicted, source = stopped, "bringup.json"
    else:
        evicted, source = None, None
    return {
        "nodes": nodes,
        "evicted": [e for e in (evicted or []) if e],
        "source": source,
        "evicted_known": evicted is not None,
        "stopped_at_bringup": None if stopped is None else [e for e in stopped if e],
    }


def assemble(seat, run_id, parts, created_at):
    """The record of one seat run from its parts ({part name: parsed JSON or None})."""
    plan, bringup = parts.get("plan"), parts.get("bringup")
    qualification, benchmark = parts.get("qualification"), parts.get("benchmark")
    qual_status, qual_failures = qualification_summary(qualification)
    if isinstance(benchmark, dict):
        bench_verdict = benchmark.get("verdict") or {}
        if bench_verdict.get("incomplete"):
            bench_status = "incomplete"
        else:
            bench_status = "clean" if bench_verdict.get("clean") else "flagged"
    else:
        bench_status = "missing"
    harness = (benchmark or {}).get("harness") if isinstance(benchmark, dict) else None
    telemetry = summarise_telemetry(parts.get("telemetry"), benchmark if isinstance(benchmark, dict) else None)
    flags = list(((benchmark or {}).get("verdict") or {}).get("flags", [])) if isinstance(benchmark, dict) else []
    if telemetry and telemetry["verdict"]["verdict"] == "software-bound":
        flags.append("software-bound")
    record = {
        "schema": RECORD_SCHEMA,
        "seat": seat,
        "run_id": run_id,
        "created_at": created_at,
        "measured_at_epoch": (benchmark or {}).get("started_at_epoch") if isinstance(benchmark, dict) else None,
        "harness": harness,
        "workload_id": (benchmark or {}).get("workload_id") if isinstance(benchmark, dict) else None,
        "workload_profile": workload_profile_of(benchmark),
        "parts": {part_file(p): parts.get(p) is not None for p in PARTS},
        "plan": plan,
        "bringup": bringup,
        "qualification": dict(qualification, failures=qual_failures) if isinstance(qualification, dict) else None,
        "benchmark": benchmark,
        "telemetry": telemetry,
        "promotion": parts.get("promotion"),
        "launch": launch_of(plan, bringup),
        "fleet_cost": fleet_cost_of(plan, bringup),
        "summary": {
            "qualification": qual_status,
            "qualification_failures": qual_failures,
            "benchmark": bench_status,
            "benchmark_flags": flags,
            "decision": (parts.get("promotion") or {}).get("decision"),
        },
    }
    for part, key in OPTIONAL_PARTS.items():
        if parts.get(part) is not None:
            record[key] = parts[part]
    return record
