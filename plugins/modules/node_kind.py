#!/usr/bin/python
"""Ansible module: the node's kind (Linux, or Linux under Windows' WSL 2 with Docker Desktop) as a fact."""

DOCUMENTATION = r"""
module: node_kind
short_description: Read what kind of node this is (linux or wsl2) as a fact
description:
  - Reads the kernel release, whether C(/dev/dxg) (WSL 2's GPU paravirtualization) and
    C(/usr/lib/wsl/lib) (the Windows driver's libraries) exist, and the Docker engine's C(/info)
    (Docker Desktop names itself there), and sets C(seatwright_host_kind) with the kind, the evidence,
    warnings and the engine. The decision is C(plugins/module_utils/node/kind.py).
  - Also reads C(/proc/cpuinfo) into C(seatwright_host_cpu), parsed by C(plugins/module_utils/node/cpu.py),
    with the processor, its logical CPUs and the vector and matrix extensions CPU engines choose
    kernels by. The plan picks a CPU seat's compute dtype from it. The test input never replaces it.
  - Fails, naming the evidence, when the inventory declares another kind (I(declared)).
  - I(test_input) is lab test equipment, honoured only on a lab node, so the lab (which cannot run
    Windows) can declare one of its nodes WSL 2.
  - Changes nothing on the host.
options:
  host:
    description: The name used for this host in messages (usually C(inventory_hostname)).
    type: str
  declared:
    description: The inventory's C(seatwright_node_kind); the node must show it.
    type: str
    choices: [linux, wsl2]
  test_input:
    description:
      - Lab test equipment. Readings that stand in for the node's own (C(kernel_release), C(dxg),
        C(wsl_lib), C(docker_info)); refused unless I(fleet_name) is C(lab) and I(lab_marker) exists.
    type: dict
  fleet_name:
    description: The fleet's name (C(seatwright_fleet_name)); the test input needs C(lab).
    type: str
  lab_marker:
    description: A file only lab/prepare.yml writes; the test input needs it on the node.
    type: path
    default: /etc/seatwright-lab/gpu-profile.json
notes:
  - "Check mode: Reads only, in check mode too."
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_full
  - seatwright.fleet.docker
author: seatwright
"""

EXAMPLES = r"""
- name: Read the node's kind
  seatwright.fleet.node_kind:
    host: "{{ inventory_hostname }}"
    declared: "{{ seatwright_node_kind | default(omit) }}"
"""

RETURN = r"""
ansible_facts:
  description: The node's kind.
  returned: always
  type: dict
  contains:
    seatwright_host_kind:
      description: kind (linux or wsl2), source (node or test-input), evidence, warnings, the Docker engine.
      type: dict
      sample:
        kind: wsl2
        source: node
        kernel_release: 6.6.87.2-microsoft-standard-WSL2
        evidence: [kernel release 6.6.87.2-microsoft-standard-WSL2 is a WSL 2 kernel]
        warnings: []
        docker_engine: {server_version: 29.6.2, operating_system: Docker Desktop, docker_desktop: true}
        driver_dir: /usr/lib/wsl/lib
        single_node_only: true
    seatwright_host_cpu:
      description: The node's processor, or null where /proc/cpuinfo names none.
      type: dict
      sample:
        model: AMD EPYC
        logical_cpus: 2
        flags: [avx2]
        bf16_native: false
"""

import os
import platform

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.docker_api import DEFAULT_SOCKET
from ansible_collections.seatwright.fleet.plugins.module_utils.io.node.kind_probe import read_cpu, read_kind
from ansible_collections.seatwright.fleet.plugins.module_utils.node.kind import decide, lab_input_problem


def main():
    module = AnsibleModule(
        argument_spec={
            "host": {"type": "str"},
            "declared": {"type": "str", "choices": ["linux", "wsl2"]},
            "test_input": {"type": "dict"},
            "fleet_name": {"type": "str"},
            "lab_marker": {"type": "path", "default": "/etc/seatwright-lab/gpu-profile.json"},
            "docker_socket": {"type": "path", "default": DEFAULT_SOCKET},
        },
        supports_check_mode=True,
    )
    params = module.params
    host = params["host"] or platform.node()
    test_input = params["test_input"]
    refused = lab_input_problem(host, test_input, os.path.exists(params["lab_marker"]), params["fleet_name"])
    if refused:
        module.fail_json(msg=refused)
    (readings, why), source = (test_input, None), "test-input"
    if test_input is None:
        (readings, why), source = read_kind(params["docker_socket"]), "node"
    try:
        fact = decide(host, readings, params["declared"], source)
    except SeatwrightError as exc:
        module.fail_json(msg=str(exc))
    fact["docker_unanswered"] = why
    facts = {"seatwright_host_kind": fact, "seatwright_host_cpu": read_cpu()}
    if fact["problems"]:
        module.fail_json(msg="\n".join(fact["problems"]), ansible_facts=facts)
    module.exit_json(changed=False, ansible_facts=facts)


if __name__ == "__main__":
    main()
