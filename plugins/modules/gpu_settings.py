#!/usr/bin/python
"""Ansible module: GPU power limits, persistence mode and the clock lock, planned, applied and read back."""

DOCUMENTATION = r"""
module: gpu_settings
short_description: Set NVIDIA GPU power limits, persistence mode and clock lock, and keep them across boots
description:
  - Reads the GPUs (NVML first, nvidia-smi as the fallback), plans every setting against what they
    report, applies only what differs and reads the result back; fails naming the host, the GPU
    and the value when a card does not take a setting.
  - Power limits are checked against each card's own min/max before anything changes, and compared
    with the requested (software) limit, not the enforced one, so a limit lowered by another
    limiter does not make every run report a change.
  - No driver interface reads a clock lock back, so the lock last applied is kept in I(record_path)
    and compared with the request.
  - With I(settings_file) and I(boot_bundle), also writes what a boot unit re-applies (limits,
    persistence and clock lock reset at reboot or driver unload) and the bundle of this module's
    own code that the unit runs (C(python3 BUNDLE SETTINGS_FILE)), so the boot path and this
    module apply the same plan.
options:
  power_limit_w:
    description:
      - The limit in watts for every chosen GPU without an override.
      - Omitted with I(power_state=present), GPUs without an override get their card's default.
    type: int
  power_overrides:
    description: GPU index to a limit in watts, taking precedence over I(power_limit_w).
    type: dict
    default: {}
  power_state:
    description: C(present) applies I(power_overrides) and I(power_limit_w); C(default) restores each card's default.
    type: str
    choices: [present, default]
    default: present
  gpus:
    description: Indexes of the GPUs to manage; empty means every GPU on the node.
    type: list
    elements: int
    default: []
  persistence:
    description: Turn persistence mode on (true) or off (false); omitted leaves it as it is.
    type: bool
  clock_lock:
    description:
      - The GPU clock range to lock, C({min_mhz, max_mhz}) in MHz; omitted or null releases any lock.
    type: dict
  record_path:
    description: JSON record of the clock lock last applied (read to compare, written after applying).
    type: path
  settings_file:
    description: JSON file of the settings the boot unit re-applies; omitted, none is written.
    type: path
  boot_bundle:
    description: Zip of the code the boot unit runs (this module's own module_utils); omitted, none is written.
    type: path
  boot_unit:
    description:
      - The boot unit itself, C(path) and C(content) (text), written with the settings file and the
        bundle when it differs; omitted, none is written. One module run for all three (issue 25).
      - With C(enabled_link) (the C(.wants/) link C(systemctl enable) makes), the result's
        C(boot_unit_enabled) says whether that link points at the unit.
    type: dict
  backend:
    description: Which interface reads and sets the GPUs; C(auto) tries NVML, then nvidia-smi.
    type: str
    choices: [auto, nvml, nvidia-smi]
    default: auto
  host:
    description: The name used for this host in messages (usually C(inventory_hostname)).
    type: str
notes:
  - "Check mode: Predicts C(changed) for every setting and file; changes nothing."
  - "Diff mode: Power limit and persistence per GPU, and the clock lock, before and after."
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_full_diff
author: seatwright
"""

EXAMPLES = r"""
- name: Cap every GPU at 250 W, persistence on, no clock lock, re-applied at boot
  gpu_settings:
    power_limit_w: 250
    persistence: true
    record_path: /var/lib/seatwright/gpu_power_clock_lock.json
    settings_file: /etc/seatwright/gpu-settings.json
    boot_bundle: /usr/local/lib/seatwright/gpu-settings.pyz
    host: "{{ inventory_hostname }}"

- name: Cap GPU 1 lower than the rest and lock the clocks
  gpu_settings:
    power_limit_w: 325
    power_overrides:
      1: 300
    clock_lock: {min_mhz: 1500, max_mhz: 2400}

- name: Restore the card defaults
  gpu_settings:
    power_state: default
"""

RETURN = r"""
limits:
  description: One entry per managed GPU with its requested power limit before and after.
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
persistence:
  description: One entry per managed GPU with its persistence mode before and after.
  returned: always
  type: list
  elements: dict
  sample:
    - {index: 0, before: false, after: true, changed: true}
clocks:
  description: The clock lock recorded as applied (before) and requested (after).
  returned: always
  type: dict
  sample: {before: null, after: {min_mhz: 1500, max_mhz: 2400}, changed: true}
files:
  description: The record, settings file and boot bundle that were (or in check mode would be) rewritten.
  returned: always
  type: list
  elements: str
backend:
  description: The interface that read (and set) the GPUs, C(nvml) or C(nvidia-smi).
  returned: always
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.node.gpu_settings import apply_settings


def main():
    module = AnsibleModule(
        argument_spec={
            "power_limit_w": {"type": "int"},
            "power_overrides": {"type": "dict", "default": {}},
            "power_state": {"type": "str", "choices": ["present", "default"], "default": "present"},
            "gpus": {"type": "list", "elements": "int", "default": []},
            "persistence": {"type": "bool"},
            "clock_lock": {"type": "dict"},
            "record_path": {"type": "path"},
            "settings_file": {"type": "path"},
            "boot_bundle": {"type": "path"},
            "boot_unit": {"type": "dict"},
            "backend": {"type": "str", "choices": ["auto", "nvml", "nvidia-smi"], "default": "auto"},
            "host": {"type": "str"},
        },
        supports_check_mode=True,
    )
    try:
        result = apply_settings(module, module._diff)
    except SeatwrightError as exc:
        module.fail_json(msg=str(exc), **exc.details)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
