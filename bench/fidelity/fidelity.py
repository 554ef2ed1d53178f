#!/usr/bin/env python3
"""Harness fidelity: seatwright's TTFT and output throughput against vLLM's own benchmark, one run.

Against one vLLM server (give it a quiet one: nobody else's requests), alternate in rounds:
vLLM's serving benchmark (vllm.benchmarks.serve driven as a module from the vLLM venv) and
seatwright's level (AIPerf through io/bench_runner.py, figures from bench/analysis.py — the code
tools/seatwright-bench runs). Same workload both ways: chat endpoint, streaming, fixed prompt and
answer lengths, ignore_eos, one concurrency. A first round of each is warm-up and discarded.
Compares the medians over rounds: TTFT p50 and output throughput, ratio seatwright / vLLM; within
10 % passes. Results go to bench/results/fidelity.json and .md with the command.

  nice -n -15 .venv/bin/python bench/fidelity/fidelity.py --base-url http://127.0.0.1:8391/v1 --model tiny \\
      --tokenizer /work/models/tiny-llama --vllm-python /work/venvs/vllm/bin/python --rounds 4

On a machine shared with other jobs, run the server and this script at the same raised priority
(renice the server's processes too): AIPerf's several processes pass each request through
inter-process queues, and starved of CPU they add their waiting to TTFT and stretch the gaps
between requests, which a single-process client does not.
"""
import argparse
import datetime
import json
import os
import platform
import shlex
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import ansible.module_utils

ROOT = Path(__file__).resolve().parents[2]
if str(ROOT / "module_utils") not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(str(ROOT / "module_utils"))

# pylint: disable=wrong-import-position
from ansible.module_utils.seatwright.bench import analysis, stats, workload as wl  # noqa: E402
from ansible.module_utils.seatwright.io import bench_runner  # noqa: E402

TOLERANCE = 0.10


def log(msg):
    print("[fidelity %s] %s" % (time.strftime("%H:%M:%S"), msg), file=sys.stderr, flush=True)


class VllmBench:
    """vLLM's benchmark in one long-lived process of the vLLM venv (imported once)."""

    def __init__(self, python):
        env = dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1")
        self.proc = subprocess.Popen([python, str(ROOT / "bench" / "fidelity" / "vllm_bench_driver.py")],
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                                     text=True, env=env)
        self._read_until("VLLM_BENCH_READY")

    def _read_until(self, prefix):
        for line in self.proc.stdout:
            if line.startswith(prefix):
                return line
        raise SystemExit("vLLM's benchmark process ended (exit %s) before %s" % (self.proc.wait(), prefix))

    def run(self, args, seed):
        argv = ["--backend", "openai-chat", "--base-url", bench_runner.server_root(args.base_url),
                "--endpoint", "/v1/chat/completions", "--model", args.model, "--tokenizer", args.tokenizer,
                "--dataset-name", "random", "--random-input-len", str(args.input_tokens),
                "--random-output-len", str(args.output_tokens), "--num-prompts", str(args.requests),
                "--max-concurrency", str(args.concurrency), "--ignore-eos", "--seed", str(seed),
                "--percentile-metrics", "ttft,tpot,itl,e2el", "--metric-percentiles", "50,95,99"]
        self.proc.stdin.write(json.dumps(argv) + "\n")
        self.proc.stdin.flush()
        result = json.loads(self._read_until("VLLM_BENCH_RESULT ").split(" ", 1)[1])
        return {"ttft_ms_p50": result.get("median_ttft_ms"), "output_tok_s": result.get("output_throughput"),
                "completed": result.get("completed"), "failed": result.get("failed", 0),
                "duration_s": result.get("duration"), "argv": argv}

    def close(self):
        self.proc.stdin.close()
        self.proc.wait()


