"""Pure decisions for running a router on a node (the router role): where its files live, what its
units and processes are, the front's nginx text, and how an alias's targets become a config.

LiteLLM without a database reloads its config only by restarting, which drops requests (docs/router.md).
So seatwright runs two LiteLLM proxies, blue and green, on two private ports behind one public
address (nginx): a move renders the new config for the idle colour, restarts it, checks it, points
the front at it and reloads nginx gracefully; the old colour stays up as the instant rollback target.
smg adds and removes workers at runtime and runs as one process. What each kind is (its pins, key
variable, units, files, front and exposure rule) is its description in router/kinds/; the code here
asks it. No I/O here.
"""

import hashlib
import json
import os
import re

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import RouterError
from ansible_collections.seatwright.fleet.plugins.module_utils.router import adapter, kinds
from ansible_collections.seatwright.fleet.plugins.module_utils.router.kinds import litellm, smg
from ansible_collections.seatwright.fleet.plugins.module_utils.router.kinds.shared import (  # noqa: F401 (deploy's names)
    COLOUR_PORT_OFFSET,
    COLOURS,
    UNIT_PREFIX,
    WILDCARD_BINDS,
    check_port,
    colour_ports,
    is_loopback,
    is_wildcard,
)

# What each kind is (pins, packages, key variable, units, exposure rule) is its description's
# (router/kinds/); these names read the shipped kinds' descriptions for the tools and tests.
KEY_ENV = {name: kinds.get(name)["key_env"] for name in kinds.names()}
PIP_SPEC = {name: kinds.get(name)["pip_spec"] for name in kinds.names()}
PIP_PINNED = {name: kinds.get(name)["pip_pinned"] for name in kinds.names()}
PIP_LOCKED = {name: kinds.get(name)["pip_locked"] for name in kinds.names()}
ROUTER_BINARY = {name: kinds.get(name)["binary"] for name in kinds.names()}
SMG_KEY_ENV = smg.KEY_ENV
SMG_TITLE = smg.TITLE
SMG_POLICY = smg.POLICY
SMG_ENTRY = smg.ENTRY
LITELLM_ENVIRONMENT = litellm.ENVIRONMENT
# The nginx upstream every colour switch rewrites; its name is what the site's proxy_pass names.
UPSTREAM_NAME = "seatwright_router"
# nginx drops an idle connection to a colour before LiteLLM's uvicorn does (its keep-alive is 5 s):
# a request nginx sends on a connection uvicorn has just closed is a 502 (one in ~600, measured).
UPSTREAM_IDLE_S = 4
SYSTEM_NGINX_PID = "/run/nginx.pid"
# Debian's package whose nginx fronts a router (the smallest build with the proxy module): a kind
# that needs it always lists it; any other gets it when its clients have a key of their own.
NGINX_PACKAGE = "nginx-light"
# Where a router listens when nothing is said: this node only (the role's default is the router node's
# fabric address).
DEFAULT_BIND = "127.0.0.1"
# The requests clients make (the OpenAI data plane): on LiteLLM the front trades the clients' key for
# the master key on these paths only, so a client key never reaches the admin API.
DATA_PLANE_PATHS = r"^/(v1/)?(chat/completions|completions|embeddings|models)$"
# An admin key is written as KEY=VALUE into an environment file: nothing that file syntax would bend.
KEY_PATTERN = re.compile(r"^[A-Za-z0-9._~+/=:-]{16,4096}$")
# A seat's traffic weight: 0 (or left out) means no traffic.
MAX_WEIGHT = adapter.WEIGHT_TOTAL


def check_admin_key(key, what="router_admin_key"):
    """The key, when it can sit in an environment file; the error never repeats the key."""
    if not isinstance(key, str) or not KEY_PATTERN.match(key):
        raise RouterError(
            "%s is not usable: give 16 to 4096 characters of letters, digits and ._~+/=:- "
            "(no spaces, quotes or newlines), e.g. from `openssl rand -hex 32`, in a vaulted variable" % what
        )
    return key


