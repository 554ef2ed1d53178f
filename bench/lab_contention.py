#!/usr/bin/env python3
"""Two lab engines loaded at once, straight at their ports (no router): closed-loop streams of the
promotion hold's own request (16 tokens, streamed) on each, every answer's latency under a 60 s client
timeout, as a promotion's canary loads them. It shows whether engines that share the lab's cores both
keep answering, or one stalls (bench/results/router/lab-2026-12-04-stall/).

    python3 bench/lab_contention.py --key-file .cache/lab/seat-api-key \
        --engine lab=http://172.30.99.11:8000:4 --engine lab-allcores=http://172.30.99.11:8003:7 --seconds 40
"""

import argparse
import json
import sys
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

# The promotion hold's own request, so the engines see what a canary sends them.
from ansible_collections.seatwright.fleet.plugins.module_utils.router.hold import PROBE_REQUEST  # noqa: E402


def engine(text):
    name, _, rest = text.partition("=")
    url, _, streams = rest.rpartition(":")
    if not (name and url and streams.isdigit()):
        raise argparse.ArgumentTypeError("give NAME=URL:STREAMS, like lab=http://172.30.99.11:8000:4")
    return name, url, int(streams)


def one(url, key, model):
    start, error = time.time(), None
    request = urllib.request.Request(
        url + "/v1/chat/completions",
        json.dumps(dict(PROBE_REQUEST, model=model)).encode(),
        {"Content-Type": "application/json", "Authorization": "Bearer " + key},
    )
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            for _line in response:
                pass
    except OSError as exc:
        error = str(exc)[:80]
    return time.time() - start, error


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--engine", type=engine, action="append", required=True, help="NAME=URL:STREAMS")
    parser.add_argument("--key-file", required=True, help="the seats' API key (the lab's .cache/lab/seat-api-key)")
    parser.add_argument("--model", default="production", help="the served name to ask for")
    parser.add_argument("--seconds", type=float, default=40.0)
    parser.add_argument("--out", help="write every answer's (engine, latency s, error) here as JSON")
    args = parser.parse_args()
    key = open(args.key_file).read().strip()
    records, lock, end = [], threading.Lock(), time.time() + args.seconds

    def loop(name, url):
        while time.time() < end:
            latency, error = one(url, key, args.model)
            with lock:
                records.append((name, round(latency, 3), error))

    threads = [threading.Thread(target=loop, args=(n, u)) for n, u, s in args.engine for _ in range(s)]
    for thread in threads:
        thread.start()
    while any(t.is_alive() for t in threads):
        time.sleep(5)
        with lock:
            print("... %d answers so far" % len(records), file=sys.stderr, flush=True)
        if time.time() > end + 70:
            break
    for name, _url, streams in args.engine:
        mine = sorted(r[1] for r in records if r[0] == name)
        errors = sum(1 for r in records if r[0] == name and r[2])
        if not mine:
            print("%s: %d streams, no answer" % (name, streams))
            continue
        print(
            "%s: %d streams, %d answers, %d failed, latency s p50 %.1f p95 %.1f max %.1f"
            % (name, streams, len(mine), errors, mine[len(mine) // 2], mine[int(len(mine) * 0.95)], mine[-1])
        )
    if args.out:
        with open(args.out, "w") as handle:
            json.dump(records, handle)


if __name__ == "__main__":
    main()
