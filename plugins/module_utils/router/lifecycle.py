"""The router's own lifecycle around an exclusive seat's eviction and restore (issue 26 item 3).

An exclusive seat that stops co-tenants takes them out of the router first (drained, then removed)
and puts them back after they are running again. The router itself may be down, and why matters:
one stopped on purpose is not a live admission plane, so a restore never waits for it nor fails
because it is absent (the field's campaign rolled a healthy restore back over exactly that [003]).
One expected up that does not answer is a warning in the result. One that answered and then refused
to take the co-tenants back fails closed, as an active router did in the field (readmission_refused).

States, as observed on the router's node (io/router/lifecycle.py):
- running: its unit (or pid) is up and its API answered;
- stopped: stopped on purpose (systemd `inactive`, i.e. `systemctl stop`; or, without systemd, no
  live process: nothing supervises it there, so an exit is taken as the operator's);
- down: expected up but not (systemd `failed`, `activating`, ...);
- unreachable: its process is up but its API did not answer.
"""

STATES = ("running", "stopped", "down", "unreachable")
STOPPED_NOTE = "router stopped on purpose; targets not re-registered"


def unit_state(active_state):
    """The lifecycle state of a router under systemd from `systemctl is-active`'s word."""
    word = (active_state or "").strip()
    if word == "active":
        return "running"
    if word == "inactive":
        return "stopped"
    return "down"


def process_state(alive):
    """Without systemd (the lab's containers) nothing restarts the router, so no live process is a stop."""
    return "running" if alive else "stopped"


def eviction_action(state, removals):
    """{'action': remove|skip|warn, 'note'} for the router when co-tenants it targets are evicted.

    `removals` is {alias: {seat: target}} the co-tenants account for in the router's listing.
    """
    if state not in STATES:
        raise ValueError("router state %r is not one of %s" % (state, ", ".join(STATES)))
    if state == "running":
        if not removals:
            return {"action": "skip", "note": "the router targets none of the evicted co-tenants"}
        return {"action": "remove", "note": "drain, then remove %s" % describe(removals)}
    if state == "stopped":
        return {"action": "skip", "note": "router stopped on purpose; nothing taken out of it"}
    return {
        "action": "warn",
        "note": "router expected up but %s: the evicted co-tenants were not taken out of it" % state,
    }


def restore_action(prior, current, removed):
    """{'action': reregister|skip|warn|none, 'note', 'warning'} for the router once the co-tenants run again.

    `prior` is the router's state recorded at eviction, `current` its state now, `removed` the
    targets recorded as taken out ({alias: {seat: target}}). Nothing here ever fails a restore.
    """
    for name, value in (("prior", prior), ("current", current)):
        if value is not None and value not in STATES:
            raise ValueError("router %s state %r is not one of %s" % (name, value, ", ".join(STATES)))
    if not removed:
        if prior == "stopped":
            return {"action": "none", "note": "router was stopped on purpose at eviction; nothing to put back"}
        return {"action": "none", "note": "nothing was taken out of the router"}
    if current == "stopped":
        return {"action": "skip", "note": STOPPED_NOTE}
    if current == "running":
        return {"action": "reregister", "note": "put back %s" % describe(removed)}
    warning = (
        "router expected up but %s: %s not re-registered; start the router, then put them back with "
        "roles/router tasks_from=apply_targets (the co-tenants themselves are restored)" % (current, describe(removed))
    )
    return {"action": "warn", "note": warning, "warning": warning}


def readmission_refused(removed, applied, problem):
    """Why a restore fails: the router was running and answered, then refused to take the co-tenants back.

    An active admission plane fails closed ([003]: only the router stopped on purpose is skipped), so a
    seat's teardown does not end with the alias routing to nothing while saying all is well."""
    done = ", ".join(item["alias"] for item in applied) or "none"
    return (
        "the router is running and answered, but refused to take back %s (aliases put back before it "
        "refused: %s): %s; fix the router, then put them back with roles/router tasks_from=apply_targets "
        "(the co-tenants themselves are restored)" % (describe(removed), done, problem)
    )


def removals(evicted, aliases_targets):
    """{alias: {seat: target}}: each evicted co-tenant's router_seat wherever the router targets it.

    `evicted` are the co-tenant entries being stopped while running (each may name `router_seat`);
    `aliases_targets` is {alias: {seat: {api_base, weight}}} as the router lists them now.
    """
    seats = {item.get("router_seat") for item in evicted if item.get("router_seat")}
    found = {}
    for alias, targets in sorted((aliases_targets or {}).items()):
        taken = {seat: dict(target) for seat, target in sorted((targets or {}).items()) if seat in seats}
        if taken:
            found[alias] = taken
    return found


def restored_targets(current, removed):
    """An alias's targets with the removed ones put back exactly (api_base and weight as recorded)."""
    merged = {seat: dict(target) for seat, target in (current or {}).items()}
    merged.update({seat: dict(target) for seat, target in (removed or {}).items()})
    return merged


def describe(by_alias):
    return "; ".join("%s: %s" % (alias, ", ".join(sorted(seats))) for alias, seats in sorted(by_alias.items()))
