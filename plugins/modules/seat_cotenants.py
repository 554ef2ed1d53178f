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
  - C(state=restored) starts every co-tenant the record says was running and is not, then removes
    the record. Co-tenants that were stopped before the seat stay stopped.
options:
  state:
    description: C(evicted) or C(restored).
    type: str
    choices: [evicted, restored]
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
  record_path:
    description: Where the prior state is recorded on the node.
    type: path
    default: /var/lib/seatwright/seat/cotenants.json
  stop_timeout_s:
    description: Seconds a co-tenant may take to stop before it is killed.
    type: int
    default: 30
attributes:
  check_mode:
    support: full
    details: Reports what would be stopped or started; records and stops nothing.
  diff_mode:
    support: none
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
record:
  description: The prior-state record (written, or read back for the restore).
  returned: always
  type: dict
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError, ServiceError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.files import atomic_write_bytes
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.services import (
    is_running,
    start_cotenant,
    stop_cotenant,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.node.defaults import COTENANTS_RECORD
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.cotenants import (
    eviction_plan,
    merge_record,
    restore_actions,
)


def _read_record(path):
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def _evict(module, params):
    plan = eviction_plan(params["host_name"], params["cotenants"], params["seat_gpus"], params["exclusive"])
    observed = [dict(item, running=is_running(item["kind"], item["name"])) for item in plan["stop"]]
    existing = _read_record(params["record_path"])
    record = merge_record(params["host_name"], params["seat"], existing, observed)
    running = [item for item in observed if item["running"]]
    evicted = [
        {"host": params["host_name"], "name": entry["name"], "kind": entry["kind"]}
        for entry in record["entries"]
        if entry["was_running"]
    ]
    if module.check_mode:
        return dict(
            changed=bool(running),
            stopped=[dict(i, how="would stop") for i in running],
            kept=plan["keep"],
            record=record,
            evicted=evicted,
        )
    if plan["stop"] or existing:
        atomic_write_bytes(params["record_path"], json.dumps(record, indent=1, sort_keys=True).encode("utf-8"))
    stopped = []
    for item in running:
        stopped.append(dict(item, how=stop_cotenant(item["kind"], item["name"], params["stop_timeout_s"])))
    return dict(changed=bool(stopped), stopped=stopped, kept=plan["keep"], record=record, evicted=evicted)


def _restore(module, params):
    record = _read_record(params["record_path"])
    if record is None:
        return dict(changed=False, started=[], actions=[], record={})
    names = {entry["name"]: entry["kind"] for entry in record.get("entries", []) if isinstance(entry, dict)}
    observed = {}
    for name, kind in names.items():
        observed[name] = is_running(kind, name) if kind in ("container", "systemd") else False
    actions = restore_actions(params["host_name"], record, observed)
    starts = [a for a in actions if a["action"] == "start"]
    if module.check_mode:
        return dict(changed=bool(starts), started=[a["name"] for a in starts], actions=actions, record=record)
    failures, started = [], []
    for action in starts:
        try:
            start_cotenant(action["kind"], action["name"])
            started.append(action["name"])
        except ServiceError as exc:
            failures.append(str(exc))
    not_running = [a["name"] for a in actions if a["was_running"] and not is_running(a["kind"], a["name"])]
    if failures or not_running:
        module.fail_json(
            msg="host %s: co-tenants not restored: %s; the record stays at %s so a re-run of "
            "playbooks/seat-down.yml retries"
            % (params["host_name"], "; ".join(failures) or ", ".join(not_running), params["record_path"]),
            started=started,
            actions=actions,
            record=record,
        )
    os.unlink(params["record_path"])
    # The record is gone either way: that alone is a change on the node.
    return dict(changed=True, started=started, actions=actions, record=record)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["evicted", "restored"], required=True),
            seat=dict(type="str", required=True),
            host_name=dict(type="str", required=True),
            cotenants=dict(type="list", elements="raw", default=[]),
            seat_gpus=dict(type="list", elements="int", default=[]),
            exclusive=dict(type="bool", default=True),
            record_path=dict(type="path", default=COTENANTS_RECORD),
            stop_timeout_s=dict(type="int", default=30),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        result = _evict(module, params) if params["state"] == "evicted" else _restore(module, params)
    except (SeatError, ServiceError, ValueError, OSError) as exc:
        module.fail_json(msg="host %s: %s" % (params["host_name"], exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
