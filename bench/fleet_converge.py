#!/usr/bin/env python3
"""Fleet lab: first converge, no-op converge and fact collection at 2, 4 and 6 nodes, in one run.

For each size the six-node fleet lab (molecule/fleet) is made again, so the first converge meets
fresh nodes; node preparation (playbooks/nodes.yml, what `make fleet-lab` converges) runs on the
first N nodes (--limit), then again (it must change nothing, or the run is refused as a
measurement), then playbooks/facts.yml gathers every fact the plan reads. Each step's wall time is
recorded with the per-host counters of its play recap (ok, changed, skipped: the work done).
The no-op converge is taken three times (the median is the figure: the host is noisy); it takes the
fast path of playbooks/nodes.yml (each node's converge record holds, its roles are skipped). A full
re-check (`-e seatwright_full_converge=true`: every role on every node, changing nothing) is timed
beside it, so what the fast path saves is in the same record.
Usage: .venv/bin/python bench/fleet_converge.py [--sizes 2,4,6] [--label NAME]
Writes bench/results/fleet/converge-<label>.json and .md. Takes the lab lock itself.
"""

import argparse
import datetime
import fcntl
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

from converge import recap, run

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / ".venv" / "bin"
INVENTORY = "inventory/fleet"
FLEET = ["fleet-%d" % n for n in range(1, 7)]
LOCK = "/tmp/seatwright-lab.lock"
# The bar: the no-op converge of six nodes takes at most 1.5 times that of two.
NOOP_RATIO_BAR = 1.5
NOOP_PASSES = 3


def say(message):
    print("[fleet-converge %s] %s" % (time.strftime("%H:%M:%S"), message), flush=True)


