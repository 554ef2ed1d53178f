#!/usr/bin/env python3
"""Staging on one quiet machine over loopback: plain copy, verified staging, and verified without the signature check.

A reference beside bench.py for when the shared lab host is too busy to judge CPU-bound work: no
containers, no Ansible; the project's weight source (io/weights/staging_source.py) serves a synthetic
cache entry on 127.0.0.1 and each method pulls it into a fresh folder, in a rotated order per
pass, after dropping the page cache where allowed and re-reading the source (warm source):

  plain-direct     bench/staging/plain_pull.py --direct: the same pull, O_DIRECT writes, no hashing
  verified-direct  staging_pull.stage, as weight_stage runs it (signature checked, every byte hashed)
  verified-nosig   the same with the listing-signature check replaced by "accept"

With --baseline DIR (an older checkout of the repository, e.g. made with
`git archive main plugins/module_utils bench/staging | tar -x -C DIR`; a checkout from before the
collection layout, with module_utils/ instead, works too), the same run also times that
checkout's plain copy and verified pull (plain-direct@baseline, verified-direct@baseline), so a
change to the pipeline is judged side by side with what it replaces, on the same source and disk.

Needs python3 only (module_utils is imported through a temporary shim folder, bench/staging/shim.py).
  python3 bench/staging/loopback.py --work /tmp/sw-loop --passes 5 --out bench/results/staging-loopback.json
      [--baseline /tmp/sw-main]
"""

import argparse
import json
import os
import platform
import secrets
import shutil
import statistics
import subprocess
import sys
import threading
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench" / "staging"))
from shim import link_shim  # noqa: E402  (beside this file)

METHODS = ["plain-direct", "verified-direct", "verified-nosig"]


def drop_caches():
    subprocess.run(["sync"], check=False)
    try:
        with open("/proc/sys/vm/drop_caches", "w") as handle:
            handle.write("3\n")
        return True
    except OSError:
        return False


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--work", required=True)
    parser.add_argument("--passes", type=int, default=5)
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--shard-mib", type=int, default=1024)
    parser.add_argument("--out", required=True)
    parser.add_argument(
        "--baseline", help="an older checkout (plugins/module_utils/ and bench/staging/) to time beside this one"
    )
    args = parser.parse_args(argv)
    work = Path(args.work)
    work.mkdir(parents=True, exist_ok=True)
    trees = {"": (ROOT, link_shim(work / "shim", ROOT))}
    methods = list(METHODS)
    if args.baseline:
        baseline = Path(args.baseline).resolve()
        trees["@baseline"] = (baseline, link_shim(work / "shim-baseline", baseline))
        methods += ["plain-direct@baseline", "verified-direct@baseline"]
    sys.path.insert(0, str(trees[""][1]))
    from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights import staging_source

    made = json.loads(
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "bench" / "staging" / "make_checkpoint.py"),
                "--out",
                str(work / "src"),
                "--shards",
                str(args.shards),
                "--shard-mib",
                str(args.shard_mib),
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    secret = secrets.token_hex(20)
    (work / "token").write_text(secret)
    listing, served, _ = staging_source.source_listing(made["path"], made["revision"], "loop", str(work / "state"))
    server = staging_source.bind_server("127.0.0.1", 0, secret, listing, served, 10**6, str(work / "pid"))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = "http://127.0.0.1:%d" % server.server_address[1]
    records = []
    for index in range(1, args.passes + 1):
        shift = (index - 1) % len(methods)
        for method in methods[shift:] + methods[:shift]:
            dest = work / "dst"
            shutil.rmtree(str(dest), ignore_errors=True)
            dropped = drop_caches()
            subprocess.run("cat %s/blobs/* > /dev/null" % made["path"], shell=True, check=True)
            load = os.getloadavg()[0]
            tree, shim_dir = trees["@baseline" if method.endswith("@baseline") else ""]
            if method.startswith("plain-direct"):
                command = [
                    sys.executable,
                    str(tree / "bench" / "staging" / "plain_pull.py"),
                    "--url",
                    url,
                    "--token-file",
                    str(work / "token"),
                    "--dest",
                    str(dest),
                    "--streams",
                    "4",
                    "--direct",
                ]
            else:
                command = [
                    sys.executable,
                    str(tree / "bench" / "staging" / "stage_direct.py"),
                    "--shim",
                    str(shim_dir),
                    "--url",
                    url,
                    "--token-file",
                    str(work / "token"),
                    "--dest",
                    str(dest / "models--seatwright--synthetic"),
                    "--revision",
                    made["revision"],
                ]
                if method == "verified-nosig":
                    command.append("--no-signature-check")
            inner = json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)
            records.append(
                {
                    "pass": index,
                    "method": method,
                    "seconds": inner["seconds"],
                    "mb_per_s": round(made["bytes"] / inner["seconds"] / 1e6, 1),
                    "auth_seconds": inner.get("auth_seconds"),
                    "loadavg_1m_before": round(load, 2),
                    "caches_dropped": dropped,
                }
            )
            print(
                "pass %d %-24s %7.2f s %8.1f MB/s  load %.2f"
                % (index, method, inner["seconds"], records[-1]["mb_per_s"], load),
                flush=True,
            )
    server.shutdown()
    med = {m: statistics.median(r["seconds"] for r in records if r["method"] == m) for m in methods}
    per_pass = {}
    for r in records:
        per_pass.setdefault(r["pass"], {})[r["method"]] = r["seconds"]
    doc = {
        "command": "python3 bench/staging/loopback.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "machine": {
            "cores": os.cpu_count(),
            "kernel": platform.release(),
            "python": platform.python_version(),
            "cpu": next(
                (line.split(":", 1)[1].strip() for line in open("/proc/cpuinfo") if line.startswith("model name")), "?"
            ),
        },
        "checkpoint": {
            "bytes": made["bytes"],
            "files": len(made["files"]),
            "shards": args.shards,
            "shard_mib": args.shard_mib,
        },
        "median_mb_per_s": {m: round(made["bytes"] / med[m] / 1e6, 1) for m in methods},
        "verified_vs_plain_direct": round(med["plain-direct"] / med["verified-direct"], 3),
        "verified_vs_plain_direct_per_pass": [
            round(p["plain-direct"] / p["verified-direct"], 3) for p in per_pass.values()
        ],
        "authenticated_vs_unchecked": round(med["verified-nosig"] / med["verified-direct"], 3),
        "auth_seconds_per_run_median": statistics.median(
            r["auth_seconds"] for r in records if r["method"] == "verified-direct"
        ),
        "records": records,
    }
    if args.baseline:
        doc["baseline"] = {
            "tree": str(args.baseline),
            "verified_vs_plain_direct": round(med["plain-direct@baseline"] / med["verified-direct@baseline"], 3),
            "verified_vs_plain_direct_per_pass": [
                round(p["plain-direct@baseline"] / p["verified-direct@baseline"], 3) for p in per_pass.values()
            ],
            "verified_now_vs_baseline": round(med["verified-direct@baseline"] / med["verified-direct"], 3),
            "plain_now_vs_baseline": round(med["plain-direct@baseline"] / med["plain-direct"], 3),
        }
    Path(args.out).parent.mkdir(parents=True, exist_ok=True)
    Path(args.out).write_text(json.dumps(doc, indent=2) + "\n")
    print(json.dumps({k: v for k, v in doc.items() if k != "records"}, indent=2))


if __name__ == "__main__":
    main()
