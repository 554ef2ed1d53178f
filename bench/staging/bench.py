#!/usr/bin/env python3
"""Staging benchmark: verified staging against plain copies, in one run, several passes.

Creates two lab containers (ckpt-a, ckpt-b on ckptnet, 172.30.98.0/24), writes a synthetic
cache-entry checkpoint of `--shards` x `--shard-mib` MiB on ckpt-a and moves it to ckpt-b with:

  plain          bench/staging/plain_pull.py: the same HTTP pull, streams and fsync, no hashing
  plain-direct   the same with O_DIRECT writes, as weight_stage writes (the faster of the two plain
                 copies is the physical limit the 0.9 bar is judged against)
  curl           curl --parallel from the same source, then sync
  copy+sha256sum plain_pull.py, then sha256sum -c of every LFS blob (what most people do)
  rsync          rsync daemon on ckpt-a, rsync -a -L into ckpt-b, then sync
  verified       the weight_stage module (hash while streaming, temp name, fsync, rename, manifest,
                 the listing's signature checked and every request authenticated)
  verified-direct  the same pipeline (staging_pull.stage) run directly on ckpt-b, no Ansible around it
  verified-nosig   verified-direct with the destination's listing-signature check replaced by
                 "accept": the pair prices authentication (requests stay authenticated, as the
                 source requires)
  disk           no transfer: dd writes the same bytes from memory with O_DIRECT, one writer per
                 shard, the destination disk's own limit (a reference, not a copy)

With --baseline DIR (an older checkout, at least plugins/module_utils/ (or, from before the
collection layout, module_utils/) and bench/staging/, e.g. from
`git archive REF plugins/module_utils bench/staging | tar -x -C DIR`), every pass also runs that
checkout's plain copy and verified pull (plain-direct@baseline, verified-direct@baseline), so a
change to the pipeline is judged side by side with what it replaces, in the same run.

Every HTTP method pulls from one weight_source started once (async) on ckpt-a. Methods run in a
different order each pass; before each one the destination is removed, dirty pages are flushed,
the host page cache is dropped and (with --cache warm-source) the source re-read, and the run
waits until the host's CPUs are quiet (other jobs share them). Times are measured on ckpt-b around
the transfer. Results go to bench/results/staging.json and .md.

  .venv/bin/python bench/staging/bench.py --passes 5
"""

import argparse
import datetime
import json
import os
import platform
import secrets
import shlex
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "staging"))
from plain_pull import staging_auth  # noqa: E402  (the one home of the wire format and chunk size)
from shim import shim_commands, staging_auth_path  # noqa: E402

DOCKER = "/usr/bin/docker"
IMAGE = "seatwright/lab:current"
NETWORK, SUBNET = "ckptnet", "172.30.98.0/24"
NODES = {"ckpt-a": "172.30.98.11", "ckpt-b": "172.30.98.12"}
INVENTORY = ROOT / "tests" / "integration" / "staging" / "inventory.yml"
SOURCE_URL = "http://172.30.98.11:8473"
METHODS = [
    "plain",
    "plain-direct",
    "curl",
    "copy+sha256sum",
    "rsync",
    "verified",
    "verified-direct",
    "verified-nosig",
    "disk",
]
BASELINE_METHODS = ["plain-direct@baseline", "verified-direct@baseline"]
SHIM = "/opt/sw"
BASELINE_SHIM, BASELINE_BIN = "/opt/sw-baseline", "/usr/local/lib/sw-baseline"
TIMER = (
    "import json, subprocess, sys, time; t = time.monotonic(); "
    "r = subprocess.run(sys.argv[1], shell=True, stdout=subprocess.PIPE, text=True); "
    "print(json.dumps({'seconds': round(time.monotonic() - t, 3), 'stdout': r.stdout})); sys.exit(r.returncode)"
)


def sh(args, check=True, **kwargs):
    return subprocess.run(args, check=check, capture_output=True, text=True, **kwargs)


def on(node, script, check=True):
    return sh([DOCKER, "exec", node, "sh", "-c", script], check=check).stdout


