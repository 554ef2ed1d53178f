#!/usr/bin/env python3
"""Moves a LiteLLM alias between two seats under steady traffic, on 127.0.0.1, without the lab, and
counts what failed: the router role's blue/green switch (io/router/switch.py) as the role runs it.

Two fake seats (tests/router_backend.py: seat-a and seat-b, both serving `lab`), two LiteLLM proxies
(blue, green) from an existing venv, one nginx in front (this script's own instance: -p/-c in a
scratch folder). A request goes through the front every --interval-ms while the alias `production`
is moved from seat-a to seat-b and back. Passes when no request failed and every request sent after
a move returned was answered (x-litellm-model-id) by the move's seat.

    .venv/bin/python bench/router_switch.py --venv /tmp/routervenv --out bench/results/router/switch
"""

import argparse
import json
import os
import secrets
import subprocess
import sys
import tempfile
import threading
import time
import urllib.error
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests"))

from ansible_collections.seatwright.fleet.plugins.module_utils.io.router import switch  # noqa: E402
from ansible_collections.seatwright.fleet.plugins.module_utils.router import adapter, deploy  # noqa: E402

ALIASES = {"production": "lab"}


def start_seat(name, port, logs):
    log = open(logs / ("%s.log" % name), "wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            str(ROOT / "tests" / "router_backend.py"),
            "--name",
            name,
            "--model",
            "lab",
            "--port",
            str(port),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    return proc


def nginx_conf(prefix, lay):
    """A whole nginx.conf for this script's own nginx: the role's own text (deploy.nginx_main_text)."""
    site = Path(prefix) / "site.conf"
    site.write_text(deploy.site_text(lay))
    return deploy.nginx_main_text(dict(lay, nginx_prefix=str(prefix), site_file=str(site)))


class Load:
    """One request through the front every interval, each on its own thread so a slow answer does not
    slow the cadence; every request's start, end, status and answering seat kept."""

    def __init__(self, url, key, interval_s):
        self.url, self.key, self.interval_s = url, key, interval_s
        self.records, self.lock, self.stop = [], threading.Lock(), threading.Event()
        self.threads = []

    def one(self):
        started = time.monotonic()
        body = json.dumps({"model": "production", "max_tokens": 2, "messages": [{"role": "user", "content": "hi"}]})
        request = urllib.request.Request(
            self.url + "/v1/chat/completions",
            data=body.encode(),
            headers={"Content-Type": "application/json", "Authorization": "Bearer " + self.key},
        )
        record = {"t0": started, "status": None, "seat": None, "error": None}
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                response.read()
                record["status"] = response.status
                record["seat"] = adapter.litellm_who_answered(dict(response.headers.items()))["seat"]
        except urllib.error.HTTPError as exc:
            record["status"], record["error"] = exc.code, exc.read()[:200].decode("utf-8", "replace")
        except OSError as exc:
            record["error"] = str(exc)
        record["t1"] = time.monotonic()
        with self.lock:
            self.records.append(record)

    def run(self):
        while not self.stop.is_set():
            thread = threading.Thread(target=self.one, daemon=True)
            thread.start()
            self.threads.append(thread)
            self.stop.wait(self.interval_s)

    def finish(self):
        self.stop.set()
        for thread in self.threads:
            thread.join(90)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--venv", default="/tmp/routervenv", help="a venv with litellm %s" % adapter.PINNED["litellm"])
    parser.add_argument("--port", type=int, default=14300, help="the front's port (the colours take the next two)")
    parser.add_argument("--seat-ports", type=int, nargs=2, default=[18101, 18102])
    parser.add_argument("--interval-ms", type=int, default=50)
    parser.add_argument("--hold-s", type=float, default=6.0, help="traffic before, between and after the moves")
    parser.add_argument("--out", help="folder for result.json")
    args = parser.parse_args()

    work = Path(tempfile.mkdtemp(prefix="router-switch-"))
    (work / "logs").mkdir()
    lay = deploy.layout("litellm", args.port, str(work / "etc"), str(work / "var"), bind="127.0.0.1")
    lay["venv"] = args.venv
    lay["upstream_file"] = str(work / "etc" / "router" / "upstream.conf")
    specs = deploy.service_specs(lay, "root")
    os.makedirs(lay["config_dir"], exist_ok=True)
    key = "sk-" + secrets.token_hex(16)
    with open(os.open(lay["env_file"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as handle:
        handle.write(deploy.env_file_text("litellm", key))
    for folder in ("body", "proxy"):
        (work / "nginx" / folder).mkdir(parents=True)
    conf = work / "nginx" / "nginx.conf"
    conf.write_text(nginx_conf(work / "nginx", lay))
    front = ["nginx", "-p", str(work / "nginx"), "-c", str(conf)]
    router = switch.Router(lay, specs, service_manager="process", front_argv=front)
    seats = {
        name: "http://127.0.0.1:%d/v1" % port for name, port in zip(("seat-a", "seat-b"), args.seat_ports, strict=True)
    }
    procs = [start_seat(name, port, work / "logs") for name, port in zip(seats, args.seat_ports, strict=True)]
    moves, result = [], {}
    try:
        t = time.monotonic()
        router.started(timeout_s=240)
        startup_s = round(time.monotonic() - t, 1)
        # The alias's first seat, before the traffic: the same move as any other.
        moves.append(
            dict(router.apply("production", ALIASES, {"seat-a": {"api_base": seats["seat-a"]}}, timeout_s=240))
        )
        load = Load("http://127.0.0.1:%d" % args.port, key, args.interval_ms / 1000.0)
        runner = threading.Thread(target=load.run, daemon=True)
        load_t0 = time.monotonic()
        runner.start()
        time.sleep(args.hold_s)
        timeline = []
        for seat, other in (("seat-b", "seat-a"), ("seat-a", "seat-b")):
            t0 = time.monotonic()
            # The seat moved away from is given weight 0: no traffic (the contract's shape).
            applied = router.apply(
                "production",
                ALIASES,
                {seat: {"api_base": seats[seat], "weight": 1}, other: {"api_base": seats[other], "weight": 0}},
                timeout_s=240,
            )
            t1 = time.monotonic()
            moves.append(dict(applied, started_s=round(t0 - load_t0, 2), returned_s=round(t1 - load_t0, 2)))
            timeline.append((seat, t0, t1))
            time.sleep(args.hold_s)
        load.finish()
        records = sorted(load.records, key=lambda r: r["t0"])
        failed = [r for r in records if r["status"] != 200]
        wrong = []
        for index, (seat, _began, returned) in enumerate(timeline):
            until = timeline[index + 1][1] if index + 1 < len(timeline) else float("inf")
            # Requests sent after this move returned and before the next move began.
            after = [r for r in records if returned <= r["t0"] < until]
            wrong += [dict(r, expected=seat) for r in after if r["seat"] != seat]
        by_seat = {}
        for r in records:
            by_seat[r["seat"] or "none"] = by_seat.get(r["seat"] or "none", 0) + 1
        result = {
            "command": " ".join([Path(sys.executable).name] + [os.path.relpath(sys.argv[0], ROOT)] + sys.argv[1:]),
            "litellm": adapter.PINNED["litellm"],
            "nginx": subprocess.run(["nginx", "-v"], capture_output=True, text=True).stderr.strip(),
            "interval_ms": args.interval_ms,
            "startup_s": startup_s,
            "requests": len(records),
            "failed": len(failed),
            "answered_by": by_seat,
            "answered_by_wrong_seat_after_a_move": len(wrong),
            "moves": moves,
            "failures": [{k: v for k, v in r.items() if k in ("status", "error")} for r in failed[:20]],
            "passed": not failed and not wrong and len(records) > 0,
        }
    finally:
        subprocess.run(front + ["-s", "quit"], capture_output=True)
        for spec in specs.values():
            pid = switch.Processes(os.path.join(lay["state_dir"], "run"))._pid(spec)
            if pid:
                os.kill(pid, 15)
        for proc in procs:
            proc.terminate()
    text = json.dumps(result, indent=2, sort_keys=True)
    if args.out:
        os.makedirs(args.out, exist_ok=True)
        Path(args.out, "result.json").write_text(text + "\n")
    print(text)
    return 0 if result.get("passed") else 1


if __name__ == "__main__":
    sys.exit(main())