def check_exposure(kind, bind, seats_keyed, clients_keyed, authenticating_front=False):
    """Refuse a router that would hand the seats' key, or its admin key, to anyone who reaches its
    port: each kind's rule is its description's (exposure_refusal)."""
    refusal = kinds.get(kind)["exposure_refusal"](bind, seats_keyed, clients_keyed, authenticating_front)
    if refusal:
        raise RouterError(refusal)
    return bind


def check_client_key(client_key, admin_key, seat_key=None):
    """The clients' key, when it can sit in nginx's config and is none of the other keys."""
    check_admin_key(client_key, "router_api_key")
    if client_key == admin_key:
        raise RouterError(
            "router_api_key is router_admin_key: give the clients a key of their own (e.g. `openssl rand "
            "-hex 32`), so that no client holds the router's admin key"
        )
    if seat_key and client_key == seat_key:
        raise RouterError("router_api_key is the seats' key (seat_api_key): give the clients a key of their own")
    return client_key


def idle_colour(active):
    """The colour a move starts: the one not serving (blue when none serves yet)."""
    if active is None:
        return COLOURS[0]
    if active not in COLOURS:
        raise RouterError("the router's state names colour %r: expected one of %s" % (active, ", ".join(COLOURS)))
    return COLOURS[1 - COLOURS.index(active)]


# Where `make router-venvs` keeps the routers the tests run (SEATWRIGHT_ROUTER_VENVS_DIR overrides).
# The test's router runs as its own user (router_user), as on a node, so that user must be able to
# enter every folder above the venv. Root (the only user the role runs as) builds them in a system
# folder every user may enter, as the role puts a node's venv under its state folder; never in the
# checkout, which may sit in a home only its owner may enter (Debian 12 makes them 0700). Another
# user keeps them in the checkout: without root the role, and so the test, does not run.
ROUTER_VENVS_ENV = "SEATWRIGHT_ROUTER_VENVS_DIR"
ROUTER_VENVS_SYSTEM_DIR = "/var/cache/seatwright/router-venvs"
ROUTER_VENVS_DIR = ".cache/router-venvs"


# Where `make router-venvs` puts each pinned router's wheels, one tar per closure, for nodes with no
# package index (the lab's): the role copies it to the node and installs from it with --no-index.
WHEELHOUSE_DIR = ".cache/router-wheels"
# The tar's last member: a node folder holding it was unpacked whole.
WHEELHOUSE_MANIFEST = "MANIFEST"


def _closure_name(kind):
    """<kind>-<version>-<hash of its locked package list>: one name per closure."""
    packages = pip_packages(kind)
    digest = hashlib.sha256("\n".join(packages).encode()).hexdigest()[:12]
    return "%s-%s-%s" % (kind, kinds.get(kind)["pinned"], digest)


def router_venv_dir(root, kind, environ=None, euid=None):
    """The test venv of one pinned router: <dir>/<kind>-<version>-<hash of its package list>, <dir>
    being ROUTER_VENVS_SYSTEM_DIR for root (euid 0), else the checkout's ROUTER_VENVS_DIR under `root`."""
    environ = os.environ if environ is None else environ
    euid = os.geteuid() if euid is None else euid
    top = environ.get(ROUTER_VENVS_ENV) or (
        ROUTER_VENVS_SYSTEM_DIR if euid == 0 else os.path.join(root, ROUTER_VENVS_DIR)
    )
    return os.path.join(top, _closure_name(kind))


def wheelhouse_name(kind, version=None):
    """The wheelhouse tar of a pinned release's closure; None for any other release (no lock)."""
    pinned = kinds.get(kind)["pinned"]
    version = version or pinned
    return _closure_name(kind) + ".tar" if version == pinned else None


