#!/usr/bin/env python3
"""OpenAI-compatible engines side by side, taking turns, at 1 and 16 streams: output tok/s of each.

A quick screen for a candidate setting before it runs the seat path (the benchmark there decides):
each stream sends unique 60-word prompts (no prefix-cache hits), 32-token answers with ignore_eos,
streamed or not (--stream: the seat path's benchmark streams, which costs the API server per token),
for --seconds per side; the two sides take turns, twice. The seats' key comes from the
environment (SEAT_KEY), never argv.

    SEAT_KEY=... .venv/bin/python bench/engine_side_by_side.py \\
        --a http://172.30.99.11:8000 --b http://172.30.99.11:8003 --model smollm2-135m-instruct
"""

import argparse
import json
import os
import random
import threading
import time
import urllib.request

WORDS = ("alpha", "beta", "gamma", "delta", "river", "stone", "cloud", "maple", "north", "quiet")


def _tokens(response, stream):
    """Completion tokens of one answer: the usage block, at the end of the stream when streamed."""
    if not stream:
        return json.load(response)["usage"]["completion_tokens"]
    tokens = None
    for line in response:
        line = line.strip()
        if line.startswith(b"data: {"):
            usage = json.loads(line[6:]).get("usage")
            tokens = usage["completion_tokens"] if usage else tokens
    if tokens is None:
        raise ValueError("the stream carried no usage block")
    return tokens


def run(base, key, model, streams, seconds, stream=False, words=60):
    """(output tok/s, answers, errors) of `streams` closed-loop clients for `seconds`, `words`-word prompts."""
    stop = time.time() + seconds
    tally = {"tokens": 0, "answers": 0, "errors": 0}
    lock = threading.Lock()

    def client(index):
        rng = random.Random(index * 7919 + int(time.time() * 1000))
        while time.time() < stop:
            prompt = " ".join(rng.choice(WORDS) + str(rng.randint(0, 999)) for _ in range(words))
            body = {
                "model": model,
                "max_tokens": 32,
                "ignore_eos": True,
                "messages": [{"role": "user", "content": prompt}],
            }
            if stream:
                body.update(stream=True, stream_options={"include_usage": True})
            headers = {"Content-Type": "application/json", "Authorization": "Bearer " + key}
            request = urllib.request.Request(base + "/v1/chat/completions", json.dumps(body).encode(), headers)
            try:
                with urllib.request.urlopen(request, timeout=120) as response:
                    tokens = _tokens(response, stream)
                if time.time() <= stop:
                    with lock:
                        tally["tokens"] += tokens
                        tally["answers"] += 1
            except (OSError, ValueError, KeyError):
                with lock:
                    tally["errors"] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(streams)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return tally["tokens"] / seconds, tally["answers"], tally["errors"]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--a", required=True, help="first engine's root URL (the incumbent)")
    parser.add_argument("--b", required=True, action="append", help="a candidate engine's root URL (repeat)")
    parser.add_argument("--model", required=True, help="the name both serve")
    parser.add_argument("--seconds", type=float, default=None, help="per side and level (default 20 at 1, 30 above)")
    parser.add_argument("--levels", default="1,16", help="stream counts, each run twice per side (default 1,16)")
    parser.add_argument("--stream", action="store_true", help="stream the answers, as the seat path's benchmark does")
    args = parser.parse_args()
    key = os.environ.get("SEAT_KEY", "")
    levels = [int(part) for part in args.levels.split(",") if part.strip()]
    for streams in levels + levels:
        seconds = args.seconds or (20.0 if streams == 1 else 30.0)
        sides = [("a", args.a)] + [("b" if len(args.b) == 1 else "b%d" % i, b) for i, b in enumerate(args.b, 1)]
        for name, base in sides:
            rate, answers, errors = run(base, key, args.model, streams, seconds, args.stream)
            print("%2d streams  %-3s %.1f output tok/s  %d answers  %d errors" % (streams, name, rate, answers, errors))


if __name__ == "__main__":
    main()
