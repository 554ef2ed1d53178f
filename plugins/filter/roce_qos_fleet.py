"""Filter seatwright.fleet.roce_qos_fleet: the nodes whose lossless RoCE settings differ from the fleet's."""

from ansible.errors import AnsibleFilterError
from ansible_collections.seatwright.fleet.plugins.module_utils.fabric.qos import declared_problems, fleet_problems

DOCUMENTATION = r"""
name: roce_qos_fleet
author: seatwright
short_description: The nodes whose lossless RoCE settings, as their ports read them, differ from the fleet's
description:
  - One line per node and setting that differs from C(seatwright_fleet_roce_qos), naming the host, the
    setting, what the port reads and what the fleet declares (C(plugins/module_utils/fabric/qos.py)
    C(fleet_problems)). Empty when every node matches, or when nothing is declared.
  - A node whose port cannot report its settings is a problem only when it declares RDMA devices.
options:
  _input:
    description: Host name to its C(seatwright_roce_qos) fact (null where it was not read).
    type: dict
    required: true
  declared:
    description: The fleet's declaration, C(seatwright_fleet_roce_qos).
    type: dict
  rdma_hosts:
    description: The hosts that declare RDMA devices.
    type: list
    elements: str
"""

EXAMPLES = r"""
- name: Refuse nodes whose RoCE QoS differs from the fleet's
  ansible.builtin.assert:
    that: __problems | length == 0
    fail_msg: "{{ __problems | join('\n') }}"
  vars:
    __problems: "{{ facts_by_host | seatwright.fleet.roce_qos_fleet(seatwright_fleet_roce_qos, ['node-a']) }}"
"""

RETURN = r"""
_value:
  description: One line per problem.
  type: list
  elements: str
"""


def roce_qos_fleet(facts, declared=None, rdma_hosts=()):
    problems = declared_problems(declared)
    if problems:
        raise AnsibleFilterError("; ".join(problems))
    return fleet_problems(declared, dict(facts or {}), tuple(rdma_hosts or ()))


class FilterModule:
    def filters(self):
        return {"roce_qos_fleet": roce_qos_fleet}