def seatwright_level(runner, args, label, seed):
    out = runner.run(label, args.concurrency, args.requests, seed)
    level = analysis.analyse_level(args.concurrency, 1, out["records"], out["before"], out["after"],
                                   out["duration_s"])
    return {"ttft_ms_p50": level["figures"]["ttft_ms_p50"], "output_tok_s": level["figures"]["output_tok_s"],
            "completed": level["succeeded"], "failed": level["failed"], "duration_s": level["duration_s"],
            "prefix_cache_hit_rate": level["prefix_cache"]["hit_rate"], "argv": runner.commands[-1][1:]}


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--base-url", required=True)
    p.add_argument("--model", required=True)
    p.add_argument("--tokenizer", required=True)
    p.add_argument("--vllm-python", default="/work/venvs/vllm/bin/python")
    p.add_argument("--aiperf", default=None)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--concurrency", type=int, default=4)
    p.add_argument("--requests", type=int, default=32)
    p.add_argument("--input-tokens", type=int, default=128)
    p.add_argument("--output-tokens", type=int, default=32)
    p.add_argument("--out", default=str(ROOT / "bench" / "results" / "fidelity"))
    args = p.parse_args()
    load = wl.workload(input_tokens=args.input_tokens, output_tokens=args.output_tokens)
    workdir = tempfile.mkdtemp(prefix="seatwright-fidelity-")
    runner = bench_runner.AIPerfRunner(args.aiperf or bench_runner.aiperf_binary(str(ROOT)), args.base_url,
                                       args.model, args.tokenizer, workdir, load)
    log("starting vLLM's benchmark process (imports vLLM once)")
    reference = VllmBench(args.vllm_python)
    rounds = []
    for index in range(args.rounds + 1):
        kind = "warm-up" if index == 0 else "round %d/%d" % (index, args.rounds)
        order = ("vllm", "seatwright") if index % 2 else ("seatwright", "vllm")
        entry = {"round": index, "warmup": index == 0, "order": list(order)}
        for name in order:
            log("%s: %s" % (kind, name))
            if name == "vllm":
                entry["vllm"] = reference.run(args, 1000 + index)
            else:
                entry["seatwright"] = seatwright_level(runner, args, "round%d" % index, 2000 + index)
            log("    TTFT p50 %.1f ms, output %.1f tok/s" % (entry[name]["ttft_ms_p50"] or 0,
                                                             entry[name]["output_tok_s"] or 0))
        rounds.append(entry)
    reference.close()
    measured = [r for r in rounds if not r["warmup"]]
    summary = {}
    for key in ("ttft_ms_p50", "output_tok_s"):
        sw = stats.median([r["seatwright"][key] for r in measured])
        ref = stats.median([r["vllm"][key] for r in measured])
        ratio = sw / ref if sw and ref else None
        summary[key] = {"seatwright": sw, "vllm": ref, "ratio": ratio,
                        "within_tolerance": ratio is not None and abs(ratio - 1) <= TOLERANCE,
                        "seatwright_range": [min(r["seatwright"][key] for r in measured),
                                             max(r["seatwright"][key] for r in measured)],
                        "vllm_range": [min(r["vllm"][key] for r in measured), max(r["vllm"][key] for r in measured)]}
    result = {
        "when": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "command": " ".join(shlex.quote(a) for a in [".venv/bin/python", "bench/fidelity/fidelity.py"] + sys.argv[1:]),
        "host": {"cpus": os.cpu_count(), "python": platform.python_version(), "load_avg_at_end": os.getloadavg(),
                 "nice": os.nice(0)},
        "workload": {"concurrency": args.concurrency, "requests": args.requests, "input_tokens": args.input_tokens,
                     "output_tokens": args.output_tokens, "ignore_eos": True, "endpoint": "chat, streaming"},
        "harness": wl.harness(),
        "tolerance": TOLERANCE,
        "summary": summary,
        "passed": all(v["within_tolerance"] for v in summary.values()),
        "rounds": rounds,
    }
    Path(args.out + ".json").write_text(json.dumps(result, indent=2) + "\n")
    Path(args.out + ".md").write_text(render(result))
    print(render(result))
    return 0 if result["passed"] else 1


def render(result):
    lines = ["# Harness fidelity: seatwright vs vLLM's own benchmark", "",
             "Measured %s, one run, rounds alternating (first round of each discarded as warm-up), on %d "
             "cores (load average at the end %.1f / %.1f / %.1f; harness processes at nice %s)."
             % ((result["when"], result["host"]["cpus"]) + tuple(result["host"]["load_avg_at_end"])
                + (result["host"].get("nice", "?"),)),
             "", "```", result["command"], "```", "",
             "Workload: %s." % json.dumps(result["workload"], sort_keys=True), "",
             "| figure | seatwright (range) | vLLM bench (range) | ratio | within %d %% |" % (100 * result["tolerance"]),
             "|---|---|---|---|---|"]
    for key, label in (("ttft_ms_p50", "TTFT p50 ms"), ("output_tok_s", "output tok/s")):
        s = result["summary"][key]
        lines.append("| %s | %.1f (%.1f–%.1f) | %.1f (%.1f–%.1f) | %.3f | %s |" % (
            label, s["seatwright"], s["seatwright_range"][0], s["seatwright_range"][1], s["vllm"],
            s["vllm_range"][0], s["vllm_range"][1], s["ratio"], "yes" if s["within_tolerance"] else "**no**"))
    lines += ["", "| round | order | seatwright TTFT p50 ms | seatwright tok/s | vLLM TTFT p50 ms | vLLM tok/s | failed |",
              "|---|---|---|---|---|---|---|"]
    for r in result["rounds"]:
        lines.append("| %s | %s | %.1f | %.1f | %.1f | %.1f | %d / %d |" % (
            "warm-up" if r["warmup"] else r["round"], " then ".join(r["order"]), r["seatwright"]["ttft_ms_p50"],
            r["seatwright"]["output_tok_s"], r["vllm"]["ttft_ms_p50"], r["vllm"]["output_tok_s"],
            r["seatwright"]["failed"], r["vllm"]["failed"]))
    lines += ["", "Passed: **%s**." % ("yes" if result["passed"] else "no")]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    sys.exit(main())
