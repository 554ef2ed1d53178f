"""What node/drain.py needs: from one node, the seat containers running, the co-tenant record and the lab
test changes already made (the node_drain_facts module); on the controller, the live seats' plans
(the drain_plan filter). Read-only."""

import json
import os

from ansible_collections.seatwright.fleet.plugins.module_utils.defaults import plan_file
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import DrainError, ServiceError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.seat.cotenants import read_record
from ansible_collections.seatwright.fleet.plugins.module_utils.io.seat.engine import seat_containers

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
        rc, containers, err = seat_containers()
    except ServiceError:
        return {"docker": False, "containers": [], "cotenants": None, "done": done_changes(params["drain_dir"])}
    if rc != 0:
        raise DrainError(
            "docker ps on this node %s: %s; start Docker, or converge with the seats left as they are"
            % ("overran" if rc is None else "failed", (err or "").strip()[-400:])
        )
    return {
        "docker": True,
        "containers": containers,
        "cotenants": read_record(params["cotenants_record"]),
        "done": done_changes(params["drain_dir"]),
    }


def read_plans(plan_dir, seats):
    """{seat: plan or None} from the controller's plan folder (module_utils/defaults.py plan_file)."""
    found = {}
    for seat in seats:
        path = plan_file(plan_dir, seat)
        if not os.path.exists(path):
            found[seat] = None
            continue
        try:
            with open(path, encoding="utf-8") as handle:
                found[seat] = json.load(handle)
        except (OSError, ValueError) as exc:
            raise DrainError(
                "the plan of live seat %s (%s) cannot be read: %s; plan it again (playbooks/plan.yml -e seat=%s)"
                % (seat, path, exc, seat)
            )
    return found
