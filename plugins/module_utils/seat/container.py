"""The container of every rank, rendered from the plan: what bring-up starts and what read-back checks.

A spec is plain data (JSON in the plan): image, entrypoint and command, env, labels, network and
IPC mode, /dev/shm, GPUs and their capabilities, ulimits, added Linux capabilities, privileged,
mounts, RDMA device nodes, and any site run options. Secrets are held in a spec by name ({"secret": name, ...}),
never by value: the value is supplied only when the container starts, and read-back compares it
by hash. The cross-node all-reduce's containers are specs too (fabric/crossnode.py container_spec).
`docker_run_argv` is the one place a spec becomes a `docker run` command line;
`read_back` compares a spec with what Docker reports for the started container.
"""

import hashlib
import json

from ansible_collections.seatwright.fleet.plugins.module_utils.addresses import is_wildcard
from ansible_collections.seatwright.fleet.plugins.module_utils.defaults import MODELS_DIR
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.engines import engine as engine_table
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.launch import model_dir

LABEL_PREFIX = "io.seatwright."
# The fingerprint label: it says which spec a running container was started from.
SPEC_LABEL = LABEL_PREFIX + "spec"
# Where each node keeps checkpoints unless the inventory sets seat_models_root (the one home's value).
DEFAULT_MODELS_ROOT = MODELS_DIR
# The secret the seat role supplies at start: the API key the endpoint requires (seat_api_key).
API_KEY_SECRET = "seat_api_key"
GIB = 1024**3
# Every engine needs more /dev/shm than Docker's 64 MiB: vLLM's CPU build asked 160 MiB for its
# broadcast queue in the lab; GPU seats share the host's IPC namespace for NCCL as well.
SHM_BYTES = {"cuda": 16 * GIB, "cpu": 2 * GIB}
PARTS = ("engine", "ray-head", "ray-worker")
# Added to every container of a seat so a hang can be diagnosed on a stock host: py-spy attaches to
# the engine's processes with ptrace, which Docker's default capabilities leave out.
DIAGNOSIS_CAPS = ("SYS_PTRACE",)
SHOWN_SECRET = "<secret %s>"


def secret_hash(value):
    """The hash read-back compares a secret by; the value itself is never stored or shown."""
    return hashlib.sha256(value.encode("utf-8")).hexdigest()


def api_key_route(engine_name):
    """How `engine_name` takes its API key: {"env": NAME} or {"flag": FLAG, "note": why}."""
    return dict(engine_table(engine_name)["api_key"])


def _gpu_fields(device, gpus):
    if device != "cuda":
        # Said outright, not left to the daemon's default IPC mode, so read-back can compare it.
        return {"gpus": None, "ipc_mode": "private", "ulimits": []}
    return {
        # Docker's --gpus device list: the GPUs this rank owns, with the 'gpu' capability.
        "gpus": {"device_ids": [str(index) for index in gpus], "capabilities": [["gpu"]]},
        # Host IPC for NCCL's shared memory; unlimited locked memory for RDMA registration.
        "ipc_mode": "host",
        "ulimits": [{"name": "memlock", "soft": -1, "hard": -1}],
    }


def _rdma_fields(device, rdma):
    """The RDMA device nodes and added capabilities of a rank's container: what fabric/transport.py
    container_rdma decided for its node (None: a one-node or CPU seat, nothing passed), and
    DIAGNOSIS_CAPS on every container."""
    if device != "cuda" or not rdma:
        return {"devices": [], "cap_add": list(DIAGNOSIS_CAPS), "rdma_source": None}
    caps = list(rdma["cap_add"]) + [cap for cap in DIAGNOSIS_CAPS if cap not in rdma["cap_add"]]
    return {"devices": list(rdma["devices"]), "cap_add": caps, "rdma_source": rdma["source"]}


