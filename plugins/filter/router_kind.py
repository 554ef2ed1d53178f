"""Filter seatwright.fleet.router_kind: what plays need of a router kind, from its description."""

from ansible_collections.seatwright.fleet.plugins.module_utils.router.kinds import for_ansible

DOCUMENTATION = r"""
name: router_kind
author: seatwright
short_description: What a play needs of a router kind
description:
  - Given a router kind's name (the inventory's C(router.kind)), returns the plain facts of its
    description in C(plugins/module_utils/router/kinds/), with C(known) (whether a description names
    it) and C(kinds) (the names of every kind). Plays ask this instead of naming a kind.
  - An unknown or missing name is not an error here: C(known) is false, so the play can say so.
options:
  _input:
    description: The router kind's name, or nothing.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Require a known router kind
  ansible.builtin.assert:
    that: (router.kind | default('') | seatwright.fleet.router_kind).known
"""

RETURN = r"""
_value:
  description:
    - C(known), C(kinds) and the description's plain fields (C(name), C(pinned), C(key_env),
      C(weights), C(routes_by_first_served_name), C(clients_send_admin_key), ...).
  type: dict
"""


def router_kind(name):
    return for_ansible(name)


class FilterModule:
    def filters(self):
        return {"router_kind": router_kind}