def pip_packages(kind, version=None):
    """What pip installs in the router's venv: the locked closure for the pinned release, else the extra."""
    described = kinds.get(kind)
    version = version or described["pinned"]
    if version == described["pinned"]:
        return list(described["pip_locked"])
    return [described["pip_spec"].format(version=version)]


def layout(
    kind,
    port,
    config_dir,
    state_dir,
    version=None,
    bind=DEFAULT_BIND,
    venv=None,
    nginx_prefix=None,
    clients_keyed=False,
):
    """Every path, port and unit name of one router on its node. `venv`: an existing venv to use
    instead of one under the state folder; `nginx_prefix`: a folder for a front nginx of the router's
    own (its whole nginx.conf, pid and logs there) instead of the system's nginx and conf.d.
    `clients_keyed`: clients send a key of their own (router_api_key), which nginx's front checks; smg
    then listens on 127.0.0.1 on the next port, behind that front."""
    described = kinds.get(kind)
    version = adapter.check_version(kind, version or described["pinned"])
    conf, state = config_dir.rstrip("/") + "/router", state_dir.rstrip("/") + "/router"
    venv = venv.rstrip("/") if venv else "%s/venv-%s-%s" % (state, kind, version)
    fronted = described["always_fronted"] or bool(clients_keyed)
    packages = list(described["packages"])
    local = "127.0.0.1" if is_wildcard(bind) else bind.strip("[]")
    found = {
        "kind": kind,
        "version": version,
        "port": check_port(port),
        "bind": bind,
        "front": fronted,
        "clients_keyed": bool(clients_keyed),
        # The public address from the router's own node.
        "front_url": "http://%s:%d" % ("[%s]" % local if ":" in local else local, port),
        "config_dir": conf,
        "state_dir": state,
        "venv": venv,
        "pip": pip_packages(kind, version),
        "wheelhouse": wheelhouse_name(kind, version),
        "wheel_dir": "%s/wheels-%s-%s" % (state, kind, version),
        "packages": packages + ([NGINX_PACKAGE] if fronted and NGINX_PACKAGE not in packages else []),
        "env_file": conf + "/router.env",
        "key_env": described["key_env"],
        # nginx's map of the clients' key (and LiteLLM's master key it is traded for): 0600, root's.
        "front_keys_file": conf + "/front-keys.conf",
        "state_file": state + "/state.json",
        "log_dir": state + "/log",
    }
    if fronted:
        found.update(upstream_file=conf + "/upstream.conf")
        if nginx_prefix:
            prefix = nginx_prefix.rstrip("/")
            main = prefix + "/nginx.conf"
            found.update(
                nginx_prefix=prefix,
                nginx_conf=main,
                site_file=prefix + "/%s.conf" % UNIT_PREFIX,
                front_argv=["nginx", "-p", prefix, "-c", main],
                front_pid=prefix + "/nginx.pid",
            )
        else:
            # Debian's nginx.conf writes its master's pid here.
            found.update(
                site_file="/etc/nginx/conf.d/%s.conf" % UNIT_PREFIX, front_argv=["nginx"], front_pid=SYSTEM_NGINX_PID
            )
    found.update(described["layout"](found))
    return found


def service_specs(lay, user):
    """{name: {unit, argv, environment, env_file, user, log, health, match}}: what each unit runs, as
    the kind's description says. The unit text and the process supervisor (where systemd is not PID 1,
    as in the lab) both start from this."""
    return kinds.get(lay["kind"])["service_specs"](lay, user)


def unit_text(spec, description):
    """A systemd unit for one spec: the key only through EnvironmentFile (never argv or the unit)."""
    lines = [
        "# Written by seatwright's router role; changes are overwritten.",
        "[Unit]",
        "Description=%s" % description,
        "After=network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        "Type=simple",
        "User=%s" % spec["user"],
        "EnvironmentFile=%s" % spec["env_file"],
    ]
    lines += ["Environment=%s=%s" % item for item in sorted(spec["environment"].items())]
    lines += [
        "ExecStart=%s" % " ".join(spec["argv"]),
        "Restart=on-failure",
        "RestartSec=2",
        "NoNewPrivileges=yes",
        "PrivateTmp=yes",
        "ProtectSystem=full",
        "ProtectHome=yes",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ]
    return "\n".join(lines)


