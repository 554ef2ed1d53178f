#!/usr/bin/env python3
"""Harness fidelity: seatwright's TTFT and output throughput against vLLM's own benchmark, one run.

Against one vLLM server (give it a quiet one: nobody else's requests), alternate in rounds:
vLLM's serving benchmark (vllm.benchmarks.serve driven as a module from the vLLM venv) and
seatwright's level (AIPerf through io/bench_runner.py, figures from bench/analysis.py — the code
tools/seatwright-bench runs). Same workload both ways: chat endpoint, streaming, fixed prompt and
answer lengths, ignore_eos, one concurrency, one warm-up request per stream. A first round of each
is warm-up and discarded. Compares the medians over rounds: TTFT p50 and output throughput, ratio
seatwright / vLLM; within 10 % passes. Results go to bench/results/fidelity.json and .md with the
command.

On a small host the engine and the load generators compete for the same cores, and AIPerf (several
processes passing each request through queues) suffers more from that than vLLM's one asyncio
process. So the script can start the server itself (--serve MODEL_DIR) pinned to its own cores
(--server-cpus, which also binds vLLM's CPU OpenMP threads there) and pin both harnesses to the
others (--harness-cpus). Each harness run records, for the fairness of the comparison: the mean
number of requests in flight (a harness short of CPU leaves streams idle), the CPU time of the
server, of the harness and of everything else on the host, each core's busy share, and the prompt
and generated tokens per request as the server counted them (the same workload, checked).

  flock /tmp/seatwright-lab.lock .venv/bin/python bench/fidelity/fidelity.py \\
      --serve /work/models/smollm2-135m-instruct --base-url http://127.0.0.1:8392/v1 \\
      --model smollm2-135m-instruct --tokenizer /work/models/smollm2-135m-instruct \\
      --server-cpus 0 --harness-cpus 1 --max-load 1.3 --rounds 4 --requests 64
"""

import argparse
import datetime
import json
import os
import platform
import resource
import shlex
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

from ansible_collections.seatwright.fleet.plugins.module_utils.bench import analysis, counters, records, stats
from ansible_collections.seatwright.fleet.plugins.module_utils.bench import workload as wl
from ansible_collections.seatwright.fleet.plugins.module_utils.io.bench import runner as bench_runner

ROOT = Path(__file__).resolve().parents[2]

TOLERANCE = 0.10


