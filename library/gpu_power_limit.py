#!/usr/bin/python
"""Ansible module: declare the requested power limit of a node's NVIDIA GPUs."""

DOCUMENTATION = r"""
module: gpu_power_limit
short_description: Set the requested power limit of NVIDIA GPUs, validated against each card's range
description:
  - Declares the power limit in watts for all GPUs or the chosen indexes, with per-GPU overrides;
    I(state=default) restores each card's own default limit.
  - Validates every target against that card's min/max before changing anything, and fails with a
    message naming the host, the GPU, the requested value and the allowed range.
  - Compares with the requested (software) limit, not the enforced one, so a limit lowered by
    another limiter does not make every run report a change.
  - Supports check mode (predicts C(changed)) and diff (requested limit per GPU, before and after).
  - After setting, reads the limits back and fails if a card did not take its new limit.
  - Limits reset at reboot or driver unload; the gpu_power role re-applies them with a boot unit.
options:
  limit_w:
    description:
      - The limit in watts for every chosen GPU without an override.
      - Omitted with I(state=present), GPUs without an override get their card's default.
    type: float
  overrides:
    description: GPU index to a limit in watts, taking precedence over I(limit_w).
    type: dict
    default: {}
  gpus:
    description: Indexes of the GPUs to manage; empty means every GPU on the node.
    type: list
    elements: int
    default: []
  state:
    description: C(present) applies I(overrides) and I(limit_w); C(default) restores each card's default.
    type: str
    choices: [present, default]
    default: present
  backend:
    description: Which interface reads and sets limits; C(auto) tries NVML, then nvidia-smi.
    type: str
    choices: [auto, nvml, nvidia-smi]
    default: auto
  host:
    description: The name used for this host in messages (usually C(inventory_hostname)).
    type: str
author: seatwright
"""

EXAMPLES = r"""
- name: Cap every GPU at 250 W
  gpu_power_limit:
    limit_w: 250
    host: "{{ inventory_hostname }}"

- name: Cap GPU 1 lower than the rest
  gpu_power_limit:
    limit_w: 325
    overrides:
      1: 300

- name: Restore the card defaults
  gpu_power_limit:
    state: default
"""

RETURN = r"""
limits:
  description: One entry per managed GPU with its requested limit before and after.
  returned: always
  type: list
  elements: dict
  sample:
    - index: 0
      name: NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition
      before_w: 300.0
      after_w: 250.0
      enforced_w: 300.0
      changed: true
backend:
  description: The interface that read (and set) the limits, C(nvml) or C(nvidia-smi).
  returned: always
  type: str
"""

import platform

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.seatwright.errors import GpuInputError, ProbeUnavailable
from ansible.module_utils.seatwright.node.gpu import plan_diff, plan_power_limits, readback_failures
from ansible.module_utils.seatwright.io.gpu_probe import read_gpus, set_power_limit


def main():
    module = AnsibleModule(
        argument_spec={
            "limit_w": {"type": "float"},
            "overrides": {"type": "dict", "default": {}},
            "gpus": {"type": "list", "elements": "int", "default": []},
            "state": {"type": "str", "choices": ["present", "default"], "default": "present"},
            "backend": {"type": "str", "choices": ["auto", "nvml", "nvidia-smi"], "default": "auto"},
            "host": {"type": "str"},
        },
        supports_check_mode=True,
    )
    params = module.params
    host = params["host"] or platform.node()
    try:
        reading = read_gpus(module, params["backend"], with_links=False)
    except ProbeUnavailable as exc:
        module.fail_json(msg="host %s: cannot read GPU power limits: %s" % (host, exc))
    try:
        plan = plan_power_limits(host, reading["devices"], params["state"], params["limit_w"],
                                 params["overrides"], params["gpus"])
    except GpuInputError as exc:
        module.fail_json(msg=str(exc))
    changed = any(item["changed"] for item in plan)
    result = {"changed": changed, "limits": plan, "backend": reading["source"]}
    if module._diff:
        result["diff"] = plan_diff(plan)
    if not changed or module.check_mode:
        module.exit_json(**result)
    for item in plan:
        if item["changed"]:
            try:
                set_power_limit(module, reading["source"], item["index"], item["after_w"])
            except ProbeUnavailable as exc:
                module.fail_json(msg="host %s: setting GPU %d to %.2f W failed: %s"
                                 % (host, item["index"], item["after_w"], exc), **result)
    after = read_gpus(module, reading["source"], with_links=False)
    failures = readback_failures(host, plan, after["devices"])
    if failures:
        module.fail_json(msg="\n".join(failures), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