def launch_digest(text):
    """What a router process was launched with (its wrapper's text), as the state records it: a
    running router whose record differs was started from an older launch."""
    return hashlib.sha256((text or "").encode("utf-8")).hexdigest()[:16]


def smg_reregister(workers):
    """The worker URLs to register again after smg restarts (it keeps workers only in memory): the
    ones it listed, less those already draining out."""
    return sorted({worker["url"] for worker in workers if worker.get("status") != "draining"})


def smg_wrapper_text(lay, policy=SMG_POLICY):
    """smg's launch wrapper (router/kinds/smg.py says why the key goes this way)."""
    return smg.wrapper_text(lay, policy)


# What the env file holds for seats that take no key (LiteLLM's config still names the variable).
NO_SEAT_KEY = "none"


def env_file_text(kind, key, seat_key=None):
    """The 0600 environment file the router's unit reads: the admin key under its variable, and the
    key the seats take (SEAT_KEY_ENV; NO_SEAT_KEY for seats that take none)."""
    seat_key = check_admin_key(seat_key, "seat API key") if seat_key else NO_SEAT_KEY
    return "%s=%s\n%s=%s\n" % (kinds.get(kind)["key_env"], check_admin_key(key), adapter.SEAT_KEY_ENV, seat_key)


def _env_value(text, name):
    """The value of `name` in an environment file's text, or None when it is absent or empty."""
    prefix = name + "="
    for line in (text or "").splitlines():
        if line.startswith(prefix):
            return line[len(prefix) :].strip() or None
    return None


def key_from_env_text(kind, text):
    """The admin key from the environment file's text, or None when it holds none."""
    return _env_value(text, kinds.get(kind)["key_env"])


def seat_key_from_env_text(text):
    """The key the seats take, from the environment file's text (None: they take none)."""
    value = _env_value(text, adapter.SEAT_KEY_ENV)
    return None if value == NO_SEAT_KEY else value


def smg_worker_body(url, seat_key=None):
    """smg's POST /workers body: the seat's address and, for a seat that takes a key, the key smg
    sends it as a bearer token (smg 1.13.0 keeps it out of its /workers listing; recorded)."""
    body = {"url": url}
    if seat_key:
        body["api_key"] = check_admin_key(seat_key, "seat API key")
    return body


def upstream_text(port):
    """The file nginx includes for the upstream: one private port, the serving colour's."""
    check_port(port, "colour port")
    return (
        "# Written by seatwright's router role at each alias move: the serving colour.\n"
        "upstream %s {\n    server 127.0.0.1:%d;\n    keepalive 16;\n    keepalive_timeout %ds;\n}\n"
        % (UPSTREAM_NAME, port, UPSTREAM_IDLE_S)
    )


def upstream_port(text):
    """The private port an upstream file points at, or None."""
    found = re.search(r"server 127\.0\.0\.1:(\d+);", text or "")
    return int(found.group(1)) if found else None


# What the front answers a request without the clients' key (smg's front; LiteLLM answers it itself).
FRONT_REFUSAL = (
    '{"error": {"message": "this router asks for the client key: send Authorization: Bearer <router_api_key>", '
    '"type": "invalid_request_error", "code": "invalid_api_key"}}'
)
# The variables the front keys file defines (nginx's map, evaluated per request).
CLIENT_VAR = "$seatwright_router_client"
AUTH_VAR = "$seatwright_router_auth"


def _proxy_lines(indent="        "):
    return [
        indent + "proxy_pass http://%s;" % UPSTREAM_NAME,
        indent + "proxy_http_version 1.1;",
        indent + 'proxy_set_header Connection "";',
        indent + "proxy_set_header Host $host;",
        # Streamed answers pass through as they come; a long generation is not cut off.
        indent + "proxy_buffering off;",
        indent + "proxy_read_timeout 600s;",
        indent + "client_max_body_size 64m;",
    ]


