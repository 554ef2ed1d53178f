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

On the lab, Prometheus is the one site.yml runs on node-a (--prometheus), the seat takes its key
(--key-file) and the freeze and thaw run on node-a, where the engine's processes are visible:

    bench/monitoring_stall.py --url http://172.30.99.11:8000 --model smollm2-135m-instruct --seat lab \
        --key-file .cache/lab/seat-api-key --prometheus http://172.30.99.11:9090 \
        --freeze 'docker exec node-a pkill -STOP -f VLLM::EngineCore' \
        --thaw 'docker exec node-a pkill -CONT -f VLLM::EngineCore' --out .cache/monitoring/lab-stall.json

Its windows are then the inventory's (monitoring_alert_settings), which --window-s and --for-s must
state for the record.
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
# the loopback Prometheus the monitoring tests use
sys.path.insert(0, str(ROOT / "tests" / "unit" / "plugins" / "module_utils" / "monitoring"))
import yaml  # noqa: E402
from ansible_collections.seatwright.fleet.plugins.module_utils.monitoring import rules, targets  # noqa: E402
from monitoring_live import api, free_port, scraped_at_least, start_prometheus, wait_until  # noqa: E402


def load(url, model, stop, max_tokens, key=None):
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
        headers = {"Content-Type": "application/json"}
        if key:
            headers["Authorization"] = "Bearer " + key
        request = urllib.request.Request(url + "/v1/chat/completions", data=body, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=600) as answer:
                for _ in answer:
                    if stop.is_set():
                        return
        except OSError:
            time.sleep(0.5)


def state(base, seat=None):
    alerts = api(base, "/api/v1/alerts")["data"]["alerts"]
    found = [
        a["state"]
        for a in alerts
        if a["labels"]["alertname"] == "SeatTokensStalled" and seat in (None, a["labels"].get("seat"))
    ]
    return found[0] if found else "inactive"


def wait_state(base, wanted, limit_s, seat=None):
    start = time.monotonic()
    while time.monotonic() - start < limit_s:
        if state(base, seat) == wanted:
            return round(time.monotonic() - start, 1)
        time.sleep(0.2)
    return None


def measure(base, args, result, prometheus):
    """Wait for enough scrapes under load, freeze, time the alert, thaw, time the clear."""
    limit_s = 10 * (args.window_s + args.for_s)
    seat = '{job="seatwright_seats"%s}' % (', seat="%s"' % args.seat if args.seat else "")
    if prometheus is not None:
        wait_until(
            lambda: scraped_at_least(base, 2 * (args.window_s // args.scrape_s) + 4), 300, "no scrapes", prometheus
        )
    else:
        # A Prometheus of its own already: the seat scraped over a whole window, with requests running.
        wanted = args.window_s // args.scrape_s + 2
        query = "min(count_over_time(up%s[%ds])) >= %d and on() sum(vllm:num_requests_running%s) > 0" % (
            seat,
            args.window_s + 2 * args.scrape_s,
            wanted,
            seat,
        )
        deadline = time.monotonic() + 300
        while not api(base, "/api/v1/query", query=query)["data"].get("result"):
            if time.monotonic() > deadline:
                raise SystemExit("%s: the seat was not scraped under load for a window within 300 s" % base)
            time.sleep(1)
    running = api(base, "/api/v1/query", query="sum(vllm:num_requests_running%s)" % seat)
    result["running_before"] = float(running["data"]["result"][0]["value"][1])
    result["state_before"] = state(base, args.seat)
    subprocess.run(shlex.split(args.freeze), check=True)
    result["fired_s"] = wait_state(base, "firing", limit_s, args.seat)
    subprocess.run(shlex.split(args.thaw), check=True)
    result["cleared_s"] = wait_state(base, "inactive", limit_s, args.seat)


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
    parser.add_argument("--prometheus", help="a running Prometheus scraping the seat (the lab's); default: start one")
    parser.add_argument("--seat", help="the seat label the alert carries (with --prometheus)")
    parser.add_argument("--key-file", help="a file holding the seat's API key, for the load's requests")
    parser.add_argument("--out", required=True)
    args = parser.parse_args(argv)
    key = Path(args.key_file).read_text().strip() if args.key_file else None
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
        threading.Thread(target=load, args=(args.url, args.model, stop, args.max_tokens, key), daemon=True)
        for _ in range(args.streams)
    ]
    for client in clients:
        client.start()
    result = {"settings": settings, "scrape_s": args.scrape_s, "streams": args.streams, "command": sys.argv}
    try:
        if args.prometheus:
            measure(args.prometheus.rstrip("/"), args, result, None)
        else:
            with start_prometheus(work, free_port()) as prometheus:
                measure(prometheus["base"], args, result, prometheus)
    finally:
        stop.set()
        subprocess.run(shlex.split(args.thaw), check=False)
    result["stated_s"] = args.window_s + args.for_s
    Path(args.out).write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps(result, indent=2))
    return 0 if result.get("fired_s") is not None and result.get("cleared_s") is not None else 1


if __name__ == "__main__":
    sys.exit(main())
