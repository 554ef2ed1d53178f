"""SGLang's model gateway (smg) as a router kind: everything seatwright decides about it, in one
description.

smg adds and removes workers at runtime and runs as one process (runtime "workers",
io/router/switch.py). It routes a request by the first name each worker serves, has no weights, and
sends the seats' key with every request. Its control-plane key reaches it through a wrapper, never
its command line. No I/O.
"""

from ansible_collections.seatwright.fleet.plugins.module_utils.router.kinds.shared import (
    UNIT_PREFIX,
    colour_ports,
    is_wildcard,
)

NAME = "smg"
PINNED = "1.13.0"
# smg's control-plane key reaches its argv through the wrapper from this environment variable.
KEY_ENV = "SMG_ADMIN_KEY"
# The title smg 1.13.0 gives its process, in place of its command line.
TITLE = "smg::router"
PIP_SPEC = "smg=={version}"
PIP_PINNED = ("smg==1.13.0",)
# The whole closure of the pinned release, as `pip freeze` printed it from a venv of PIP_PINNED made
# on Debian 12 (Python 3.11) from the index of 2026-12-02 (`scripts/router-venvs --freeze smg`).
PIP_LOCKED = (
    "grpcio==1.85.3",
    "grpcio-health-checking==1.85.1",
    "protobuf==7.36.2",
    "PyYAML==6.0.4",
    "setproctitle==1.3.8",
    "smg==1.13.0",
    "typing_extensions==4.16.0",
)

# smg's policy: least_load sends a request to the worker with the least expected wait from the load
# the engines report and what smg has in flight, so a seat that falls behind (a canary on shared
# cores stalled 80 s in the lab, 2026-12-04) stops taking new requests. round_robin kept sending it
# half the alias's traffic, and 30-67 requests per run waited past a client's 60 s.
POLICY = "least_load"

# smg's own entry point (smg/cli.py main(argv), as its console script calls it), given its launch
# arguments and, added in the process from the environment, the control-plane key: /proc/PID/cmdline,
# which every local user reads, holds this text and the launch arguments, never the key.
ENTRY = (
    "import os, sys; from smg.cli import main; "
    'sys.exit(main(sys.argv[1:] + ["--control-plane-api-keys", "seatwright:seatwright:admin:" + os.environ["%s"]]))'
)


def exposure_refusal(bind, seats_keyed, clients_keyed, authenticating_front):
    """smg adds the seat key to every request (recorded: 21-chat-seat-given-the-key), so smg on every
    interface in front of keyed seats is an open seat, unless its clients need a key of their own
    (router_api_key, checked by the role's front) or the operator's own front authenticates them."""
    if is_wildcard(bind) and seats_keyed and not (clients_keyed or authenticating_front):
        return (
            "router_bind %r puts smg on every interface in front of seats that take a key, and smg sends "
            "the seats' key with every request: anyone who reaches the port would use every seat. Set "
            "router_api_key (vault) so the router's front asks clients for a key of their own, bind the "
            "router node's fabric address (the default), or, when an authenticating front of your own "
            "stands before it, say so with router_authenticating_front: true" % bind
        )
    return None


def layout(found):
    """One unit and its wrapper. Behind the front smg listens on this node only, on the next port;
    the controller's calls on the node (its /workers) go to smg itself."""
    fronted = found["front"]
    smg_host, smg_port = (
        ("127.0.0.1", colour_ports(found["port"])["blue"]) if fronted else (found["bind"], found["port"])
    )
    return {
        "unit": "%s-smg.service" % UNIT_PREFIX,
        "wrapper": "%s/smg-start" % found["config_dir"],
        "smg_host": smg_host,
        "smg_port": smg_port,
        "router_url": "http://127.0.0.1:%d" % smg_port if fronted else found["front_url"],
    }


def service_specs(lay, user):
    """smg's one process, started through its wrapper."""
    return {
        "smg": {
            "unit": lay["unit"],
            "argv": ["/bin/sh", lay["wrapper"]],
            "environment": {},
            "env_file": lay["env_file"],
            "user": user,
            "log": lay["log_dir"] + "/smg.log",
            "health": lay["router_url"] + "/health",
            # smg renames its process (setproctitle) to this once started; its port is in argv before.
            "match": [str(lay["smg_port"]), TITLE],
        }
    }


def wrapper_text(lay, policy=POLICY):
    """smg 1.13.0 takes its control-plane key only as an argument. This shell checks the key is in
    the environment (filled from the 0600 env file) and execs smg's Python entry point, which adds
    it to smg's arguments inside the process: the key is in no unit, task, log or command line (a
    `smg launch ... --control-plane-api-keys KEY` put it in smg's /proc/PID/cmdline, issue 50)."""
    argv = [
        "launch",
        "--host",
        lay["smg_host"],
        "--port",
        str(lay["smg_port"]),
        "--policy",
        policy,
        "--health-check-interval-secs",
        "2",
    ]
    return "\n".join(
        [
            "#!/bin/sh",
            "# Written by seatwright's router role: smg's key comes from the environment, not the unit,",
            "# and reaches smg's arguments inside its process, not on its command line.",
            'if [ -z "${%s:-}" ]; then echo "%s is not set: see %s" >&2; exit 1; fi'
            % (KEY_ENV, KEY_ENV, lay["env_file"]),
            "exec %s/bin/python -c '%s' %s" % (lay["venv"], ENTRY % KEY_ENV, " ".join(argv)),
            "",
        ]
    )


def files(lay):
    """The wrapper the unit runs."""
    return [{"path": lay["wrapper"], "content": wrapper_text(lay), "mode": "0755"}]


def serving_spec(specs, active):
    """The process that answers the API: smg's one (it has no colours, so `active` is not read)."""
    return specs["smg"]


def refusal_hint(call, status, text):
    return None


KIND = {
    "name": NAME,
    "label": "smg",
    "pinned": PINNED,
    "compromised": (),
    "pip_spec": PIP_SPEC,
    "pip_pinned": PIP_PINNED,
    "pip_locked": PIP_LOCKED,
    "binary": "smg",
    "key_env": KEY_ENV,
    # nginx is added only when its clients have a key of their own (router_api_key).
    "packages": ("python3-venv",),
    "always_fronted": False,
    # Workers are added and removed at runtime (io/router/switch.py).
    "runtime": "workers",
    # No weights: a canary is one of two workers serving the alias name (router/rollout.py).
    "weights": False,
    # smg routes by each worker's first served name (adapter.seat_aliases, rollout.smg_alias_refusal).
    "routes_by_first_served_name": True,
    # Without router_api_key its clients send no key (its admin key is for the control plane only).
    "clients_send_admin_key": False,
    # The front refuses a request without the clients' key and strips it (deploy.site_text).
    "front": "refuse",
    # smg serves its metrics on a port of their own, with no key (--prometheus-port's default).
    "metrics": {"port": 29000, "path": "/metrics", "key": None},
    "exposure_refusal": exposure_refusal,
    "layout": layout,
    "service_specs": service_specs,
    "files": files,
    "serving_spec": serving_spec,
    "refusal_hint": refusal_hint,
}