def container_spec(plan_ctx, rank, part):
    """The spec of one container of a rank: part is 'engine', 'ray-head' or 'ray-worker'.

    plan_ctx: {seat, engine, device, image, image_id, served_name, models_root,
    run_args, rdma}; rdma is the node's container_rdma (fabric/transport.py) for a multi-node
    seat, else absent. Every part of a GPU rank gets it: Ray runs the engine's workers inside
    the ray-head and ray-worker containers. The engine container of node rank 0 takes the API key by the engine's route;
    no other container serves the API, so none holds the key.
    """
    if part not in PARTS:
        raise SeatError("container part %r is not one of %s" % (part, ", ".join(PARTS)))
    # The Ray head is PID 1 of its container: without --block `ray start` returns and the container exits.
    argv = list(rank["setup"][0]) + ["--block"] if part == "ray-head" else list(rank["argv"])
    env = dict(rank["env"])
    name = rank["setup_container"] if part == "ray-head" else rank["container"]
    if part == "ray-head":
        # The Ray head is the cluster, not a driver: it must not try to join an address.
        env.pop("RAY_ADDRESS", None)
    secrets = []
    if part == "engine" and rank["rank"] == 0:
        secrets.append(dict(api_key_route(plan_ctx["engine"]), secret=API_KEY_SECRET))
    served = plan_ctx["served_name"]
    spec = {
        "name": name,
        "part": part,
        "image": plan_ctx["image"],
        "image_id": plan_ctx.get("image_id"),
        "entrypoint": argv[0],
        "command": argv[1:],
        "env": env,
        "secrets": secrets,
        "labels": {
            LABEL_PREFIX + "seat": plan_ctx["seat"],
            LABEL_PREFIX + "rank": str(rank["rank"]),
            LABEL_PREFIX + "role": part if part != "engine" else rank["role"],
        },
        "network_mode": "host",
        "shm_size_bytes": SHM_BYTES["cuda" if plan_ctx["device"] == "cuda" else "cpu"],
        "privileged": False,
        "mounts": [
            {
                "source": "%s/%s" % (plan_ctx["models_root"].rstrip("/"), served),
                "target": model_dir(served),
                "read_only": True,
            }
        ],
        # Site options from seat_engine_run_args: passed through, fingerprinted, not read back.
        "run_args": [str(arg) for arg in plan_ctx.get("run_args") or []],
    }
    spec.update(_gpu_fields(plan_ctx["device"], rank["gpus"]))
    spec.update(_rdma_fields(plan_ctx["device"], plan_ctx.get("rdma")))
    return spec


SPEC_FIELDS = (
    "name",
    "part",
    "image",
    "image_id",
    "entrypoint",
    "command",
    "env",
    "secrets",
    "labels",
    "network_mode",
    "ipc_mode",
    "shm_size_bytes",
    "gpus",
    "ulimits",
    "cap_add",
    "devices",
    "rdma_source",
    "privileged",
    "mounts",
    "run_args",
)


def check_spec(spec):
    """SeatError when `spec` is not a whole container spec (a plan from an older seatwright, a typo)."""
    missing = [field for field in SPEC_FIELDS if field not in (spec or {})]
    if missing:
        raise SeatError(
            "the container spec %s lacks %s; plan the seat again (playbooks/plan.yml) so every rank "
            "carries a whole spec" % ((spec or {}).get("name", "(unnamed)"), ", ".join(missing))
        )
    if not spec["image"]:
        raise SeatError(
            "the container spec %s names no image; pin engine.image in the recipe and plan again" % spec["name"]
        )
    for item in spec["secrets"]:
        if "secret" not in item or not ("env" in item or "flag" in item):
            raise SeatError(
                "the container spec %s has a secret %r that names neither an env variable nor a flag; "
                "plan the seat again" % (spec["name"], item)
            )


def env_file_text(env):
    """The docker --env-file text of `env`: one NAME=value line each.

    Docker's env file has no quoting, so a line break in a value would start a line of its own
    (another variable); such a name or value is refused, naming the variable, never the value.
    """
    lines = []
    for name, value in sorted(env.items()):
        value = str(value)
        if not name or any(c in name for c in "=\r\n\0 "):
            raise SeatError("env %r: not a variable name (it holds '=', a space, a line break or NUL)" % name)
        if any(c in value for c in "\r\n\0"):
            raise SeatError(
                "env %s: its value holds a line break or NUL, which would add lines to the engine's env "
                "file; remove it from serving.env (or the secret)" % name
            )
        lines.append("%s=%s\n" % (name, value))
    return "".join(lines)


