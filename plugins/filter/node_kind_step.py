"""Filter seatwright.fleet.node_kind_step: what a node role does at one step on the node's kind, and why."""

from ansible.errors import AnsibleFilterError
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.node.kind import role_step

DOCUMENTATION = r"""
name: node_kind_step
author: seatwright
short_description: What a node role does at one step on a node of a kind (linux or wsl2), and why
description:
  - Returns C(act) (run the Linux step), C(status) and C(messages), the reasons a person reads; a step
    a kind does not allow is a skip with its reason, never a failure. The decisions are
    C(plugins/module_utils/node/kind.py) C(role_step).
  - C(driver) on wsl2 reports the Windows driver's version from the GPU summary and installs nothing;
    C(power) judges a check-mode gpu_settings trial (on wsl2 nothing is set, and what would change is
    reported as not settable on this node kind); C(power_boot) and C(rdma) are skipped on wsl2.
options:
  _input:
    description: The node's kind, linux or wsl2.
    type: str
    required: true
  step:
    description: One of driver, power, power_boot, rdma.
    type: str
    required: true
  host:
    description: The host, for messages.
    type: str
    required: true
  data:
    description: The GPU summary (driver) or the registered check-mode gpu_settings result (power).
    type: dict
"""

EXAMPLES = r"""
- name: Say what the driver role does here
  ansible.builtin.debug:
    msg: "{{ (__common_node_kind | seatwright.fleet.node_kind_step('driver', inventory_hostname,
             ansible_facts.seatwright_gpu_summary)).messages }}"
"""

RETURN = r"""
_value:
  description: C({act, status, messages}).
  type: dict
"""


def node_kind_step(kind, step, host, data=None):
    try:
        return role_step(host, kind, step, data)
    except SeatwrightError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule:
    def filters(self):
        return {"node_kind_step": node_kind_step}