def timed(node, script):
    """(seconds, stdout) of a shell script, timed inside the node."""
    done = sh([DOCKER, "exec", node, "python3", "-c", TIMER, script], check=False)
    if done.returncode:
        raise SystemExit("%s failed on %s: %s" % (script, node, done.stderr.strip()[-500:]))
    result = json.loads(done.stdout)
    return result["seconds"], result["stdout"]


def cpu_sample(seconds):
    """Host CPU busy fraction over `seconds`."""

    def read():
        with open("/proc/stat") as handle:
            fields = [int(v) for v in handle.readline().split()[1:]]
        return sum(fields), fields[3] + fields[4]

    total0, idle0 = read()
    time.sleep(seconds)
    total1, idle1 = read()
    return 1.0 - (idle1 - idle0) / float(max(total1 - total0, 1))


class CpuMeter:
    def __enter__(self):
        with open("/proc/stat") as handle:
            self.start = [int(v) for v in handle.readline().split()[1:]]
        return self

    def __exit__(self, *exc):
        with open("/proc/stat") as handle:
            end = [int(v) for v in handle.readline().split()[1:]]
        delta = [b - a for a, b in zip(self.start, end)]
        self.busy = 1.0 - (delta[3] + delta[4]) / float(max(sum(delta), 1))


def wait_quiet(threshold, max_wait_s):
    """Wait until the host's CPUs are mostly idle; returns (busy fraction seen, seconds waited)."""
    started = time.monotonic()
    busy = cpu_sample(1.0)
    while busy > threshold and time.monotonic() - started < max_wait_s:
        busy = cpu_sample(1.0)
    return round(busy, 3), round(time.monotonic() - started, 1)


def drop_caches():
    sh(["sync"])
    try:
        with open("/proc/sys/vm/drop_caches", "w") as handle:
            handle.write("3\n")
        return True
    except OSError:
        return False


def ansible_json(args):
    env = dict(
        os.environ,
        ANSIBLE_STDOUT_CALLBACK="ansible.posix.json",
        ANSIBLE_LOAD_CALLBACK_PLUGINS="1",
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
    )
    done = sh(
        [str(ROOT / ".venv" / "bin" / "ansible"), "-i", str(INVENTORY)] + args, check=False, env=env, cwd=str(ROOT)
    )
    report = json.loads(done.stdout[done.stdout.index("{") :])
    return list(report["plays"][0]["tasks"][0]["hosts"].values())[0]


def setup(args, token):
    for node in NODES:
        sh([DOCKER, "rm", "-f", node], check=False)
    sh([DOCKER, "network", "rm", NETWORK], check=False)
    sh([DOCKER, "network", "create", "--subnet", SUBNET, NETWORK])
    for node, address in NODES.items():
        sh(
            [
                DOCKER,
                "run",
                "-d",
                "--name",
                node,
                "--hostname",
                node,
                "--network",
                NETWORK,
                "--ip",
                address,
                IMAGE,
                "sleep",
                "infinity",
            ]
        )
        on(node, "apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq rsync >/dev/null")
        for script in ("make_checkpoint.py", "plain_pull.py", "stage_direct.py"):
            sh([DOCKER, "cp", str(ROOT / "bench" / "staging" / script), "%s:/usr/local/bin/" % node])
        # The chunk size and the request authentication have one home, copied beside plain_pull.py.
        sh(
            [
                DOCKER,
                "cp",
                str(staging_auth_path(ROOT)),
                "%s:/usr/local/bin/" % node,
            ]
        )
    prepare, (tree, into) = shim_commands(SHIM, ROOT)
    on("ckpt-b", prepare)
    sh([DOCKER, "cp", str(tree), "ckpt-b:" + into])
    if args.baseline:
        base = Path(args.baseline)
        prepare, (tree, into) = shim_commands(BASELINE_SHIM, base)
        on("ckpt-b", "mkdir -p %s && %s" % (BASELINE_BIN, prepare))
        for script in (
            base / "bench" / "staging" / "plain_pull.py",
            base / "bench" / "staging" / "stage_direct.py",
            staging_auth_path(base),
        ):
            sh([DOCKER, "cp", str(script), "ckpt-b:%s/" % BASELINE_BIN])
        sh([DOCKER, "cp", str(tree), "ckpt-b:" + into])
    made = json.loads(
        on(
            "ckpt-a",
            "python3 /usr/local/bin/make_checkpoint.py --out /srv/hf --shards %d "
            "--shard-mib %d" % (args.shards, args.shard_mib),
        )
    )
    on("ckpt-b", "printf %s > /run/token" % token)
    on(
        "ckpt-a",
        "printf '[ckpt]\\npath = %s\\nread only = yes\\nuid = root\\ngid = root\\n' > /etc/rsyncd.conf && "
        "rsync --daemon --address=172.30.98.11" % made["path"],
    )
    source = ansible_json(
        [
            "ckpt-a",
            "-m",
            "weight_source",
            "-B",
            "14400",
            "-P",
            "0",
            "-a",
            json.dumps(
                {
                    "path": made["path"],
                    "revision": made["revision"],
                    "name": "bench",
                    "bind_address": "172.30.98.11",
                    "token": token,
                    "clients": 100000,
                    "idle_timeout_s": 3600,
                    "lifetime_s": 14400,
                }
            ),
        ]
    )
    if "ansible_job_id" not in source:
        raise SystemExit("could not start weight_source: %s" % source)
    return made


