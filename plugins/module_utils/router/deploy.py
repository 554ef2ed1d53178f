"""Pure decisions for running a router on a node (the router role): where its files live, what its
units and processes are, the front's nginx text, and how an alias's targets become a config.

LiteLLM without a database reloads its config only by restarting, which drops requests (docs/router.md).
So seatwright runs two LiteLLM proxies, blue and green, on two private ports behind one public
address (nginx): a move renders the new config for the idle colour, restarts it, checks it, points
the front at it and reloads nginx gracefully; the old colour stays up as the instant rollback target.
smg adds and removes workers at runtime and runs as one process. No I/O here.
"""

import hashlib
import json
import os
import re

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import RouterError
from ansible_collections.seatwright.fleet.plugins.module_utils.router import adapter

COLOURS = ("blue", "green")
# The colours' private ports sit just above the public one.
COLOUR_PORT_OFFSET = {"blue": 1, "green": 2}
# smg's control-plane key reaches its argv through the wrapper from this environment variable.
SMG_KEY_ENV = "SMG_ADMIN_KEY"
KEY_ENV = {"litellm": adapter.LITELLM_KEY_ENV, "smg": SMG_KEY_ENV}
UNIT_PREFIX = "seatwright-router"
# The title smg 1.13.0 gives its process, in place of its command line.
SMG_TITLE = "smg::router"
# The nginx upstream every colour switch rewrites; its name is what the site's proxy_pass names.
UPSTREAM_NAME = "seatwright_router"
# nginx drops an idle connection to a colour before LiteLLM's uvicorn does (its keep-alive is 5 s):
# a request nginx sends on a connection uvicorn has just closed is a 502 (one in ~600, measured).
UPSTREAM_IDLE_S = 4
SYSTEM_NGINX_PID = "/run/nginx.pid"
# Debian's package whose nginx fronts the LiteLLM colours (the smallest build with the proxy module),
# and smg when its clients have a key of their own.
FRONT_PACKAGES = {"litellm": ["nginx-light", "python3-venv"], "smg": ["python3-venv"]}
NGINX_PACKAGE = "nginx-light"
# Where a router listens when nothing is said: this node only (the role's default is the router node's
# fabric address).
DEFAULT_BIND = "127.0.0.1"
# Addresses that listen on every interface of the node.
WILDCARD_BINDS = ("0.0.0.0", "::", "[::]", "*", "")
# The requests clients make (the OpenAI data plane): on LiteLLM the front trades the clients' key for
# the master key on these paths only, so a client key never reaches the admin API.
DATA_PLANE_PATHS = r"^/(v1/)?(chat/completions|completions|embeddings|models)$"
# What pip installs in the router's venv for a release other than the pinned one.
PIP_SPEC = {"litellm": "litellm[proxy]=={version}", "smg": "smg=={version}"}
# What pip installs for the pinned release (adapter.PINNED), each pinned: the role's default
# (router_pip_packages) and `make router-venvs` (scripts/router-venvs) both read it. LiteLLM's
# [proxy] extra names litellm-proxy, missing from the package index this was recorded on, so the
# extra's packages the proxy asked for are listed by hand (tests/fixtures/router/README.md; the
# last three were in the recording's venv unlisted, and the proxy stops at start without them).
PIP_PINNED = {
    "litellm": (
        "litellm==1.110.2",
        "gunicorn==23.0.0",
        "uvicorn==0.54.0",
        "uvloop==0.23.0",
        "fastapi==0.165.0",
        "starlette==1.10.0",
        "backoff==2.2.1",
        "rq==2.12.0",
        "semver==3.1.2",
        "Expression==5.8.0",
        "fastapi-sso==0.23.0",
        "mcp==2.3.0",
        "soundfile==0.14.0",
        "websockets==17.4",
        "orjson==3.13.0",
        "APScheduler==3.11.3",
    ),
    "smg": ("smg==1.13.0",),
}
# The whole closure of each pinned release, every package at its version, as `pip freeze` printed it
# from a venv of PIP_PINNED made on Debian 12 (Python 3.11) from the index of 2026-12-02
# (`scripts/router-venvs --freeze KIND` prints it again). The role installs this, not the top-level
# list: a dependency that floats with the index is an unpinned router.
PIP_LOCKED = {
    "litellm": (
        "aiohappyeyeballs==2.7.1",
        "aiohttp==3.14.5",
        "aiosignal==1.4.0",
        "annotated-doc==0.0.7",
        "annotated-types==0.8.0",
        "anyio==4.16.0",
        "APScheduler==3.11.3",
        "async-timeout==5.0.1",
        "attrs==26.1.0",
        "backoff==2.2.1",
        "boto3==1.44.8",
        "botocore==1.44.8",
        "certifi==2026.10.19.post1",
        "cffi==2.1.1",
        "charset-normalizer==3.5.3",
        "click==8.5.1",
        "croniter==7.0.0",
        "cryptography==50.0.2",
        "dnspython==2.9.2",
        "email-validator==2.4.0",
        "Expression==5.8.0",
        "fastapi==0.165.0",
        "fastapi-sso==0.23.0",
        "fastuuid==0.14.0",
        "filelock==4.3.1",
        "frozenlist==1.8.0",
        "fsspec==2026.9.0",
        "gunicorn==23.0.0",
        "h11==0.16.0",
        "h2==4.4.1",
        "hf-xet==1.8.0",
        "hpack==4.2.0",
        "httpcore==1.0.9",
        "httpcore2==2.16.2",
        "httpx==0.29.0",
        "httpx2==2.16.2",
        "huggingface_hub==2.4.0",
        "hyperframe==6.1.0",
        "idna==3.20",
        "importlib_metadata==8.9.0",
        "Jinja2==3.1.6",
        "jiter==0.19.0",
        "jmespath==1.1.0",
        "jsonschema==4.26.0",
        "jsonschema-specifications==2025.9.1",
        "litellm==1.110.2",
        "MarkupSafe==3.0.4",
        "mcp==2.3.0",
        "mcp-types==2.3.0",
        "multidict==7.2.1",
        "numpy==2.4.6",
        "oauthlib==4.0.1",
        "openai==3.57.0",
        "opentelemetry-api==1.45.2",
        "orjson==3.13.0",
        "packaging==26.4",
        "propcache==0.5.4",
        "pycparser==3.12",
        "pydantic==2.14.4",
        "pydantic-settings==2.16.3",
        "pydantic_core==2.50.5",
        "PyJWT==2.15.1",
        "python-dateutil==2.9.0.post0",
        "python-dotenv==1.2.4",
        "python-multipart==0.0.34",
        "PyYAML==6.0.4",
        "redis==8.1.0",
        "referencing==0.37.0",
        "regex==2026.11.19",
        "requests==2.34.2",
        "rpds-py==2026.9.1",
        "rq==2.12.0",
        "s3transfer==0.19.3",
        "semver==3.1.2",
        "six==1.17.0",
        "sniffio==1.3.1",
        "soundfile==0.14.0",
        "sse-starlette==3.7.1",
        "starlette==1.10.0",
        "tiktoken==0.14.0",
        "tokenizers==0.23.3",
        "tqdm==4.70.1",
        "truststore==0.10.5",
        "typing-inspection==0.4.5",
        "typing_extensions==4.16.0",
        "tzlocal==5.4.5",
        "urllib3==2.8.0",
        "uvicorn==0.54.0",
        "uvloop==0.23.0",
        "websockets==17.4",
        "yarl==1.25.1",
        "zipp==4.1.2",
    ),
    "smg": (
        "grpcio==1.85.3",
        "grpcio-health-checking==1.85.1",
        "protobuf==7.36.2",
        "PyYAML==6.0.4",
        "setproctitle==1.3.8",
        "smg==1.13.0",
        "typing_extensions==4.16.0",
    ),
}
# LiteLLM fetches a model cost map from the internet at start unless told to use its local copy.
LITELLM_ENVIRONMENT = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}
# An admin key is written as KEY=VALUE into an environment file: nothing that file syntax would bend.
KEY_PATTERN = re.compile(r"^[A-Za-z0-9._~+/=:-]{16,4096}$")
NAME_PATTERN = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
# A seat's traffic weight: 0 (or left out) means no traffic.
MAX_WEIGHT = adapter.WEIGHT_TOTAL


