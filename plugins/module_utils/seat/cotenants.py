"""Exclusive mode: which co-tenant services a seat evicts, what was running, and what to restore.

Co-tenants are declared per host in the inventory (`seatwright_node_cotenants`): a list of
{name, kind: container|systemd, gpus: [indices] | all, memory, memory_source, router_seat}; `memory` is what the
service holds on each of its GPUs, measured or declared (memory_source says which), and a seat that
leaves it resident takes at most what it leaves (rule gpu-memory-cotenants). A seat that is exclusive stops every
co-tenant that shares a GPU with it (`all` claims every GPU of the node, so an exclusive seat
always evicts it, even a CPU seat). Before anything is stopped the prior state of each is recorded
on the node, with the seats that hold them stopped; teardown, and any failure of bring-up, restarts
exactly those that were running once the last of those seats is gone.
A co-tenant the router sends traffic to names its seat there (`router_seat`, the name in the
router's listing); the same record keeps the router's state and the targets taken out of it, so
the restore puts them back exactly (router/lifecycle.py decides).
"""

import math
import re

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError
from ansible_collections.seatwright.fleet.plugins.module_utils.node.contract import memory_bytes
from ansible_collections.seatwright.fleet.plugins.module_utils.router import lifecycle

RECORD_FORMAT = "seatwright-cotenants/1"
KINDS = ("container", "systemd")
FIELDS = ("name", "kind", "gpus", "memory", "memory_source", "router_seat")
# Docker container names and systemd unit names; no shell metacharacters reach a command line.
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@:-]{0,254}$")


def _is_index(value):
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def check_cotenants(host, declared):
    """The host's declared co-tenants, normalised; a SeatError naming the entry and field otherwise."""
    where = "host %s: seatwright_node_cotenants" % host
    if declared is None:
        return []
    if not isinstance(declared, list):
        raise SeatError(
            "%s is %s; expected a list of {name, kind: container|systemd, gpus: [indices] | all}; "
            "fix it in the inventory (host_vars/%s.yml)" % (where, type(declared).__name__, host)
        )
    problems, entries, seen = [], [], set()
    for position, item in enumerate(declared):
        at = "%s[%d]" % (where, position)
        if not isinstance(item, dict):
            problems.append("%s is %r; expected a mapping with name, kind and gpus" % (at, item))
            continue
        unknown = sorted(set(item) - set(FIELDS))
        if unknown:
            problems.append(
                "%s: unknown field%s %s; allowed: %s"
                % (at, "" if len(unknown) == 1 else "s", ", ".join(unknown), ", ".join(FIELDS))
            )
        name, kind, gpus = item.get("name"), item.get("kind"), item.get("gpus")
        if not isinstance(name, str) or not _NAME.match(name):
            problems.append(
                "%s.name is %r; expected a container or unit name (letters, digits, _ . @ : -)" % (at, name)
            )
        elif name in seen:
            problems.append("%s.name %s is declared twice; keep one entry" % (at, name))
        seen.add(name)
        if kind not in KINDS:
            problems.append("%s.kind is %r; expected container or systemd" % (at, kind))
        if gpus != "all" and not (isinstance(gpus, list) and gpus and all(_is_index(g) for g in gpus)):
            problems.append("%s.gpus is %r; expected all, or a non-empty list of GPU indices like [0, 1]" % (at, gpus))
        memory = item.get("memory")
        if memory is not None and memory_bytes(memory) is None:
            problems.append(
                "%s.memory is %r; expected its GPU memory on each GPU it uses, e.g. '21.6 GiB'" % (at, memory)
            )
        router_seat = item.get("router_seat")
        if router_seat is not None and (not isinstance(router_seat, str) or not _NAME.match(router_seat)):
            problems.append(
                "%s.router_seat is %r; expected the seat's name in the router's listing (a key of the "
                "alias's targets, e.g. lab-side), or leave it out if the router does not send it traffic"
                % (at, router_seat)
            )
        if kind == "systemd" and isinstance(name, str) and "." not in name:
            name = name + ".service"
        entries.append(
            {
                "name": name,
                "kind": kind,
                "gpus": gpus if gpus == "all" else sorted(set(gpus or [])),
                "memory_bytes": memory_bytes(memory) if memory is not None else None,
                "memory_source": item.get("memory_source")
                or ("declared in the inventory" if memory is not None else None),
                "router_seat": router_seat,
            }
        )
    if problems:
        raise SeatError("\n".join(problems) + "\nfix them in the inventory (host_vars/%s.yml)" % host)
    return entries


