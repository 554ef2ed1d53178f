"""What Prometheus scrapes: the seats' file_sd entries, the scrape configuration, the co-tenant textfile.

A seat's serving rank (node rank 0: the only one with an HTTP server) is one file_sd entry in a
file of its own, `seat-<seat>.json`, labelled seat, node, rank, engine and alias. Bring-up writes
it, teardown removes it, a promotion's alias move relabels the seats (monitoring_targets module).
The seats' API key never appears here: the seats' scrape job reads it from a 0600 credentials file.
"""

import re

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import MonitoringError
from ansible_collections.seatwright.fleet.plugins.module_utils.monitoring import metrics, rules
from ansible_collections.seatwright.fleet.plugins.module_utils.router import kinds
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.cotenants import record_holders, restore_actions

_SEAT = re.compile(r"^[a-z0-9][a-z0-9._-]{0,62}$")
_ADDRESS = re.compile(r"^[A-Za-z0-9.:\[\]_-]+:[0-9]{1,5}$")
FILE_PREFIX = "seat-"


def seat_file_name(seat):
    if not isinstance(seat, str) or not _SEAT.match(seat):
        raise MonitoringError(
            "seat name %r cannot name a target file; expected the recipe's name (seats/<name>.yml)" % (seat,)
        )
    return "%s%s.json" % (FILE_PREFIX, seat)


def seat_of_file(name):
    """The seat a target file is for, or None for a file that is not one."""
    if name.startswith(FILE_PREFIX) and name.endswith(".json"):
        return name[len(FILE_PREFIX) : -len(".json")]
    return None


def seat_groups(seat, plan, alias=""):
    """The file_sd groups for `seat` from its plan ({engine: {name}, ranks: [{host, rank, serve}]})."""
    seat_file_name(seat)
    engine = ((plan or {}).get("engine") or {}).get("name")
    if engine not in metrics.ENGINE_METRICS:
        raise MonitoringError(
            "seat %s: the plan's engine is %r; seatwright watches %s"
            % (seat, engine, " and ".join(sorted(metrics.ENGINE_METRICS)))
        )
    groups = []
    for rank in (plan or {}).get("ranks") or []:
        if not rank.get("serve"):
            continue
        if not _ADDRESS.match(str(rank["serve"])):
            raise MonitoringError(
                "seat %s: rank %s serves at %r, not host:port" % (seat, rank.get("rank"), rank["serve"])
            )
        labels = {"seat": seat, "node": str(rank["host"]), "rank": str(rank["rank"]), "engine": engine}
        groups.append({"targets": [str(rank["serve"])], "labels": _with_alias(labels, alias)})
    if not groups:
        raise MonitoringError("seat %s: its plan names no serving rank (ranks[].serve); plan it again" % seat)
    return groups


def _with_alias(labels, alias):
    labels = {key: value for key, value in labels.items() if key != "alias"}
    if alias:
        labels["alias"] = alias
    return labels


def move_alias(files, alias, holders):
    """{seat: groups} with `alias` on the `holders`' targets only: the seats the router sends it to now
    (a promotion moved it or rolled it back; a drain moved it onto the seats that stay, or put it back)."""
    if not alias:
        raise MonitoringError("name the alias that moved")
    holders = set(holders) - {""}
    moved = {}
    for seat, groups in sorted(files.items()):
        new = []
        for group in groups:
            labels = dict(group.get("labels") or {})
            if seat in holders:
                labels = _with_alias(labels, alias)
            elif labels.get("alias") == alias:
                labels = _with_alias(labels, "")
            new.append({"targets": list(group["targets"]), "labels": labels})
        moved[seat] = new
    return moved


def cotenant_textfile(record):
    """The node exporter textfile for a node's co-tenant record (seat/cotenants.py), or none: one
    sample per co-tenant the seat stopped (was running) and that has not been restored yet."""
    lines = [
        "# HELP %s A co-tenant an exclusive seat stopped and seatwright has not restored yet."
        % metrics.COTENANT_EVICTED,
        "# TYPE %s gauge" % metrics.COTENANT_EVICTED,
    ]
    if record:
        # What a restore would start, as seat/cotenants.py decides it (nothing counted as running now),
        # once for each seat that holds it stopped.
        for action in restore_actions(record.get("host") or "", record, {}):
            if action["action"] != "start":
                continue
            for seat in record_holders(record) or [""]:
                lines.append(
                    '%s{seat="%s",cotenant="%s"} 1' % (metrics.COTENANT_EVICTED, _escape(seat), _escape(action["name"]))
                )
    return "\n".join(lines) + "\n"