def site_text(lay):
    """nginx's server for the public address; the upstream comes from the included file. With the
    clients' key (clients_keyed) the front checks it: LiteLLM's front trades it for the master key on
    the data plane's paths only and passes anything else as it is (LiteLLM then asks for its master
    key); smg's front refuses a request without it and strips it, so smg adds the seats' key."""
    lines = [
        "# Written by seatwright's router role: the router's one public address.",
        "include %s;" % lay["upstream_file"],
    ]
    if lay.get("clients_keyed"):
        lines.append("include %s;" % lay["front_keys_file"])
    lines += ["server {", "    listen %s:%d;" % (lay["bind"], lay["port"])]
    if not lay.get("clients_keyed"):
        lines += ["    location / {"] + _proxy_lines() + ["    }"]
    elif kinds.get(lay["kind"])["front"] == "trade":
        lines += ["    location / {"] + _proxy_lines() + ["    }"]
        traded = [DATA_PLANE_PATHS]
        metrics = kinds.get(lay["kind"]).get("metrics") or {}
        if metrics.get("port") is None and metrics.get("key") == "clients":
            # The router's metrics behind the front: Prometheus sends the clients' key, as a client does.
            traded.append("^%s/?$" % re.escape(metrics["path"].rstrip("/")))
        for paths in traded:
            lines += ["    location ~ %s {" % paths, "        proxy_set_header Authorization %s;" % AUTH_VAR]
            lines += _proxy_lines() + ["    }"]
    else:
        lines += [
            "    location / {",
            "        default_type application/json;",
            "        if (%s = 0) {" % CLIENT_VAR,
            "            return 401 '%s';" % FRONT_REFUSAL,
            "        }",
            '        proxy_set_header Authorization "";',
        ]
        lines += _proxy_lines() + ["    }"]
    return "\n".join(lines + ["}", ""])


def _exact_bearer(key):
    """A case-sensitive nginx regex matching `Bearer KEY` alone (map's plain strings ignore case)."""
    return '"~^Bearer %s$"' % "".join("[%s]" % c if c in ".+" else c for c in key)


def front_keys_text(kind, client_key, admin_key, seat_key=None):
    """The 0600 file nginx's front includes: a map from the Authorization header to whether it holds
    the clients' key (smg), or to the header sent on (LiteLLM, on the data plane: the master key for
    the clients' key or the master key itself, nothing for any other, so LiteLLM answers 401)."""
    check_admin_key(admin_key)
    check_client_key(client_key, admin_key, seat_key)
    head = "# Written by seatwright's router role (0600): the clients' key, checked by the front.\n"
    if kinds.get(kind)["front"] == "trade":
        rows = ['default "";'] + [
            '%s "Bearer %s";' % (_exact_bearer(key), admin_key) for key in (client_key, admin_key)
        ]
        var = AUTH_VAR
    else:
        rows, var = ["default 0;", "%s 1;" % _exact_bearer(client_key)], CLIENT_VAR
    return head + "map $http_authorization %s {\n%s}\n" % (var, "".join("    %s\n" % row for row in rows))


def nginx_main_text(lay):
    """A whole nginx.conf for a front of the router's own (layout's nginx_prefix): pid, logs and
    temporary files under the prefix, the site included; no root-owned path is needed."""
    prefix = lay["nginx_prefix"]
    return "\n".join(
        [
            "# Written by seatwright's router role: the router's own nginx (nginx -p %s)." % prefix,
            "worker_processes 1;",
            "pid %s/nginx.pid;" % prefix,
            "error_log %s/error.log;" % prefix,
            "events { worker_connections 512; }",
            "http {",
            "    access_log %s/access.log;" % prefix,
            "    client_body_temp_path %s/body;" % prefix,
            "    proxy_temp_path %s/proxy;" % prefix,
            "    include %s;" % lay["site_file"],
            "}",
            "",
        ]
    )