def check_port(port, what="router port"):
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65533:
        raise RouterError("%s %r is not a TCP port: give a whole number from 1 to 65533" % (what, port))
    return port


def check_admin_key(key, what="router_admin_key"):
    """The key, when it can sit in an environment file; the error never repeats the key."""
    if not isinstance(key, str) or not KEY_PATTERN.match(key):
        raise RouterError(
            "%s is not usable: give 16 to 4096 characters of letters, digits and ._~+/=:- "
            "(no spaces, quotes or newlines), e.g. from `openssl rand -hex 32`, in a vaulted variable" % what
        )
    return key


def is_wildcard(bind):
    return (bind or "").strip() in WILDCARD_BINDS


def is_loopback(bind):
    return (bind or "").startswith("127.") or bind in ("::1", "[::1]", "localhost")


def check_exposure(kind, bind, seats_keyed, clients_keyed, authenticating_front=False):
    """Refuse a router that would hand the seats' key to anyone who reaches its port. smg adds the
    seat key to every request (recorded: 21-chat-seat-given-the-key), so smg on every interface in
    front of keyed seats is an open seat, unless its clients need a key of their own (router_api_key,
    checked by the role's front) or the operator's own front authenticates them. LiteLLM without a
    database has one key, its master key: clients beyond this node get their own (router_api_key)."""
    adapter.check_kind(kind)
    if kind == "smg" and is_wildcard(bind) and seats_keyed and not (clients_keyed or authenticating_front):
        raise RouterError(
            "router_bind %r puts smg on every interface in front of seats that take a key, and smg sends "
            "the seats' key with every request: anyone who reaches the port would use every seat. Set "
            "router_api_key (vault) so the router's front asks clients for a key of their own, bind the "
            "router node's fabric address (the default), or, when an authenticating front of your own "
            "stands before it, say so with router_authenticating_front: true" % bind
        )
    if kind == "litellm" and not is_loopback(bind) and not clients_keyed:
        raise RouterError(
            "router_bind %r opens LiteLLM beyond this node, and without router_api_key its clients would "
            "hold the master key, which also changes the router's deployments: set router_api_key (vault) "
            "to a key of the clients' own, other than router_admin_key" % bind
        )
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


