#!/usr/bin/python
"""Ansible module: all-reduce bus-bandwidth sweep on one node, with the transport of each channel."""

DOCUMENTATION = r"""
module: nccl_bandwidth
short_description: Measure NCCL all-reduce bus bandwidth and the transport of every channel
description:
  - Runs an all-reduce sweep over the node's GPUs with C(NCCL_DEBUG=INFO) and reports, per message
    size, the time, algorithm bandwidth and bus bandwidth, the maximum, and the transport NCCL chose
    for each channel (P2P, SHM, NET/Socket, NET/IB) as logged in its C(Channel ... via ...) lines.
  - Uses nccl-tests' C(all_reduce_perf) when it is installed (its C(-J) JSON when the binary offers
    it, else its table), otherwise a torch.distributed sweep with one process per GPU.
  - GPUDirect RDMA is reported only when a channel line says C(/GDRDMA); a C(GDR 1) summary line
    proves nothing on its own.
  - Fails, naming the node and the numbers, when a result is wrong or the bus bandwidth over large
    sizes is below O(threshold_gbps).
  - Measures only; changes nothing on the node, so it also runs in check mode.
options:
  method:
    description: C(nccl-tests) or C(torch) to force one path; C(auto) prefers nccl-tests.
    type: str
    choices: [auto, nccl-tests, torch]
    default: auto
  all_reduce_perf:
    description: Path of nccl-tests' all_reduce_perf; looked up on PATH when not given.
    type: path
  python:
    description: Interpreter with PyTorch (CUDA) for the torch path; defaults to the one running the module.
    type: path
  gpus:
    description: GPUs (ranks) to use; 0 means every GPU the node has.
    type: int
    default: 0
  sizes:
    description: Message sizes in bytes; nccl-tests sweeps from the smallest to the largest by doubling.
    type: list
    elements: int
    default: [1048576, 8388608, 67108864, 268435456, 1073741824]
  warmup:
    description: Untimed all-reduces per size before timing.
    type: int
    default: 5
  iters:
    description: Timed all-reduces per size.
    type: int
    default: 20
  judge_min_bytes:
    description: Only sizes of at least this many bytes are judged (small sizes measure latency).
    type: int
    default: 67108864
  threshold_gbps:
    description: Fail when the best bus bandwidth over judged sizes is below this (GB/s).
    type: float
  env:
    description: Extra environment for the run (e.g. the node's rendered NCCL environment).
    type: dict
    default: {}
  timeout_s:
    description: Give up on the run after this many seconds.
    type: int
    default: 600
  return_output:
    description: Also return the tool's full output (for recording fixtures and evidence).
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: Measures only; runs the same in check mode.
  diff_mode:
    support: none
author: seatwright
"""

EXAMPLES = r"""
- name: Measure all-reduce bandwidth on the node's GPUs
  nccl_bandwidth:
    threshold_gbps: 20
    env: "{{ nccl_env_entries | items2dict(key_name='name', value_name='value') }}"
  register: sweep
"""

RETURN = r"""
method:
  description: C(nccl-tests) or C(torch).
  returned: success
  type: str
nranks:
  description: Ranks (GPUs) in the sweep.
  returned: success
  type: int
rows:
  description: One entry per size with size_bytes, time_us, algbw_gbps, busbw_gbps.
  returned: success
  type: list
  elements: dict
max_busbw_gbps:
  description: Highest bus bandwidth of any size (GB/s).
  returned: success
  type: float
judged_busbw_gbps:
  description: Highest bus bandwidth among sizes of at least judge_min_bytes (GB/s).
  returned: success
  type: float
transports:
  description: channels (count), counts (per C(via) string), transports (classes seen), gdrdma (bool).
  returned: success
  type: dict
nccl_version:
  description: NCCL version the run logged.
  returned: success
  type: str
passed:
  description: Whether the sweep met the threshold with no wrong results.
  returned: success
  type: bool
output:
  description: The tool's full output (only with return_output).
  returned: when return_output
  type: str
ansible_facts:
  description: seatwright_nccl_bandwidth, the same figures without the raw output.
  returned: success
  type: dict
"""

