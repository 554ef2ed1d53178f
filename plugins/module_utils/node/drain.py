"""What a converge does with the seats on the nodes it is about to disrupt (issue 52).

A change that restarts a node's driver, kernel modules, Docker or a seat's engine image stops the
seats on that node. Before any such change the converge decides, node by node:
- move each router alias a seat serves onto another running seat that serves the same alias;
- tear the seat down with its co-tenants restored, where the operator asked for it
  (`seatwright_drain=true`) or where every alias it serves moved;
- refuse, naming the seat and the alias, otherwise.
After the change the node is checked, the seats come back from their plans and the aliases go back.
A seat that spans nodes is drained whole: every node it runs on joins the same batch, so the seat
is torn down and brought back together. Batches run one after another (the play's `serial`).

Pure: inputs are what the roles observed (node/drain facts, the router's listing, the plan files).
"""

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import DrainError
from ansible_collections.seatwright.fleet.plugins.module_utils.node.driver import driver_action
from ansible_collections.seatwright.fleet.plugins.module_utils.node.kind import kind_of
from ansible_collections.seatwright.fleet.plugins.module_utils.router.deploy import MAX_WEIGHT, metrics_url
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.container import LABEL_PREFIX
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.cotenants import record_holders

# What each pending change reaches on its node: every seat there, the seats running one engine
# image, or the seats holding GPUs (a power cap changes their clocks, not a CPU seat's).
CHANGE_SCOPE = {
    "driver": "node",
    "kernel_modules": "node",
    "docker": "node",
    "mtu": "node",
    "engine_image": "image",
    "power_cap": "gpus",
}
# Changes that may reboot the node (nvidia_driver_reboot_allowed): the router's process goes too.
NODE_DOWN = ("driver",)


def _check_change(host, change):
    if not isinstance(change, dict) or change.get("kind") not in CHANGE_SCOPE:
        raise DrainError(
            "node %s: pending change %r is not one of %s; pass {kind, detail}"
            % (host, change, ", ".join(sorted(CHANGE_SCOPE)))
        )
    if change["kind"] == "engine_image" and not isinstance(change.get("image"), str):
        raise DrainError("node %s: an engine_image change needs the image repository it replaces (image:)" % host)


def _check_seat(seat, entry):
    if not isinstance(entry, dict) or not isinstance(entry.get("hosts"), list) or not entry["hosts"]:
        raise DrainError("live seat %s: needs the hosts it runs on (hosts: [...]); got %r" % (seat, entry))


def _repository(reference):
    """`seatwright/vllm-cpu` of `seatwright/vllm-cpu:c3df` (a registry port's colon is kept)."""
    name = (reference or "").split("@", 1)[0]
    head, _sep, tail = name.rpartition(":")
    return head if head and "/" not in tail else name


def affected(host, changes, live):
    """Sorted names of the live seats on `host` that `changes` stop."""
    found = set()
    for change in changes:
        _check_change(host, change)
        scope = CHANGE_SCOPE[change["kind"]]
        for seat, entry in live.items():
            if host not in entry["hosts"]:
                continue
            if scope == "image":
                image = entry.get("image")
                if image and _repository(image) != _repository(change["image"]):
                    continue
            if scope == "gpus":
                held = set((entry.get("gpus") or {}).get(host) or [])
                asked = change.get("gpus")
                if not held or (asked is not None and not held.intersection(asked)):
                    continue
            found.add(seat)
    return sorted(found)


