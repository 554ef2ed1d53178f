"""Filter seatwright.fleet.seat_aliases: the router aliases a seat serves ahead of its own name (smg)."""

from ansible.errors import AnsibleFilterError
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import RouterError
from ansible_collections.seatwright.fleet.plugins.module_utils.router.adapter import seat_aliases as decide

DOCUMENTATION = r"""
name: seat_aliases
author: seatwright
short_description: The router alias names a seat serves ahead of its own
description:
  - Given the inventory's C(router) declaration, returns the alias names the seat must serve first
    (C(plugins/module_utils/router/adapter.py) C(seat_aliases)). Empty unless the router is smg,
    which routes by each seat's first served name; LiteLLM maps aliases itself.
  - Fails naming the alias that is not declared, or the aliases that would compete for one seat.
options:
  _input:
    description: The inventory's C(router) (C({kind, aliases, ...})), or nothing when there is no router.
    type: dict
    required: true
  seat:
    description: The seat being planned.
    type: str
    required: true
  asked:
    description: An alias the seat is launched to take over (C(-e seat_alias=NAME)), or nothing.
    type: str
    required: false
"""

EXAMPLES = r"""
- name: Plan a candidate that will take over production on an smg router
  seatwright.fleet.seat_plan:
    served_aliases: "{{ router | default({}) | seatwright.fleet.seat_aliases(seat, seat_alias | default(none)) }}"
"""

RETURN = r"""
_value:
  description: Alias names, at most one, to serve ahead of the seat's own name.
  type: list
  elements: str
"""


def seat_aliases(router, seat, asked=None):
    try:
        return decide(router, seat, asked)
    except RouterError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule:
    def filters(self):
        return {"seat_aliases": seat_aliases}
