"""The all-reduce sweep on a node, for the nccl_bandwidth module: pick the tool, run it, judge it.

nccl-tests' all_reduce_perf when the node has it, else the torch worker (allreduce_worker.py) under
the node's PyTorch interpreter. Parsing and judging are fabric/nccl.py's; this file runs commands
and temporary files. Every failure raises NcclError with the message for people and, as details,
what the module returns beside it.
"""

import inspect
import os
import shutil
import socket
import sys
import tempfile

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
from ansible_collections.seatwright.fleet.plugins.module_utils.io.fabric import allreduce_worker


def check_request(params):
    """NcclError when the sizes or counts cannot make a sweep."""
    bad = [size for size in params["sizes"] if size < 4 or size % 4]
    if not params["sizes"] or bad:
        raise NcclError(
            "sizes must be byte counts that are positive multiples of 4 (float32 "
            "elements); got %s" % (bad or "an empty list")
        )
    if params["gpus"] < 0 or params["iters"] < 1 or params["warmup"] < 0:
        raise NcclError("gpus must be >= 0, iters >= 1 and warmup >= 0")


def measure(module):
    """Run the sweep the module's parameters ask for; the module's result, or NcclError."""
    params = module.params
    check_request(params)
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
        raise NcclError("%s; last output:\n%s" % (exc, _tail(output)))
    transports = summarise_transports(parse_channels(output))
    figures = dict(
        verdict, method=method, nranks=nranks, rows=rows, transports=transports, nccl_version=nccl_version(output)
    )
    message = verdict_message("node %s" % socket.gethostname(), verdict, transports)
    result = dict(figures, changed=False, msg=message, ansible_facts={"seatwright_nccl_bandwidth": figures})
    if params["return_output"]:
        result["output"] = output
    if not verdict["passed"]:
        raise NcclError(result.pop("msg"), **result)
    return result


def free_port():
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def choose_method(module):
    method = module.params["method"]
    binary = module.params["all_reduce_perf"] or module.get_bin_path("all_reduce_perf")
    if method == "nccl-tests" and not binary:
        raise NcclError(
            "method nccl-tests: all_reduce_perf was not found on this node; "
            "install nccl-tests or pass all_reduce_perf=<path>"
        )
    if method in ("auto", "nccl-tests") and binary:
        return "nccl-tests", binary
    return "torch", None


def count_gpus(module):
    rc, out, err = module.run_command(["nvidia-smi", "-L"])
    gpus = len([line for line in out.splitlines() if line.startswith("GPU ")]) if rc == 0 else 0
    if gpus < 1:
        raise NcclError("could not count GPUs with nvidia-smi -L (rc %d: %s); pass gpus" % (rc, err.strip()))
    return gpus


def run_nccl_tests(module, binary, env):
    params = module.params
    gpus = params["gpus"] or count_gpus(module)
    _rc, help_text, help_err = module.run_command([binary, "--help"])
    workdir = tempfile.mkdtemp(prefix="seatwright-nccl-")
    try:
        json_path = os.path.join(workdir, "all_reduce_perf.json")
        argv = [binary, "-b", str(min(params["sizes"])), "-e", str(max(params["sizes"])), "-f", "2"]
        argv += ["-g", str(gpus), "-w", str(params["warmup"]), "-n", str(params["iters"])]
        # Older builds have no JSON output; their table is read instead.
        if "json" in (help_text + help_err).lower():
            argv += ["-J", json_path]
        rc, out, err = module.run_command(bounded(module, argv), environ_update=env)
        output = out + err
        if rc != 0:
            raise NcclError("all_reduce_perf exited %d: %s" % (rc, _tail(output)), argv=argv)
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
    rc, _out, err = module.run_command([python, "-c", "import torch; print(torch.cuda.device_count())"])
    if rc != 0:
        raise NcclError(
            "no all_reduce_perf on this node and %s cannot import torch (%s); install "
            "nccl-tests, or pass python=<an interpreter with PyTorch>" % (python, _tail(err))
        )
    workdir = tempfile.mkdtemp(prefix="seatwright-nccl-")
    try:
        # A real file: torch.multiprocessing's spawned interpreters re-import the worker from it.
        worker = os.path.join(workdir, "allreduce_sweep.py")
        with open(worker, "w") as handle:
            handle.write(inspect.getsource(allreduce_worker))
        argv = [python, worker, "--nranks", str(params["gpus"]), "--port", str(free_port())]
        argv += ["--warmup", str(params["warmup"]), "--iters", str(params["iters"]), "--sizes"]
        argv += [str(size) for size in params["sizes"]]
        rc, out, err = module.run_command(bounded(module, argv), environ_update=env)
        output = out + err
        if rc != 0:
            raise NcclError("the torch all-reduce sweep exited %d: %s" % (rc, _tail(output)))
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
