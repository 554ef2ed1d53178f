"""The torch path of the all-reduce sweep: one process per GPU, timed with CUDA events.

nccl_sweep.py writes this file's source to a temporary file and runs it with the node's PyTorch
interpreter, because torch.multiprocessing spawns fresh interpreters that must be able to import
their __main__. It prints one `size_bytes=... busbw_GBps=...` line per size (read by
fabric/nccl.py parse_torch_sweep), then `nranks=` and `check_wrong_elements=`.

The module's own interpreter imports this file only so Ansible ships it with the module; that
interpreter need not have torch.
"""

import argparse
import sys

try:
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError:  # the Ansible interpreter only ships this file; the worker's interpreter has torch
    torch = dist = mp = None


def run(rank, args):
    torch.cuda.set_device(rank)
    dist.init_process_group(
        "nccl",
        init_method="tcp://127.0.0.1:%d" % args.port,
        rank=rank,
        world_size=args.nranks,
        device_id=torch.device("cuda", rank),
    )
    # One small all-reduce with a known sum first: a fast but wrong collective must not pass.
    check = torch.full((1024,), float(rank + 1), device="cuda")
    dist.all_reduce(check)
    expected = args.nranks * (args.nranks + 1) / 2
    wrong = int((check != expected).sum().item())
    for size in args.sizes:
        buf = torch.empty(size // 4, dtype=torch.float32, device="cuda")
        for _ in range(args.warmup):
            dist.all_reduce(buf)
        torch.cuda.synchronize()
        dist.barrier()
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        for _ in range(args.iters):
            dist.all_reduce(buf)
        end.record()
        torch.cuda.synchronize()
        time_us = start.elapsed_time(end) * 1000.0 / args.iters
        algbw = size / (time_us * 1e-6) / 1e9
        busbw = algbw * 2.0 * (args.nranks - 1) / args.nranks
        if rank == 0:
            print(
                "size_bytes=%d time_us=%.1f algbw_GBps=%.2f busbw_GBps=%.2f" % (size, time_us, algbw, busbw),
                flush=True,
            )
    if rank == 0:
        print("check_wrong_elements=%d" % wrong, flush=True)
    dist.destroy_process_group()


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description="NCCL all-reduce bus-bandwidth sweep, one process per GPU")
    parser.add_argument("--nranks", type=int, default=0, help="GPUs to use; 0: every GPU torch sees")
    parser.add_argument("--port", type=int, required=True, help="a free local port for the rendezvous")
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--sizes", type=int, nargs="+", required=True, help="message sizes in bytes")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    if torch is None:
        sys.exit("%s cannot import torch; run the sweep with an interpreter that has PyTorch" % sys.executable)
    args.nranks = args.nranks or torch.cuda.device_count()
    if args.nranks < 2:
        sys.exit("need at least 2 GPUs for an all-reduce sweep, found %d" % args.nranks)
    print("nranks=%d" % args.nranks, flush=True)
    mp.spawn(run, args=(args,), nprocs=args.nranks, join=True)


if __name__ == "__main__":
    main()
