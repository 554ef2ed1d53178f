"""Lookup plugin seatwright.fleet.converge: the command that reads a node's converge record."""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible_collections.seatwright.fleet.plugins.module_utils.node.converge_record import snapshot_command

DOCUMENTATION = r"""
name: converge
author: seatwright
short_description: The command that reads a node's converge record
description:
  - C(command) is the shell command a node runs to report its boot, clock, converge record and the
    state of the paths the node roles write (plugins/module_utils/node/converge_record.py).
options:
  _terms:
    description: C(command).
    required: true
  config_dir:
    description: The configuration folder in effect, for C(command).
    type: path
  state_dir:
    description: The state folder in effect, for C(command).
    type: path
"""

EXAMPLES = r"""
- name: Read this node's converge record
  ansible.builtin.raw: "{{ lookup('seatwright.fleet.converge', 'command') }}"
"""

RETURN = r"""
_raw:
  description: One value per term.
  type: list
"""


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        unknown = [term for term in terms if term != "command"]
        if unknown:
            raise AnsibleLookupError("seatwright.fleet.converge takes 'command', not %r" % unknown[0])
        return [snapshot_command(kwargs.get("config_dir"), kwargs.get("state_dir")) for _ in terms]
