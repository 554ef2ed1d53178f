"""Lookup plugin seatwright.fleet.converge: what playbooks/nodes.yml needs to skip a current node."""

from pathlib import Path

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.files import tree_digests
from ansible_collections.seatwright.fleet.plugins.module_utils.node.converge_record import (
    inputs_digest,
    snapshot_command,
    steering_names,
)

DOCUMENTATION = r"""
name: converge
author: seatwright
short_description: The inputs digest of a node's converge, and the command that reads its record
description:
  - C(inputs) hashes every file of the collection's roles, plugins and playbooks, and the host's
    variables named C(seatwright_*) or after a role (C(gpu_power_*), ...), templated, facts left out.
  - C(command) is the shell command a node runs to report its boot, clock, converge record and the
    state of the paths the node roles write (plugins/module_utils/node/converge_record.py).
options:
  _terms:
    description: C(inputs) or C(command).
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

ROOT = Path(__file__).resolve().parents[2]
FOLDERS = ("roles", "plugins", "playbooks")
_CODE = {}


def code_digests():
    """The collection's files, hashed once per controller process."""
    if not _CODE:
        _CODE.update(tree_digests(str(ROOT), FOLDERS))
    return _CODE


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        values = []
        for term in terms:
            if term == "command":
                values.append(snapshot_command(kwargs.get("config_dir"), kwargs.get("state_dir")))
            elif term == "inputs":
                variables = variables or {}
                roles = sorted(path.name for path in (ROOT / "roles").iterdir() if path.is_dir())
                names = steering_names(variables, roles, variables.get("ansible_facts") or {})
                settings = {name: self._templar.template(variables[name]) for name in names}
                values.append(inputs_digest(code_digests(), settings))
            else:
                raise AnsibleLookupError("seatwright.fleet.converge takes 'inputs' or 'command', not %r" % term)
        return values
