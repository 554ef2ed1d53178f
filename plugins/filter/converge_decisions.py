"""Filter seatwright.fleet.converge_decisions: which nodes of a play may skip the node roles, and why not."""

from pathlib import Path

from ansible.errors import AnsibleFilterError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.files import tree_digests
from ansible_collections.seatwright.fleet.plugins.module_utils.node.converge_record import MAX_AGE_H, node_decision

DOCUMENTATION = r"""
name: converge_decisions
author: seatwright
short_description: For each node, the inputs digest of its converge and the reason it must converge
description:
  - Given the play's hosts and C(hostvars), each host with its registered C(__nodes_snapshot) (the
    output of C(lookup('seatwright.fleet.converge', 'command')) run on it), returns
    a dictionary of host to C(inputs) and C(reason); C(reason) is empty when the node's converge record holds.
  - C(inputs) hashes every file of the collection's roles, plugins and playbooks, and the host's
    variables named C(seatwright_*) or after a role (C(gpu_power_*), ...), facts left out.
  - The rules are in plugins/module_utils/node/converge_record.py.
options:
  _input:
    description: The play's hosts.
    type: list
    elements: str
    required: true
  hostvars:
    description: The play's C(hostvars).
    type: dict
    required: true
  forced:
    description: Whether a full converge was asked for (every node gets that reason).
    type: bool
    default: false
  state_dir:
    description: The state folder in effect.
    type: path
  max_age_h:
    description: Hours a record is trusted at most.
    type: int
    default: 24
"""

EXAMPLES = r"""
- name: Decide every node at once
  ansible.builtin.set_fact:
    decisions: "{{ ansible_play_hosts | seatwright.fleet.converge_decisions(hostvars) }}"
  run_once: true
"""

RETURN = r"""
_value:
  description: A dictionary of host to its C(inputs) digest and the C(reason) it must converge.
  type: dict
"""

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("roles", "plugins", "playbooks")


def converge_decisions(hosts, hostvars, forced=False, state_dir=None, max_age_h=MAX_AGE_H):
    code = tree_digests(str(ROOT), FOLDERS)
    roles = sorted(path.name for path in (ROOT / "roles").iterdir() if path.is_dir())
    try:
        return {
            host: node_decision(hostvars[host], code, roles, bool(forced), state_dir, int(max_age_h)) for host in hosts
        }
    except ValueError as exc:
        raise AnsibleFilterError("%s; the node needs cat, date and GNU find" % exc)


class FilterModule:
    def filters(self):
        return {"converge_decisions": converge_decisions}
