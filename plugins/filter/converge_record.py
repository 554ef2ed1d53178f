"""Filter seatwright.fleet.converge_record: the record a node keeps after a full converge."""

from ansible.errors import AnsibleFilterError
from ansible_collections.seatwright.fleet.plugins.module_utils.node.converge_record import new_record, parse_snapshot

DOCUMENTATION = r"""
name: converge_record
author: seatwright
short_description: The converge record to write on a node
description:
  - From the output of C(lookup('seatwright.fleet.converge', 'command')) run on the node after its
    roles succeeded (plugins/module_utils/node/converge_record.py).
options:
  _input:
    description: The command's standard output.
    type: str
    required: true
  inputs:
    description: The inputs digest read before the roles ran.
    type: str
    required: true
  state_dir:
    description: The state folder in effect.
    type: path
"""

EXAMPLES = r"""
- name: The record's text
  ansible.builtin.debug:
    msg: "{{ snapshot.stdout | seatwright.fleet.converge_record(inputs) }}"
"""

RETURN = r"""
_value:
  description: The record's JSON text.
  type: str
"""


def converge_record(stdout, inputs, state_dir=None):
    try:
        return new_record(parse_snapshot(stdout, state_dir), inputs)
    except ValueError as exc:
        raise AnsibleFilterError("%s; the node needs cat, date and GNU find" % exc)


class FilterModule:
    def filters(self):
        return {"converge_record": converge_record}