def eviction_plan(host, declared, seat_gpus, exclusive):
    """{'stop': [co-tenant], 'keep': [co-tenant + reason]} for one host of the seat.

    `seat_gpus` are the GPU indices the seat uses on this host (empty for a CPU seat).
    """
    cotenants = check_cotenants(host, declared)
    stop, keep = [], []
    for item in cotenants:
        shared = sorted(set(seat_gpus)) if item["gpus"] == "all" else sorted(set(item["gpus"]) & set(seat_gpus))
        if not exclusive:
            keep.append(
                dict(
                    item,
                    reason="the seat is not exclusive (topology.exclusive: false); it stays "
                    "resident and the seat leaves it GPU memory",
                )
            )
        elif item["gpus"] == "all" or shared:
            stop.append(
                dict(
                    item,
                    reason="claims %s, which the exclusive seat needs"
                    % ("every GPU of the node" if item["gpus"] == "all" else "GPU %s" % ",".join(map(str, shared))),
                )
            )
        else:
            keep.append(
                dict(item, reason="uses GPU %s only, which the seat does not use" % ",".join(map(str, item["gpus"])))
            )
    return {"host": host, "stop": stop, "keep": keep}


def resident_footprint(host, declared, gpu_index, exclusive):
    """{'bytes', 'sources', 'unknown'} of the co-tenant memory that stays on one GPU of a seat.

    Under an exclusive seat nothing sharing its GPUs stays. `unknown` names the resident co-tenants
    that declare no memory, so their footprint cannot be counted.
    """
    decided = eviction_plan(host, declared, [gpu_index], exclusive)
    total, sources, unknown, entries = 0, [], [], []
    for position, item in enumerate(check_cotenants(host, declared)):
        if item["name"] not in {kept["name"] for kept in decided["keep"]}:
            continue
        if item["gpus"] != "all" and gpu_index not in item["gpus"]:
            continue
        if item["memory_bytes"] is None:
            unknown.append(item["name"])
            continue
        total += item["memory_bytes"]
        entries.append({"name": item["name"], "position": position, "bytes": item["memory_bytes"]})
        sources.append("%s %.2f GiB (%s)" % (item["name"], item["memory_bytes"] / 2.0**30, item["memory_source"]))
    return {"bytes": total, "sources": sources, "unknown": unknown, "entries": entries}


def _gib(count):
    return "%.2f GiB" % (count / 2.0**30)


