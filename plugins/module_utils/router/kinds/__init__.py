"""The router kinds seatwright drives: one pure description per kind (litellm.py, smg.py), looked up
through get(). A description says what the kind is (its pins and packages, the variable holding its
key, its binary, its units and files, how it changes its targets, whether it has weights or routes
by a seat's first served name, its exposure rule); the code around it asks the description instead
of naming a kind. io/router/client.py holds one client per kind. Adding a kind is one description
here and one client there (tests/unit/plugins/module_utils/router/test_router_kinds.py adds one). No I/O.
"""

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import RouterError
from ansible_collections.seatwright.fleet.plugins.module_utils.router.kinds import litellm, smg

# What every description holds (the keys deploy, adapter, rollout and the io side read).
FIELDS = (
    "name",
    "label",
    "pinned",
    "compromised",
    "pip_spec",
    "pip_pinned",
    "pip_locked",
    "binary",
    "key_env",
    "packages",
    "always_fronted",
    "runtime",
    "weights",
    "routes_by_first_served_name",
    "clients_send_admin_key",
    "front",
    "exposure_refusal",
    "layout",
    "service_specs",
    "files",
    "serving_spec",
    "refusal_hint",
)
# How a kind changes its targets on the node: a restarted idle colour behind the front, or workers
# added and removed at runtime (io/router/switch.py runs each).
RUNTIMES = ("colours", "workers")
# What the front does with the clients' key: trade it for the admin key on the data plane, or refuse
# a request without it (deploy.site_text, deploy.front_keys_text).
FRONTS = ("trade", "refuse")

_KINDS = {}


def register(description):
    """Add a kind from its description; RouterError naming what a malformed one lacks."""
    missing = [field for field in FIELDS if field not in description]
    if missing:
        raise RouterError("router kind description %r lacks %s" % (description.get("name"), ", ".join(missing)))
    if description["runtime"] not in RUNTIMES or description["front"] not in FRONTS:
        raise RouterError(
            "router kind %s: runtime must be one of %s and front one of %s"
            % (description["name"], ", ".join(RUNTIMES), ", ".join(FRONTS))
        )
    _KINDS[description["name"]] = description
    return description


def unregister(name):
    """Forget a kind (a test's own, once the test is done)."""
    _KINDS.pop(name, None)


def names():
    """The kinds' names, in the order they were registered: the choices of every `kind` option."""
    return tuple(_KINDS)


def find(name):
    """The description of `name`, or None when no kind has that name."""
    return _KINDS.get(name) if isinstance(name, str) else None


def get(name):
    """The description of `name`; RouterError naming the known kinds when there is none."""
    found = find(name)
    if found is None:
        raise RouterError("router kind %r is not known: use one of %s" % (name, ", ".join(names())))
    return found


def for_ansible(name):
    """What plays need of a kind (the filter seatwright.fleet.router_kind): whether it is known, the
    known kinds, and the description's plain facts."""
    found = find(name)
    plain = {key: value for key, value in (found or {}).items() if not callable(value)}
    return dict(plain, known=found is not None, kinds=list(names()))


register(litellm.KIND)
register(smg.KIND)