def log(msg):
    print("[fidelity %s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


def parse_cpus(text):
    """'0', '1-3', '0,2-3' -> sorted list of CPU ids; an error names the text."""
    cpus = set()
    try:
        for part in text.split(","):
            first, _, last = part.strip().partition("-")
            cpus.update(range(int(first), int(last or first) + 1))
    except ValueError:
        raise SystemExit("--server-cpus/--harness-cpus: %r is not a CPU list like 0 or 1-3 or 0,2" % text)
    if not cpus or min(cpus) < 0:
        raise SystemExit("--server-cpus/--harness-cpus: %r names no CPU" % text)
    return sorted(cpus)


def cpu_text(cpus):
    return ",".join(str(c) for c in cpus)


def server_command(python, model_dir, served_name, base_url, max_model_len):
    """The vLLM server this script starts (the lab's CPU server, as shared/LAB documents it)."""
    host, _, port = bench_runner.server_root(base_url).split("://", 1)[-1].partition(":")
    return [
        python,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        model_dir,
        "--served-model-name",
        served_name,
        "--host",
        host,
        "--port",
        port or "80",
        "--max-model-len",
        str(max_model_len),
    ]


def server_env(server_cpus):
    """Offline, a small KV cache, and (when pinned) vLLM's CPU OpenMP threads bound to the server's cores."""
    env = {"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    if server_cpus:
        env["VLLM_CPU_OMP_THREADS_BIND"] = cpu_text(server_cpus)
    return env


def mean_in_flight_vllm(result):
    """vLLM's benchmark's per-request start times and latencies as records: requests in flight on average.

    Without start times (vLLM keeps them only with --save-detailed), the sum of latencies over its duration.
    """
    latencies = [x for x in result.get("latencies") or [] if x and x > 0]
    if not result.get("start_times"):
        return sum(latencies) / result["duration"] if latencies and result.get("duration") else None
    spans = [
        {"start_ns": int(start * 1e9), "end_ns": int((start + latency) * 1e9)}
        for start, latency in zip(result["start_times"], result.get("latencies") or [])
        if latency and latency > 0
    ]
    return records.mean_in_flight(spans)


# ------------------------------------------------------------------------------------- CPU accounting

CLOCK_TICKS = os.sysconf("SC_CLK_TCK")


def read_cores():
    """{cpu id: (busy ticks, all ticks)} from /proc/stat."""
    cores = {}
    with open("/proc/stat", encoding="ascii") as handle:
        for line in handle:
            name, *fields = line.split()
            if not name.startswith("cpu") or name == "cpu":
                continue
            ticks = [int(v) for v in fields[:8]]
            idle = ticks[3] + ticks[4]  # idle + iowait
            cores[int(name[3:])] = (sum(ticks) - idle, sum(ticks))
    return cores


def _proc_stat(pid):
    try:
        with open("/proc/%d/stat" % pid, encoding="ascii", errors="replace") as handle:
            fields = handle.read().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return int(fields[1]), int(fields[11]) + int(fields[12])  # ppid, utime + stime (ticks)


def tree_ticks(root):
    """CPU ticks used so far by a live process and its live descendants."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            got = _proc_stat(int(entry))
            if got:
                table[int(entry)] = got
    wanted, total, frontier = {root}, 0, [root]
    while frontier:
        pid = frontier.pop()
        total += table.get(pid, (0, 0))[1]
        children = [p for p, (ppid, _) in table.items() if ppid == pid and p not in wanted]
        wanted.update(children)
        frontier.extend(children)
    return total, sorted(wanted & set(table))


def affinity_of(pids):
    """{pid: 'Cpus_allowed_list'} for each live pid (the pinning, as the kernel applies it)."""
    out = {}
    for pid in pids:
        try:
            with open("/proc/%d/status" % pid, encoding="ascii") as handle:
                for line in handle:
                    if line.startswith("Cpus_allowed_list:"):
                        out[pid] = line.split(":", 1)[1].strip()
        except OSError:
            pass
    return out


def own_ticks():
    """This script and its reaped children (AIPerf and its processes), in ticks."""
    me, kids = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return (me.ru_utime + me.ru_stime + kids.ru_utime + kids.ru_stime) * CLOCK_TICKS


def cpu_usage(before, after, wall_s):
    """CPU seconds of the server, the harness and everything else, and each core's busy share, over one run.

    before/after: {"cores": read_cores(), "server": ticks, "harness": ticks}.
    """
    busy = {c: after["cores"][c][0] - before["cores"][c][0] for c in after["cores"] if c in before["cores"]}
    total = {c: after["cores"][c][1] - before["cores"][c][1] for c in after["cores"] if c in before["cores"]}
    host_s = sum(busy.values()) / CLOCK_TICKS
    server_s = (after["server"] - before["server"]) / CLOCK_TICKS
    harness_s = (after["harness"] - before["harness"]) / CLOCK_TICKS
    return {
        "wall_s": wall_s,
        "server_cpu_s": server_s,
        "harness_cpu_s": harness_s,
        "other_cpu_s": max(0.0, host_s - server_s - harness_s),
        "core_busy": {str(c): (busy[c] / total[c]) if total[c] else None for c in sorted(busy)},
    }


def server_counts(base_url):
    """Prompt tokens, generation tokens and finished requests so far, as the server counts them."""
    text = bench_runner.scrape_metrics(base_url)
    if text is None:
        return {}
    samples = counters.parse_exposition(text)
    got = counters.engine_counters(samples)
    finished = samples.get("vllm:request_success_total")
    got["requests"] = sum(v for _, v in finished) if finished else None
    return got


def per_request(before, after):
    """What the server saw during one harness run: requests (warm-ups included) and tokens per request."""
    delta = {
        k: (after.get(k) - before.get(k)) if after.get(k) is not None and before.get(k) is not None else None
        for k in ("requests", "prompt_tokens", "generation_tokens")
    }
    n = delta["requests"]
    return {
        "requests": n,
        "prompt_tokens_per_request": delta["prompt_tokens"] / n if n and delta["prompt_tokens"] is not None else None,
        "generation_tokens_per_request": delta["generation_tokens"] / n
        if n and delta["generation_tokens"] is not None
        else None,
    }


class Server:
    """The vLLM server under test, started by this script on its own cores, stopped at the end."""

    def __init__(self, argv, env, cpus, log_path, ready_timeout_s=600):
        self.argv, self.env, self.cpus, self.log_path = argv, env, cpus, log_path
        self.ready_timeout_s = ready_timeout_s
        self.proc = None

    def start(self, base_url):
        logfile = open(self.log_path, "wb")  # pylint: disable=consider-using-with
        cpus = set(self.cpus) if self.cpus else None
        self.proc = subprocess.Popen(
            self.argv,
            stdout=logfile,
            stderr=subprocess.STDOUT,
            env=dict(os.environ, **self.env),
            start_new_session=True,
            preexec_fn=(lambda: os.sched_setaffinity(0, cpus)) if cpus else None,
        )
        started = time.time()
        while time.time() - started < self.ready_timeout_s:
            if self.proc.poll() is not None:
                raise SystemExit(
                    "the vLLM server exited %s before it was ready; see %s" % (self.proc.returncode, self.log_path)
                )
            try:
                with urllib.request.urlopen(bench_runner.server_root(base_url) + "/v1/models", timeout=5):
                    return time.time() - started
            except (urllib.error.URLError, OSError):
                time.sleep(3)
        self.stop()
        raise SystemExit("the vLLM server was not ready after %d s; see %s" % (self.ready_timeout_s, self.log_path))

    def ticks(self):
        return tree_ticks(self.proc.pid) if self.proc else (0, [])

    def stop(self):
        if self.proc and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


def wait_for_quiet(max_load, timeout_s=900):
    """Wait until the 1-minute load average is below max_load; returns the load seen."""
    started = time.time()
    while os.getloadavg()[0] >= max_load:
        if time.time() - started > timeout_s:
            raise SystemExit("the host's 1-minute load stayed at or over %.2f for %d s" % (max_load, timeout_s))
        log("waiting for the 1-minute load (%.2f) to drop below %.2f" % (os.getloadavg()[0], max_load))
        time.sleep(15)
    return os.getloadavg()


def vllm_bench_argv(args, seed):
    """vLLM's benchmark arguments for the same workload seatwright's AIPerf run gets (bench_runner.command)."""
    return [
        "--backend",
        "openai-chat",
        "--base-url",
        bench_runner.server_root(args.base_url),
        "--endpoint",
        "/v1/chat/completions",
        "--model",
        args.model,
        "--tokenizer",
        args.tokenizer,
        "--dataset-name",
        "random",
        "--random-input-len",
        str(args.input_tokens),
        "--random-output-len",
        str(args.output_tokens),
        "--num-prompts",
        str(args.requests),
        "--max-concurrency",
        str(args.concurrency),
        "--ignore-eos",
        "--seed",
        str(seed),
        # One warm-up request per stream, as seatwright asks AIPerf for (bench_runner.command).
        "--num-warmups",
        str(args.concurrency),
        "--percentile-metrics",
        "ttft,tpot,itl,e2el",
        "--metric-percentiles",
        "50,95,99",
        # Keeps each request's start time in the result (for the requests in flight); reporting only.
        "--save-detailed",
    ]


class VllmBench:
    """vLLM's benchmark in one long-lived process of the vLLM venv (imported once)."""

    def __init__(self, python):
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        self.proc = subprocess.Popen(
            [python, str(ROOT / "bench" / "fidelity" / "vllm_bench_driver.py")],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        self._read_until("VLLM_BENCH_READY")

    def _read_until(self, prefix):
        for line in self.proc.stdout:
            if line.startswith(prefix):
                return line
        raise SystemExit("vLLM's benchmark process ended (exit %s) before %s" % (self.proc.wait(), prefix))

    def run(self, args, seed):
        argv = vllm_bench_argv(args, seed)
        self.proc.stdin.write(json.dumps(argv) + "\n")
        self.proc.stdin.flush()
        result = json.loads(self._read_until("VLLM_BENCH_RESULT ").split(" ", 1)[1])
        return {
            "ttft_ms_p50": result.get("median_ttft_ms"),
            "output_tok_s": result.get("output_throughput"),
            "completed": result.get("completed"),
            "failed": result.get("failed", 0),
            "duration_s": result.get("duration"),
            "in_flight_mean": mean_in_flight_vllm(result),
            "argv": argv,
        }

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def seatwright_level(runner, args, label, seed):
    out = runner.run(label, args.concurrency, args.requests, seed)
    level = analysis.analyse_level(args.concurrency, 1, out["records"], out["before"], out["after"], out["duration_s"])
    return {
        "ttft_ms_p50": level["figures"]["ttft_ms_p50"],
        "output_tok_s": level["figures"]["output_tok_s"],
        "completed": level["succeeded"],
        "failed": level["failed"],
        "duration_s": level["duration_s"],
        "prefix_cache_hit_rate": level["prefix_cache"]["hit_rate"],
        "in_flight_mean": records.mean_in_flight(out["records"]),
        "argv": runner.commands[-1][1:],
    }


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--base-url", required=True)
    p.add_argument("--model", required=True, help="the served model name")
    p.add_argument("--tokenizer", required=True)
    p.add_argument(
        "--serve",
        metavar="MODEL_DIR",
        default=None,
        help="start the vLLM server on --base-url's port with this model (and stop it at the end); "
        "without it, --base-url must already serve --model",
    )
    p.add_argument("--max-model-len", type=int, default=2048)
    p.add_argument("--server-cpus", default=None, help="CPUs for the server this script starts, e.g. 0")
    p.add_argument(
        "--harness-cpus", default=None, help="CPUs for both harnesses (this script, AIPerf, vLLM's benchmark), e.g. 1"
    )
    p.add_argument(
        "--max-load",
        type=float,
        default=None,
        help="wait until the host's 1-minute load average is below this before starting",
    )
    p.add_argument("--vllm-python", default="/work/venvs/vllm/bin/python")
    p.add_argument("--aiperf", default=None)
    p.add_argument(
        "--poll-hz",
        type=int,
        default=wl.CLOSED_LOOP_POLL_HZ,
        help="seatwright's AIPerf free-stream check rate (tools/seatwright-bench --poll-hz; 0: AIPerf's busy loop)",
    )
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--requests", type=int, default=32)
    p.add_argument("--input-tokens", type=int, default=128)
    p.add_argument("--output-tokens", type=int, default=32)
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "fidelity"))
    args = p.parse_args()
    server_cpus = parse_cpus(args.server_cpus) if args.server_cpus else None
    harness_cpus = parse_cpus(args.harness_cpus) if args.harness_cpus else None
    if server_cpus and not args.serve:
        p.error("--server-cpus pins the server this script starts: give --serve MODEL_DIR too")
    if server_cpus and harness_cpus and set(server_cpus) & set(harness_cpus):
        p.error("--server-cpus and --harness-cpus overlap: the point is to keep them apart")
    if harness_cpus:
        os.sched_setaffinity(0, set(harness_cpus))  # AIPerf and vLLM's benchmark inherit it
    load_before = wait_for_quiet(args.max_load) if args.max_load else os.getloadavg()
    log("1-minute load %.2f before starting" % load_before[0])
    load = wl.workload(input_tokens=args.input_tokens, output_tokens=args.output_tokens)
    workdir = tempfile.mkdtemp(prefix="seatwright-fidelity-")
    server = None
    if args.serve:
        argv = server_command(args.vllm_python, args.serve, args.model, args.base_url, args.max_model_len)
        server = Server(argv, server_env(server_cpus), server_cpus, os.path.join(workdir, "server.log"))
        log(
            "starting the vLLM server%s: %s"
            % (" on CPU " + cpu_text(server_cpus) if server_cpus else "", " ".join(shlex.quote(a) for a in argv))
        )
    # A timeout or a kill ends the run through the finally below: never leave the server running.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit("fidelity: terminated (signal %d)" % signum))
    try:
        if server:
            ready_s = server.start(args.base_url)
            log("server ready after %.0f s" % ready_s)
        result = measure(args, load, workdir, server)
    finally:
        if server:
            log("stopping the vLLM server")
            server.stop()
    result.update(
        {
            "when": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
            "command": " ".join(
                shlex.quote(a) for a in [".venv/bin/python", "bench/fidelity/fidelity.py"] + sys.argv[1:]
            ),
        }
    )
    result["host"].update({"load_avg_before": list(load_before)})
    if server:
        result["server"] = {"argv": server.argv, "env": server.env, "cpus": server_cpus, "ready_s": ready_s}
    result["harness_cpus"] = harness_cpus
    Path(args.out + ".json").write_text(json.dumps(result, indent=2) + "\n")
    Path(args.out + ".md").write_text(render(result))
    print(render(result))
    return 0 if result["passed"] else 1


def measure(args, load, workdir, server):
    """The alternating rounds against the ready server; the result without when/command."""
    runner = bench_runner.AIPerfRunner(
        args.aiperf or bench_runner.aiperf_binary(str(ROOT)),
        args.base_url,
        args.model,
        args.tokenizer,
        workdir,
        load,
        poll_hz=args.poll_hz,
    )
    log("starting vLLM's benchmark process (imports vLLM once)")
    reference = VllmBench(args.vllm_python)
    pinning = {"harness": affinity_of([os.getpid(), reference.proc.pid])}
    if server:
        pinning["server"] = affinity_of(server.ticks()[1])

    def snapshot():
        return {
            "cores": read_cores(),
            "server": server.ticks()[0] if server else 0,
            "harness": own_ticks() + tree_ticks(reference.proc.pid)[0],
        }

    rounds = []
    for index in range(args.rounds + 1):
        kind = "warm-up" if index == 0 else "round %d/%d" % (index, args.rounds)
        order = ("vllm", "seatwright") if index % 2 else ("seatwright", "vllm")
        entry = {"round": index, "warmup": index == 0, "order": list(order)}
        for name in order:
            log("%s: %s" % (kind, name))
            counts_before, cpu_before, started = server_counts(args.base_url), snapshot(), time.time()
            if name == "vllm":
                entry[name] = reference.run(args, 1000 + index)
            else:
                entry[name] = seatwright_level(runner, args, "round%d" % index, 2000 + index)
            entry[name]["cpu"] = cpu_usage(cpu_before, snapshot(), time.time() - started)
            entry[name]["server_saw"] = per_request(counts_before, server_counts(args.base_url))
            log(
                "    TTFT p50 %.1f ms, output %.1f tok/s, %.2f in flight; CPU s: server %.1f, harness %.1f, "
                "other %.1f of %.1f wall"
                % (
                    entry[name]["ttft_ms_p50"] or 0,
                    entry[name]["output_tok_s"] or 0,
                    entry[name]["in_flight_mean"] or 0,
                    entry[name]["cpu"]["server_cpu_s"],
                    entry[name]["cpu"]["harness_cpu_s"],
                    entry[name]["cpu"]["other_cpu_s"],
                    entry[name]["cpu"]["wall_s"],
                )
            )
        rounds.append(entry)
    reference.close()
    measured = [r for r in rounds if not r["warmup"]]
    summary = {}
    for key in ("ttft_ms_p50", "output_tok_s"):
        sw = stats.median([r["seatwright"][key] for r in measured])
        ref = stats.median([r["vllm"][key] for r in measured])
        ratio = sw / ref if sw and ref else None
        summary[key] = {
            "seatwright": sw,
            "vllm": ref,
            "ratio": ratio,
            "within_tolerance": ratio is not None and abs(ratio - 1) <= TOLERANCE,
            "seatwright_range": [
                min(r["seatwright"][key] for r in measured),
                max(r["seatwright"][key] for r in measured),
            ],
            "vllm_range": [min(r["vllm"][key] for r in measured), max(r["vllm"][key] for r in measured)],
            "round_ratios": [
                r["seatwright"][key] / r["vllm"][key] for r in measured if r["seatwright"][key] and r["vllm"][key]
            ],
        }
    return {
        "host": {
            "cpus": os.cpu_count(),
            "python": platform.python_version(),
            "load_avg_at_end": os.getloadavg(),
            "nice": os.nice(0),
        },
        "workload": {
            "concurrency": args.concurrency,
            "requests": args.requests,
            "input_tokens": args.input_tokens,
            "output_tokens": args.output_tokens,
            "ignore_eos": True,
            "endpoint": "chat, streaming",
            "warmup_requests": args.concurrency,
        },
        "model": {"served_name": args.model, "dir": args.serve or args.tokenizer},
        "pinning": pinning,
        "harness": wl.harness(),
        "tolerance": TOLERANCE,
        "summary": summary,
        "passed": all(v["within_tolerance"] for v in summary.values()),
        "rounds": rounds,
    }


def _f(value, fmt="%.1f"):
    return "n/a" if value is None else fmt % value


def render(result):
    host = result["host"]
    before = host.get("load_avg_before")
    server = result.get("server")
    lines = [
        "# Harness fidelity: seatwright vs vLLM's own benchmark",
        "",
        "Measured %s, one run, rounds alternating (first round of each discarded as warm-up), on %d cores "
        "(1-minute load average %s before the server started, %.1f at the end; nice %s)."
        % (
            result["when"],
            host["cpus"],
            _f(before[0], "%.2f") if before else "n/a",
            host["load_avg_at_end"][0],
            host.get("nice", "?"),
        ),
        "",
        "```",
        result["command"],
        "```",
        "",
    ]
    if server:
        lines += [
            "Server (started and stopped by the script): `%s` with %s%s, ready after %.0f s."
            % (
                " ".join(shlex.quote(a) for a in server["argv"]),
                ", ".join("%s=%s" % kv for kv in sorted(server["env"].items())),
                "; pinned to CPU %s" % cpu_text(server["cpus"]) if server.get("cpus") else "",
                server["ready_s"],
            ),
            "",
        ]
    pinning = result.get("pinning") or {}
    if result.get("harness_cpus") or pinning.get("server"):
        lines += [
            "Isolation: harnesses (this script, AIPerf and its processes, vLLM's benchmark) on CPU %s; "
            "server processes' allowed CPUs as the kernel reported them: %s."
            % (
                cpu_text(result["harness_cpus"]) if result.get("harness_cpus") else "any",
                ", ".join(sorted(set(pinning.get("server", {}).values()))) or "n/a",
            ),
            "",
        ]
    lines += [
        "Workload: %s." % json.dumps(result["workload"], sort_keys=True),
        "",
        "| figure | seatwright (range) | vLLM bench (range) | ratio | per-round ratios | within %d %% |"
        % (100 * result["tolerance"]),
        "|---|---|---|---|---|---|",
    ]
    for key, label in (("ttft_ms_p50", "TTFT p50 ms"), ("output_tok_s", "output tok/s")):
        s = result["summary"][key]
        lines.append(
            "| %s | %.1f (%.1f–%.1f) | %.1f (%.1f–%.1f) | %s | %s | %s |"
            % (
                label,
                s["seatwright"],
                s["seatwright_range"][0],
                s["seatwright_range"][1],
                s["vllm"],
                s["vllm_range"][0],
                s["vllm_range"][1],
                _f(s["ratio"], "%.3f"),
                ", ".join("%.2f" % r for r in s.get("round_ratios", [])),
                "yes" if s["within_tolerance"] else "**no**",
            )
        )
    lines += [
        "",
        "| round | harness | TTFT p50 ms | output tok/s | in flight (of %d) | server saw: requests, "
        "prompt / generated tokens per request | CPU s: server / harness / other (wall s) | core busy | failed |"
        % result["workload"]["concurrency"],
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for r in result["rounds"]:
        for name in r["order"]:
            run = r[name]
            cpu, saw = run.get("cpu") or {}, run.get("server_saw") or {}
            lines.append(
                "| %s | %s | %.1f | %.1f | %s | %s, %s / %s | %s / %s / %s (%s) | %s | %d |"
                % (
                    "warm-up" if r["warmup"] else r["round"],
                    "seatwright (AIPerf)" if name == "seatwright" else "vLLM bench",
                    run["ttft_ms_p50"],
                    run["output_tok_s"],
                    _f(run.get("in_flight_mean"), "%.2f"),
                    _f(saw.get("requests"), "%d"),
                    _f(saw.get("prompt_tokens_per_request")),
                    _f(saw.get("generation_tokens_per_request")),
                    _f(cpu.get("server_cpu_s")),
                    _f(cpu.get("harness_cpu_s")),
                    _f(cpu.get("other_cpu_s")),
                    _f(cpu.get("wall_s")),
                    " ".join(
                        "cpu%s %s" % (c, _f(100 * v if v is not None else None, "%.0f%%"))
                        for c, v in sorted((cpu.get("core_busy") or {}).items())
                    )
                    or "n/a",
                    run["failed"],
                )
            )
    lines += ["", "Passed: **%s**." % ("yes" if result["passed"] else "no")]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