def check_targets(targets, what="router_targets"):
    """{seat: weight} of the seats that get traffic, from {seat: {api_base, weight}}; weight 0 or
    absent seat = no traffic. Also {seat: api_base}."""
    if not isinstance(targets, dict):
        raise RouterError("%s must be a dict of seat -> {api_base, weight}, not %s" % (what, type(targets).__name__))
    weights, bases = {}, {}
    for seat, item in sorted(targets.items()):
        if not isinstance(item, dict) or not isinstance(item.get("api_base"), str) or not item["api_base"]:
            raise RouterError("%s[%s] needs an api_base (the seat's http://host:port/v1)" % (what, seat))
        weight = item.get("weight", 1)
        if isinstance(weight, bool) or not isinstance(weight, int) or not 0 <= weight <= MAX_WEIGHT:
            raise RouterError("%s[%s].weight %r is not a whole number from 0 to %d" % (what, seat, weight, MAX_WEIGHT))
        model = item.get("model")
        if model is not None and not (isinstance(model, str) and model):
            raise RouterError("%s[%s].model %r is not the name the seat serves" % (what, seat, model))
        if weight > 0:
            weights[seat], bases[seat] = weight, item["api_base"]
    return weights, bases


def target_models(targets):
    """{seat: served model name} of the targets that say it (the router sends that name to the seat)."""
    weights, _bases = check_targets(targets)
    return {seat: targets[seat]["model"] for seat in weights if targets[seat].get("model")}


def litellm_models(config):
    """{seat: served model name} from a config seatwright rendered, where it is not the group's."""
    found = {}
    for row in (config or {}).get("model_list", []):
        model = ((row.get("litellm_params") or {}).get("model") or "")[len("openai/") :]
        seat = (row.get("model_info") or {}).get("id")
        if model and model != row.get("model_name"):
            found[seat] = model
    return found


def litellm_state(config):
    """From a config seatwright rendered: ({group: {seat: weight}}, {seat: api_base})."""
    groups, bases = {}, {}
    for row in (config or {}).get("model_list", []):
        params = row.get("litellm_params") or {}
        seat = (row.get("model_info") or {}).get("id")
        groups.setdefault(row.get("model_name"), {})[seat] = params.get("weight", 1)
        bases[seat] = params.get("api_base")
    return groups, bases


def litellm_config_text(aliases, current, alias, targets):
    """The whole config after moving `alias` onto `targets` ({seat: {api_base, weight}}), other groups
    kept from `current` (the serving colour's config, or None). Aliases whose group has no seat yet
    are left out until it has one. JSON text, which LiteLLM's YAML reader takes as it is."""
    adapter.declared_alias(aliases, alias)
    groups, bases = litellm_state(current)
    models = litellm_models(current)
    weights, new_bases = check_targets(targets)
    group = aliases[alias]
    groups[group] = weights
    bases.update(new_bases)
    models.update(target_models(targets))
    groups = {name: seats for name, seats in groups.items() if seats}
    served = {name: target for name, target in aliases.items() if target in groups and name != target}
    config = adapter.litellm_config(served, groups, bases, models)
    return json.dumps(config, indent=2, sort_keys=True) + "\n"


def litellm_initial_text():
    """The first colour's config before any alias has a seat: no deployments, the key from the environment."""
    return json.dumps(adapter.litellm_config({}, {}, {}), indent=2, sort_keys=True) + "\n"


def litellm_targets(listing, group):
    """{seat: {api_base, weight}} of one group from adapter.litellm_deployments' rows."""
    return {
        row["seat"]: dict({"api_base": row["api_base"], "weight": row["weight"]}, **_model_of(row))
        for row in listing
        if row["group"] == group
    }


def _model_of(item):
    return {"model": item["model"]} if item.get("model") else {}