import os
import shutil
import socket
import sys
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import NcclError
from ansible_collections.seatwright.fleet.plugins.module_utils.fabric.nccl import (
    judge_sweep,
    nccl_version,
    parse_all_reduce_perf,
    parse_all_reduce_perf_json,
    parse_channels,
    parse_torch_sweep,
    summarise_transports,
    verdict_message,
)

# The torch path's worker, written to a temporary file and run with the node's Python: it has to
# be a standalone program because torch.multiprocessing spawns fresh interpreters.
TORCH_WORKER = r'''
import argparse
import os
import sys

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, args):
    torch.cuda.set_device(rank)
    dist.init_process_group("nccl", init_method="tcp://127.0.0.1:%d" % args.port,
                            rank=rank, world_size=args.nranks, device_id=torch.device("cuda", rank))
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
            print("size_bytes=%d time_us=%.1f algbw_GBps=%.2f busbw_GBps=%.2f" % (size, time_us, algbw, busbw),
                  flush=True)
    if rank == 0:
        print("check_wrong_elements=%d" % wrong, flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--nranks", type=int, default=0)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--warmup", type=int, default=5)
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--sizes", type=int, nargs="+", required=True)
    args = parser.parse_args()
    args.nranks = args.nranks or torch.cuda.device_count()
    if args.nranks < 2:
        sys.exit("need at least 2 GPUs for an all-reduce sweep, found %d" % args.nranks)
    print("nranks=%d" % args.nranks, flush=True)
    mp.spawn(run, args=(args,), nprocs=args.nranks, join=True)
'''


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def choose_method(module):
    method = module.params["method"]
    binary = module.params["all_reduce_perf"] or module.get_bin_path("all_reduce_perf")
    if method == "nccl-tests" and not binary:
        module.fail_json(
            msg="method nccl-tests: all_reduce_perf was not found on this node; "
            "install nccl-tests or pass all_reduce_perf=<path>"
        )
    if method in ("auto", "nccl-tests") and binary:
        return "nccl-tests", binary
    return "torch", None


def run_nccl_tests(module, binary, env):
    params = module.params
    gpus = params["gpus"]
    if gpus == 0:
        rc, out, err = module.run_command(["nvidia-smi", "-L"])
        gpus = len([line for line in out.splitlines() if line.startswith("GPU ")]) if rc == 0 else 0
        if gpus < 1:
            module.fail_json(msg="could not count GPUs with nvidia-smi -L (rc %d: %s); pass gpus" % (rc, err.strip()))
    rc, help_text, help_err = module.run_command([binary, "--help"])
    workdir = tempfile.mkdtemp(prefix="seatwright-nccl-")
    try:
        json_path = os.path.join(workdir, "all_reduce_perf.json")
        argv = [
            binary,
            "-b",
            str(min(params["sizes"])),
            "-e",
            str(max(params["sizes"])),
            "-f",
            "2",
            "-g",
            str(gpus),
            "-w",
            str(params["warmup"]),
            "-n",
            str(params["iters"]),
        ]
        if "json" in (help_text + help_err).lower():
            argv += ["-J", json_path]
        rc, out, err = module.run_command(bounded(module, argv), environ_update=env)
        output = out + err
        if rc != 0:
            module.fail_json(msg="all_reduce_perf exited %d: %s" % (rc, _tail(output)), argv=argv)
        if os.path.exists(json_path):
            with open(json_path) as handle:
                rows = parse_all_reduce_perf_json(handle.read())
        else:
            rows = parse_all_reduce_perf(output)
        return gpus, rows, output
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


