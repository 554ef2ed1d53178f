#!/usr/bin/python
"""Ansible module: check every gpu_nodes host's declaration against the node and fleet contract."""

DOCUMENTATION = r"""
module: fleet_preflight
short_description: Check the fleet's inventory declarations against the node and fleet contract
description:
  - Validates what each host in C(gpu_nodes) declares (GPU profile and count, fabric address and
    interface, RDMA devices, power cap, co-tenant services) and the fleet-wide variables (name,
    fabric subnet, state and config folders, incumbent seats and promotion policy), then what must
    hold across the fleet (fleet variables equal on every host, unique fabric addresses inside the
    fabric subnet).
  - The variables and what is expected of each come from one table,
    C(plugins/module_utils/node/contract.py); a C(seatwright_node_*) or C(seatwright_fleet_*)
    name that is not in it is reported as a typo.
  - Fails with one line per problem, each naming the host, the variable and what is expected.
  - Reads nothing from the hosts and changes nothing.
options:
  nodes:
    description:
      - Host name to the contract variables visible on that host (its own and the fleet's), as
        collected by C(playbooks/vars/contract.yml).
    type: dict
    required: true
notes:
  - "Check mode: Changes nothing in either mode."
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_full
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
        seatwright_fabric_subnet: 10.77.0.0/24
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
declarations:
  description:
    - Host name to what node_base publishes as the local fact C(ansible_local.seatwright) (the
      host's and the fleet's variables with defaults filled in).
  returned: success
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.node.contract import check_fleet, local_fact


def main():
    module = AnsibleModule(argument_spec={"nodes": {"type": "dict", "required": True}}, supports_check_mode=True)
    nodes = module.params["nodes"]
    problems = check_fleet(nodes)
    result = {"changed": False, "hosts": sorted(nodes), "problems": problems}
    if problems:
        module.fail_json(msg="inventory preflight failed:\n" + "\n".join(problems), **result)
    result["declarations"] = dict((host, local_fact(host, nodes[host])) for host in sorted(nodes))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