def engine_share(gpus, recorded=None):
    """{'value', 'how', 'refusal'}: the largest share of each GPU a resident seat's engine may take.

    `gpus` are the seat's GPUs, each with its host, memory_total_mib, and what plan.py's
    _with_residents found: resident_bytes, resident_entries, resident_unknown (co-tenants that
    declare no memory) and cotenants_declared (False where the host sets no seatwright_node_cotenants:
    nothing says what runs there; [] says nothing does). `recorded` is the recipe's
    topology.resident_fraction with its source, or None.

    Each GPU allows 1 - its co-tenants' memory / its size, rounded down to the hundredth; a GPU whose
    co-tenants' memory is undeclared allows the recorded fraction. The seat takes the least of them.
    value is 'none' when nothing stays resident (no cap), None with a refusal {'detail', 'remedy'}
    when a GPU's co-tenants are larger than it or undeclared with no recorded fraction.
    """
    where = "seatwright_node_cotenants"
    over = []
    for gpu in gpus:
        total = gpu["memory_total_mib"] * 2**20
        if gpu.get("resident_bytes") and math.floor(100.0 * (total - gpu["resident_bytes"]) / total) <= 0:
            over.append(
                "host %s gpu %s: %s %s %s, and the card has %s"
                % (
                    gpu.get("host"),
                    gpu["index"],
                    " + ".join(
                        "%s[%d] (%s) %s" % (where, item["position"], item["name"], _gib(item["bytes"]))
                        for item in gpu.get("resident_entries") or ()
                    ),
                    "declares" if len(gpu.get("resident_entries") or ()) == 1 else "declare",
                    "its whole memory or more" if gpu["resident_bytes"] >= total else "all but a sliver of it",
                    _gib(total),
                )
            )
    if over:
        return {
            "value": None,
            "how": "co-tenant memory larger than the card",
            "refusal": {
                "detail": "resident co-tenants leave the engine nothing: " + "; ".join(sorted(set(over))),
                "remedy": "correct the memory of those entries in %s (host_vars/<host>.yml): it is what the service "
                "holds on each GPU it uses, e.g. '21.6 GiB'; or make the seat exclusive (topology.exclusive: true) "
                "so it evicts them" % where,
            },
        }
    undeclared = sorted(
        {"host %s sets no %s" % (gpu.get("host"), where) for gpu in gpus if gpu.get("cotenants_declared") is False}
        | {
            "%s on %s declares no memory" % (name, gpu.get("host"))
            for gpu in gpus
            for name in gpu.get("resident_unknown") or ()
        }
    )
    caps = []
    for gpu in gpus:
        total = gpu["memory_total_mib"] * 2**20
        if gpu.get("cotenants_declared") is False or gpu.get("resident_unknown"):
            if recorded is not None:
                caps.append(
                    (
                        recorded["value"],
                        "host %s gpu %s: co-tenant memory undeclared, so the recipe's "
                        "topology.resident_fraction %.2f (%s)"
                        % (gpu.get("host"), gpu["index"], recorded["value"], recorded["source"]),
                    )
                )
        resident = gpu.get("resident_bytes") or 0
        if resident:
            cap = math.floor(100.0 * (total - resident) / total) / 100.0
            caps.append(
                (
                    cap,
                    "host %s gpu %s: %s of co-tenants (%s) resident on %s leave %.2f of it"
                    % (
                        gpu.get("host"),
                        gpu["index"],
                        _gib(resident),
                        "; ".join(gpu.get("resident_sources") or ()),
                        _gib(total),
                        cap,
                    ),
                )
            )
    if undeclared and recorded is None:
        return {
            "value": None,
            "how": "co-tenant memory undeclared",
            "refusal": {
                "detail": "the seat is resident (topology.exclusive: false), but the memory its co-tenants hold is "
                "not declared: %s" % "; ".join(undeclared),
                "remedy": "declare each co-tenant that stays on the seat's GPUs with its memory in %s "
                "(host_vars/<host>.yml: name, kind, gpus, memory such as '21.6 GiB', memory_source), or set it to [] "
                "on a host where none runs; or record the share the field ran at beside them in "
                "topology.resident_fraction with its source" % where,
            },
        }
    if not caps:
        return {"value": "none", "how": "no co-tenant stays on the seat's GPUs", "refusal": None}
    cap, how = min(caps, key=lambda item: item[0])
    return {"value": cap, "how": how, "refusal": None}


def router_section(host, view, observed):
    """The record's `router` part: the router's state at eviction and the targets to take out.

    `view` is {state, aliases: {alias: {seat: {api_base, weight}}}} as observed on the router's
    node (None: no router in front of this node's co-tenants); `observed` the co-tenants to stop,
    each with running. Only running ones are taken out: a stopped one gets nothing back later.
    """
    if view is None:
        return None
    if not isinstance(view, dict) or view.get("state") not in lifecycle.STATES:
        raise SeatError(
            "host %s: the router's view %r has no state among %s; pass what roles/router "
            "tasks_from=cotenants observed" % (host, view, ", ".join(lifecycle.STATES))
        )
    taken = lifecycle.removals([item for item in observed if item["running"]], view.get("aliases"))
    decided = lifecycle.eviction_action(view["state"], taken)
    return {
        "state": view["state"],
        "removed": taken if decided["action"] == "remove" else {},
        "note": decided["note"],
    }


def merge_record(host, seat, existing, observed, router=None):
    """The prior-state record to write before stopping anything.

    `observed` is [{name, kind, running}] as found now. An existing record (a seat already up, or a
    bring-up that failed before it could restore) keeps the state it saw first: a co-tenant we
    stopped ourselves must not be recorded as "was stopped" by the next run, nor a target we took
    out of the router as never there. `router` is router_section's answer for this run.
    """
    entries = {}
    if existing:
        check_record(host, existing)
        for entry in existing["entries"]:
            entries[entry["name"]] = dict(entry)
    for item in observed:
        if item["name"] not in entries:
            entries[item["name"]] = {"name": item["name"], "kind": item["kind"], "was_running": bool(item["running"])}
        elif item["running"]:
            # Started since the record was written (by hand, or a restore by another seat): this run
            # stops it, so it must come back.
            entries[item["name"]]["was_running"] = True
    record = {
        "format": RECORD_FORMAT,
        "host": host,
        "seat": (existing or {}).get("seat") or seat,
        # A seat that stops none of them (not exclusive, or sharing no GPU) holds nothing.
        "holders": sorted(set(record_holders(existing or {})) | ({seat} if observed else set())),
        "entries": [entries[name] for name in sorted(entries)],
    }
    kept = (existing or {}).get("router") or router
    if kept is not None:
        record["router"] = kept
    return record


