#!/usr/bin/python
"""Ansible module: the router on its node (plan, start, move an alias, read it, take a seat out)."""

DOCUMENTATION = r"""
module: router_control
short_description: Run the router on its node and move an alias's targets
description:
  - C(plan) returns the router's paths, units, ports and file texts (read-only, no key).
  - C(key) writes the admin key to the router's 0600 env file (its units read it from there).
  - C(started) starts what is not running, LiteLLM's serving colour and nginx, or smg.
  - C(apply) makes I(alias) go only to I(targets) with their weights, checked in the router's listing.
    On LiteLLM the idle colour gets the new config, is checked, and nginx is pointed at it; the
    serving colour stays up as the rollback target. On smg workers are added and removed at runtime.
  - C(read) returns the alias's current targets; C(deregister) drains I(seat) and takes it out.
  - The admin key is read from the router's 0600 env file on the node, never passed in.
options:
  state:
    description: What to do.
    type: str
    choices: [plan, key, started, apply, read, deregister]
    default: plan
  port:
    description: The router's public port (LiteLLM's colours take the next two).
    type: int
    required: true
  bind:
    description:
      - The address the public port listens on (the role's default is the router node's fabric address).
      - smg on every interface in front of seats that take a key is refused unless I(clients_keyed) or
        I(authenticating_front); LiteLLM beyond 127.0.0.1 is refused unless I(clients_keyed).
    type: str
    default: 127.0.0.1
  clients_keyed:
    description:
      - Clients send a key of their own (the role's router_api_key), which nginx's front checks. LiteLLM's
        front trades it for the master key on the data plane only; smg then listens on 127.0.0.1 behind it.
    type: bool
    default: false
  seats_keyed:
    description: The seats take a key (the router sends it to them).
    type: bool
    default: false
  version:
    description: The router's release; compromised releases are refused.
    type: str
  venv:
    description: An existing venv holding the router (default one under the state folder).
    type: str
  nginx_prefix:
    description: A folder for LiteLLM's front nginx of its own (default the system's nginx).
    type: str
  alias:
    description: The alias to apply, read or deregister from.
    type: str
  targets:
    description: Seat to C({api_base, weight}); weight 0 or an absent seat gets no traffic.
    type: dict
    default: {}
  seat:
    description: The seat to deregister.
    type: str
  metrics_url:
    description: The seat engine's /metrics, for the drain (default beside its api_base).
    type: str
  timeout_s:
    description: Seconds a start, a move or a drain may take.
    type: float
    default: 180
  admin_key:
    description: The router's admin key, for state=key only (written to the 0600 env file).
    type: str
  seat_key:
    description: The key the seats take, for state=key only (the same file; the router sends it to the seats).
    type: str
  client_key:
    description: The clients' key, for state=key only, written to the front's 0600 map (with I(clients_keyed)).
    type: str
notes:
  - "Check mode: Reads the router and says what would change; starts, writes and moves nothing."
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_full
  - seatwright.fleet.router
author: seatwright
"""

EXAMPLES = r"""
- name: Move production onto lab-b
  seatwright.fleet.router_control:
    state: apply
    kind: litellm
    port: 4000
    config_dir: /etc/seatwright
    state_dir: /var/lib/seatwright
    aliases: {production: lab}
    alias: production
    targets: {lab-b: {api_base: "http://172.30.99.12:8000/v1", weight: 100}}
"""

RETURN = r"""
plan:
  description: The layout, service specs and file texts (state=plan).
  returned: when state is plan
  type: dict
targets:
  description: The alias's targets as the router lists them, seat to C({api_base, weight}).
  returned: when state is apply or read
  type: dict
seconds:
  description: How long the move took.
  returned: when state is apply
  type: float
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.router.switch import control

ARGUMENT_SPEC = {
    "state": {"type": "str", "choices": ["plan", "key", "started", "apply", "read", "deregister"], "default": "plan"},
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
    "venv": {"type": "str"},
    "nginx_prefix": {"type": "str"},
    "service_manager": {"type": "str", "choices": ["auto", "systemd", "process"], "default": "auto"},
    "aliases": {"type": "dict", "default": {}},
    "alias": {"type": "str"},
    "targets": {"type": "dict", "default": {}},
    "seat": {"type": "str"},
    "metrics_url": {"type": "str"},
    "timeout_s": {"type": "float", "default": 180},
    "admin_key": {"type": "str", "no_log": True},
    "seat_key": {"type": "str", "no_log": True},
    "client_key": {"type": "str", "no_log": True},
}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        result = control(module.params, module.check_mode)
    except SeatwrightError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