def children_cpu_s():
    """CPU seconds used so far by this process's finished children (Ansible and its workers)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def fresh_fleet(log):
    """Makes the six nodes again and forgets their cached facts, so a converge finds them bare."""
    run([str(BIN / "molecule"), "destroy", "-s", "fleet"], log)
    for name in FLEET:
        for cached in (ROOT / ".cache" / "facts").glob("*%s" % name):
            cached.unlink()
    return run([str(BIN / "molecule"), "create", "-s", "fleet"], log)[0]


def step(label, playbook, hosts, log, *extra):
    say("%s on %d nodes ..." % (label, len(hosts)))
    cmd = [str(BIN / "ansible-playbook"), "-i", INVENTORY, playbook, "--limit", ",".join(hosts), *extra]
    cpu_before = children_cpu_s()
    seconds, stdout = run(cmd, log)
    # The controller's CPU (Ansible, its forks and their docker clients): what grows with the nodes.
    cpu = children_cpu_s() - cpu_before
    counters = recap(stdout)
    say(
        "%s on %d nodes: %.1f s, controller CPU %.1f s, changed %s"
        % (label, len(hosts), seconds, cpu, sum(c.get("changed", 0) for c in counters.values()))
    )
    return {
        "wall_s": round(seconds, 2),
        "controller_cpu_s": round(cpu, 2),
        "load_after": "%.1f/%.1f/%.1f" % os.getloadavg(),
        "command": " ".join(cmd[1:]),
        "recap": counters,
    }


def totals(counters):
    """Sums of each counter over the hosts of one recap."""
    summed = {}
    for host_counters in counters.values():
        for name, value in host_counters.items():
            summed[name] = summed.get(name, 0) + value
    return summed


def measure(sizes, log):
    rows = []
    for size in sizes:
        hosts = FLEET[:size]
        say("making the six-node fleet lab again (molecule destroy, create and prepare -s fleet)")
        create_s = fresh_fleet(log)
        first = step("first converge", "playbooks/nodes.yml", hosts, log)
        passes = [step("no-op converge", "playbooks/nodes.yml", hosts, log) for _ in range(NOOP_PASSES)]
        full = step("full re-check", "playbooks/nodes.yml", hosts, log, "-e", "seatwright_full_converge=true")
        for run_ in passes + [full]:
            changed = {h: c.get("changed", 0) for h, c in run_["recap"].items() if c.get("changed", 0)}
            if len(run_["recap"]) != size or changed:
                sys.exit("a no-op converge of %d nodes changed %s: not a no-op, not recorded" % (size, changed))
        noop = dict(sorted(passes, key=lambda p: p["wall_s"])[len(passes) // 2])
        noop["passes_wall_s"] = [p["wall_s"] for p in passes]
        facts = step("fact collection", "playbooks/facts.yml", hosts, log)
        rows.append(
            {"nodes": size, "create_s": round(create_s, 2), "first_converge": first, "noop_converge": noop}
            | {"full_recheck": full, "fact_collection": facts}
        )
    return rows


def markdown(result):
    rows = result["sizes"]
    lines = [
        "# Fleet lab: converge and fact collection at %s nodes" % ", ".join(str(r["nodes"]) for r in rows),
        "",
        "Command: `%s`" % result["command"],
        "Measured %s on %s (load average %s at the start, %s at the end), commit %s."
        % (result["measured_at"], result["machine"], result["load_start"], result["load_end"], result["commit"]),
        "Each size on a freshly made six-node fleet lab (molecule/fleet), `--limit` to its first N nodes.",
        "",
        "| nodes | first converge (s) | no-op converge (s), median (passes) | full re-check (s) "
        "| fact collection (s) | no-op controller CPU (s) | first: ok/changed/skipped "
        "| no-op: ok/changed/skipped | full re-check: ok/changed/skipped | facts: ok/changed/skipped |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for row in rows:
        cells = [str(row["nodes"]), "%.1f" % row["first_converge"]["wall_s"]]
        passes = row["noop_converge"].get("passes_wall_s", [row["noop_converge"]["wall_s"]])
        cells.append("%.1f (%s)" % (row["noop_converge"]["wall_s"], ", ".join("%.1f" % p for p in passes)))
        cells += ["%.1f" % row[k]["wall_s"] for k in ("full_recheck", "fact_collection")]
        cells.append("%.1f" % row["noop_converge"]["controller_cpu_s"])
        for key in ("first_converge", "noop_converge", "full_recheck", "fact_collection"):
            t = totals(row[key]["recap"])
            cells.append("%d/%d/%d" % (t.get("ok", 0), t.get("changed", 0), t.get("skipped", 0)))
        lines.append("| %s |" % " | ".join(cells))
    lines += [
        "",
        "Task counts are summed over the nodes (each node's own are in the JSON beside this file).",
        "",
        "No-op converge at %d nodes / at %d nodes = %.2f (bar: <= %.1f): %s."
        % (rows[-1]["nodes"], rows[0]["nodes"], result["noop_ratio"], NOOP_RATIO_BAR, result["verdict"]),
    ]
    return "\n".join(lines) + "\n"


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="2,4,6", help="node counts, each at most 6 (default 2,4,6)")
    parser.add_argument("--label", default="lab", help="names the result files (default lab)")
    parser.add_argument("--out", default="bench/results/fleet", help="result folder")
    args = parser.parse_args()
    try:
        sizes = [int(part) for part in args.sizes.split(",")]
    except ValueError:
        sys.exit("--sizes %r: give node counts separated by commas, e.g. 2,4,6" % args.sizes)
    if len(sizes) < 2 or any(size < 1 or size > len(FLEET) for size in sizes):
        sys.exit("--sizes %r: give at least two node counts between 1 and %d" % (args.sizes, len(FLEET)))
    out = ROOT / args.out
    out.mkdir(parents=True, exist_ok=True)
    stem = out / ("converge-%s" % args.label)
    commit = subprocess.run(
        ["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=False
    ).stdout.strip()
    load_start = "%.1f/%.1f/%.1f" % os.getloadavg()
    say("waiting for the lab lock %s" % LOCK)
    with open(LOCK, "w") as lock, open(str(stem) + ".log", "w") as log:
        fcntl.flock(lock, fcntl.LOCK_EX)
        rows = measure(sizes, log)
        say("removing the fleet lab")
        run([str(BIN / "molecule"), "destroy", "-s", "fleet"], log)
    ratio = rows[-1]["noop_converge"]["wall_s"] / rows[0]["noop_converge"]["wall_s"]
    result = {
        "command": ".venv/bin/python bench/fleet_converge.py %s" % " ".join(sys.argv[1:]),
        "measured_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": "%d cores, %s" % (os.cpu_count(), os.uname().machine),
        "commit": commit,
        "load_start": load_start,
        "load_end": "%.1f/%.1f/%.1f" % os.getloadavg(),
        "sizes": rows,
        "noop_ratio": round(ratio, 3),
        "noop_ratio_bar": NOOP_RATIO_BAR,
        "verdict": "met" if ratio <= NOOP_RATIO_BAR else "not met",
    }
    Path(str(stem) + ".json").write_text(json.dumps(result, indent=2) + "\n")
    text = markdown(result)
    Path(str(stem) + ".md").write_text(text)
    print(text)


if __name__ == "__main__":
    main()
