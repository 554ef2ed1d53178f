"""The router on its node, for an exclusive seat's co-tenants (stdlib only): its lifecycle state and
the alias targets it lists; the evicted co-tenants' targets drained and removed, then put back.

router/lifecycle.py decides; this observes (systemctl is-active, or the pid file where systemd is
not PID 1) and acts through io/router/switch.py, the same code as roles/router's apply_targets and
deregister. A router that is stopped, down or unreachable never fails a restore: the answer says so;
one that answered as running and then refused the targets fails it (router/lifecycle.py).
"""

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import RouterError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common import services
from ansible_collections.seatwright.fleet.plugins.module_utils.io.router import switch
from ansible_collections.seatwright.fleet.plugins.module_utils.router import deploy, kinds, lifecycle


def serving_spec(router):
    """The process that answers the router's API, as its kind says (smg's one, LiteLLM's serving colour)."""
    return kinds.get(router.lay["kind"])["serving_spec"](router.specs, lambda: router.state().get("active"))


def observe(router, aliases):
    """{state, unit, aliases: {alias: targets}}: targets only when the router answered."""
    spec = serving_spec(router)
    if isinstance(router.manager, switch.Systemd):
        _rc, out, _err = services.systemctl("is-active", spec["unit"])
        state = lifecycle.unit_state(out)
    else:
        state = lifecycle.process_state(router.manager.running(spec))
    seen, problem = {}, None
    if state == "running":
        try:
            seen = {alias: router.read(alias, aliases) for alias in sorted(aliases)}
        except RouterError as exc:
            state, problem = "unreachable", str(exc)
    return {"state": state, "unit": spec["unit"], "aliases": seen, "problem": problem}


def remove(router, aliases, removals, check_mode, timeout_s):
    """Drain each recorded target (no new traffic, its engine's running gauge at 0), then take it out."""
    view = observe(router, aliases)
    decided = lifecycle.eviction_action(view["state"], removals)
    done = []
    if decided["action"] == "remove":
        for alias, seats in sorted(removals.items()):
            for seat, target in sorted(seats.items()):
                answer = router.deregister(
                    alias, aliases, seat, deploy.metrics_url(target["api_base"]), check_mode, timeout_s
                )
                done.append(dict(answer, alias=alias))
    result = {
        "changed": any(item["changed"] for item in done),
        "state": view["state"],
        "action": decided["action"],
        "note": decided["note"],
        "removed": done,
    }
    if decided["action"] == "warn":
        result["warning"] = decided["note"]
    return result


def restore(router, aliases, prior, removed, check_mode, timeout_s):
    """Put the recorded targets back exactly, unless the router is stopped on purpose (a note) or
    expected up and not answering (a warning); never an error for an absent router, RouterError for a
    running one that refuses them."""
    removed = removed or {}
    view = observe(router, aliases) if removed else {"state": None, "aliases": {}, "problem": None}
    decided = lifecycle.restore_action(prior, view["state"], removed)
    result = {"changed": False, "state": view["state"], "action": decided["action"], "note": decided["note"]}
    if decided["action"] == "reregister":
        applied = []
        try:
            for alias, seats in sorted(removed.items()):
                want = lifecycle.restored_targets(view["aliases"].get(alias), seats)
                answer = router.apply(alias, aliases, want, check_mode, timeout_s)
                applied.append({"alias": alias, "targets": answer["targets"], "changed": answer["changed"]})
        except RouterError as exc:
            # It answered as running, then refused: an active admission plane fails closed ([003]).
            raise RouterError(lifecycle.readmission_refused(removed, applied, exc))
        result.update(changed=any(item["changed"] for item in applied), applied=applied)
    if decided.get("warning"):
        result["warning"] = decided["warning"]
    return result


def converge(params, check_mode=False):
    """router_cotenants's one call on the router's node."""
    found = deploy.plan(params)
    router = switch.Router(found["layout"], found["specs"], params["service_manager"])
    aliases = params["aliases"] or {}
    if params["state"] == "observed":
        return dict(observe(router, aliases), changed=False)
    if params["state"] == "removed":
        return remove(router, aliases, params["removed"] or {}, check_mode, params["timeout_s"])
    return restore(router, aliases, params["prior"], params["removed"], check_mode, params["timeout_s"])
