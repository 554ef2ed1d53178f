#!/usr/bin/env python3
"""SeatTokensStalled against a real engine: freeze its core under load, time the alert, thaw, time the clear.

The field's deadlock ([000]) held running requests while no token came out and the API server kept
answering. Freezing the engine core process (SIGSTOP) while the API server runs makes the same
shape: the running gauge keeps its last value, the generated-token counter stops, /metrics answers.

This starts Debian's Prometheus on 127.0.0.1 with the rules and a seat target seatwright generates
(monitoring/rules.py, targets.py), at the windows given (short, so one run takes a minute), keeps
--streams streaming chat requests running against the seat, then runs --freeze, waits for the alert
to fire, runs --thaw and waits for it to clear. The two times go to --out as JSON with the command.

    bench/monitoring_stall.py --url http://127.0.0.1:18051 --model tiny \
        --freeze 'kill -STOP 1234' --thaw 'kill -CONT 1234' --out bench/results/monitoring/stall-engine.json

On the lab the freeze and thaw are `docker exec node-a docker exec <rank container> kill -STOP <pid>`.
"""

import argparse
import json
import shlex
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "unit"))  # the loopback Prometheus the monitoring tests use
import yaml  # noqa: E402
from ansible_collections.seatwright.fleet.plugins.module_utils.monitoring import rules, targets  # noqa: E402
from monitoring_live import api, free_port, scraped_at_least, start_prometheus, wait_until  # noqa: E402


def load(url, model, stop, max_tokens):
    """One client: streaming chat requests back to back until `stop` is set."""
    body = json.dumps(
        {
            "model": model,
            "messages": [{"role": "user", "content": "Count on, one number a line, from 1."}],
            "max_tokens": max_tokens,
            "ignore_eos": True,
            "stream": True,
        }
    ).encode()
    while not stop.is_set():
        request = urllib.request.Request(
            url + "/v1/chat/completions", data=body, headers={"Content-Type": "application/json"}
        )
        try:
            with urllib.request.urlopen(request, timeout=600) as answer:
                for _ in answer:
                    if stop.is_set():
                        return
        except OSError:
            time.sleep(0.5)


def state(base):
    alerts = api(base, "/api/v1/alerts")["data"]["alerts"]
    found = [a["state"] for a in alerts if a["labels"]["alertname"] == "SeatTokensStalled"]
    return found[0] if found else "inactive"


def wait_state(base, wanted, limit_s):
    start = time.monotonic()
    while time.monotonic() - start < limit_s:
        if state(base) == wanted:
            return round(time.monotonic() - start, 1)
        time.sleep(0.2)
    return None


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", required=True, help="the seat's base URL (http://host:port)")
    parser.add_argument("--model", required=True, help="its served model name")
    parser.add_argument("--freeze", required=True, help="command that freezes the engine core")
    parser.add_argument("--thaw", required=True, help="command that lets it run again")
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--max-tokens", type=int, default=1024)
    parser.add_argument("--window-s", type=int, default=10, help="stall_window_s")
    parser.add_argument("--for-s", type=int, default=10, help="stall_for_s")
    parser.add_argument("--scrape-s", type=int, default=2)
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    settings = {"stall_window_s": args.window_s, "stall_for_s": args.for_s}
    work = Path(tempfile.mkdtemp(prefix="monitoring-stall-"))
    (work / "file_sd").mkdir()
    address = args.url.split("//", 1)[1].rstrip("/")
    plan = {"engine": {"name": "vllm"}, "ranks": [{"host": "seat-node", "rank": 0, "serve": address}]}
    (work / "file_sd" / targets.seat_file_name("stall")).write_text(json.dumps(targets.seat_groups("stall", plan)))
    (work / "rules.yml").write_text(yaml.safe_dump(rules.rules_document(settings)))
    config = targets.scrape_config(
        nodes={},
        gpu_nodes={},
        routers=[],
        file_sd_dir=str(work / "file_sd"),
        credentials_file="",
        rules_file=str(work / "rules.yml"),
        scrape_interval_s=args.scrape_s,
    )
    (work / "prometheus.yml").write_text(yaml.safe_dump(config))
    stop = threading.Event()
    clients = [
        threading.Thread(target=load, args=(args.url, args.model, stop, args.max_tokens), daemon=True)
        for _ in range(args.streams)
    ]
    for client in clients:
        client.start()
    result = {"settings": settings, "scrape_s": args.scrape_s, "streams": args.streams, "command": sys.argv}
    try:
        with start_prometheus(work, free_port()) as prometheus:
            base = prometheus["base"]
            wait_until(
                lambda: scraped_at_least(base, 2 * (args.window_s // args.scrape_s) + 4), 300, "no scrapes", prometheus
            )
            running = api(base, "/api/v1/query", query='sum(vllm:num_requests_running{job="seatwright_seats"})')
            result["running_before"] = float(running["data"]["result"][0]["value"][1])
            result["state_before"] = state(base)
            subprocess.run(shlex.split(args.freeze), check=True)
            result["fired_s"] = wait_state(base, "firing", 10 * (args.window_s + args.for_s))
            subprocess.run(shlex.split(args.thaw), check=True)
            result["cleared_s"] = wait_state(base, "inactive", 10 * (args.window_s + args.for_s))
    finally:
        stop.set()
        subprocess.run(shlex.split(args.thaw), check=False)
    result["stated_s"] = args.window_s + args.for_s
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0 if result.get("fired_s") is not None and result.get("cleared_s") is not None else 1


if __name__ == "__main__":
    sys.exit(main())
