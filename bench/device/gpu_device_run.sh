#!/usr/bin/env bash
# Device machine (nvidia-h200-x2), read-only: gpu_facts and a check-mode gpu_power_limit through
# ansible-playbook, the gpu_facts timing benchmark, and the raw probes, written redacted to $OUT.
# Never changes a GPU setting: the only setter runs with check_mode: true, and the limits are read
# before and after to prove it. Run from the repository root, with .whl/gpu carried:
#   bash bench/device/gpu_device_run.sh
set -uo pipefail
: "${OUT:?OUT must name the folder that comes back}"
RAW=$(mktemp -d)
# The collection seatwright.fleet is this checkout, reached through the link scripts/collection-link makes.
bash scripts/collection-link
export GPU_DEVICE_RAW=$RAW PYTHONPATH=/tmp/site:$PWD/.cache/collections LC_ALL=C.UTF-8 PYTHONUNBUFFERED=1
export ANSIBLE_COLLECTIONS_PATH=$PWD/.cache/collections ANSIBLE_NOCOLOR=1
# Keep NVLink multicast off on this shared host, as its README asks.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
LIMITS="index,power.limit,enforced.power.limit,persistence_mode,clocks.applications.graphics,mig.mode.current"

python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site \
  .whl/gpu/*.whl || exit 1

{
  echo "# versions"
  python3 --version
  python3 -c "import ansible, pynvml; print('ansible-core', ansible.__version__ if hasattr(ansible, '__version__') else ''); print('pynvml from', pynvml.__file__)"
  python3 -m pip show nvidia-ml-py 2>/dev/null | grep -E '^(Name|Version)'
  python3 -m ansible.cli.playbook --version
  nvidia-smi --version
} >"$RAW/probe.txt" 2>&1

nvidia-smi --query-gpu=$LIMITS --format=csv >"$RAW/limits_before.csv" 2>&1

python3 bench/device/gpu_nvml_raw.py "$RAW/nvml_raw.json" >>"$RAW/probe.txt" 2>&1

python3 -m ansible.cli.playbook -i localhost, bench/device/gpu_device.yml --diff \
  -e ansible_python_interpreter="$(command -v python3)" >"$RAW/playbook.log" 2>&1
echo "playbook rc=$?" >>"$RAW/playbook.log"

python3 bench/device/gpu_timing.py --reps 11 --out "$RAW/timing.json" >"$RAW/timing.txt" 2>&1
echo "timing rc=$?" >>"$RAW/timing.txt"

nvidia-smi --query-gpu=$LIMITS --format=csv >"$RAW/limits_after.csv" 2>&1
{
  echo "## limits before the run"; cat "$RAW/limits_before.csv"
  echo "## limits after the run"; cat "$RAW/limits_after.csv"
  if cmp -s "$RAW/limits_before.csv" "$RAW/limits_after.csv"; then echo "UNCHANGED"; else echo "CHANGED"; fi
} >"$RAW/limits_readback.txt"
rm "$RAW/limits_before.csv" "$RAW/limits_after.csv"

{
  echo "## nvidia-smi nvlink -s"; nvidia-smi nvlink -s
  echo "## nvidia-smi -q -d POWER"; nvidia-smi -q -d POWER
  echo "## nvidia-smi topo -m"; nvidia-smi topo -m
  echo "## /sys/kernel/iommu_groups entries"; ls /sys/kernel/iommu_groups 2>&1 | wc -l
  echo "## /proc/cmdline iommu arguments"; tr ' ' '\n' </proc/cmdline | grep -i iommu || echo "(none)"
  echo "## lspci -vvv (Access Control Services)"
  if command -v lspci >/dev/null; then lspci -vvv 2>&1 | grep -E '^[0-9a-f]|ACSCap|ACSCtl'; else echo "lspci: not installed"; fi
} >>"$RAW/probe.txt" 2>&1

python3 bench/device/gpu_redact.py "$RAW" "$OUT" "$(hostname)"
rm -rf "$RAW"
cat "$OUT/playbook.log" "$OUT/timing.txt" "$OUT/limits_readback.txt"
head -40 "$OUT/probe.txt"