def _escape(value):
    return str(value).replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def router_target(router, clients_keyed):
    """(target, note) of a router for the routers' job: `router` {node, kind, ip, port} as the inventory
    declares it (`ip` the router node's fabric address), or {node, kind, address[, path]} given outright.
    Where and how a kind serves its metrics is its description's (router/kinds, `metrics`). A kind whose
    metrics want the clients' key gets no target without one (router_api_key), and the note says so:
    Prometheus never holds a router's admin key."""
    if router.get("address"):
        return {"node": router["node"], "kind": router["kind"], "address": router["address"],
                "path": router.get("path") or "/metrics", "keyed": bool(router.get("keyed"))}, None  # fmt: skip
    metrics = kinds.get(router["kind"]).get("metrics")
    if not metrics:
        return None, "router %s on %s serves no metrics seatwright knows of" % (router["kind"], router["node"])
    keyed = metrics.get("key") == "clients"
    if keyed and not clients_keyed:
        return None, (
            "router %s on %s is not scraped: its metrics ask for a key, and without router_api_key the only "
            "one is its admin key, which Prometheus is not given; set router_api_key" % (router["kind"], router["node"])
        )
    port = metrics.get("port") or router["port"]
    target = {"node": router["node"], "kind": router["kind"], "address": "%s:%d" % (router["ip"], int(port))}
    return dict(target, path=metrics["path"], keyed=keyed), None


def scrape_config(
    *,
    nodes,
    gpu_nodes,
    routers,
    file_sd_dir,
    credentials_file,
    rules_file,
    scrape_interval_s=15,
    node_exporter_port=9100,
    dcgm_port=9400,
    router_credentials_file="",
):
    """prometheus.yml as a dict. `nodes`: {name: address} of every node (node exporter); `gpu_nodes`:
    those running the DCGM exporter; `routers`: the routers (router_target's input); with
    `router_credentials_file` (the clients' router key, 0600) a router whose metrics want the key gets it."""
    interval = "%ds" % scrape_interval_s

    def static(addresses, port):
        return [
            {"targets": ["%s:%d" % (address, port)], "labels": {"node": name}}
            for name, address in sorted(addresses.items())
        ]

    seats = {
        "job_name": rules.SEAT_JOB,
        "file_sd_configs": [{"files": ["%s/%s*.json" % (file_sd_dir.rstrip("/"), FILE_PREFIX)]}],
    }
    if credentials_file:
        seats["authorization"] = {"type": "Bearer", "credentials_file": credentials_file}
    jobs = [
        seats,
        {"job_name": "seatwright_nodes", "static_configs": static(nodes, node_exporter_port)},
    ]
    if gpu_nodes:
        jobs.append({"job_name": "seatwright_gpus", "static_configs": static(gpu_nodes, dcgm_port)})
    found = [router_target(router, bool(router_credentials_file))[0] for router in routers or []]
    # One job per way of scraping (path, key): the first is seatwright_routers, as the rules read it.
    by_way = {}
    for target in (t for t in found if t):
        by_way.setdefault((target["path"], target["keyed"]), []).append(target)
    for index, ((path, keyed), group) in enumerate(sorted(by_way.items())):
        job = {
            "job_name": "seatwright_routers" + ("" if index == 0 else "_%d" % index),
            "metrics_path": path,
            "static_configs": [
                {"targets": [target["address"]], "labels": {"node": target["node"], "router": target["kind"]}}
                for target in group
            ],
        }
        if keyed:
            job["authorization"] = {"type": "Bearer", "credentials_file": router_credentials_file}
        jobs.append(job)
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": [rules_file],
        "scrape_configs": jobs,
    }
