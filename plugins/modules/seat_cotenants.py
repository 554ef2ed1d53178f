#!/usr/bin/python
"""Evict a node's co-tenant services for an exclusive seat, recording their prior state; restore them."""

DOCUMENTATION = r"""
---
module: seat_cotenants
short_description: Stop the co-tenants an exclusive seat needs gone, and put them back afterwards
description:
  - C(state=evicted) decides which declared co-tenants share a GPU with the seat (see
    C(plugins/module_utils/seat/cotenants.py)), records whether each was running in
    I(record_path) on the node (atomically, before anything is stopped), then stops the running
    ones. A stop that overruns I(stop_timeout_s) is escalated to a kill, never a removal, so the
    restore can start it again. A record left by an earlier run is kept, so its prior state wins.
  - C(state=recorded) writes the same record and stops nothing. Given I(router) (what the router's
    node observed), the record also keeps the router's state and the targets of the co-tenants'
    C(router_seat) to take out (C(router_remove)), so roles/router C(tasks_from=cotenants) drains
    and removes them before C(state=evicted) stops the co-tenants, and a restore puts them back exactly.
  - The record names the seats that hold its co-tenants stopped (C(holders)), every exclusive seat
    on the node that stopped them. A co-tenant running when a later bring-up finds the record (started
    by hand since) is recorded as running, so it comes back too.
  - C(state=restored) releases I(seat)'s hold. While another holder still runs a container on the
    node, nothing is started and the record stays with the seats left (C(held_by)). Otherwise it
    starts every co-tenant the record says was running and is not, then removes the record.
    Co-tenants that were stopped before the seat stay stopped. The record's router part comes back
    as I(router), for roles/router C(tasks_from=cotenants) to re-register.
options:
  state:
    description: C(recorded), C(evicted) or C(restored).
    type: str
    choices: [recorded, evicted, restored]
    required: true
  seat:
    description: Name of the seat, kept in the record.
    type: str
    required: true
  host_name:
    description: Inventory name of the node, for messages.
    type: str
    required: true
  cotenants:
    description: The node's C(seatwright_node_cotenants), a list of C({name, kind, gpus}).
    type: list
    elements: raw
    default: []
  seat_gpus:
    description: GPU indices the seat uses on this node; empty for a CPU seat.
    type: list
    elements: int
    default: []
  exclusive:
    description: The seat's C(topology.exclusive); false evicts nothing.
    type: bool
    default: true
  router:
    description:
      - "The router's view from its node, C({state, aliases}) (roles/router C(tasks_from=cotenants));
        state is running, stopped, down or unreachable, aliases maps alias to C({seat: {api_base, weight}})."
      - Omitted when no router is in front of this node's co-tenants.
    type: dict
  record_path:
    description: Where the prior state is recorded on the node.
    type: path
    default: /var/lib/seatwright/seat/cotenants.json
  stop_timeout_s:
    description: Seconds a co-tenant may take to stop before it is killed.
    type: int
    default: 30
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_full
author:
  - seatwright
"""

EXAMPLES = r"""
- name: Evict the co-tenants that share the seat's GPUs
  seat_cotenants:
    state: evicted
    seat: glm53
    host_name: "{{ inventory_hostname }}"
    cotenants: "{{ seatwright_node_cotenants | default([]) }}"
    seat_gpus: [0, 1]

- name: Put them back
  seat_cotenants:
    state: restored
    seat: glm53
    host_name: "{{ inventory_hostname }}"
"""

RETURN = r"""
stopped:
  description: Co-tenants stopped now, each with how (stopped or killed).
  returned: state=evicted
  type: list
  elements: dict
evicted:
  description: The co-tenants this seat holds evicted on the node, C([{host, name, kind}]) (the evidence's fleet cost).
  returned: state=evicted
  type: list
  elements: dict
kept:
  description: Declared co-tenants left running, each with the reason.
  returned: state=evicted
  type: list
  elements: dict
started:
  description: Co-tenants started again.
  returned: state=restored
  type: list
  elements: str
actions:
  description: What the restore decided for every recorded co-tenant.
  returned: state=restored
  type: list
  elements: dict
held_by:
  description: Seats still running on the node that keep the co-tenants stopped (empty once they are restored).
  returned: state=restored
  type: list
  elements: str
record:
  description: The prior-state record (written, or read back for the restore).
  returned: always
  type: dict
router_remove:
  description: "Targets to take out of the router, C({alias: {seat: {api_base, weight}}}), as recorded."
  returned: state=recorded or evicted
  type: dict
router:
  description: "The record's router part C({state, removed, note}) (null without one)."
  returned: state=restored, once the record is done
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.defaults import COTENANTS_RECORD
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.seat.cotenants import converge_cotenants


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["recorded", "evicted", "restored"], required=True),
            seat=dict(type="str", required=True),
            host_name=dict(type="str", required=True),
            cotenants=dict(type="list", elements="raw", default=[]),
            seat_gpus=dict(type="list", elements="int", default=[]),
            exclusive=dict(type="bool", default=True),
            router=dict(type="dict"),
            record_path=dict(type="path", default=COTENANTS_RECORD),
            stop_timeout_s=dict(type="int", default=30),
        ),
        supports_check_mode=True,
    )
    try:
        result = converge_cotenants(module.params, module.check_mode)
    except SeatwrightError as exc:
        module.fail_json(msg=str(exc), **exc.details)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