def colour_ports(port):
    """{colour: private port}; the public port is the front's."""
    check_port(port)
    return {colour: port + offset for colour, offset in COLOUR_PORT_OFFSET.items()}


def idle_colour(active):
    """The colour a move starts: the one not serving (blue when none serves yet)."""
    if active is None:
        return COLOURS[0]
    if active not in COLOURS:
        raise RouterError("the router's state names colour %r: expected one of %s" % (active, ", ".join(COLOURS)))
    return COLOURS[1 - COLOURS.index(active)]


# The command each router's venv must hold.
ROUTER_BINARY = {"litellm": "litellm", "smg": "smg"}
# Where `make router-venvs` keeps the routers the tests run (SEATWRIGHT_ROUTER_VENVS_DIR overrides).
ROUTER_VENVS_ENV = "SEATWRIGHT_ROUTER_VENVS_DIR"
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
    return "%s-%s-%s" % (kind, adapter.PINNED[kind], digest)


def router_venv_dir(root, kind, environ=None):
    """The test venv of one pinned router: <dir>/<kind>-<version>-<hash of its package list>."""
    environ = os.environ if environ is None else environ
    top = environ.get(ROUTER_VENVS_ENV) or os.path.join(root, ROUTER_VENVS_DIR)
    return os.path.join(top, _closure_name(kind))


def wheelhouse_name(kind, version=None):
    """The wheelhouse tar of a pinned release's closure; None for any other release (no lock)."""
    version = version or adapter.PINNED[adapter.check_kind(kind)]
    return _closure_name(kind) + ".tar" if version == adapter.PINNED[kind] else None


def pip_packages(kind, version=None):
    """What pip installs in the router's venv: the locked closure for the pinned release, else the extra."""
    version = version or adapter.PINNED[adapter.check_kind(kind)]
    if version == adapter.PINNED[kind]:
        return list(PIP_LOCKED[kind])
    return [PIP_SPEC[kind].format(version=version)]


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
    adapter.check_kind(kind)
    version = adapter.check_version(kind, version or adapter.PINNED[kind])
    conf, state = config_dir.rstrip("/") + "/router", state_dir.rstrip("/") + "/router"
    venv = venv.rstrip("/") if venv else "%s/venv-%s-%s" % (state, kind, version)
    fronted = kind == "litellm" or bool(clients_keyed)
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
        "packages": list(FRONT_PACKAGES[kind]) + ([NGINX_PACKAGE] if fronted and kind == "smg" else []),
        "env_file": conf + "/router.env",
        "key_env": KEY_ENV[kind],
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
    if kind == "litellm":
        # The controller's calls on the node go through the front (the admin key passes as it is).
        found["router_url"] = found["front_url"]
        found.update(
            colours={
                colour: {
                    "port": private,
                    "unit": "%s-litellm-%s.service" % (UNIT_PREFIX, colour),
                    "config": "%s/litellm-%s.yaml" % (conf, colour),
                }
                for colour, private in colour_ports(port).items()
            },
        )
    else:
        # Behind the front smg listens on this node only, on the next port; the controller's calls on
        # the node (its /workers) go to smg itself.
        smg_host, smg_port = ("127.0.0.1", colour_ports(port)["blue"]) if fronted else (bind, port)
        found.update(
            unit="%s-smg.service" % UNIT_PREFIX,
            wrapper="%s/smg-start" % conf,
            smg_host=smg_host,
            smg_port=smg_port,
            router_url="http://127.0.0.1:%d" % smg_port if fronted else found["front_url"],
        )
    return found