def batches(order, touched, live, batch_size=1):
    """Lists of hosts, in `order`, drained together: a seat's hosts are never split across batches.

    `touched` maps host -> affected seats. Hosts linked by a seat form one group; groups are packed
    into batches of at most `batch_size` hosts (a group larger than that is a batch of its own).
    """
    if not isinstance(batch_size, int) or batch_size < 1:
        raise DrainError("seatwright_serial %r: the batch size must be a whole number of nodes, 1 or more" % batch_size)
    rank = {host: index for index, host in enumerate(order)}
    parent = {host: host for host in order}

    def root(host):
        while parent[host] != host:
            host = parent[host]
        return host

    for host in order:
        for seat in touched.get(host, []):
            for other in live[seat]["hosts"]:
                if other in parent:
                    a, b = sorted((root(host), root(other)), key=rank.get)
                    parent[b] = a
    groups = {}
    for host in order:
        groups.setdefault(root(host), []).append(host)
    packed, current = [], []
    for first in sorted(groups, key=rank.get):
        group = groups[first]
        if current and len(current) + len(group) > batch_size:
            packed.append(current)
            current = []
        current = current + group
        if len(current) >= batch_size:
            packed.append(current)
            current = []
    if current:
        packed.append(current)
    return packed


def _served(seat, aliases):
    return sorted(alias for alias, targets in aliases.items() if (targets.get(seat) or 0) > 0)


def _weighted(targets):
    """The seats of {seat: weight} the router sends traffic to: the ones a step's alias label goes on."""
    return sorted(seat for seat, weight in targets.items() if (weight or 0) > 0)


def _moved_targets(targets, leaving, live):
    """The alias's weights with every `leaving` seat at 0, or None where no other live seat is listed."""
    staying = [seat for seat in sorted(targets) if seat not in leaving and seat in live]
    if not staying:
        return None
    after = {seat: (0 if seat in leaving else targets[seat]) for seat in targets}
    if sum(after[seat] for seat in staying) <= 0:
        # Listed but standing by (weight 0): they take the leaving seats' share between them.
        share = sum(targets[seat] for seat in leaving if seat in targets) // len(staying)
        share = min(MAX_WEIGHT, max(1, share))
        for seat in staying:
            after[seat] = share
    return after


def drain_plan(order, pending, live, aliases, drain=False, router_node=None, batch_size=1):
    """The ordered drain of a converge: one entry per batch of nodes, each with its steps.

    order: the play's hosts in order. pending: {host: [{kind, detail, image?, gpus?}]}, the
    disruptive changes the roles would make. live: {seat: {hosts, gpus: {host: [index]}, image,
    cotenants: {host: [name]}, planned}}, the seats running now. aliases: {alias: {seat: weight}},
    the router's listing. drain: the operator's seatwright_drain. router_node: the router's host.

    Returns {batches: [{hosts, changes, seats, steps, refusals}], refusals, drain_hosts, batch_sizes}.
    A batch with no seat and no router to drain has no steps: its nodes converge as usual.
    """
    for seat, entry in live.items():
        _check_seat(seat, entry)
    for alias, targets in aliases.items():
        if not isinstance(targets, dict):
            raise DrainError("router alias %s: expected {seat: weight}, got %r" % (alias, targets))
    touched = {host: affected(host, pending.get(host) or [], live) for host in order}
    result = {"batches": [], "refusals": [], "drain_hosts": [], "batch_sizes": []}
    for hosts in batches(order, touched, live, batch_size):
        entry = _batch(hosts, pending, touched, live, aliases, drain, router_node, order)
        result["batches"].append(entry)
        result["refusals"] += entry["refusals"]
        if entry["steps"]:
            result["drain_hosts"] += hosts
            result["batch_sizes"].append(len(hosts))
    return result


