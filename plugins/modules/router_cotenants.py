#!/usr/bin/python
"""Ansible module: the router's side of an exclusive seat's co-tenants (observe, take out, put back)."""

DOCUMENTATION = r"""
module: router_cotenants
short_description: Take evicted co-tenants out of the router and put them back, minding the router's own state
description:
  - Runs on the router's node (roles/router C(tasks_from=cotenants) delegates it there).
  - C(observed) returns the router's lifecycle state (running, stopped on purpose, down, unreachable;
    see C(plugins/module_utils/router/lifecycle.py)) and, when it answers, every alias's targets.
  - C(removed) drains each target in I(removed) (no new traffic, its engine's running gauge at 0)
    and takes it out; a router that is not running is left alone, with a note or a warning.
  - C(restored) puts the targets in I(removed) back exactly. A router stopped on purpose is not
    waited for (the note says the targets were not re-registered); one expected up that does not
    answer is a warning. Neither fails the task; a running router that answered and then refuses the
    targets fails it (an active admission plane fails closed).
options:
  state:
    description: What to do.
    type: str
    choices: [observed, removed, restored]
    default: observed
  port:
    description: The router's public port.
    type: int
    required: true
  bind:
    description: The address the public port listens on (as the router role was given it).
    type: str
    default: 127.0.0.1
  clients_keyed:
    description: Clients send a key of their own, checked by the router's front (router_control's).
    type: bool
    default: false
  seats_keyed:
    description: The seats take a key.
    type: bool
    default: false
  version:
    description: The router's release; empty is the pinned one.
    type: str
  removed:
    description: "Targets taken out, or to take out, C({alias: {seat: {api_base, weight}}}), from the co-tenant record."
    type: dict
    default: {}
  prior:
    description: The router's state recorded at eviction (restored only).
    type: str
    choices: [running, stopped, down, unreachable]
  timeout_s:
    description: Seconds a move or a drain may take.
    type: float
    default: 180
notes:
  - "Check mode: Observes the router and says what it would drain, remove or put back; changes nothing."
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_full
  - seatwright.fleet.router
author: seatwright
"""

EXAMPLES = r"""
- name: Put back what the co-tenant record took out
  seatwright.fleet.router_cotenants:
    state: restored
    kind: smg
    port: 4000
    config_dir: /etc/seatwright
    state_dir: /var/lib/seatwright
    aliases: {production: lab}
    prior: running
    removed: {production: {lab-side: {api_base: "http://172.30.99.11:8001/v1", weight: 100}}}
"""

RETURN = r"""
state:
  description: The router's lifecycle state now (running, stopped, down or unreachable).
  returned: always
  type: str
aliases:
  description: "Each alias's targets, seat to C({api_base, weight}), when the router answered."
  returned: state=observed
  type: dict
action:
  description: What was decided (remove, reregister, skip, warn or none).
  returned: state=removed or restored
  type: str
note:
  description: Why, in words (e.g. router stopped on purpose; targets not re-registered).
  returned: state=removed or restored
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.router.lifecycle import converge

ARGUMENT_SPEC = {
    "state": {"type": "str", "choices": ["observed", "removed", "restored"], "default": "observed"},
    "kind": {"type": "str", "required": True},
    "port": {"type": "int", "required": True},
    "bind": {"type": "str", "default": "127.0.0.1"},
    "clients_keyed": {"type": "bool", "default": False},
    "seats_keyed": {"type": "bool", "default": False},
    "authenticating_front": {"type": "bool", "default": False},
    "version": {"type": "str"},
    "config_dir": {"type": "str", "required": True},
    "state_dir": {"type": "str", "required": True},
    "user": {"type": "str", "default": "seatwright-router"},
    "service_manager": {"type": "str", "choices": ["auto", "systemd", "process"], "default": "auto"},
    "aliases": {"type": "dict", "default": {}},
    "removed": {"type": "dict", "default": {}},
    "prior": {"type": "str", "choices": ["running", "stopped", "down", "unreachable"]},
    "timeout_s": {"type": "float", "default": 180},
}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        result = converge(module.params, module.check_mode)
    except SeatwrightError as exc:
        module.fail_json(msg=str(exc))
    if result.get("warning"):
        module.warn(result["warning"])
    module.exit_json(**result)


if __name__ == "__main__":
    main()
