"""The LiteLLM proxy as a router kind: everything seatwright decides about it, in one description.

LiteLLM without a database reloads its config only by restarting, which drops requests
(docs/router.md). So it runs as two proxies, blue and green, on two private ports behind one public
address (nginx): a move renders the idle colour's config, restarts it, checks it and points the front
at it; the old colour stays up as the instant rollback target (runtime "colours", io/router/switch.py).
Its one key, the master key, is read from its environment, never written into its config. No I/O.
"""

from ansible_collections.seatwright.fleet.plugins.module_utils.router.kinds.shared import (
    COLOURS,
    UNIT_PREFIX,
    colour_ports,
    is_loopback,
)

NAME = "litellm"
# Pinned, and why: LiteLLM 1.82.7 and 1.82.8 were compromised on PyPI in March 2026.
PINNED = "1.110.2"
COMPROMISED = ("1.82.7", "1.82.8")
# LiteLLM's master key is read from the proxy's environment, never written into its config.
KEY_ENV = "LITELLM_MASTER_KEY"
# LiteLLM fetches a model cost map from the internet at start unless told to use its local copy.
ENVIRONMENT = {"LITELLM_LOCAL_MODEL_COST_MAP": "True"}
# Settings of every config the colours run: the prometheus callback serves /metrics/ (router request,
# latency and failure counters, https://docs.litellm.ai/docs/proxy/prometheus), which needs a key
# there (litellm.require_auth_for_metrics_endpoint, true in 1.110.2).
CONFIG_SETTINGS = {"callbacks": ["prometheus"]}
# Where Prometheus scrapes it: the public port (None: the router's own), behind the front, which
# trades the clients' key for the master key there as on the data plane (deploy.site_text), so
# Prometheus holds the clients' key, never the master key.
METRICS = {"port": None, "path": "/metrics/", "key": "clients"}
# What pip installs in the router's venv for a release other than the pinned one.
PIP_SPEC = "litellm[proxy]=={version}"
# What pip installs for the pinned release, each pinned: the role's default (router_pip_packages) and
# `make router-venvs` (scripts/router-venvs) both read it. LiteLLM's [proxy] extra names
# litellm-proxy, missing from the package index this was recorded on, so the extra's packages the
# proxy asked for are listed by hand (tests/fixtures/router/README.md; the last three were in the
# recording's venv unlisted, and the proxy stops at start without them).
PIP_PINNED = (
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
    # The prometheus callback's client library (litellm_settings.callbacks, CONFIG_SETTINGS below).
    "prometheus_client==0.26.0",
)
# The whole closure of the pinned release, every package at its version, as `pip freeze` printed it
# from a venv of PIP_PINNED made on Debian 12 (Python 3.11) from the index of 2026-12-02
# (`scripts/router-venvs --freeze litellm` prints it again). The role installs this, not the
# top-level list: a dependency that floats with the index is an unpinned router.
PIP_LOCKED = (
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
    "prometheus_client==0.26.0",
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
)


def exposure_refusal(bind, seats_keyed, clients_keyed, authenticating_front):
    """LiteLLM without a database has one key, its master key: clients beyond this node get their own
    (router_api_key), or they would hold the key that also changes the router's deployments."""
    if not is_loopback(bind) and not clients_keyed:
        return (
            "router_bind %r opens LiteLLM beyond this node, and without router_api_key its clients would "
            "hold the master key, which also changes the router's deployments: set router_api_key (vault) "
            "to a key of the clients' own, other than router_admin_key" % bind
        )
    return None


def layout(found):
    """The colours' ports, units and configs; the controller's calls on the node go through the
    front (the admin key passes as it is)."""
    conf = found["config_dir"]
    return {
        "router_url": found["front_url"],
        "colours": {
            colour: {
                "port": private,
                "unit": "%s-litellm-%s.service" % (UNIT_PREFIX, colour),
                "config": "%s/litellm-%s.yaml" % (conf, colour),
            }
            for colour, private in colour_ports(found["port"]).items()
        },
    }


def service_specs(lay, user):
    """One proxy per colour, on 127.0.0.1 behind the front."""
    specs = {}
    for colour, item in sorted(lay["colours"].items()):
        argv = [lay["venv"] + "/bin/litellm", "--config", item["config"], "--host", "127.0.0.1"]
        specs[colour] = {
            "unit": item["unit"],
            "config": item["config"],
            "argv": argv + ["--port", str(item["port"])],
            "environment": dict(ENVIRONMENT),
            "env_file": lay["env_file"],
            "user": user,
            "log": "%s/litellm-%s.log" % (lay["log_dir"], colour),
            "health": "http://127.0.0.1:%d/health/liveliness" % item["port"],
            # What a live process's command line holds (the pid file's check against a reused pid).
            "match": [str(item["port"])],
        }
    return specs


def files(lay):
    """No file beyond the units and the front: each colour's config is written at a move."""
    return []


def serving_spec(specs, active):
    """The process that answers the API: the serving colour (`active()` reads it; blue before the
    first move)."""
    return specs[active() or COLOURS[0]]


def refusal_hint(call, status, text):
    """What to do when LiteLLM's admin API refuses for want of a database (recorded)."""
    if "No DB Connected" in (text or "") or "DB not connected" in (text or ""):
        return (
            "LiteLLM refused %s (HTTP %s): its admin API needs a database (DATABASE_URL); without one, "
            "render the config (litellm_config) and move the alias on a second proxy behind the same "
            "address, since a restart drops requests" % (call, status)
        )
    return None


KIND = {
    "name": NAME,
    "label": "LiteLLM",
    "pinned": PINNED,
    "compromised": COMPROMISED,
    "pip_spec": PIP_SPEC,
    "pip_pinned": PIP_PINNED,
    "pip_locked": PIP_LOCKED,
    # The command its venv must hold.
    "binary": "litellm",
    "key_env": KEY_ENV,
    # Debian's packages: nginx fronts the colours (the smallest build with the proxy module).
    "packages": ("nginx-light", "python3-venv"),
    # The colours need nginx in front whatever the clients send.
    "always_fronted": True,
    # How a move changes the targets on the node (io/router/switch.py): restart the idle colour.
    "runtime": "colours",
    # Deployments carry weights, so a canary gets the share asked for.
    "weights": True,
    # LiteLLM maps aliases itself and sends each seat its own name (adapter.seat_aliases).
    "routes_by_first_served_name": False,
    # Without router_api_key its only key is the master key, which its clients then send (promote.yml).
    "clients_send_admin_key": True,
    # The front trades the clients' key for the master key on the data plane (deploy.site_text).
    "front": "trade",
    "metrics": METRICS,
    "exposure_refusal": exposure_refusal,
    "layout": layout,
    "service_specs": service_specs,
    "files": files,
    "serving_spec": serving_spec,
    "refusal_hint": refusal_hint,
}