def _batch(hosts, pending, touched, live, aliases, drain, router_node, order):
    seats = sorted({seat for host in hosts for seat in touched[host]})
    changes = {host: list(pending.get(host) or []) for host in hosts}
    refusals = []
    router_down = router_node in hosts and any(c["kind"] in NODE_DOWN for c in changes.get(router_node, []))
    if router_down and not drain:
        refusals.append(
            "node %s: the router runs here and goes down with the %s change, so every alias fails until it is "
            "back; set -e seatwright_drain=true to accept that, or move the router (router.node) first"
            % (router_node, ", ".join(c["kind"] for c in changes[router_node] if c["kind"] in NODE_DOWN))
        )
    moves, stranded = {}, {}
    for alias in sorted(aliases):
        leaving = [seat for seat in seats if (aliases[alias].get(seat) or 0) > 0]
        if not leaving:
            continue
        after = _moved_targets(aliases[alias], set(seats), live)
        if after is None:
            stranded[alias] = leaving
        else:
            moves[alias] = {"from": leaving, "targets": after, "restore": dict(aliases[alias])}
    for seat in seats:
        where = ", ".join(live[seat]["hosts"])
        if not live[seat].get("planned", True):
            refusals.append(
                "seat %s (on %s): no plan of it is recorded, so it could not be brought back after the change; "
                "plan it (playbooks/plan.yml -e seat=%s) or take it down yourself (playbooks/teardown.yml)"
                % (seat, where, seat)
            )
        outside = [host for host in live[seat]["hosts"] if host not in order]
        if outside:
            refusals.append(
                "seat %s spans %s, which this run does not reach: a seat is drained whole, so include every "
                "node it runs on (-l)" % (seat, ", ".join(outside))
            )
        if drain:
            continue
        served = _served(seat, aliases)
        lost = [alias for alias in served if alias in stranded]
        if not served:
            refusals.append(
                "seat %s (on %s) serves no router alias, so its clients would lose it during the change; "
                "set -e seatwright_drain=true to tear it down (co-tenants restored) and bring it back after"
                % (seat, where)
            )
        elif lost:
            refusals.append(
                "seat %s (on %s) serves alias %s, which no other running seat serves; set -e seatwright_drain=true "
                "to tear it down (co-tenants restored) and bring it back after, "
                "or bring a second seat up behind %s first" % (seat, where, ", ".join(lost), ", ".join(lost))
            )
    steps = []
    if seats or router_down:
        for alias, move in sorted(moves.items()):
            staying = _weighted(move["targets"])
            steps.append(
                {"step": "move", "alias": alias, "from": move["from"], "to": staying, "targets": move["targets"]}
            )
        for seat in seats:
            steps.append(
                {
                    "step": "teardown",
                    "seat": seat,
                    "hosts": list(live[seat]["hosts"]),
                    "cotenants": {h: list(c) for h, c in sorted((live[seat].get("cotenants") or {}).items()) if c},
                    "stranded": sorted(alias for alias, left in stranded.items() if seat in left),
                }
            )
        steps.append({"step": "change", "hosts": list(hosts), "changes": changes})
        steps.append({"step": "check", "hosts": list(hosts)})
        for seat in seats:
            steps.append({"step": "bringup", "seat": seat, "hosts": list(live[seat]["hosts"])})
        for alias, move in sorted(moves.items()):
            steps.append(
                {"step": "restore-alias", "alias": alias, "to": _weighted(move["restore"]), "targets": move["restore"]}
            )
    return {"hosts": list(hosts), "changes": changes, "seats": seats, "steps": steps, "refusals": refusals}


def _weights(targets):
    return ", ".join("%s %s" % (seat, weight) for seat, weight in sorted(targets.items()))


def _step_line(step):
    kind = step["step"]
    if kind == "move":
        return "move alias %s from %s to %s (%s)" % (
            step["alias"],
            ", ".join(step["from"]),
            ", ".join(step["to"]),
            _weights(step["targets"]),
        )
    if kind == "teardown":
        restored = "; ".join("%s on %s" % (", ".join(names), host) for host, names in step["cotenants"].items())
        line = "tear seat %s down on %s, restoring %s" % (
            step["seat"],
            ", ".join(step["hosts"]),
            ("co-tenants " + restored) if restored else "no co-tenant",
        )
        if step["stranded"]:
            line += " (alias %s unserved until it is back)" % ", ".join(step["stranded"])
        return line
    if kind == "change":
        return "make the changes: " + "; ".join(
            "%s: %s" % (host, ", ".join(_change_text(c) for c in changes) or "nothing (a seat drained whole runs here)")
            for host, changes in step["changes"].items()
        )
    if kind == "check":
        return "check %s" % ", ".join(step["hosts"])
    if kind == "bringup":
        return "bring seat %s back on %s from its plan" % (step["seat"], ", ".join(step["hosts"]))
    return "put alias %s back (%s)" % (step["alias"], _weights(step["targets"]))


