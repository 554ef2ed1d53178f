"""One node's ranks of the cross-node all-reduce: run inside the engine image on each node of a pair.

io/fabric/crossnode.py writes this file's source to the node and mounts it into the container (or
hands it to a local interpreter), because torch.multiprocessing spawns fresh interpreters that
must import their __main__ from a real file. Every node runs it with the same world size; ranks
`--first-rank` .. `--first-rank + --local-ranks - 1` are this node's, one process each (one per
GPU with nccl; CPU processes with gloo). They meet at `--master-addr:--master-port`, the first
node's fabric address, where global rank 0 hosts torch's TCP store.

Global rank 0 prints `world_size=... backend=...`, one `size_bytes=... busbw_GBps=...` line per
size (the shape fabric/nccl.py parse_torch_sweep reads), then `check_wrong_elements=` summed over
every rank. The module's own interpreter imports this file only so that Ansible ships it.
"""

import argparse
import datetime
import sys
import time

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError:  # the Ansible interpreter only ships this file; the worker's interpreter has torch
    torch = dist = mp = None


def _sync(args):
    if args.backend == "nccl":
        torch.cuda.synchronize()


def _timed(args, buf):
    """Microseconds per all-reduce of `buf`: CUDA events with nccl, the wall clock with gloo."""
    if args.backend == "nccl":
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(args.iters):
            dist.all_reduce(buf)
        end.record()
        torch.cuda.synchronize()
        return start.elapsed_time(end) * 1000.0 / args.iters
    started = time.perf_counter()
    for _ in range(args.iters):
        dist.all_reduce(buf)
    return (time.perf_counter() - started) * 1e6 / args.iters


def run(local_rank, args):
    rank = args.first_rank + local_rank
    options = {"timeout": datetime.timedelta(seconds=args.timeout_s)}
    if args.backend == "nccl":
        torch.cuda.set_device(local_rank)
        device = torch.device("cuda", local_rank)
        options["device_id"] = device
    else:
        device = torch.device("cpu")
    dist.init_process_group(
        args.backend,
        init_method="tcp://%s:%d" % (args.master_addr, args.master_port),
        rank=rank,
        world_size=args.world_size,
        **options,
    )
    # A known sum first: a fast but wrong collective must not pass. Every rank counts its own
    # wrong elements and the counts are summed, so rank 0 reports the other node's too.
    check = torch.full((1024,), float(rank + 1), device=device)
    dist.all_reduce(check)
    expected = args.world_size * (args.world_size + 1) / 2
    wrong = torch.tensor([float((check != expected).sum().item())], device=device)
    dist.all_reduce(wrong)
    if rank == 0:
        print("world_size=%d backend=%s" % (args.world_size, args.backend), flush=True)
    for size in args.sizes:
        buf = torch.ones(size // 4, dtype=torch.float32, device=device)
        for _ in range(args.warmup):
            dist.all_reduce(buf)
        _sync(args)
        dist.barrier()
        time_us = _timed(args, buf)
        algbw = size / (time_us * 1e-6) / 1e9
        busbw = algbw * 2.0 * (args.world_size - 1) / args.world_size
        if rank == 0:
            print(
                "size_bytes=%d time_us=%.1f algbw_GBps=%.2f busbw_GBps=%.2f" % (size, time_us, algbw, busbw),
                flush=True,
            )
    if rank == 0:
        print("check_wrong_elements=%d" % int(wrong.item()), flush=True)
    dist.barrier()
    dist.destroy_process_group()


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="one node's ranks of a two-node all-reduce bus-bandwidth sweep")
    parser.add_argument("--backend", choices=["nccl", "gloo"], default="nccl")
    parser.add_argument("--world-size", type=int, required=True, help="ranks over both nodes")
    parser.add_argument("--first-rank", type=int, required=True, help="global rank of this node's first process")
    parser.add_argument("--local-ranks", type=int, required=True, help="processes on this node (one per GPU)")
    parser.add_argument("--master-addr", required=True, help="fabric address of the node running rank 0")
    parser.add_argument("--master-port", type=int, required=True)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--timeout-s", type=int, default=300, help="give up waiting for the other node")
    parser.add_argument("--sizes", type=int, nargs="+", required=True, help="message sizes in bytes")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if torch is None:
        sys.exit("%s cannot import torch; run the worker in the engine image (it has PyTorch)" % sys.executable)
    if args.backend == "nccl" and torch.cuda.device_count() < args.local_ranks:
        sys.exit(
            "%d ranks asked for on this node, torch sees %d GPU(s)" % (args.local_ranks, torch.cuda.device_count())
        )
    mp.spawn(run, args=(args,), nprocs=args.local_ranks, join=True)


if __name__ == "__main__":
    main()
