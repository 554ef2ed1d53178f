#!/usr/bin/env python3
"""Device run: the cross-node all-reduce worker (io/fabric/crossnode_worker.py) as two "nodes".

Two worker processes started separately, as nccl_crossnode starts one per node, meeting at an
address: node 0 runs global rank 0 and hosts the rendezvous. NCCL runs one rank per "node"
(world of 2); on a one-GPU machine both "nodes" share GPU 0
and tell NCCL they are different hosts (NCCL_HOSTID), so NCCL connects them over its network
transport (Socket here: no RDMA NIC). Gloo runs two CPU ranks per "node" (world of 4).
Outputs go to $OUT/<case>-node<r>.txt, exactly as printed.
  PYTHONUNBUFFERED=1 python3 bench/device/nccl_crossnode.py
"""

import os
import socket
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
WORKER = ROOT / "plugins" / "module_utils" / "io" / "fabric" / "crossnode_worker.py"
OUT = Path(os.environ.get("OUT", "/tmp/crossnode-out"))
# NVLink multicast stays off on this shared host (device KINDS.md).
QUIET = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1", "NVSHMEM_DISABLE_NVLS": "1"}
SIZES = [1048576, 8388608, 67108864, 268435456, 1073741824]

CASES = {
    "nccl-net-socket": ("nccl", 1, SIZES, {"NCCL_SOCKET_IFNAME": "lo"}),
    "gloo-cpu": ("gloo", 2, SIZES[:3], {"GLOO_SOCKET_IFNAME": "lo"}),
}


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run_case(name, backend, per_node, sizes, extra):
    port = free_port()
    procs = []
    for node_rank in (1, 0):  # the peer first, as the module starts it: it waits for rank 0
        env = dict(os.environ, NCCL_DEBUG="INFO", **QUIET, **extra)
        if backend == "nccl":
            gpus = int(os.environ.get("SEATWRIGHT_GPUS", "1"))
            env["CUDA_VISIBLE_DEVICES"] = str(node_rank % gpus)
            env["NCCL_HOSTID"] = "seatwright-node%d" % node_rank
        argv = [sys.executable, str(WORKER), "--backend", backend, "--world-size", str(2 * per_node)]
        argv += ["--first-rank", str(node_rank * per_node), "--local-ranks", str(per_node)]
        argv += ["--master-addr", "127.0.0.1", "--master-port", str(port), "--warmup", "5", "--iters", "20"]
        argv += ["--timeout-s", "120", "--sizes"] + [str(s) for s in sizes]
        log = open(OUT / ("%s-node%d.txt" % (name, node_rank)), "w")
        procs.append((node_rank, subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, env=env), log))
        time.sleep(1)
    for node_rank, proc, log in procs:
        rc = proc.wait(timeout=300)
        log.close()
        print("%s node %d exited %d" % (name, node_rank, rc), flush=True)


def main():
    OUT.mkdir(parents=True, exist_ok=True)
    for name, (backend, per_node, sizes, extra) in CASES.items():
        started = time.monotonic()
        run_case(name, backend, per_node, sizes, extra)
        print("%s took %.1f s" % (name, time.monotonic() - started), flush=True)
        print((OUT / ("%s-node0.txt" % name)).read_text()[-1500:], flush=True)


if __name__ == "__main__":
    main()