def serve_host(spec):
    """The address the spec's engine binds its API to (the value after --host), or None."""
    command = spec.get("command") or []
    for index, arg in enumerate(command[:-1]):
        if arg == "--host":
            return command[index + 1]
    return None


def open_serving_problem(spec, secrets):
    """Why the spec must not start: its API listens on every interface with no API key; else None."""
    if not any(item.get("secret") == API_KEY_SECRET for item in spec["secrets"]):
        return None
    host = serve_host(spec)
    if host is None or not is_wildcard(host) or _secret_value(secrets, {"secret": API_KEY_SECRET}):
        return None
    return (
        "%s would serve the API on every interface (%s) with no API key: anyone who reaches the node "
        "could use it. Set seat_api_key (keep it in a vault), or set seatwright_node_serve_address to "
        "one address" % (spec["name"], host)
    )


def rank_specs(plan_ctx, rank):
    """(the rank's own container spec, the Ray head's spec or None) for one rendered rank."""
    own = "ray-worker" if rank["role"] == "ray-worker" else "engine"
    setup = container_spec(plan_ctx, rank, "ray-head") if rank["setup"] else None
    return container_spec(plan_ctx, rank, own), setup


def _secret_value(secrets, item):
    value = (secrets or {}).get(item["secret"])
    return str(value) if value not in (None, "") else None


def resolved_command(spec, secrets=None, shown=False):
    """The spec's command with each flag secret appended: its value, or a placeholder when shown.

    Shown without secrets (the plan), every flag secret appears as a placeholder; shown with
    secrets (read-back), only those that have a value.
    """
    command = list(spec["command"])
    for item in spec["secrets"]:
        if "flag" not in item:
            continue
        value = _secret_value(secrets, item)
        if shown and (secrets is None or value is not None):
            command += [item["flag"], SHOWN_SECRET % item["secret"]]
        elif not shown and value is not None:
            command += [item["flag"], value]
    return command


def redact_argv(argv, spec, secrets=None):
    """A process's argv with the value after each of the spec's secret flags replaced.

    The placeholder says whether the value matched the secret (compared by hash), so the
    argv can be compared with the plan's and written to evidence without the key.
    """
    flags = {item["flag"]: item for item in spec["secrets"] if "flag" in item}
    out = list(argv or [])
    for index in range(len(out) - 1):
        item = flags.get(out[index])
        if item is None:
            continue
        value = _secret_value(secrets, item)
        same = value is not None and secret_hash(out[index + 1]) == secret_hash(value)
        out[index + 1] = SHOWN_SECRET % item["secret"] if same else "<not the secret %s>" % item["secret"]
    return out


def secret_env(spec, secrets):
    """{env name: value} of the spec's env secrets that have a value; for the 0600 env file only."""
    env = {}
    for item in spec["secrets"]:
        value = _secret_value(secrets, item)
        if "env" in item and value is not None:
            env[item["env"]] = value
    return env


