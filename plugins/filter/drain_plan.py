"""Filter seatwright.fleet.drain_plan: what a converge does, batch by batch, with the seats its changes stop."""

from ansible.errors import AnsibleFilterError
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.node.drain_probe import read_plans
from ansible_collections.seatwright.fleet.plugins.module_utils.node.drain import decide, seat_names

DOCUMENTATION = r"""
name: drain_plan
author: seatwright
short_description: The drain of a converge, batch by batch, from the play's hosts and their variables
description:
  - Given the play's hosts in order and C(hostvars), finds each host's disruptive changes (the driver
    its cached GPU facts report against C(nvidia_driver_branch); the lab's labelled test changes not yet
    made) and, for the hosts read by C(seatwright.fleet.node_drain_facts), the seats running there with
    their plans (read from I(plan_dir)).
  - Returns C(batches) (each C({hosts, changes, seats, steps, refusals})), C(refusals), C(drain_hosts)
    and C(batch_sizes) in batch order, C(pending) (host to its changes) and C(lines) (what --check shows).
  - The rules are in plugins/module_utils/node/drain.py.
options:
  _input:
    description: The play's hosts, in order.
    type: list
    elements: str
    required: true
  hostvars:
    description: The play's C(hostvars).
    type: dict
    required: true
  driver_branch:
    description:
      - The driver branch a host without its own C(nvidia_driver_branch) is converged to (the shared
        default, C(lookup('seatwright.fleet.defaults', 'driver_branch'))).
    type: str
    required: true
  plan_dir:
    description: The controller's plan folder (C(.cache/plans) under the project).
    type: path
  router_aliases:
    description: "The router's listing: alias to C({seat: {api_base, weight}})."
    type: dict
  router_node:
    description: The router's host (C(router.node)), when a router is enabled.
    type: str
  drain:
    description: The operator's C(seatwright_drain).
    type: bool
    default: false
  batch_size:
    description: Nodes drained at once (C(seatwright_serial)); a seat's nodes are never split.
    type: int
    default: 1
  test_changes:
    description: "The lab's labelled test changes: host to C([{kind, id, detail}]) (C(seatwright_drain_test_changes))."
    type: dict
"""

EXAMPLES = r"""
- name: Decide the drain
  ansible.builtin.set_fact:
    drain: >-
      {{ ansible_play_hosts | seatwright.fleet.drain_plan(hostvars, '580', plan_dir='/srv/seatwright/.cache/plans') }}
  run_once: true
"""

RETURN = r"""
_value:
  description: The drain plan (node/drain.py decide).
  type: dict
"""


def _node(hostvars, host, driver_branch):
    variables = hostvars[host]
    facts = variables.get("ansible_facts") or {}
    return {
        "host_kind": facts.get("seatwright_host_kind"),
        "node_kind": variables.get("seatwright_node_kind"),
        "driver_version": (facts.get("seatwright_gpu_summary") or {}).get("driver_version"),
        "driver_branch": str(variables.get("nvidia_driver_branch") or driver_branch),
        # node_drain_facts' answer is a fact: under ansible_facts whether or not facts are injected as vars.
        "facts": facts.get("seatwright_drain_node") or variables.get("seatwright_drain_node"),
    }


def drain_plan(
    hosts,
    hostvars,
    driver_branch,
    plan_dir=None,
    router_aliases=None,
    router_node=None,
    drain=False,
    batch_size=1,
    test_changes=None,
):
    try:
        nodes = {host: _node(hostvars, host, driver_branch) for host in hosts}
        plans = read_plans(plan_dir, seat_names({h: n["facts"] for h, n in nodes.items()})) if plan_dir else {}
        return decide(
            list(hosts),
            nodes,
            plans,
            router_aliases,
            bool(drain),
            router_node or None,
            int(batch_size),
            test_changes or {},
        )
    except (SeatwrightError, ValueError) as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule:
    def filters(self):
        return {"drain_plan": drain_plan}
