#!/usr/bin/env python3
"""Placing the lab engine image on node-b: streamed from node-a vs built again on node-b.

One run, same lab, same image definition. Each pass empties node-b's Docker engine, then
  distribute: ansible-playbook playbooks/images.yml   (node-a holds the image; node-b receives it)
and empties it again, then
  rebuild:    the same playbook with engine_image_builder=node-b and no distribution
(node-b loads the base from the controller and builds from the same context and wheelhouse).
Both runs skip the facts probe, which is the same work either way. The image ids are recorded: a
distributed node must show node-a's id. Needs the lab up (molecule create + prepare) and the lab lock.
Usage: .venv/bin/python bench/images/bench.py [--passes 1] [--out bench/results/images]
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

ROOT = Path(__file__).resolve().parents[2]
BIN = ROOT / ".venv" / "bin"
DOCKER = "/usr/bin/docker"
LABEL = "org.seatwright.image=lab-vllm-cpu"


def run(cmd, log, env=None):
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    elapsed = time.monotonic() - start
    log.write("$ %s\n(%.1f s, exit %d)\n%s\n%s\n" % (" ".join(cmd), elapsed, proc.returncode, proc.stdout, proc.stderr))
    log.flush()
    if proc.returncode != 0:
        sys.exit("command failed (%d): %s\n%s" % (proc.returncode, " ".join(cmd), proc.stdout[-3000:]))
    return elapsed, proc.stdout


def on(node, command, log):
    return run([DOCKER, "exec", node, "sh", "-c", command], log)[1]


def image(node, log):
    """(reference, id, size bytes) of the lab engine image in the node's engine, or None."""
    out = on(
        node, "docker images --no-trunc --filter label=%s --format '{{.Repository}}:{{.Tag}} {{.ID}}'" % LABEL, log
    ).split()
    if not out:
        return None
    size = on(node, "docker image inspect -f '{{.Size}}' %s" % out[0], log).strip()
    return out[0], out[1], int(size)


def empty(node, log):
    """Remove every image, container and build cache from the node's own engine."""
    on(node, "docker system prune -af >/dev/null && docker images -q | wc -l", log)


def playbook(extra, log):
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        PATH="%s:/usr/bin:%s" % (BIN, os.environ.get("PATH", "")),
    )
    cmd = [
        str(BIN / "ansible-playbook"),
        "-i",
        "inventory/lab",
        "playbooks/images.yml",
        "-e",
        '{"engine_image_read_facts": false}',
    ] + extra
    elapsed, out = run(cmd, log, env)
    counts = {host: int(changed) for host, changed in re.findall(r"^(\S+)\s+:\s+ok=\d+\s+changed=(\d+)", out, re.M)}
    return elapsed, counts


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=1)
    parser.add_argument("--out", default="bench/results/images")
    args = parser.parse_args()
    out = ROOT / args.out
    out.parent.mkdir(parents=True, exist_ok=True)
    passes = []
    with open(str(out) + ".log", "w") as log:
        print("bench: making sure node-a holds the image (builds it when its tag is new)", flush=True)
        playbook(["-l", "node-a"], log)
        source = image("node-a", log)
        if source is None:
            sys.exit("node-a holds no lab engine image after playbooks/images.yml")
        for number in range(1, args.passes + 1):
            empty("node-b", log)
            print("bench: pass %d: distributing node-a -> node-b" % number, flush=True)
            distribute_s, distribute_changed = playbook([], log)
            received = image("node-b", log)
            empty("node-b", log)
            print(
                "bench: pass %d: building again on node-b (%.0f s to distribute)" % (number, distribute_s), flush=True
            )
            rebuild_s, rebuild_changed = playbook(
                [
                    "-l",
                    "node-b",
                    "-e",
                    json.dumps({"engine_image_builder": "node-b", "engine_image_distribute": False}),
                ],
                log,
            )
            rebuilt = image("node-b", log)
            passes.append(
                {
                    "pass": number,
                    "distribute_s": round(distribute_s, 1),
                    "rebuild_s": round(rebuild_s, 1),
                    "ratio_rebuild_over_distribute": round(rebuild_s / distribute_s, 2),
                    "received_id": received and received[1],
                    "rebuilt_id": rebuilt and rebuilt[1],
                    "distribute_changed": distribute_changed,
                    "rebuild_changed": rebuild_changed,
                }
            )
            print(
                "bench: pass %d: rebuild %.0f s, ratio %.2f" % (number, rebuild_s, rebuild_s / distribute_s), flush=True
            )
        # Leave the lab as a converge leaves it: node-b holds node-a's image.
        empty("node-b", log)
        playbook([], log)
    for item in passes:
        if item["received_id"] != source[1]:
            sys.exit("node-b received %s, node-a holds %s: not a valid distribution" % (item["received_id"], source[1]))
    result = {
        "command": ".venv/bin/python bench/images/bench.py --passes %d --out %s" % (args.passes, args.out),
        "measured_at": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": {"cores": os.cpu_count(), "arch": os.uname().machine},
        "image": {"reference": source[0], "id": source[1], "size_bytes": source[2]},
        "passes": passes,
    }
    Path(str(out) + ".json").write_text(json.dumps(result, indent=2) + "\n")
    lines = [
        "# Lab engine image onto node-b: distributed from node-a vs built again",
        "",
        "Command: `%s` (lab up, lab lock held). Measured %s on %d cores, %s."
        % (result["command"], result["measured_at"], result["machine"]["cores"], result["machine"]["arch"]),
        "Image %s, %.2f GB, id `%s`." % (source[0], source[2] / 1e9, source[1][:19]),
        "Each pass empties node-b's own Docker engine before each way; both run `playbooks/images.yml`",
        "without the facts probe. Distribution: export on node-a, weight staging's verified stream, load,",
        "id check. Rebuild: base image from the controller, the same context and wheelhouse, build on node-b.",
        "",
        "| pass | distribute (s) | build again (s) | build / distribute | node-b id after distribution |",
        "|---|---|---|---|---|",
    ]
    for item in passes:
        lines.append(
            "| %d | %.1f | %.1f | %.2f | `%s` (= node-a) |"
            % (
                item["pass"],
                item["distribute_s"],
                item["rebuild_s"],
                item["ratio_rebuild_over_distribute"],
                item["received_id"][:19],
            )
        )
    Path(str(out) + ".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


if __name__ == "__main__":
    main()