def _change_text(change):
    return change["kind"] + (" (%s)" % change["detail"] if change.get("detail") else "")


def describe(plan):
    """Lines a person reads in --check: every batch in order, its nodes, changes and numbered steps."""
    lines = []
    for number, batch in enumerate(plan["batches"], 1):
        changed = [c for host in batch["hosts"] for c in batch["changes"][host]]
        head = "batch %d: %s" % (number, ", ".join(batch["hosts"]))
        if not batch["steps"]:
            lines.append(
                head
                + (": no serving seat is touched, converges as usual" if changed else ": no disruptive change pending")
            )
            continue
        lines.append(head + ": drain")
        lines += ["  %d. %s" % (index, _step_line(step)) for index, step in enumerate(batch["steps"], 1)]
    lines += ["refused: " + message for message in plan["refusals"]]
    return lines


def pending_changes(host, kind, driver_version, driver_branch, test_changes=(), done=()):
    """The disruptive changes the node roles would make on `host`, as far as they are known in advance.

    driver: the loaded driver (the cached GPU facts) against nvidia_driver_branch, decided by
    node/driver.py (a WSL 2 node's driver is the Windows host's: never changed here; no driver
    loaded yet is a first install, where no seat can be running). test_changes: labelled lab test
    input ({kind, id, detail}), pending until the node records its id as made (`done`).
    """
    found = []
    if kind != "wsl2" and driver_version:
        action, reason = driver_action(driver_version, driver_branch)
        if action == "change":
            found.append({"kind": "driver", "detail": reason})
    for change in test_changes or ():
        if not isinstance(change, dict) or not isinstance(change.get("id"), str) or not change["id"]:
            raise DrainError("node %s: lab test change %r needs an id (the node records it once made)" % (host, change))
        _check_change(host, change)
        if change["id"] not in (done or ()):
            found.append(dict(change, test_input=True))
    return found


# The columns io/node/drain_probe.py asks `docker ps` for, tab-separated, in this order.
SEAT_LABEL = LABEL_PREFIX + "seat"
PS_FORMAT = '{{.Names}}\t{{.Image}}\t{{.State}}\t{{.Label "%s"}}\t{{.Label "%srank"}}' % (SEAT_LABEL, LABEL_PREFIX)