def record_holders(record):
    """The seats holding a record's co-tenants stopped. A record written before several seats could
    hold one names a single seat, its `seat`."""
    holders = record.get("holders")
    if holders is None:
        return [record["seat"]] if record.get("seat") else []
    return list(holders)


def release(record, seat, running_seats=None):
    """{holders, restore, reason} when `seat` goes down on the record's node.

    Several exclusive seats on one node (on different GPUs, or CPU seats beside a co-tenant that
    claims `all`) share the node's record; the co-tenants come back only once none of them runs, or
    a restore would start a service on GPUs a running seat still uses. `running_seats` are the seats
    with a running container on the node now (None when that could not be read: the record's
    holders are trusted); a holder no longer running there (crashed, removed by hand) holds nothing.
    """
    others = [name for name in record_holders(record) if name != seat]
    if running_seats is not None:
        others = [name for name in others if name in running_seats]
    if others:
        return {
            "holders": others,
            "restore": False,
            "reason": "kept stopped: seat%s %s still run%s on this node"
            % ("" if len(others) == 1 else "s", ", ".join(others), "s" if len(others) == 1 else ""),
        }
    return {"holders": [], "restore": True, "reason": "no other seat on this node holds them stopped"}


def check_record(host, record):
    """A SeatError unless `record` is a co-tenant record this code wrote."""
    if (
        not isinstance(record, dict)
        or record.get("format") != RECORD_FORMAT
        or not isinstance(record.get("entries"), list)
    ):
        raise SeatError(
            "host %s: the co-tenant record is not a %s record; restore the services by hand, "
            "then delete the record" % (host, RECORD_FORMAT)
        )
    for entry in record["entries"]:
        if (
            not isinstance(entry, dict)
            or entry.get("kind") not in KINDS
            or not isinstance(entry.get("name"), str)
            or not _NAME.match(entry["name"])
            or not isinstance(entry.get("was_running"), bool)
        ):
            raise SeatError(
                "host %s: co-tenant record entry %r is malformed; restore the services by hand, "
                "then delete the record" % (host, entry)
            )
    holders = record.get("holders")
    if holders is not None and not (
        isinstance(holders, list) and all(isinstance(name, str) and _NAME.match(name) for name in holders)
    ):
        raise SeatError(
            "host %s: the co-tenant record's holders %r are not a list of seat names; restore the services "
            "by hand once no seat runs on the node, then delete the record" % (host, holders)
        )
    router = record.get("router")
    if router is not None and not _router_ok(router):
        raise SeatError(
            "host %s: the co-tenant record's router part %r is malformed; put the router's targets "
            "back by hand (roles/router tasks_from=apply_targets), then delete the record" % (host, router)
        )


def _router_ok(router):
    if not isinstance(router, dict) or router.get("state") not in lifecycle.STATES:
        return False
    removed = router.get("removed")
    if not isinstance(removed, dict):
        return False
    for targets in removed.values():
        if not isinstance(targets, dict):
            return False
        for target in targets.values():
            if not isinstance(target, dict) or not isinstance(target.get("api_base"), str):
                return False
    return True


def restore_actions(host, record, observed):
    """[{name, kind, action: start|none, reason}] that puts every recorded co-tenant back.

    `observed` maps name -> running (bool) now. Only those that were running are started; one that
    was stopped before the seat stays stopped.
    """
    if not record:
        return []
    check_record(host, record)
    actions = []
    for entry in record["entries"]:
        running = observed.get(entry["name"])
        if entry["was_running"] and not running:
            actions.append(dict(entry, action="start", reason="was running before the seat evicted it"))
        elif entry["was_running"]:
            actions.append(dict(entry, action="none", reason="running again already"))
        else:
            actions.append(dict(entry, action="none", reason="was not running before the seat; left stopped"))
    return actions
