"""Exploration for issue 25: verified / plain when a node's streams are split over several processes.

Starts the project's source (whole-file and piece listings) on 127.0.0.1 and runs P concurrent pull
children (bench/staging_ram.py --pull) of S streams each, every child pulling the whole checkpoint
into a folder of its own; aggregate GB/s = P x bytes / the slowest child's transfer time. An
approximation of one node with P pulling processes: the source here serves P copies.

  SHARD_MIB=1024 REPS=3 python3 bench/staging_procs.py   (needs about 3 x 8.6 GB free in /dev/shm)
"""

import json
import os
import secrets
import shutil
import statistics
import subprocess
import sys
import threading
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench" / "staging"))
from shim import link_shim  # noqa: E402


def main():
    work = Path("/dev/shm/sw-procs")
    shutil.rmtree(str(work), ignore_errors=True)
    work.mkdir(parents=True)
    shim = link_shim(work / "shim", ROOT)
    sys.path.insert(0, str(shim))
    from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights import staging_source

    made = json.loads(
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "bench/staging/make_checkpoint.py"),
                "--out",
                str(work / "src"),
                "--shards",
                "8",
                "--shard-mib",
                os.environ.get("SHARD_MIB", "1024"),
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    secret = secrets.token_hex(20)
    (work / "token").write_text(secret)
    urls = {}
    for kind, piece in (("plain", 0), ("verified", 64 << 20)):
        listing, served, _ = staging_source.source_listing(
            made["path"], made["revision"], "ram", str(work / "state-src"), os.cpu_count(), True, piece
        )
        server = staging_source.bind_server("127.0.0.1", 0, secret, listing, served, 10**6, str(work / ("pid-" + kind)))
        threading.Thread(target=server.serve_forever, daemon=True).start()
        urls[kind] = "http://127.0.0.1:%d" % server.server_address[1]

    results = {}
    layouts = [(1, 8), (2, 4), (4, 2), (2, 8)]
    for rep in range(int(os.environ.get("REPS", "3"))):
        for procs, streams in layouts:
            for kind in ("plain", "verified"):
                dests = [work / ("dst%d" % i) for i in range(procs)]
                for d in dests:
                    shutil.rmtree(str(d), ignore_errors=True)
                cmds = [
                    [
                        sys.executable,
                        str(ROOT / "bench/staging_ram.py"),
                        "--pull",
                        kind,
                        "--pull-streams",
                        str(streams),
                        "--shim",
                        str(shim),
                        "--url",
                        urls[kind],
                        "--token-file",
                        str(work / "token"),
                        "--dest",
                        str(d / "models--seatwright--synthetic"),
                        "--revision",
                        made["revision"],
                        "--state",
                        str(work / ("state%d" % i)),
                        "--chunk-kib",
                        "0",
                    ]
                    for i, d in enumerate(dests)
                ]
                t0 = time.perf_counter()
                running = [subprocess.Popen(c, stdout=subprocess.PIPE, text=True) for c in cmds]
                outs = [json.loads(p.communicate()[0]) for p in running]
                wall = time.perf_counter() - t0
                gb_s = procs * made["bytes"] / max(o["seconds"] for o in outs) / 1e9
                results.setdefault((procs, streams, kind), []).append(gb_s)
                print(
                    "rep %d %dx%d %-8s %.2f GB/s (wall %.2f s, child transfer_s %s)"
                    % (rep, procs, streams, kind, gb_s, wall, [o["seconds"] for o in outs]),
                    flush=True,
                )
    for procs, streams in layouts:
        p = statistics.median(results[(procs, streams, "plain")])
        v = statistics.median(results[(procs, streams, "verified")])
        print(
            "%d procs x %d streams: plain %.2f, verified %.2f GB/s (aggregate over the slowest child's transfer), "
            "verified/plain %.3f" % (procs, streams, p, v, v / p)
        )
    shutil.rmtree(str(work), ignore_errors=True)


if __name__ == "__main__":
    main()
