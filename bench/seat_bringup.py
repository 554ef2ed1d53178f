#!/usr/bin/env python3
"""Bring-up overhead of a lab seat: playbook wall time minus the engine's own time to ready.

For each pass: take the seat down (playbooks/teardown.yml, not timed), then time
`ansible-playbook playbooks/seat.yml -e seat=<name> -e seat_measure=false` (bring-up only, no
qualification or benchmark) from start to exit, and read the engine's own time to ready from the
run's bringup.json (seconds from `docker run` until /health answered 200 and /v1/models listed
the model, polled every 2 s, so up to 2 s late). Overhead = wall - ready. Then one re-run
against the running seat (no change), whose wall time is all overhead.

Needs the lab up with the engine image and the lab checkpoints on the nodes (make lab). Run under
the lab lock:
  flock /tmp/seatwright-lab.lock .venv/bin/python bench/seat_bringup.py [--seat lab] [--passes 3]
Writes bench/results/seat_bringup.json and .md.
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PLAYBOOK = str(ROOT / ".venv" / "bin" / "ansible-playbook")


def run(*args):
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    started = time.monotonic()
    done = subprocess.run(
        [PLAYBOOK, "-i", "inventory/lab"] + list(args), cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    return done.returncode, done.stdout + done.stderr, time.monotonic() - started


def evidence(output):
    found = re.findall(r"evidence: (\S+)", output)
    if not found:
        raise SystemExit("no evidence folder in the playbook output:\n" + output[-3000:])
    return json.loads((Path(found[-1].rstrip("'\"")) / "bringup.json").read_text())


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seat", default="lab")
    parser.add_argument("--passes", type=int, default=3)
    args = parser.parse_args()
    seat = ("playbooks/seat.yml", "-e", "seat=%s" % args.seat)
    rows = []
    for index in range(args.passes):
        rc, out, _ = run("playbooks/teardown.yml", "-e", "seat=%s" % args.seat)
        if rc:
            raise SystemExit("teardown failed:\n" + out[-3000:])
        rc, out, wall = run(*seat, "-e", "seat_measure=false")
        if rc:
            raise SystemExit("bring-up failed:\n" + out[-3000:])
        ready = evidence(out)["ready"]["elapsed_s"]
        rows.append(
            {"pass": index + 1, "wall_s": round(wall, 1), "engine_ready_s": ready, "overhead_s": round(wall - ready, 1)}
        )
        print(
            "pass %d/%d: playbook %.1f s, engine ready after %.1f s, overhead %.1f s"
            % (index + 1, args.passes, wall, ready, wall - ready),
            file=sys.stderr,
            flush=True,
        )
    rc, out, rerun = run(*seat, "-e", "seat_measure=false")
    if rc:
        raise SystemExit("re-run failed:\n" + out[-3000:])
    changed = re.search(r"^node-a\s*:.*changed=(\d+)", out, re.M)
    result = {
        "seat": args.seat,
        "command": "flock /tmp/seatwright-lab.lock .venv/bin/python bench/seat_bringup.py "
        "--seat %s --passes %d" % (args.seat, args.passes),
        "machine": "%d cores" % os.cpu_count(),
        "passes": rows,
        "median_wall_s": statistics.median(r["wall_s"] for r in rows),
        "median_engine_ready_s": statistics.median(r["engine_ready_s"] for r in rows),
        "median_overhead_s": statistics.median(r["overhead_s"] for r in rows),
        "rerun_wall_s": round(rerun, 1),
        "rerun_changed": int(changed.group(1)) if changed else None,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    out_dir = ROOT / "bench" / "results"
    (out_dir / "seat_bringup.json").write_text(json.dumps(result, indent=1) + "\n")
    lines = [
        "# Seat bring-up overhead (%s)" % args.seat,
        "",
        "`%s` on %s, %s. Overhead = playbook wall time minus the engine's own time to ready "
        "(from bringup.json: `docker run` to /health 200 with the model listed, polled every 2 s)."
        % (result["command"], result["machine"], result["when"]),
        "",
        "| pass | playbook wall (s) | engine to ready (s) | overhead (s) |",
        "|---|---|---|---|",
    ]
    lines += [
        "| %d | %.1f | %.1f | %.1f |" % (r["pass"], r["wall_s"], r["engine_ready_s"], r["overhead_s"]) for r in rows
    ]
    lines += [
        "| median | %.1f | %.1f | %.1f |"
        % (result["median_wall_s"], result["median_engine_ready_s"], result["median_overhead_s"]),
        "",
        "Re-run against the running seat (nothing changes, the container is kept): %.1f s, changed=%s."
        % (result["rerun_wall_s"], result["rerun_changed"]),
        "",
    ]
    (out_dir / "seat_bringup.md").write_text("\n".join(lines))
    print("\n".join(lines))


if __name__ == "__main__":
    main()