def _size_text(size):
    return "%dg" % (size // GIB) if size % GIB == 0 else "%db" % size


def docker_run_argv(spec, env_file, secrets=None, shown=False, detach=True):
    """`docker run` arguments (after `docker`) that start the spec's container.

    The env comes from env_file (0600: it may hold the API key); with no env_file, a spec that holds
    no secret gives its env on the command line (-e). The engine is PID 1 through --entrypoint, so
    its argv reads back exactly. shown=True renders secrets as placeholders, for the plan and --check
    output. detach=False runs it in the foreground and removes it when it exits (a probe's run).
    """
    command = ["run", "--detach" if detach else "--rm", "--name", spec["name"], "--network", spec["network_mode"]]
    if env_file:
        command += ["--env-file", env_file]
    elif spec["secrets"]:
        raise SeatError("the container spec %s holds secrets, so its env must come from an env file" % spec["name"])
    else:
        for key, value in sorted(spec["env"].items()):
            command += ["-e", "%s=%s" % (key, value)]
    for key, value in sorted(spec["labels"].items()):
        command += ["--label", "%s=%s" % (key, value)]
    for mount in spec["mounts"]:
        command += ["-v", "%s:%s%s" % (mount["source"], mount["target"], ":ro" if mount["read_only"] else "")]
    if spec["gpus"] and spec["gpus"]["device_ids"] is None:
        command += ["--gpus", "all"]
    elif spec["gpus"]:
        # Docker wants the device list quoted when it holds a comma.
        command += ["--gpus", '"device=%s"' % ",".join(spec["gpus"]["device_ids"])]
    command += ["--ipc", spec["ipc_mode"]]
    if spec["shm_size_bytes"] is not None:
        command += ["--shm-size", _size_text(spec["shm_size_bytes"])]
    for limit in spec["ulimits"]:
        command += ["--ulimit", "%s=%d:%d" % (limit["name"], limit["soft"], limit["hard"])]
    for device in spec["devices"]:
        # A folder passes every device node under it (uverbsN and rdma_cm for /dev/infiniband).
        command += ["--device", device]
    for capability in spec["cap_add"]:
        command += ["--cap-add", capability]
    if spec["privileged"]:
        command.append("--privileged")
    command += list(spec["run_args"])
    return command + ["--entrypoint", spec["entrypoint"], spec["image"]] + resolved_command(spec, secrets, shown)


def fingerprint(spec, image_id, secrets=None):
    """Fingerprint of what a container runs: a changed spec, image or secret replaces it.

    Secret values enter only as hashes, so the label never carries a key.
    """
    hashed = {item["secret"]: secret_hash(_secret_value(secrets, item) or "") for item in spec["secrets"]}
    blob = json.dumps({"spec": spec, "image_id": image_id, "secrets": hashed}, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def _env_dict(items):
    env = {}
    for item in items or []:
        key, _, value = item.partition("=")
        env[key] = value
    return env


def _bare_capability(name):
    """SYS_PTRACE for 'CAP_SYS_PTRACE' or 'sys_ptrace', as docker run --cap-add takes it."""
    text = str(name).upper()
    return text[4:] if text.startswith("CAP_") else text


def observed(inspect):
    """The spec's fields as Docker reports them for a container (`docker container inspect`)."""
    config = inspect.get("Config") or {}
    host = inspect.get("HostConfig") or {}
    requests = host.get("DeviceRequests") or []
    gpus = None
    if requests:
        first = requests[0]
        gpus = {"device_ids": list(first.get("DeviceIDs") or []), "capabilities": first.get("Capabilities") or []}
    entrypoint = config.get("Entrypoint") or []
    return {
        "name": (inspect.get("Name") or "").lstrip("/"),
        "image": config.get("Image"),
        "image_id": inspect.get("Image"),
        "entrypoint": entrypoint[0] if len(entrypoint) == 1 else entrypoint,
        "command": list(config.get("Cmd") or []),
        "env": _env_dict(config.get("Env")),
        "labels": {
            k: v for k, v in (config.get("Labels") or {}).items() if k.startswith(LABEL_PREFIX) and k != SPEC_LABEL
        },
        "network_mode": host.get("NetworkMode"),
        "ipc_mode": host.get("IpcMode"),
        "shm_size_bytes": host.get("ShmSize"),
        "gpus": gpus,
        "ulimits": [
            {"name": item.get("Name"), "soft": item.get("Soft"), "hard": item.get("Hard")}
            for item in host.get("Ulimits") or []
        ],
        # Docker may report a capability with its kernel prefix (CAP_SYS_PTRACE); the spec names it bare.
        "cap_add": [_bare_capability(item) for item in host.get("CapAdd") or []],
        # Docker keeps a --device as given (a folder stays one entry), path on host and in container.
        "devices": [
            item.get("PathOnHost")
            if item.get("PathInContainer") in (None, "", item.get("PathOnHost"))
            else "%s:%s" % (item.get("PathOnHost"), item.get("PathInContainer"))
            for item in host.get("Devices") or []
        ],
        "privileged": bool(host.get("Privileged")),
        "mounts": [
            {"source": item.get("Source"), "target": item.get("Destination"), "read_only": not item.get("RW", True)}
            for item in inspect.get("Mounts") or []
            if item.get("Type") == "bind"
        ],
    }


def _same_program(expected, running):
    # An entrypoint may be given by name or resolved to a full path; the program is the same.
    return expected == running or str(expected).rsplit("/", 1)[-1] == str(running).rsplit("/", 1)[-1]


def _compare_command(spec, have, secrets):
    want = resolved_command(spec, secrets)
    if have == want:
        return []
    flags = {item["flag"]: item["secret"] for item in spec["secrets"] if "flag" in item}
    for index in range(max(len(want), len(have))):
        expected = want[index] if index < len(want) else None
        running = have[index] if index < len(have) else None
        if expected == running:
            continue
        previous = want[index - 1] if 0 < index <= len(want) else None
        if previous in flags:
            return [
                "command: the value after %s differs from the secret %s (value not shown)" % (previous, flags[previous])
            ]
        return ["command: argument %d is %r, the plan says %r" % (index + 1, running, expected)]
    return []


def _compare_env(spec, have, image_env, secrets):
    problems = []
    secret_names = {}
    for item in spec["secrets"]:
        if "env" in item:
            secret_names[item["env"]] = item
    for key in sorted(spec["env"]):
        if key not in have:
            problems.append("env %s: not set, the plan sets %r" % (key, spec["env"][key]))
        elif have[key] != spec["env"][key]:
            problems.append("env %s: %r, the plan says %r" % (key, have[key], spec["env"][key]))
    for key, item in sorted(secret_names.items()):
        value = _secret_value(secrets, item)
        if value is None and key in have:
            problems.append("env %s: set, but the secret %s is empty so the plan sets none" % (key, item["secret"]))
        elif value is not None and key not in have:
            problems.append("env %s: not set, the plan sets it from the secret %s" % (key, item["secret"]))
        elif value is not None and secret_hash(have[key]) != secret_hash(value):
            problems.append("env %s: differs from the secret %s (value not shown)" % (key, item["secret"]))
    for key in sorted(set(have) - set(spec["env"]) - set(secret_names)):
        # The image's own env (PATH and the like) is allowed; anything else was added behind the plan.
        if (image_env or {}).get(key) != have[key]:
            problems.append("env %s: set to %r, which neither the plan nor the image sets" % (key, have[key]))
    return problems


SIMPLE_FIELDS = (
    "name",
    "image",
    "labels",
    "network_mode",
    "ipc_mode",
    "shm_size_bytes",
    "gpus",
    "ulimits",
    "cap_add",
    "devices",
    "privileged",
    "mounts",
)


def read_back(spec, inspect, image_env=None, image_id=None, secrets=None):
    """Sentences naming every field where the started container differs from its spec; [] when equal.

    inspect: `docker container inspect` of the container; image_env: the image's own env (its
    Config.Env), which the container may carry besides the spec's; image_id: the id bring-up
    checked (else the spec's). Secrets are compared by hash and never shown. run_args are not
    read back field by field: they are site options Docker reports in many places.
    """
    have = observed(inspect)
    problems = []
    for field in SIMPLE_FIELDS:
        if field == "cap_add" and sorted(have[field]) == sorted(spec[field]):
            continue  # a set of capabilities: Docker need not keep their order
        if have[field] != spec[field]:
            problems.append("%s: %s, the plan says %s" % (field, json.dumps(have[field]), json.dumps(spec[field])))
    want_id = image_id or spec.get("image_id")
    if want_id and have["image_id"] != want_id:
        problems.append("image_id: %s, the plan says %s" % (have["image_id"], want_id))
    if not _same_program(spec["entrypoint"], have["entrypoint"]):
        problems.append("entrypoint: %s, the plan says %s" % (json.dumps(have["entrypoint"]), spec["entrypoint"]))
    problems += _compare_command(spec, have["command"], secrets)
    problems += _compare_env(
        spec, have["env"], _env_dict(image_env) if isinstance(image_env, list) else image_env, secrets
    )
    return ["%s: %s" % (spec["name"], problem) for problem in problems]


def shown_run(spec):
    """The docker run line of a spec as the plan and --check show it (secrets by name)."""
    return ["docker"] + docker_run_argv(spec, "<seat_state_dir>/%s.env" % spec["name"], shown=True)
