#!/usr/bin/env python3
"""The lab seat's engine in each compute dtype, side by side on one lab node: prefill and decode.

Each dtype gets an engine container on the node: the lab seat's own planned launch (image, checkpoint
mount, shared memory, environment, argv from .cache/plans/<seat>.json) on another port, with
`--dtype` replaced. Once all answer, they take turns at each prompt length and stream count
(bench/engine_side_by_side.py: unique prompts, no prefix-cache hits, 32-token answers), twice, and
the output tok/s and mean seconds per answer of each are recorded. The containers are removed at
the end, also on failure; they take no API key. Run it on a quiet lab (no benchmark or qualification running).

    .venv/bin/python bench/lab_cpu_dtype.py --node node-a --dtypes bfloat16,float32 \\
        --words 60,600 --levels 1,8 --out bench/results/lab-cpu-dtype
"""

import argparse
import json
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from engine_side_by_side import run  # noqa: E402

FIRST_PORT = 8021


def log(text):
    print("[%s] %s" % (time.strftime("%H:%M:%S"), text), flush=True)


def docker(node, *args, check=True):
    return subprocess.run(["docker", "exec", node, "docker", *args], capture_output=True, text=True, check=check)


def launch(node, rank, dtype, port):
    """Start the seat's rank as planned, on `port`, computing in `dtype`; returns the container's name."""
    spec = rank["container_spec"]
    argv = list(rank["argv"])
    if "--dtype" in argv:
        del argv[argv.index("--dtype") : argv.index("--dtype") + 2]
    argv[argv.index("--port") + 1] = str(port)
    name = "seatwright-bench-dtype-%s" % dtype
    docker(node, "rm", "-f", name, check=False)
    args = ["run", "-d", "--name", name, "--network", "host", "--shm-size", str(spec["shm_size_bytes"])]
    for mount in spec["mounts"]:
        args += ["-v", "%s:%s:%s" % (mount["source"], mount["target"], "ro" if mount.get("read_only") else "rw")]
    for key, value in rank["env"].items():
        args += ["-e", "%s=%s" % (key, value)]
    docker(node, *args, spec["image"], *argv, "--dtype", dtype)
    return name


def wait_ready(node, names_ports, host, timeout_s):
    start = time.time()
    waiting = dict(names_ports)
    while waiting:
        for name, port in list(waiting.items()):
            state = docker(node, "inspect", "-f", "{{.State.Running}}", name, check=False).stdout.strip()
            if state != "true":
                tail = docker(node, "logs", "--tail", "5", name, check=False)
                raise SystemExit("%s stopped before answering:\n%s%s" % (name, tail.stdout, tail.stderr))
            probe = docker(node, "exec", name, "python3", "-c", _HEALTH % (host, port), check=False)
            if probe.returncode == 0:
                log("%s answers after %.0f s" % (name, time.time() - start))
                del waiting[name]
        if waiting:
            if time.time() - start > timeout_s:
                raise SystemExit("not ready after %d s: %s" % (timeout_s, ", ".join(waiting)))
            log("waiting for %s (%.0f s)" % (", ".join(waiting), time.time() - start))
            time.sleep(10)


_HEALTH = "import urllib.request; urllib.request.urlopen('http://%s:%d/health', timeout=5)"


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--node", default="node-a", help="the lab node (its container name)")
    parser.add_argument("--seat", default="lab", help="the seat whose plan is launched (.cache/plans/<seat>.json)")
    parser.add_argument("--dtypes", default="bfloat16,float32")
    parser.add_argument("--words", default="60,600", help="prompt lengths in words (about 1.3 tokens each)")
    parser.add_argument("--levels", default="1,8", help="stream counts")
    parser.add_argument("--seconds", type=float, default=40.0, help="per engine, length and level, each turn")
    parser.add_argument("--ready-timeout", type=int, default=600)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    plan = json.loads((ROOT / ".cache" / "plans" / ("%s.json" % args.seat)).read_text())
    rank = plan["ranks"][0]
    host = rank["argv"][rank["argv"].index("--host") + 1]
    model = rank["argv"][rank["argv"].index("--served-model-name") + 1]
    # The bench's own engines take no key: they listen only while it runs, on the lab's fabric.
    key = ""
    dtypes = [d for d in args.dtypes.split(",") if d]
    cpu = docker(args.node, "version", "-f", "{{.Server.Version}}", check=False)
    lscpu = subprocess.run(["docker", "exec", args.node, "lscpu"], capture_output=True, text=True).stdout
    names = {}
    try:
        for offset, dtype in enumerate(dtypes):
            names[dtype] = launch(args.node, rank, dtype, FIRST_PORT + offset)
            log("started %s on port %d" % (names[dtype], FIRST_PORT + offset))
        wait_ready(args.node, {names[d]: FIRST_PORT + i for i, d in enumerate(dtypes)}, host, args.ready_timeout)
        rows = []
        for turn in (1, 2):
            for words in [int(w) for w in args.words.split(",")]:
                for streams in [int(s) for s in args.levels.split(",")]:
                    for offset, dtype in enumerate(dtypes):
                        base = "http://%s:%d" % (host, FIRST_PORT + offset)
                        rate, answers, errors = run(base, key, model, streams, args.seconds, True, words)
                        row = {
                            "turn": turn,
                            "words": words,
                            "streams": streams,
                            "dtype": dtype,
                            "output_tok_s": round(rate, 2),
                            "answers": answers,
                            "errors": errors,
                            "s_per_answer": round(args.seconds * streams / answers, 2) if answers else None,
                        }
                        rows.append(row)
                        log(
                            "turn %d, %d words, %d streams, %s: %.1f output tok/s, %d answers, %d errors"
                            % (turn, words, streams, dtype, rate, answers, errors)
                        )
    finally:
        for name in names.values():
            docker(args.node, "rm", "-f", name, check=False)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    record = {
        "command": " ".join(sys.argv),
        "node": args.node,
        "seat": args.seat,
        "image": rank["container_spec"]["image"],
        "docker": cpu.stdout.strip(),
        "lscpu": lscpu,
        "rows": rows,
    }
    (out / "lab-cpu-dtype.json").write_text(json.dumps(record, indent=1) + "\n")
    log("recorded %s" % (out / "lab-cpu-dtype.json"))


if __name__ == "__main__":
    main()