def wanted(targets):
    """The {seat: {api_base, weight}} a listing must show after applying `targets`."""
    weights, bases = check_targets(targets)
    return {
        seat: dict({"api_base": bases[seat], "weight": weights[seat]}, **_model_of(targets[seat])) for seat in weights
    }


def smg_targets(workers, alias, names=None):
    """{seat: {api_base, weight 1}} of the healthy workers serving the alias; smg has no weights, the
    share is each worker's 1/N. `names` {url: seat} gives seats their names (else the URL)."""
    names = names or {}
    return {
        names.get(worker["url"], worker["url"]): {"api_base": worker["url"], "weight": 1}
        for worker in workers
        if worker["model"] == alias and worker["status"] != "draining"
    }


def smg_url(api_base):
    """smg's worker URL for a seat's api_base: the engine's root, without /v1."""
    url = api_base.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def openai_base(url):
    """An engine's or a router's OpenAI base URL, ending in /v1 (smg lists its workers without it)."""
    url = url.rstrip("/")
    return url if url.endswith("/v1") else url + "/v1"


def metrics_url(api_base):
    """The engine's Prometheus page beside its OpenAI API."""
    return smg_url(api_base) + "/metrics"


def smg_plan(workers, alias, targets):
    """(add [url], remove [worker id]) that make the alias's workers the targets with weight > 0."""
    weights, bases = check_targets(targets)
    want = {smg_url(bases[seat]) for seat in weights}
    have = {(w["url"] or "").rstrip("/"): w for w in workers if w["status"] != "draining"}
    add = sorted(url for url in want if url not in have)
    remove = sorted(w["id"] for url, w in have.items() if url not in want and w["model"] == alias)
    return add, remove


def smg_wanted(targets):
    """What smg's listing must show: the URLs with weight > 0, each weight 1 (smg has no weights)."""
    weights, bases = check_targets(targets)
    return {seat: {"api_base": smg_url(bases[seat]), "weight": 1} for seat in weights}


def same_targets(shown, want):
    """Whether a listing's {seat: {api_base, weight}} is the wanted one (addresses without a trailing /)."""

    def norm(targets):
        return {s: ((t.get("api_base") or "").rstrip("/"), t.get("weight", 1)) for s, t in targets.items()}

    return norm(shown) == norm(want)


def plan(params, systemd=True):
    """What the role writes and runs: the layout, the specs, the folders and every file's text but the
    env file. Unit files only where systemd runs them (`systemd`); the pid-file runner needs none."""
    check_exposure(
        params["kind"],
        params["bind"],
        params.get("seats_keyed", False),
        params.get("clients_keyed", False),
        params.get("authenticating_front", False),
    )
    lay = layout(
        params["kind"],
        params["port"],
        params["config_dir"],
        params["state_dir"],
        params["version"],
        params["bind"],
        params.get("venv"),
        params.get("nginx_prefix"),
        params.get("clients_keyed", False),
    )
    specs = service_specs(lay, params["user"])
    files = []
    if systemd:
        files += [
            {"path": "/etc/systemd/system/" + spec["unit"], "content": unit_text(spec, "seatwright router (%s)" % name)}
            for name, spec in sorted(specs.items())
        ]
    folders = [{"path": lay[name], "mode": "0755"} for name in ("config_dir", "state_dir", "log_dir")]
    if lay["front"]:
        files.append({"path": lay["site_file"], "content": site_text(lay)})
        if lay.get("nginx_prefix"):
            folders += [{"path": lay["nginx_prefix"] + sub, "mode": "0755"} for sub in ("", "/body", "/proxy")]
            files.append({"path": lay["nginx_conf"], "content": nginx_main_text(lay)})
    files += kinds.get(lay["kind"])["files"](lay)
    return {
        "layout": lay,
        "specs": specs,
        "folders": folders,
        "files": files,
        "units": [spec["unit"] for _n, spec in sorted(specs.items())],
    }
