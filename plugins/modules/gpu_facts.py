#!/usr/bin/python
"""Ansible module: the node's NVIDIA GPUs, their limits and links, and the IOMMU/ACS state, as facts."""

DOCUMENTATION = r"""
module: gpu_facts
short_description: Read the node's NVIDIA GPUs (NVML first, nvidia-smi as the fallback) as facts
description:
  - Sets C(seatwright_gpus), one entry per GPU (index, name, uuid, PCI bus id, compute capability as
    C("12.0"), sm as C("sm_120"), memory in MiB, requested and enforced power limit, min/max/default
    limit in W, persistence mode, IOMMU group), and C(seatwright_gpu_summary) (count, driver and CUDA
    versions, is_sm120, total VRAM, the link between each GPU pair as NVLink count or PCIe path,
    IOMMU and ACS state and whether peer-to-peer can hang).
  - Reads through NVML (nvidia-ml-py) when it is importable and answers, else through nvidia-smi.
  - A host with no NVIDIA driver gets C(count=0) and the reason; it fails only when I(require_gpus) is true.
  - Changes no GPU setting. Writes the facts, with the time they were read, to I(cache_path) (atomic
    write; skipped in check mode).
options:
  require_gpus:
    description: Fail, naming the reason, when no GPU answers.
    type: bool
    default: false
  backend:
    description: Which reader to use; C(auto) tries NVML, then nvidia-smi.
    type: str
    choices: [auto, nvml, nvidia-smi]
    default: auto
  cache_path:
    description: Where the node keeps the last facts read; an empty string writes nothing.
    type: path
    default: /var/lib/seatwright/gpu_facts.json
  host:
    description: The name used for this host in messages (usually C(inventory_hostname)).
    type: str
notes:
  - "Check mode: Reads the GPUs; in check mode writes no cache."
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_full
author: seatwright
"""

EXAMPLES = r"""
- name: Read GPU facts, failing on a node without GPUs
  gpu_facts:
    require_gpus: true
    host: "{{ inventory_hostname }}"

- name: Show the GPU summary
  ansible.builtin.debug:
    var: ansible_facts.seatwright_gpu_summary
"""

RETURN = r"""
ansible_facts:
  description: The GPU facts.
  returned: always
  type: dict
  contains:
    seatwright_gpus:
      description: One dict per GPU, ordered by index.
      type: list
      elements: dict
      sample:
        - index: 0
          name: NVIDIA H200
          compute_capability: "9.0"
          sm: sm_90
          memory_total_mib: 143771
          power_limit_w: 700.0
          power_enforced_w: 700.0
          power_min_w: 200.0
          power_max_w: 700.0
          power_default_w: 700.0
          persistence_mode: true
    seatwright_gpu_summary:
      description: Count, versions, SM120 flag, total VRAM, links, IOMMU/ACS and the peer-to-peer assessment.
      type: dict
      sample:
        count: 2
        driver_version: 580.159.04
        cuda_version: "13.0"
        is_sm120: false
        total_vram_mib: 287542
        source: nvml
        reason: null
cache_path:
  description: The file the facts were written to, or null when nothing was written.
  returned: always
  type: str
"""

import platform

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.defaults import GPU_FACTS_CACHE
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.node.gpu_facts import gpu_facts


def main():
    module = AnsibleModule(
        argument_spec={
            "require_gpus": {"type": "bool", "default": False},
            "backend": {"type": "str", "choices": ["auto", "nvml", "nvidia-smi"], "default": "auto"},
            "cache_path": {"type": "path", "default": GPU_FACTS_CACHE},
            "host": {"type": "str"},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        result = gpu_facts(module, params["host"] or platform.node(), params["require_gpus"], params["cache_path"])
    except SeatwrightError as exc:
        module.fail_json(msg=str(exc), **exc.details)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
