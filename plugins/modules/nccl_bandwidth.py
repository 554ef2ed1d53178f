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
notes:
  - "Check mode: Measures only; runs the same in check mode."
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_full
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

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.fabric.nccl_sweep import measure


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
    try:
        result = measure(module)
    except SeatwrightError as exc:
        module.fail_json(msg=str(exc), **exc.details)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
