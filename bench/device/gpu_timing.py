#!/usr/bin/env python3
"""Device benchmark: wall time of the gpu_facts module beside the bare NVML call, in one run.

Each repetition times, in turn: the bare NVML init+query (in this process, and as a fresh
interpreter), seatwright's NVML reader alone, the gpu_facts module as its own process (NVML and
nvidia-smi backends), the module through `ansible` ad hoc, and a bare nvidia-smi query. Interleaving
the measurements spreads drift over all of them; medians and ranges are reported.

Run from the repository root with ansible-core importable:
  PYTHONPATH=/tmp/site python3 bench/device/gpu_timing.py --reps 11 --out timing.json
"""

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]

BARE_NVML = """
import pynvml
pynvml.nvmlInit()
pynvml.nvmlSystemGetDriverVersion()
for i in range(pynvml.nvmlDeviceGetCount()):
    h = pynvml.nvmlDeviceGetHandleByIndex(i)
    pynvml.nvmlDeviceGetName(h)
    pynvml.nvmlDeviceGetCudaComputeCapability(h)
    pynvml.nvmlDeviceGetMemoryInfo(h)
    pynvml.nvmlDeviceGetPowerManagementLimit(h)
    pynvml.nvmlDeviceGetPowerManagementLimitConstraints(h)
    pynvml.nvmlDeviceGetPowerManagementDefaultLimit(h)
    pynvml.nvmlDeviceGetPersistenceMode(h)
pynvml.nvmlShutdown()
"""

# Runs library/gpu_facts.py as Ansible would after unpacking it (the collection on sys.path: PYTHONPATH).
MODULE_RUNNER = """
import runpy
runpy.run_path(%r, run_name="__main__")
""" % str(ROOT / "library" / "gpu_facts.py")

SMI_FIELDS = (
    "index,name,uuid,pci.bus_id,compute_cap,memory.total,driver_version,power.limit,"
    "enforced.power.limit,power.min_limit,power.max_limit,power.default_limit,persistence_mode"
)


def timed_subprocess(argv, env=None):
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        raise RuntimeError("%s exited %d: %s" % (argv[:3], done.returncode, (done.stdout + done.stderr)[-2000:]))
    return elapsed, done.stdout


def module_args_file(directory, backend):
    path = Path(directory) / ("args-%s.json" % backend)
    path.write_text(json.dumps({"ANSIBLE_MODULE_ARGS": {"cache_path": "", "backend": backend}}))
    return str(path)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=11)
    parser.add_argument("--out", required=True)
    args = parser.parse_args()

    from ansible_collections.seatwright.fleet.plugins.module_utils.io.node.gpu_probe import read_nvml

    env = dict(os.environ, ANSIBLE_LIBRARY=str(ROOT / "library"), LC_ALL="C.UTF-8")
    adhoc = [
        sys.executable,
        "-m",
        "ansible.cli.adhoc",
        "-i",
        "localhost,",
        "-c",
        "local",
        "-m",
        "gpu_facts",
        "-a",
        "cache_path=",
        "-e",
        "ansible_python_interpreter=%s" % sys.executable,
        "localhost",
    ]
    samples = {
        name: []
        for name in (
            "nvml_init_query_in_process",
            "nvml_init_query_fresh_python",
            "seatwright_read_nvml_in_process",
            "gpu_facts_module_process_nvml",
            "gpu_facts_module_process_nvidia_smi",
            "gpu_facts_via_ansible_adhoc",
            "nvidia_smi_query_process",
        )
    }
    module_outputs = {}
    with tempfile.TemporaryDirectory() as scratch:
        nvml_args = module_args_file(scratch, "nvml")
        smi_args = module_args_file(scratch, "nvidia-smi")
        code = compile(BARE_NVML, "bare_nvml", "exec")
        for _ in range(args.reps):
            start = time.perf_counter()
            exec(code, {})  # pylint: disable=exec-used
            samples["nvml_init_query_in_process"].append(time.perf_counter() - start)
            samples["nvml_init_query_fresh_python"].append(timed_subprocess([sys.executable, "-c", BARE_NVML])[0])
            start = time.perf_counter()
            read_nvml(with_links=True)
            samples["seatwright_read_nvml_in_process"].append(time.perf_counter() - start)
            elapsed, out = timed_subprocess([sys.executable, "-c", MODULE_RUNNER, nvml_args])
            samples["gpu_facts_module_process_nvml"].append(elapsed)
            module_outputs["nvml"] = out
            elapsed, out = timed_subprocess([sys.executable, "-c", MODULE_RUNNER, smi_args])
            samples["gpu_facts_module_process_nvidia_smi"].append(elapsed)
            module_outputs["nvidia-smi"] = out
            samples["gpu_facts_via_ansible_adhoc"].append(timed_subprocess(adhoc, env)[0])
            samples["nvidia_smi_query_process"].append(
                timed_subprocess(["nvidia-smi", "--query-gpu=" + SMI_FIELDS, "--format=csv,noheader"])[0]
            )
    summary = {}
    for name, values in samples.items():
        summary[name] = {
            "n": len(values),
            "median_s": statistics.median(values),
            "min_s": min(values),
            "max_s": max(values),
            "samples_s": values,
        }
    sources = {
        backend: json.loads(out.strip().splitlines()[-1])["ansible_facts"]["seatwright_gpu_summary"]["source"]
        for backend, out in module_outputs.items()
    }
    record = {"reps": args.reps, "python": sys.version.split()[0], "module_sources": sources, "timings": summary}
    Path(args.out).write_text(json.dumps(record, indent=2) + "\n")
    print("%-40s %10s %10s %10s" % ("measurement", "median ms", "min ms", "max ms"))
    for name, stats in summary.items():
        print(
            "%-40s %10.1f %10.1f %10.1f" % (name, stats["median_s"] * 1e3, stats["min_s"] * 1e3, stats["max_s"] * 1e3)
        )


if __name__ == "__main__":
    main()
