#!/usr/bin/python
"""Ansible module: check every gpu_nodes host's declaration before any role runs."""

DOCUMENTATION = r"""
module: fleet_preflight
short_description: Check the fleet's inventory declarations before anything else runs
description:
  - Validates what each host in C(gpu_nodes) declares (GPU profile and count, fabric address and
    interface, RDMA devices, power cap) and what must hold across the fleet (unique fabric
    addresses inside the fabric subnet).
  - Fails with one line per problem, each naming the host, the variable and what is expected.
  - Reads nothing from the hosts and changes nothing.
options:
  nodes:
    description: Host name to that host's declared variables.
    type: dict
    required: true
  fabric_subnet:
    description: The fabric's network; when set, every fabric address must be inside it.
    type: str
author: seatwright
"""

EXAMPLES = r"""
- name: Check the fleet's declarations
  fleet_preflight:
    nodes:
      node-a:
        seatwright_node_gpu_profile: rtx-pro-6000-maxq
        seatwright_node_gpu_count: 2
        seatwright_node_fabric_ip: 10.77.0.11
        seatwright_node_fabric_iface: enp65s0f0np0
    fabric_subnet: 10.77.0.0/24
"""

RETURN = r"""
hosts:
  description: The hosts that were checked.
  returned: always
  type: list
  elements: str
problems:
  description: One line per problem found (empty on success).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.seatwright.node.inventory import check_fleet


def main():
    module = AnsibleModule(
        argument_spec={
            "nodes": {"type": "dict", "required": True},
            "fabric_subnet": {"type": "str"},
        },
        supports_check_mode=True,
    )
    nodes = module.params["nodes"]
    problems = check_fleet(nodes, module.params["fabric_subnet"])
    result = {"changed": False, "hosts": sorted(nodes), "problems": problems}
    if problems:
        module.fail_json(msg="inventory preflight failed:\n" + "\n".join(problems), **result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