def service_specs(lay, user):
    """{name: {unit, argv, environment, env_file, user, log}}: what each unit runs. The unit text and
    the process supervisor (where systemd is not PID 1, as in the lab) both start from this."""
    specs = {}
    if lay["kind"] == "litellm":
        for colour, item in sorted(lay["colours"].items()):
            argv = [lay["venv"] + "/bin/litellm", "--config", item["config"], "--host", "127.0.0.1"]
            specs[colour] = {
                "unit": item["unit"],
                "config": item["config"],
                "argv": argv + ["--port", str(item["port"])],
                "environment": dict(LITELLM_ENVIRONMENT),
                "env_file": lay["env_file"],
                "user": user,
                "log": "%s/litellm-%s.log" % (lay["log_dir"], colour),
                "health": "http://127.0.0.1:%d/health/liveliness" % item["port"],
                # What a live process's command line holds (the pid file's check against a reused pid).
                "match": [str(item["port"])],
            }
    else:
        specs["smg"] = {
            "unit": lay["unit"],
            "argv": ["/bin/sh", lay["wrapper"]],
            "environment": {},
            "env_file": lay["env_file"],
            "user": user,
            "log": lay["log_dir"] + "/smg.log",
            "health": lay["router_url"] + "/health",
            # smg renames its process (setproctitle) to this once started; its port is in argv before.
            "match": [str(lay["smg_port"]), SMG_TITLE],
        }
    return specs


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


# smg's policy: least_load sends a request to the worker with the least expected wait from the load
# the engines report and what smg has in flight, so a seat that falls behind (a canary on shared
# cores stalled 80 s in the lab, 2026-12-04) stops taking new requests. round_robin kept sending it
# half the alias's traffic, and 30-67 requests per run waited past a client's 60 s.
SMG_POLICY = "least_load"


# smg's own entry point (smg/cli.py main(argv), as its console script calls it), given its launch
# arguments and, added in the process from the environment, the control-plane key: /proc/PID/cmdline,
# which every local user reads, holds this text and the launch arguments, never the key.
SMG_ENTRY = (
    "import os, sys; from smg.cli import main; "
    'sys.exit(main(sys.argv[1:] + ["--control-plane-api-keys", "seatwright:seatwright:admin:" + os.environ["%s"]]))'
)


def smg_wrapper_text(lay, policy=SMG_POLICY):
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
            % (SMG_KEY_ENV, SMG_KEY_ENV, lay["env_file"]),
            "exec %s/bin/python -c '%s' %s" % (lay["venv"], SMG_ENTRY % SMG_KEY_ENV, " ".join(argv)),
            "",
        ]
    )


# What the env file holds for seats that take no key (LiteLLM's config still names the variable).
NO_SEAT_KEY = "none"


def env_file_text(kind, key, seat_key=None):
    """The 0600 environment file the router's unit reads: the admin key under its variable, and the
    key the seats take (SEAT_KEY_ENV; NO_SEAT_KEY for seats that take none)."""
    seat_key = check_admin_key(seat_key, "seat API key") if seat_key else NO_SEAT_KEY
    return "%s=%s\n%s=%s\n" % (KEY_ENV[adapter.check_kind(kind)], check_admin_key(key), adapter.SEAT_KEY_ENV, seat_key)


def _env_value(text, name):
    """The value of `name` in an environment file's text, or None when it is absent or empty."""
    prefix = name + "="
    for line in (text or "").splitlines():
        if line.startswith(prefix):
            return line[len(prefix) :].strip() or None
    return None


def key_from_env_text(kind, text):
    """The admin key from the environment file's text, or None when it holds none."""
    return _env_value(text, KEY_ENV[adapter.check_kind(kind)])


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
    elif lay["kind"] == "litellm":
        lines += ["    location / {"] + _proxy_lines() + ["    }"]
        lines += ["    location ~ %s {" % DATA_PLANE_PATHS, "        proxy_set_header Authorization %s;" % AUTH_VAR]
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
    if adapter.check_kind(kind) == "litellm":
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
    if lay["kind"] == "smg":
        files.append({"path": lay["wrapper"], "content": smg_wrapper_text(lay), "mode": "0755"})
    return {
        "layout": lay,
        "specs": specs,
        "folders": folders,
        "files": files,
        "units": [spec["unit"] for _n, spec in sorted(specs.items())],
    }
