"""Evicting and restoring a node's co-tenants, for the seat_cotenants module.

seat/cotenants.py decides which co-tenants an exclusive seat stops and what a record asks to
restore; this file observes them (docker, systemctl through io/common/services.py), keeps the
record on the node and applies the decision. Failures raise SeatError or ServiceError with the
message for people; a failed restore carries what was done as details.

With a router in front of co-tenants, eviction runs in two calls around the router's: `recorded`
writes the record (with the router's state and the targets to take out) and stops nothing; roles/
router tasks_from=cotenants drains and removes those targets; `evicted` then stops the co-tenants.
"""

import json
import os

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import DrainError, SeatError, ServiceError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.files import atomic_write_bytes
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.services import (
    is_running,
    start_cotenant,
    stop_cotenant,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.io.seat.engine import seat_containers
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.cotenants import (
    check_record,
    eviction_plan,
    merge_record,
    release,
    restore_actions,
    router_section,
)


def converge_cotenants(params, check_mode):
    """The seat_cotenants result for `params` (state evicted or restored)."""
    host = params["host_name"]
    try:
        if params["state"] in ("recorded", "evicted"):
            return evict(params, check_mode, stop=params["state"] == "evicted")
        result, problem = restore(params, check_mode)
    except (SeatError, ServiceError, ValueError, OSError) as exc:
        raise SeatError("host %s: %s" % (host, exc))
    if problem:
        raise ServiceError(
            "host %s: co-tenants not restored: %s; the record stays at %s so a re-run of "
            "playbooks/teardown.yml retries" % (host, problem, params["record_path"]),
            **result,
        )
    return result


def read_record(path):
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)


def evict(params, check_mode, stop=True):
    plan = eviction_plan(params["host_name"], params["cotenants"], params["seat_gpus"], params["exclusive"])
    observed = [dict(item, running=is_running(item["kind"], item["name"])) for item in plan["stop"]]
    existing = read_record(params["record_path"])
    router = router_section(params["host_name"], params.get("router"), observed)
    record = merge_record(params["host_name"], params["seat"], existing, observed, router)
    router_remove = (record.get("router") or {}).get("removed") or {}
    running = [item for item in observed if item["running"]]
    evicted = [
        {"host": params["host_name"], "name": entry["name"], "kind": entry["kind"]}
        for entry in record["entries"]
        if entry["was_running"]
    ]
    if check_mode:
        return dict(
            changed=bool(running) if stop else record != existing,
            stopped=[dict(i, how="would stop") for i in running] if stop else [],
            kept=plan["keep"],
            record=record,
            evicted=evicted,
            router_remove=router_remove,
        )
    # The record is written before anything stops, so a failure halfway still knows what to restore.
    if plan["stop"] or existing:
        atomic_write_bytes(params["record_path"], json.dumps(record, indent=1, sort_keys=True).encode("utf-8"))
    if not stop:
        return dict(
            changed=record != existing,
            stopped=[],
            kept=plan["keep"],
            record=record,
            evicted=evicted,
            router_remove=router_remove,
        )
    stopped = []
    for item in running:
        stopped.append(dict(item, how=stop_cotenant(item["kind"], item["name"], params["stop_timeout_s"])))
    return dict(
        changed=bool(stopped),
        stopped=stopped,
        kept=plan["keep"],
        record=record,
        evicted=evicted,
        router_remove=router_remove,
    )


def running_seats():
    """Seats with a running container on this node, or None when Docker cannot say."""
    try:
        rc, containers, _ = seat_containers(stopped_too=False)
    except (ServiceError, DrainError):
        return None
    return {item["seat"] for item in containers if item["running"]} if rc == 0 else None


def restore(params, check_mode):
    """(result, problem): problem names what could not be put back, None when all is back."""
    record = read_record(params["record_path"])
    if record is None:
        return dict(changed=False, started=[], actions=[], record={}, held_by=[]), None
    check_record(params["host_name"], record)
    decided = release(record, params["seat"], running_seats())
    if not decided["restore"]:
        kept = dict(record, holders=decided["holders"])
        actions = [
            dict(entry, action="none", reason=decided["reason"]) for entry in record["entries"] if entry["was_running"]
        ]
        if kept != record and not check_mode:
            atomic_write_bytes(params["record_path"], json.dumps(kept, indent=1, sort_keys=True).encode("utf-8"))
        return dict(changed=kept != record, started=[], actions=actions, record=kept, held_by=decided["holders"]), None
    names = {entry["name"]: entry["kind"] for entry in record.get("entries", []) if isinstance(entry, dict)}
    observed = {}
    for name, kind in names.items():
        observed[name] = is_running(kind, name) if kind in ("container", "systemd") else False
    actions = restore_actions(params["host_name"], record, observed)
    starts = [a for a in actions if a["action"] == "start"]
    if check_mode:
        return (
            dict(changed=bool(starts), started=[a["name"] for a in starts], actions=actions, record=record, held_by=[]),
            None,
        )
    failures, started = [], []
    for action in starts:
        try:
            start_cotenant(action["kind"], action["name"])
            started.append(action["name"])
        except ServiceError as exc:
            failures.append(str(exc))
    not_running = [a["name"] for a in actions if a["was_running"] and not is_running(a["kind"], a["name"])]
    if failures or not_running:
        return dict(started=started, actions=actions, record=record), "; ".join(failures) or ", ".join(not_running)
    os.unlink(params["record_path"])
    # The record is gone either way: that alone is a change on the node.
    return (
        dict(changed=True, started=started, actions=actions, record=record, router=record.get("router"), held_by=[]),
        None,
    )