def method_script(method, made, token):
    """The shell each baseline runs on ckpt-b (verified runs through Ansible instead)."""
    blobs = [(name, entry) for name, entry in sorted(made["files"].items())]
    if method == "plain-direct@baseline":
        return (
            "python3 %s/plain_pull.py --url %s --token-file /run/token --dest /srv/bench/plain-baseline "
            "--streams 4 --direct" % (BASELINE_BIN, SOURCE_URL)
        )
    if method == "verified-direct@baseline":
        return (
            "python3 %s/stage_direct.py --shim %s --url %s --token-file /run/token --dest "
            "/srv/bench/verified-baseline/models--seatwright--synthetic --revision %s"
            % (BASELINE_BIN, BASELINE_SHIM, SOURCE_URL, made["revision"])
        )
    if method in ("plain", "plain-direct", "copy+sha256sum"):
        script = (
            "python3 /usr/local/bin/plain_pull.py --url %s --token-file /run/token --dest /srv/bench/%s "
            "--streams 4%s" % (SOURCE_URL, method, " --direct" if method == "plain-direct" else "")
        )
        if method == "copy+sha256sum":
            lines = "".join("%s  %s\\n" % (e["sha256"], name) for name, e in blobs if "sha256" in e)
            script += " && cd /srv/bench/%s && printf '%s' | sha256sum --quiet -c -" % (method, lines)
        return script
    if method == "curl":
        # Each request needs its own single-use MAC; the bench knows the run's secret and makes them.
        groups = []
        for name, e in blobs:
            path = "/file/blobs/%s" % (e.get("sha256") or e.get("git-sha1"))
            header = staging_auth.authorization(
                token, "GET", path, "curl", server=staging_auth.server_name(*SOURCE_URL[len("http://") :].split(":"))
            )[0]
            groups.append(
                "-sf -H %s -o /srv/bench/curl/%s %s%s"
                % (shlex.quote("Authorization: " + header), name, SOURCE_URL, path)
            )
        return "mkdir -p /srv/bench/curl && curl -s --parallel --parallel-max 4 %s && sync" % " --next ".join(groups)
    if method in ("verified-direct", "verified-nosig"):
        return (
            "python3 /usr/local/bin/stage_direct.py --shim %s --url %s --token-file /run/token --dest "
            "/srv/bench/%s/models--seatwright--synthetic --revision %s%s"
            % (
                SHIM,
                SOURCE_URL,
                method,
                made["revision"],
                " --no-signature-check" if method == "verified-nosig" else "",
            )
        )
    if method == "disk":
        writers = " ".join(
            "dd if=/dev/zero of=/srv/bench/disk/%s bs=4M count=%d oflag=direct conv=fsync status=none &"
            % (name, e["size"] // (4 << 20))
            for name, e in blobs
            if e["size"] >= 4 << 20
        )
        return "mkdir -p /srv/bench/disk && %s wait" % writers
    if method == "rsync":
        return (
            "mkdir -p /srv/bench/rsync && rsync -a -L rsync://172.30.98.11/ckpt/snapshots/%s/ /srv/bench/rsync/ "
            "&& sync" % made["revision"]
        )
    raise ValueError(method)


def run_verified(made, token):
    started = time.monotonic()
    result = ansible_json(
        [
            "ckpt-b",
            "-m",
            "weight_stage",
            "-a",
            json.dumps(
                {
                    "source_url": SOURCE_URL,
                    "token": token,
                    "dest": "/srv/bench/verified/models--seatwright--synthetic",
                    "name": "bench",
                    "revision": made["revision"],
                    "client": "verified",
                    "streams": 4,
                }
            ),
        ]
    )
    wall = time.monotonic() - started
    if result.get("failed") or result.get("bytes_transferred") != made["bytes"]:
        raise SystemExit("verified staging failed: %s" % result.get("msg", result))
    if not all(t["direct_io"] for t in result["transfers"]):
        raise SystemExit("verified staging fell back to buffered writes; the comparison would not be like for like")
    return result["elapsed_s"], round(wall, 3)


def one_pass(index, order, made, token, args):
    records = []
    for method in order:
        on("ckpt-b", "rm -rf /srv/bench")
        dropped = drop_caches()
        if args.cache == "warm-source":
            on("ckpt-a", "cat %s/blobs/* > /dev/null" % made["path"])
        busy_before, waited = wait_quiet(args.quiet_busy, args.quiet_wait_s)
        inner = {}
        with CpuMeter() as meter:
            if method == "verified":
                seconds, outer = run_verified(made, token)
            else:
                outer, stdout = timed("ckpt-b", method_script(method, made, token))
                # plain_pull and stage_direct time themselves from the listing fetch to the last fsync
                # (manifest written), as weight_stage does.
                inner = json.loads(stdout) if method.startswith(("plain", "verified-")) else {}
                seconds = inner.get("seconds", outer)
        size = int(on("ckpt-b", "du -sbL /srv/bench | cut -f1").strip() or 0)
        if method.startswith("verified-") and not inner.get("direct_io"):
            raise SystemExit("%s fell back to buffered writes; the comparison would not be like for like" % method)
        records.append(
            {
                "pass": index,
                "method": method,
                "seconds": seconds,
                "auth_seconds": inner.get("auth_seconds") if method.startswith("verified-") else None,
                "mb_per_s": round(made["bytes"] / seconds / 1e6, 1),
                "outer_s": outer,
                "dest_bytes": size,
                "host_cpu_busy_during": round(meter.busy, 3),
                "host_cpu_busy_before": busy_before,
                "quiet_wait_s": waited,
                "caches_dropped": dropped,
            }
        )
        print(
            "pass %d %-15s %7.2f s %7.1f MB/s  cpu %.0f%% (before %.0f%%)"
            % (index, method, seconds, records[-1]["mb_per_s"], 100 * meter.busy, 100 * busy_before),
            flush=True,
        )
    return records


def summarise(records, made):
    by_method = {}
    for method in sorted(set(r["method"] for r in records), key=lambda m: (METHODS + BASELINE_METHODS).index(m)):
        times = sorted(r["seconds"] for r in records if r["method"] == method)
        by_method[method] = {
            "median_s": statistics.median(times),
            "min_s": times[0],
            "max_s": times[-1],
            "median_mb_per_s": round(made["bytes"] / statistics.median(times) / 1e6, 1),
            "passes": len(times),
        }
    med = {m: by_method[m]["median_s"] for m in by_method}
    limit = min(("plain", "plain-direct"), key=lambda m: med[m])
    per_pass = {}
    for r in records:
        per_pass.setdefault(r["pass"], {})[r["method"]] = r["seconds"]
    pass_ratios = [min(p["plain"], p["plain-direct"]) / p["verified"] for p in per_pass.values()]
    ratios = {
        "physical_limit_method": limit,
        "verified_vs_plain_throughput": round(med[limit] / med["verified"], 3),
        "verified_vs_plain_per_pass": [round(x, 3) for x in pass_ratios],
        "verified_vs_plain_per_pass_median": round(statistics.median(pass_ratios), 3),
        "verified_vs_buffered_plain_throughput": round(med["plain"] / med["verified"], 3),
        "verified_vs_direct_plain_throughput": round(med["plain-direct"] / med["verified"], 3),
        "verified_speedup_over_copy_then_sha256sum": round(med["copy+sha256sum"] / med["verified"], 3),
        "verified_vs_curl_throughput": round(med["curl"] / med["verified"], 3),
        "verified_vs_rsync_throughput": round(med["rsync"] / med["verified"], 3),
        "verified_vs_disk_only_throughput": round(med["disk"] / med["verified"], 3),
    }
    auth_pairs = [p["verified-nosig"] / p["verified-direct"] for p in per_pass.values()]
    ratios["authenticated_vs_unchecked_throughput"] = round(med["verified-nosig"] / med["verified-direct"], 3)
    ratios["authenticated_vs_unchecked_per_pass"] = [round(x, 3) for x in auth_pairs]
    ratios["auth_seconds_per_run_median"] = statistics.median(
        r["auth_seconds"] for r in records if r["method"] == "verified-direct"
    )
    if "verified-direct@baseline" in med:
        ratios["baseline"] = {
            "verified_direct_vs_plain_direct": round(med["plain-direct"] / med["verified-direct"], 3),
            "verified_direct_vs_plain_direct_per_pass": [
                round(p["plain-direct"] / p["verified-direct"], 3) for p in per_pass.values()
            ],
            "baseline_verified_direct_vs_plain_direct": round(
                med["plain-direct@baseline"] / med["verified-direct@baseline"], 3
            ),
            "baseline_verified_direct_vs_plain_direct_per_pass": [
                round(p["plain-direct@baseline"] / p["verified-direct@baseline"], 3) for p in per_pass.values()
            ],
            "verified_direct_now_vs_baseline_throughput": round(
                med["verified-direct@baseline"] / med["verified-direct"], 3
            ),
            "plain_direct_now_vs_baseline_throughput": round(med["plain-direct@baseline"] / med["plain-direct"], 3),
        }
    ratios["meets_0_95_of_plain"] = ratios["verified_vs_plain_throughput"] >= 0.95
    ratios["meets_1_5x_over_copy_then_sha256sum"] = ratios["verified_speedup_over_copy_then_sha256sum"] >= 1.5
    return by_method, ratios


def environment(args):
    cpu = next((line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?")
    flags = open("/proc/cpuinfo").read()
    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "sha_ni": " sha_ni " in flags,
        "kernel": platform.release(),
        "memory_gib": round(os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30, 1),
        "node_python": on("ckpt-b", "python3 --version").strip(),
        "rsync": on("ckpt-b", "rsync --version | head -1").strip(),
        "curl": on("ckpt-b", "curl --version | head -1").strip(),
        "sha256sum": on("ckpt-b", "sha256sum --version | head -1").strip(),
        "docker": sh([DOCKER, "--version"]).stdout.strip(),
        "cache_policy": args.cache,
        "loadavg_at_start": [round(x, 2) for x in os.getloadavg()],
        "quiet_gate": "each method starts once host CPU busy <= %.0f%% over 1 s (or after %d s)"
        % (100 * args.quiet_busy, args.quiet_wait_s),
    }


def _baseline_lines(args, ratios):
    if "baseline" not in ratios:
        return []
    b = ratios["baseline"]
    return [
        "",
        "Side by side with another checkout's pipeline (`--baseline %s`, run as plain-direct@baseline and "
        "verified-direct@baseline in every pass, on the same source and disk): verified-direct / plain-direct "
        "now %.3f (per pass %s), with the baseline's own plain copy and pull %.3f (per pass %s); verified-direct "
        "now runs at %.3f x the baseline's throughput, plain-direct at %.3f x."
        % (
            args.baseline,
            b["verified_direct_vs_plain_direct"],
            ", ".join("%.3f" % x for x in b["verified_direct_vs_plain_direct_per_pass"]),
            b["baseline_verified_direct_vs_plain_direct"],
            ", ".join("%.3f" % x for x in b["baseline_verified_direct_vs_plain_direct_per_pass"]),
            b["verified_direct_now_vs_baseline_throughput"],
            b["plain_direct_now_vs_baseline_throughput"],
        ),
    ]


def write_results(args, made, records, by_method, ratios, env, command):
    out = ROOT / "bench" / "results"
    out.mkdir(parents=True, exist_ok=True)
    doc = {
        "command": command,
        "date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "checkpoint": {
            "shards": args.shards,
            "shard_mib": args.shard_mib,
            "bytes": made["bytes"],
            "tensor_bytes": made["tensor_bytes"],
            "files": len(made["files"]),
            "layout": "hf-cache",
        },
        "environment": env,
        "methods": by_method,
        "ratios": ratios,
        "records": records,
    }
    (out / "staging.json").write_text(json.dumps(doc, indent=2) + "\n")
    lines = [
        "# Staging benchmark",
        "",
        "Command (from the repository root): `%s`" % command,
        "",
        "Checkpoint: %d shards of %d MiB with real safetensors headers, a shard index and config files, "
        "as a Hugging Face cache entry: %d files, %d bytes. Two lab containers on one Docker network; the "
        "destination is ckpt-b's overlay filesystem."
        % (args.shards, args.shard_mib, len(made["files"]), made["bytes"]),
        "",
        "Machine: %s, %d cores (sha_ni %s), %s GiB, kernel %s; %s; %s; %s. Load average at the start: "
        "%s (1, 5, 15 min); host CPU busy before and during each method is in staging.json."
        % (
            env["cpu"],
            env["cores"],
            env["sha_ni"],
            env["memory_gib"],
            env["kernel"],
            env["node_python"],
            env["rsync"],
            env["sha256sum"],
            ", ".join("%.2f" % x for x in env["loadavg_at_start"]),
        ),
        "",
        "| method | median s | min s | max s | median MB/s |",
        "|---|---|---|---|---|",
    ]
    for method in by_method:
        m = by_method[method]
        lines.append(
            "| %s | %.2f | %.2f | %.2f | %.1f |" % (method, m["median_s"], m["min_s"], m["max_s"], m["median_mb_per_s"])
        )
    lines += (
        [
            "",
            "| ratio | value | bar |",
            "|---|---|---|",
            "| verified throughput / faster plain copy (%s) throughput, medians | %.3f | >= 0.95: %s |"
            % (
                ratios["physical_limit_method"],
                ratios["verified_vs_plain_throughput"],
                "met" if ratios["meets_0_95_of_plain"] else "NOT met",
            ),
            "| same, median of per-pass ratios (each pass against its faster plain copy) | %.3f | |"
            % ratios["verified_vs_plain_per_pass_median"],
            "| verified / plain (buffered) | %.3f | |" % ratios["verified_vs_buffered_plain_throughput"],
            "| verified / plain-direct | %.3f | |" % ratios["verified_vs_direct_plain_throughput"],
            "| copy-then-sha256sum time / verified time (medians) | %.3f | >= 1.5: %s |"
            % (
                ratios["verified_speedup_over_copy_then_sha256sum"],
                "met" if ratios["meets_1_5x_over_copy_then_sha256sum"] else "NOT met",
            ),
            "| verified throughput / curl throughput | %.3f | |" % ratios["verified_vs_curl_throughput"],
            "| verified throughput / rsync throughput | %.3f | |" % ratios["verified_vs_rsync_throughput"],
            "| verified throughput / disk-only write rate (dd, no network) | %.3f | |"
            % ratios["verified_vs_disk_only_throughput"],
            "",
            "Cost of authentication: staging_pull.stage run directly on ckpt-b with the listing-signature "
            "check (verified-direct, %.1f MB/s median) and with the check replaced by accept (verified-nosig, "
            "%.1f MB/s median); throughput with / without = %.3f (per pass: %s). Timed inside the run, the "
            "authentication calls (one MAC per request, the signature check) took %.6f s per run (median)."
            % (
                by_method["verified-direct"]["median_mb_per_s"],
                by_method["verified-nosig"]["median_mb_per_s"],
                ratios["authenticated_vs_unchecked_throughput"],
                ", ".join("%.3f" % x for x in ratios["authenticated_vs_unchecked_per_pass"]),
                ratios["auth_seconds_per_run_median"],
            ),
        ]
        + _baseline_lines(args, ratios)
        + [
            "",
            "Per pass, in seconds. verified is weight_stage's own elapsed_s (listing fetch to manifest "
            "written); plain and plain-direct are plain_pull's own time (listing fetch to last fsync); curl, "
            "rsync and copy+sha256sum are the wall time of their command inside ckpt-b. `outer_s` in the JSON "
            "is the wall time around each command (for verified, the whole Ansible call).",
            "",
            "| pass | " + " | ".join(by_method) + " | host CPU busy during verified |",
            "|" + "---|" * (len(by_method) + 2),
        ]
    )
    for index in sorted({r["pass"] for r in records}):
        row = {r["method"]: r for r in records if r["pass"] == index}
        lines.append(
            "| %d | %s | %.0f%% |"
            % (
                index,
                " | ".join("%.2f" % row[m]["seconds"] for m in by_method),
                100 * row["verified"]["host_cpu_busy_during"],
            )
        )
    lines += [
        "",
        "Method: %s. Cache policy `%s`: before every method the destination is removed, dirty pages "
        "flushed and the host page cache dropped (%s)%s. %s. The containers share the host's cores "
        "with other jobs; the CPU columns in staging.json show how busy the host was."
        % (
            "methods run in a rotated order each pass",
            args.cache,
            "allowed" if all(r["caches_dropped"] for r in records) else "refused",
            "; then the source blobs are read once so the source serves from memory, as a node that just "
            "downloaded or staged the checkpoint does, and the one shared virtual disk only takes the "
            "destination's writes"
            if args.cache == "warm-source"
            else "",
            env["quiet_gate"],
        ),
    ]
    (out / "staging.md").write_text("\n".join(lines) + "\n")


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--shard-mib", type=int, default=1024)
    parser.add_argument("--cache", choices=["warm-source", "cold"], default="warm-source")
    parser.add_argument("--quiet-busy", type=float, default=0.15)
    parser.add_argument("--quiet-wait-s", type=int, default=120)
    parser.add_argument("--keep", action="store_true", help="leave the containers up afterwards")
    parser.add_argument(
        "--baseline", help="an older checkout (plugins/module_utils/, bench/staging/) timed beside this one"
    )
    args = parser.parse_args(argv)
    command = "%s %s" % (
        ".venv/bin/python bench/staging/bench.py",
        " ".join(shlex.quote(a) for a in (argv if argv is not None else sys.argv[1:])),
    )
    token = secrets.token_hex(20)
    try:
        made = setup(args, token)
        env = environment(args)
        records = []
        methods = METHODS + (BASELINE_METHODS if args.baseline else [])
        for index in range(1, args.passes + 1):
            shift = (index - 1) % len(methods)
            records += one_pass(index, methods[shift:] + methods[:shift], made, token, args)
        by_method, ratios = summarise(records, made)
        write_results(args, made, records, by_method, ratios, env, command.strip())
        print(json.dumps(ratios, indent=2))
    finally:
        if not args.keep:
            for node in NODES:
                sh([DOCKER, "rm", "-f", node], check=False)
            sh([DOCKER, "network", "rm", NETWORK], check=False)


if __name__ == "__main__":
    main()
