#!/usr/bin/python
"""Ansible module: sample the node's GPU power, clocks, utilisation and temperature during a benchmark."""

DOCUMENTATION = r"""
module: gpu_telemetry
short_description: Sample GPU power, SM clock, utilisation and temperature until told to stop
description:
  - Reads every GPU once per I(interval_s) (NVML first, nvidia-smi as the fallback, through the same
    probe code as C(gpu_facts)) until I(duration_s) has passed or I(stop_file) exists, and returns the
    samples. Meant to run with C(async) and C(poll 0) beside a benchmark, then be collected.
  - Marks readings from the seatwright lab's nvidia-smi emulator as emulated (they are test
    equipment, never a measurement).
  - Changes nothing on the host.
options:
  duration_s:
    description: Longest time to sample, in seconds.
    type: int
    default: 3600
  interval_s:
    description: Seconds between samples.
    type: float
    default: 1.0
  stop_file:
    description:
      - Sampling ends as soon as this file exists (the playbook touches it after the benchmark).
      - Its folder must be private to the sampling user (not writable by others, not a link), e.g. a
        per-run C(ansible.builtin.tempfile) folder; a stop file in C(/tmp) is refused, since anyone
        could plant it there.
    type: path
  backend:
    description: Which reader to use; C(auto) tries NVML, then nvidia-smi.
    type: str
    choices: [auto, nvml, nvidia-smi]
    default: auto
notes:
  - "Check mode: Only reads; it samples in check mode too."
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_full
author: seatwright
"""

EXAMPLES = r"""
- name: Make a private folder for the stop file
  ansible.builtin.tempfile:
    state: directory
  register: telemetry_folder

- name: Sample GPUs beside the benchmark
  gpu_telemetry:
    duration_s: 1800
    stop_file: "{{ telemetry_folder.path }}/stop"
  async: 1900
  poll: 0
  register: telemetry_job
"""

RETURN = r"""
telemetry:
  description: The samples, with the reader that took them.
  returned: always
  type: dict
  contains:
    source:
      description: C(nvml) or C(nvidia-smi).
      type: str
    emulated:
      description: True when nvidia-smi is the seatwright lab emulator (test equipment).
      type: bool
    interval_s:
      description: Seconds between samples.
      type: float
    samples:
      description: One entry per reading, C(t) in epoch seconds and one dict per GPU.
      type: list
      elements: dict
      sample:
        - t: 1796050000.5
          gpus:
            - {index: 0, power_w: 287.1, power_limit_w: 325.0, sm_clock_mhz: 2310, sm_clock_max_mhz: 3090,
               util_pct: 99, temp_c: 81}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.node.gpu_probe import record_telemetry


def main():
    module = AnsibleModule(
        argument_spec={
            "duration_s": {"type": "int", "default": 3600},
            "interval_s": {"type": "float", "default": 1.0},
            "stop_file": {"type": "path"},
            "backend": {"type": "str", "choices": ["auto", "nvml", "nvidia-smi"], "default": "auto"},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        result = record_telemetry(
            module, params["duration_s"], params["interval_s"], params["stop_file"], params["backend"]
        )
    except SeatwrightError as exc:
        module.fail_json(msg=str(exc), **exc.details)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