def parse_seat_containers(text):
    """[{name, image, running, seat, rank}] of `docker ps --format PS_FORMAT` lines (seat containers only)."""
    found = []
    for number, line in enumerate((text or "").splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 5:
            raise DrainError(
                "docker ps line %d: %r has %d columns, expected 5 (%s)" % (number, line, len(fields), PS_FORMAT)
            )
        name, image, state, seat, rank = (field.strip() for field in fields)
        if not seat:
            continue
        found.append(
            {
                "name": name,
                "image": image,
                "running": state == "running",
                "seat": seat,
                "rank": int(rank) if rank.isdigit() else None,
            }
        )
    return found


def live_seats(nodes, plans):
    """{seat: {hosts, gpus, image, cotenants, planned}} of the seats running on the observed nodes.

    nodes: {host: node_drain_facts' answer ({containers, cotenants})}; plans: {seat: plan or None}
    (the controller's plan files). A seat's hosts are its plan's, else where its containers run; its
    co-tenants are those its record on each node says it stopped and will restore.
    """
    live = {}
    for host in sorted(nodes):
        facts = nodes[host] or {}
        for container in facts.get("containers") or []:
            if not container["running"]:
                continue
            entry = live.setdefault(container["seat"], {"hosts": [], "gpus": {}, "image": None, "cotenants": {}})
            if host not in entry["hosts"]:
                entry["hosts"].append(host)
            entry["image"] = entry["image"] or container["image"]
        record = facts.get("cotenants") or {}
        # The co-tenants come back with the last of their holders torn down, in the order a batch
        # tears seats down (sorted).
        holding = sorted(seat for seat in record_holders(record) if seat in live)
        if holding:
            names = [e["name"] for e in record.get("entries") or [] if e.get("was_running")]
            live[holding[-1]]["cotenants"][host] = names
    for seat, entry in live.items():
        plan = (plans or {}).get(seat)
        entry["planned"] = bool(plan)
        if plan:
            ranks = plan.get("ranks") or []
            entry["hosts"] = [r["host"] for r in ranks] + [
                h for h in entry["hosts"] if h not in [r["host"] for r in ranks]
            ]
            entry["gpus"] = {r["host"]: list(r.get("gpus") or []) for r in ranks}
    return live


def test_input_problem(host, test_changes, lab_marker, fleet_name):
    """None when lab test changes may stand in for a real one, else why not: honoured only on a lab
    node (seatwright_fleet_name lab, prepared by lab/prepare.yml), as node/kind.py's test input is."""
    if not test_changes:
        return None
    if fleet_name != "lab" or not lab_marker:
        return (
            "host %s: seatwright_drain_test_changes is lab test equipment (a simulated change) and is honoured "
            "only on a lab node (seatwright_fleet_name lab, prepared by lab/prepare.yml); remove it" % host
        )
    return None


def seat_names(nodes):
    """Sorted names of the seats with a running container on the observed nodes (whose plans to read)."""
    return sorted(
        {c["seat"] for facts in nodes.values() for c in (facts or {}).get("containers") or [] if c["running"]}
    )


def decide(
    order, nodes, plans=None, router_aliases=None, drain=False, router_node=None, batch_size=1, test_changes=None
):
    """The drain of a converge from what the play holds: drain_plan's answer with `pending` (per host,
    only hosts with a change) and `lines` (describe's), for the drain_plan filter.

    nodes: {host: {host_kind (the cached seatwright_host_kind fact), node_kind (the inventory's),
    driver_version (the cached GPU summary's), driver_branch, facts (node_drain_facts' answer, None
    where the node was not read)}}. router_aliases: {alias: {seat: {api_base, weight}}}, the router's
    listing. test_changes: {host: [{kind, id, detail}]}, the lab's labelled test input.
    """
    pending, observed = {}, {}
    for host in order:
        node = nodes.get(host) or {}
        facts = node.get("facts")
        kind, _source = kind_of(node.get("host_kind"), node.get("node_kind"))
        found = pending_changes(
            host,
            kind,
            node.get("driver_version"),
            node.get("driver_branch"),
            (test_changes or {}).get(host),
            (facts or {}).get("done", ()),
        )
        if found:
            pending[host] = found
        if facts is not None:
            observed[host] = facts
    aliases = {}
    for alias, targets in (router_aliases or {}).items():
        if not isinstance(targets, dict):
            raise DrainError(
                "router alias %s: the router's listing %r is not {seat: {api_base, weight}}" % (alias, targets)
            )
        aliases[alias] = {seat: int((target or {}).get("weight") or 0) for seat, target in targets.items()}
    live = live_seats(observed, plans or {})
    plan = drain_plan(order, pending, live, aliases, bool(drain), router_node, batch_size)
    # The router is given whole targets: the listed api_base and model, the step's weight.
    for batch in plan["batches"]:
        for step in batch["steps"]:
            if "alias" in step:
                listed = router_aliases[step["alias"]]
                step["router_targets"] = {
                    seat: dict(listed[seat], weight=weight) for seat, weight in step["targets"].items()
                }
                # Where deregister reads each leaving seat's running gauge (it may no longer be listed).
                step["metrics_urls"] = {
                    seat: metrics_url(listed[seat]["api_base"])
                    for seat in step.get("from", [])
                    if listed[seat].get("api_base")
                }
    plan["pending"] = pending
    plan["lines"] = describe(plan) if pending else []
    return plan
