"""Filter seatwright.fleet.converge_reason: why a node must converge again, from its snapshot."""

from ansible.errors import AnsibleFilterError
from ansible_collections.seatwright.fleet.plugins.module_utils.node.converge_record import (
    MAX_AGE_H,
    parse_snapshot,
    stale_reason,
)

DOCUMENTATION = r"""
name: converge_reason
author: seatwright
short_description: Why a node must go through the node roles again, or an empty string
description:
  - Reads the output of C(lookup('seatwright.fleet.converge', 'command')) run on the node and
    compares the node's converge record with it (plugins/module_utils/node/converge_record.py).
options:
  _input:
    description: The command's standard output.
    type: str
    required: true
  inputs:
    description: C(lookup('seatwright.fleet.converge', 'inputs')).
    type: str
    required: true
  state_dir:
    description: The state folder in effect.
    type: path
  max_age_h:
    description: Hours a record is trusted at most.
    type: int
    default: 24
"""

EXAMPLES = r"""
- name: Say why the node converges
  ansible.builtin.debug:
    msg: "{{ snapshot.stdout | seatwright.fleet.converge_reason(inputs) or 'current' }}"
"""

RETURN = r"""
_value:
  description: The reason, or an empty string when the record holds.
  type: str
"""


def converge_reason(stdout, inputs, state_dir=None, max_age_h=MAX_AGE_H):
    try:
        return stale_reason(parse_snapshot(stdout, state_dir), inputs, int(max_age_h)) or ""
    except ValueError as exc:
        raise AnsibleFilterError("%s; the node needs cat, date and GNU find" % exc)


class FilterModule:
    def filters(self):
        return {"converge_reason": converge_reason}
