#!/usr/bin/env python3
"""Start a copy of a planned lab seat's engine with one setting changed, for a side-by-side screen.

The copy is the seat's own container spec (.cache/plans/SEAT.json, rank 0): same image, checkpoint
mount, key and arguments, on another port and under another name, with --env and --arg added.
It runs on the lab node the seat's rank 0 runs on (through that node's Docker engine), is test
equipment for bench/engine_side_by_side.py, and is removed with --remove. The seat key reaches the
container through an env file (0600) written on the node from stdin, never argv.

    .venv/bin/python bench/engine_variant.py --seat lab --port 8004 --name screen-omp \\
        --env VLLM_CPU_NUM_OF_RESERVED_CPU=0 --env OMP_WAIT_POLICY=PASSIVE
    .venv/bin/python bench/engine_variant.py --name screen-omp --node node-a --remove
"""

import argparse
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests"))

from ansible_collections.seatwright.fleet.plugins.module_utils.seat import container  # noqa: E402

KEY_FILE = ROOT / ".cache" / "lab" / "seat-api-key"


def variant_spec(spec, name, port, env, args):
    """The seat's container spec with the name, port, env and arguments changed, and no seat labels
    (so no lifecycle step takes the copy for the seat); it starts through the same docker run."""
    command = list(spec["command"])
    if "--port" in command:
        command[command.index("--port") + 1] = str(port)
    return dict(spec, name=name, command=command + list(args), env=dict(spec["env"], **env), labels={})


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seat", help="the planned seat to copy (its .cache/plans/SEAT.json)")
    parser.add_argument("--name", required=True, help="the copy's container name")
    parser.add_argument("--port", type=int, help="the copy's port")
    parser.add_argument("--node", help="the lab node (default: the seat's rank 0 host)")
    parser.add_argument("--env", action="append", default=[], help="KEY=VALUE added to the engine's environment")
    parser.add_argument("--arg", action="append", default=[], help="an engine argument appended (repeat)")
    parser.add_argument("--remove", action="store_true", help="remove the copy")
    parsed = parser.parse_args()
    if parsed.remove:
        if not parsed.node:
            sys.exit("--remove needs --node")
        subprocess.run(["docker", "exec", parsed.node, "docker", "rm", "-f", parsed.name], check=False)
        return
    if not (parsed.seat and parsed.port):
        sys.exit("starting a copy needs --seat and --port")
    plan_file = ROOT / ".cache" / "plans" / (parsed.seat + ".json")
    try:
        rank = json.loads(plan_file.read_text())["ranks"][0]
    except (OSError, ValueError, KeyError, IndexError) as exc:
        sys.exit("no plan for seat %s at %s (%s): run its seat.yml first" % (parsed.seat, plan_file, exc))
    env = dict(item.split("=", 1) for item in parsed.env)
    node = parsed.node or rank["host"]
    spec = variant_spec(rank["container_spec"], parsed.name, parsed.port, env, parsed.arg)
    env_file = "/tmp/%s.env" % parsed.name
    secrets = {container.API_KEY_SECRET: KEY_FILE.read_text().strip()}
    text = container.env_file_text(dict(spec["env"], **container.secret_env(spec, secrets)))
    write = ["docker", "exec", "-i", node, "sh", "-c", "umask 077 && cat > " + env_file]
    subprocess.run(write, input=text, text=True, check=True)
    subprocess.run(["docker", "exec", node, "docker"] + container.docker_run_argv(spec, env_file, secrets), check=True)
    print(
        "started %s on %s:%d; remove with --name %s --node %s --remove"
        % (parsed.name, node, parsed.port, parsed.name, node)
    )


if __name__ == "__main__":
    main()
