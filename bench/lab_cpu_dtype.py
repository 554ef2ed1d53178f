#!/usr/bin/env python3
"""The lab seat's engine in each compute dtype, side by side on one lab node: prefill and decode.

Each dtype gets an engine container on the node: the lab seat's own planned launch (image, checkpoint
mount, shared memory, environment, argv from .cache/plans/<seat>.json) on another port, with
`--dtype` replaced. Once all answer, they take turns at each prompt length, twice: a few streamed answers one at a
time (unique prompts, no prefix-cache hit, 32 tokens with ignore_eos), recording the prompt's tokens,
the median time to the first token (prefill) and the median decode rate after it. The containers are removed at
the end, also on failure; they take no API key. Run it on a quiet lab (no benchmark or qualification running).

    .venv/bin/python bench/lab_cpu_dtype.py --node node-a --dtypes bfloat16,float32 \\
        --words 60,600 --requests 4 --out bench/results/lab-cpu-dtype
"""

import argparse
import json
import random
import signal
import statistics
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "bench"))
from engine_side_by_side import WORDS  # noqa: E402

FIRST_PORT = 8021


def one(base, model, prompt):
    """(prompt tokens, seconds to the first token, seconds from it to the last, tokens) of one streamed answer."""
    body = {
        "model": model,
        "max_tokens": 32,
        "ignore_eos": True,
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": [{"role": "user", "content": prompt}],
    }
    request = urllib.request.Request(
        base + "/v1/chat/completions", json.dumps(body).encode(), {"Content-Type": "application/json"}
    )
    start, first, usage = time.time(), None, None
    with urllib.request.urlopen(request, timeout=600) as response:
        for line in response:
            if not line.startswith(b"data: {"):
                continue
            chunk = json.loads(line[6:])
            if first is None and any((c.get("delta") or {}).get("content") for c in chunk.get("choices") or []):
                first = time.time()
            usage = chunk.get("usage") or usage
    end = time.time()
    return usage["prompt_tokens"], (first or end) - start, end - (first or end), usage["completion_tokens"]


def measure(base, model, words, requests, turn):
    """Medians over `requests` answers, one at a time, each prompt unique (no prefix-cache hit)."""
    rng = random.Random(words * 1000 + turn)
    results, errors = [], 0
    for _ in range(requests):
        prompt = " ".join(rng.choice(WORDS) + str(rng.randint(0, 99999)) for _ in range(words))
        try:
            results.append(one(base, model, prompt))
        except (OSError, ValueError, KeyError, TypeError):
            errors += 1
    if not results:
        return {"prompt_tokens": 0, "ttft_s": float("nan"), "decode_tok_s": float("nan"), "errors": errors}
    return {
        "prompt_tokens": int(statistics.median(r[0] for r in results)),
        "ttft_s": round(statistics.median(r[1] for r in results), 3),
        "decode_tok_s": round(statistics.median((r[3] - 1) / r[2] for r in results if r[2] > 0), 2),
        "answers": len(results),
        "errors": errors,
    }


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
    parser.add_argument("--requests", type=int, default=4, help="answers per engine, length and turn, one at a time")
    parser.add_argument("--ready-timeout", type=int, default=600)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    plan = json.loads((ROOT / ".cache" / "plans" / ("%s.json" % args.seat)).read_text())
    rank = plan["ranks"][0]
    host = rank["argv"][rank["argv"].index("--host") + 1]
    model = rank["argv"][rank["argv"].index("--served-model-name") + 1]
    dtypes = [d for d in args.dtypes.split(",") if d]
    docker_version = docker(args.node, "version", "-f", "{{.Server.Version}}", check=False)
    lscpu = subprocess.run(["docker", "exec", args.node, "lscpu"], capture_output=True, text=True).stdout
    names, rows = {}, []
    out = Path(args.out)
    # A SIGTERM (an outer timeout) still removes the containers and keeps what was measured.
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("stopped by SIGTERM"))
    try:
        for offset, dtype in enumerate(dtypes):
            names[dtype] = launch(args.node, rank, dtype, FIRST_PORT + offset)
            log("started %s on port %d" % (names[dtype], FIRST_PORT + offset))
        wait_ready(args.node, {names[d]: FIRST_PORT + i for i, d in enumerate(dtypes)}, host, args.ready_timeout)
        for turn in (1, 2):
            for words in [int(w) for w in args.words.split(",")]:
                for offset, dtype in enumerate(dtypes):
                    base = "http://%s:%d" % (host, FIRST_PORT + offset)
                    row = dict(measure(base, model, words, args.requests, turn), turn=turn, words=words, dtype=dtype)
                    rows.append(row)
                    log(
                        "turn %d, %d words, %s: prompt %d tokens, TTFT %.2f s, decode %.1f tok/s, %d errors"
                        % (turn, words, dtype, row["prompt_tokens"], row["ttft_s"], row["decode_tok_s"], row["errors"])
                    )
    finally:
        for name in names.values():
            docker(args.node, "rm", "-f", name, check=False)
        out.mkdir(parents=True, exist_ok=True)
        record = {
            "command": " ".join(sys.argv),
            "node": args.node,
            "seat": args.seat,
            "image": rank["container_spec"]["image"],
            "docker": docker_version.stdout.strip(),
            "lscpu": lscpu,
            "complete": len(rows) == 2 * len(dtypes) * len(args.words.split(",")),
            "rows": rows,
        }
        (out / "lab-cpu-dtype.json").write_text(json.dumps(record, indent=1) + "\n")
        log("recorded %s" % (out / "lab-cpu-dtype.json"))


if __name__ == "__main__":
    main()
