#!/usr/bin/env python3
"""Wall time of a first converge of site.yml on fresh lab nodes, and of a no-op re-converge.

Both are measured in one run against the same containers: recreate the lab, converge, converge
again. The re-converge must report changed=0 or the run is refused as a measurement.
Usage: .venv/bin/python bench/converge.py [--out bench/results/converge]
"""

import argparse
import datetime
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / ".venv" / "bin"


def run(cmd, log, extra_env=None):
    """Runs one step and returns (seconds, stdout); a failed step ends the run with its output."""
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        PATH="%s:/usr/bin:%s" % (BIN, os.environ.get("PATH", "")),
        **(extra_env or {}),
    )
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - start
    log.write("$ %s\n%s\n%s\n" % (" ".join(cmd), proc.stdout, proc.stderr))
    log.flush()
    if proc.returncode != 0:
        sys.exit("command failed (%d): %s\n%s" % (proc.returncode, " ".join(cmd), proc.stdout[-3000:]))
    return elapsed, proc.stdout


def recap(stdout):
    """host -> every counter of its PLAY RECAP line (ok, changed, unreachable, failed, skipped...)."""
    hosts = {}
    for host, counters in re.findall(r"^(\S+)\s+:\s+(ok=\d+.*)$", stdout, re.M):
        hosts[host] = {name: int(value) for name, value in re.findall(r"(\w+)=(\d+)", counters)}
    return hosts


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", default="bench/results/converge")
    args = parser.parse_args()
    out = ROOT / args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    playbook = [str(BIN / "ansible-playbook"), "-i", "inventory/lab", "site.yml", "-l", "gpu_nodes"]
    with open(str(out) + ".log", "w") as log:
        run([str(BIN / "molecule"), "destroy"], log)
        run([str(BIN / "molecule"), "create"], log)
        run([str(BIN / "molecule"), "prepare", "--force"], log)
        first_s, first_out = run(playbook, log)
        again_s, again_out = run(playbook, log)
    again = recap(again_out)
    if not again or any(c["changed"] for c in again.values()):
        sys.exit("the re-converge changed something (%s): not a no-op, not recorded" % again)
    result = {
        "command": ".venv/bin/python bench/converge.py --out %s" % args.out,
        "measured_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": "%d cores, %s" % (os.cpu_count(), os.uname().machine),
        "first_converge_s": round(first_s, 2),
        "noop_reconverge_s": round(again_s, 2),
        "ratio_noop_to_first": round(again_s / first_s, 3),
        "first_recap": recap(first_out),
        "noop_recap": again,
    }
    Path(str(out) + ".json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "# Lab converge: first run vs no-op re-run",
        "",
        "Command: `%s` (one run: lab recreated, then two converges of "
        "`ansible-playbook -i inventory/lab site.yml -l gpu_nodes`)." % result["command"],
        "Measured %s on %s." % (result["measured_at"], result["machine"]),
        "",
        "| run | wall time (s) | changed per host |",
        "|---|---|---|",
        "| first converge | %.2f | %s |"
        % (first_s, ", ".join("%s=%d" % (h, c["changed"]) for h, c in sorted(result["first_recap"].items()))),
        "| no-op re-converge | %.2f | %s |"
        % (again_s, ", ".join("%s=%d" % (h, c["changed"]) for h, c in sorted(again.items()))),
        "",
        "No-op / first = %.3f." % result["ratio_noop_to_first"],
    ]
    Path(str(out) + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
