"""What node/drain.py needs from one node: the seat containers running, the co-tenant record, the lab
test changes already made. Read-only; for the node_drain_facts module."""

import os

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import DrainError, ServiceError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.services import docker
from ansible_collections.seatwright.fleet.plugins.module_utils.io.seat.cotenants import read_record
from ansible_collections.seatwright.fleet.plugins.module_utils.node.drain import (
    PS_FORMAT,
    SEAT_LABEL,
    parse_seat_containers,
)

# A made test change is an empty file of this name in the drain folder.
DONE_SUFFIX = ".done"


def done_changes(drain_dir):
    """Ids of the lab test changes this node records as made."""
    if not os.path.isdir(drain_dir):
        return []
    return sorted(name[: -len(DONE_SUFFIX)] for name in os.listdir(drain_dir) if name.endswith(DONE_SUFFIX))


def drain_facts(params):
    """{docker, containers, cotenants, done}: a node without Docker runs no seat (docker false)."""
    try:
        rc, out, err = docker("ps", "--all", "--filter", "label=" + SEAT_LABEL, "--format", PS_FORMAT)
    except ServiceError:
        return {"docker": False, "containers": [], "cotenants": None, "done": done_changes(params["drain_dir"])}
    if rc != 0:
        raise DrainError(
            "docker ps on this node %s: %s; start Docker, or converge with the seats left as they are"
            % ("overran" if rc is None else "failed", (err or out).strip()[-400:])
        )
    return {
        "docker": True,
        "containers": parse_seat_containers(out),
        "cotenants": read_record(params["cotenants_record"]),
        "done": done_changes(params["drain_dir"]),
    }