def run_torch(module, env):
    params = module.params
    python = params["python"] or sys.executable
    rc, out, err = module.run_command([python, "-c", "import torch; print(torch.cuda.device_count())"])
    if rc != 0:
        module.fail_json(
            msg="no all_reduce_perf on this node and %s cannot import torch (%s); install "
            "nccl-tests, or pass python=<an interpreter with PyTorch>" % (python, _tail(err))
        )
    workdir = tempfile.mkdtemp(prefix="seatwright-nccl-")
    try:
        worker = os.path.join(workdir, "allreduce_sweep.py")
        with open(worker, "w") as handle:
            handle.write(TORCH_WORKER)
        argv = [
            python,
            worker,
            "--nranks",
            str(params["gpus"]),
            "--port",
            str(free_port()),
            "--warmup",
            str(params["warmup"]),
            "--iters",
            str(params["iters"]),
            "--sizes",
        ] + [str(size) for size in params["sizes"]]
        rc, out, err = module.run_command(bounded(module, argv), environ_update=env)
        output = out + err
        if rc != 0:
            module.fail_json(msg="the torch all-reduce sweep exited %d: %s" % (rc, _tail(output)))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    rows = parse_torch_sweep(output)
    nranks = 0
    for line in output.splitlines():
        if line.startswith("nranks="):
            nranks = int(line.split("=", 1)[1])
        if line.startswith("check_wrong_elements=") and rows:
            rows[0]["wrong"] = int(line.split("=", 1)[1])
    return nranks, rows, output


def bounded(module, argv):
    """argv under coreutils' timeout, so a hung collective cannot hold the play forever."""
    timeout = module.get_bin_path("timeout")
    if not timeout:
        return argv
    return [timeout, "--kill-after=10", str(module.params["timeout_s"])] + argv


def _tail(text, lines=15):
    return "\n".join((text or "").strip().splitlines()[-lines:])


def main():
    module = AnsibleModule(
        argument_spec={
            "method": {"type": "str", "choices": ["auto", "nccl-tests", "torch"], "default": "auto"},
            "all_reduce_perf": {"type": "path"},
            "python": {"type": "path"},
            "gpus": {"type": "int", "default": 0},
            "sizes": {
                "type": "list",
                "elements": "int",
                "default": [1048576, 8388608, 67108864, 268435456, 1073741824],
            },
            "warmup": {"type": "int", "default": 5},
            "iters": {"type": "int", "default": 20},
            "judge_min_bytes": {"type": "int", "default": 67108864},
            "threshold_gbps": {"type": "float"},
            "env": {"type": "dict", "default": {}},
            "timeout_s": {"type": "int", "default": 600},
            "return_output": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    params = module.params
    bad = [size for size in params["sizes"] if size < 4 or size % 4]
    if not params["sizes"] or bad:
        module.fail_json(
            msg="sizes must be byte counts that are positive multiples of 4 (float32 "
            "elements); got %s" % (bad or "an empty list")
        )
    if params["gpus"] < 0 or params["iters"] < 1 or params["warmup"] < 0:
        module.fail_json(msg="gpus must be >= 0, iters >= 1 and warmup >= 0")

    env = {"NCCL_DEBUG": "INFO"}
    env.update({str(k): str(v) for k, v in params["env"].items()})
    method, binary = choose_method(module)
    if method == "nccl-tests":
        nranks, rows, output = run_nccl_tests(module, binary, env)
    else:
        nranks, rows, output = run_torch(module, env)

    try:
        verdict = judge_sweep(rows, params["threshold_gbps"], params["judge_min_bytes"])
    except NcclError as exc:
        module.fail_json(msg="%s; last output:\n%s" % (exc, _tail(output)))
    transports = summarise_transports(parse_channels(output))
    figures = dict(
        verdict, method=method, nranks=nranks, rows=rows, transports=transports, nccl_version=nccl_version(output)
    )
    message = verdict_message("node %s" % socket.gethostname(), verdict, transports)
    result = dict(figures, changed=False, msg=message, ansible_facts={"seatwright_nccl_bandwidth": figures})
    if params["return_output"]:
        result["output"] = output
    if not verdict["passed"]:
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
