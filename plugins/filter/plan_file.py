"""Filter seatwright.fleet.plan_file: a seat's plan file in the plan folder, named in one place."""

from ansible.errors import AnsibleFilterError
from ansible_collections.seatwright.fleet.plugins.module_utils.defaults import plan_file as decide

DOCUMENTATION = r"""
name: plan_file
author: seatwright
short_description: A seat's plan file in the plan folder
description:
  - Returns C(<plan folder>/<seat>.json) (C(plugins/module_utils/defaults.py) C(plan_file)), where
    playbooks/plan.yml writes a seat's plan and bring-up, the seat role and promote.yml read it.
  - Fails when the seat's name is not a DNS label, so no name can reach outside the folder.
options:
  _input:
    description: The plan folder (the project's C(.cache/plans) unless the inventory moved it).
    type: path
    required: true
  seat:
    description: The seat's name.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Where the lab seat's plan is
  ansible.builtin.debug:
    msg: "{{ (playbook_dir ~ '/../.cache/plans') | seatwright.fleet.plan_file('lab') }}"
"""

RETURN = r"""
_value:
  description: The plan file's path.
  type: path
"""


def plan_file(plan_dir, seat):
    try:
        return decide(plan_dir, seat)
    except ValueError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule:
    def filters(self):
        return {"plan_file": plan_file}
