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
from pathlib import Path

from staging_ram import ROOT, link_shim, make_checkpoint, pull_command, serve_source

LAYOUTS = [(1, 8), (2, 4), (4, 2), (2, 8)]


def main():
    work = Path("/dev/shm/sw-procs")
    shutil.rmtree(str(work), ignore_errors=True)
    work.mkdir(parents=True)
    shim = link_shim(work / "shim", ROOT)
    sys.path.insert(0, str(shim))
    from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights import staging_source

    made = make_checkpoint(work / "src", 8, int(os.environ.get("SHARD_MIB", "1024")))
    secret = secrets.token_hex(20)
    (work / "token").write_text(secret)
    urls = {}
    for kind, piece_bytes in (("plain", 0), ("verified", 64 << 20)):
        server, _listing = serve_source(staging_source, made, work, kind, secret, piece_bytes)
        urls[kind] = "http://127.0.0.1:%d" % server.server_address[1]
    results = {}
    for rep in range(int(os.environ.get("REPS", "3"))):
        for procs, streams in LAYOUTS:
            for kind in ("plain", "verified"):
                dests = [work / ("dst%d" % i) for i in range(procs)]
                for dest in dests:
                    shutil.rmtree(str(dest), ignore_errors=True)
                running = [
                    subprocess.Popen(
                        pull_command(
                            kind, streams, shim, urls[kind], work, dest, made["revision"], work / ("state%d" % i)
                        ),
                        stdout=subprocess.PIPE,
                        text=True,
                    )
                    for i, dest in enumerate(dests)
                ]
                outs = [json.loads(p.communicate()[0]) for p in running]
                # Aggregate over the slowest child's transfer: the children start a few ms apart.
                gb_s = procs * made["bytes"] / max(o["seconds"] for o in outs) / 1e9
                results.setdefault((procs, streams, kind), []).append(gb_s)
                print(
                    "rep %d %dx%d %-8s %.2f GB/s (child transfer_s %s)"
                    % (rep, procs, streams, kind, gb_s, [o["seconds"] for o in outs]),
                    flush=True,
                )
    for procs, streams in LAYOUTS:
        plain = statistics.median(results[(procs, streams, "plain")])
        verified = statistics.median(results[(procs, streams, "verified")])
        print(
            "%d procs x %d streams: plain %.2f, verified %.2f GB/s (aggregate over the slowest child's transfer), "
            "verified/plain %.3f" % (procs, streams, plain, verified, verified / plain)
        )
    shutil.rmtree(str(work), ignore_errors=True)


if __name__ == "__main__":
    main()
