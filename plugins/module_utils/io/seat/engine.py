"""An engine rank's container on a node: start it to a spec, probe it, read it back, dump its stacks.

Every docker call is bounded (io/services.py). HTTP probes go to the address the seat serves on.
"""

import json
import os
import time

from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError, ServiceError
from ansible_collections.seatwright.fleet.plugins.module_utils.fabric.nccl import engine_transports
from ansible_collections.seatwright.fleet.plugins.module_utils.fabric.transport import observed_transport
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.files import atomic_write_bytes
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.openai_http import MAX_BODY_BYTES, get_text
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.services import (
    container_state,
    containers_labelled,
    docker,
    remove_container,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.node.drain import (
    PS_FORMAT,
    SEAT_LABEL,
    parse_seat_containers,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.container import (
    LABEL_PREFIX,
    SPEC_LABEL,
    check_spec,
    docker_run_argv,
    env_file_text,
    fingerprint,
    open_serving_problem,
    read_back,
    redact_argv,
    resolved_command,
    secret_env,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.readiness import (
    engine_pids,
    last_lines,
    ray_alive_verdict,
    readiness_verdict,
    root_cause,
    wait_progress,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.running import (
    compare_running,
    nccl_env_drift,
    parse_env_file,
    redact_env,
)

HTTP_TIMEOUT_S = 5
DUMP_TIMEOUT_S = 60


def image_id(reference):
    rc, out, err = docker("image", "inspect", "--format", "{{.Id}}", reference)
    if rc != 0:
        return None
    return out.strip() or None


def inspect_container(name):
    """`docker container inspect` of one container as a dict; None when there is no such container."""
    rc, out, err = docker("container", "inspect", name)
    if rc != 0:
        if rc is not None and "no such" in (err + out).lower():
            return None
        raise ServiceError(
            "docker container inspect %s %s"
            % (name, "overran" if rc is None else "failed: " + (err or out).strip()[-400:])
        )
    return json.loads(out)[0]


def image_env(reference):
    """The image's own env (Config.Env), which a container carries besides its spec's; [] when unreadable."""
    rc, out, _ = docker("image", "inspect", "--format", "{{json .Config.Env}}", reference)
    if rc != 0:
        return []
    return json.loads(out or "null") or []


def read_back_spec(spec, secrets=None, checked_image_id=None):
    """Sentences naming every field where the container Docker runs differs from its spec ([] when equal)."""
    data = inspect_container(spec["name"])
    if data is None:
        return ["%s: no such container; bring-up did not start it or something removed it" % spec["name"]]
    return read_back(spec, data, image_env(data.get("Image") or spec["image"]), checked_image_id, secrets)


def run_spec(spec, env_file, secrets=None, mark=None):
    """Start a spec's container (seat/container.py docker_run_argv); the env file is written 0600 first.

    The env file holds the spec's env and its env secrets: the only place a key is written.
    """
    payload = env_file_text(dict(spec["env"], **secret_env(spec, secrets)))
    atomic_write_bytes(env_file, payload.encode("utf-8"), mode=0o600)
    # The fingerprint label lets a re-run keep a container that already runs this spec.
    labels = dict(spec["labels"], **({SPEC_LABEL: mark} if mark else {}))
    command = docker_run_argv(dict(spec, labels=labels), env_file, secrets)
    rc, out, err = docker(*command, timeout_s=120)
    if rc != 0:
        # The docker CLI echoes no argv back, so its error cannot carry a secret flag's value.
        raise ServiceError(
            "docker run of %s failed: %s"
            % (spec["name"], "overran 120 s" if rc is None else (err or out).strip()[-600:])
        )
    return out.strip()


def _nccl_drift(spec, multi_node, nccl_env_file, host):
    if not multi_node:
        return
    if not os.path.exists(nccl_env_file):
        raise SeatError(
            "%s: %s is missing; prepare the node (site.yml, role nccl_env) before a multi-node seat"
            % (host, nccl_env_file)
        )
    with open(nccl_env_file, encoding="utf-8") as handle:
        drift = nccl_env_drift(host, spec["env"], parse_env_file(handle.read()))
    if drift:
        raise SeatError("%s; re-run site.yml (role nccl_env) and plan the seat again" % "; ".join(drift))


def start(params, check_mode=False):
    """state=started of seat_engine: keep the container when it runs its spec, else (re)start it.

    A container is kept only when its fingerprint label matches and reading it back finds no
    difference, so a container changed behind seatwright's back is replaced, with the fields named.
    """
    spec, secrets, host = params["spec"], params["secrets"] or {}, params["host_name"]
    check_spec(spec)
    # Refused before anything is removed or started: an env file that would gain lines, an open API.
    env_file_text(dict(spec["env"], **secret_env(spec, secrets)))
    problem = open_serving_problem(spec, secrets)
    if problem:
        raise SeatError("%s: %s" % (host, problem))
    present = image_id(spec["image"])
    if present is None:
        raise SeatError(
            "%s: image %s is not on this node; build or load it (the engine image role) before bring-up"
            % (host, spec["image"])
        )
    wanted = params["image_id"] or spec["image_id"]
    if wanted and present != wanted:
        raise SeatError(
            "%s: image %s on this node is %s, but bring-up checked %s; every node must run the same "
            "image: load the same build everywhere" % (host, spec["image"], present, wanted)
        )
    _nccl_drift(spec, params["multi_node"], params["nccl_env_file"], host)
    mark = fingerprint(spec, present, secrets)
    state = container_state(spec["name"])
    result = {"spec_hash": mark, "env": dict(spec["env"]), "started_epoch": time.time(), "container_id": state["id"]}
    drift = []
    if state["running"] and state["labels"].get(SPEC_LABEL) == mark:
        drift = read_back_spec(spec, secrets, present)
        if not drift:
            return dict(result, changed=False, action="kept", drift=[])
    result.update(changed=True, action="replaced" if state["exists"] else "started", drift=drift)
    if check_mode:
        return result
    if state["exists"]:
        remove_container(spec["name"], params["stop_timeout_s"])
    env_file = os.path.join(params["env_dir"], spec["name"] + ".env")
    result["container_id"] = run_spec(spec, env_file, secrets, mark)
    result["started_epoch"] = time.time()
    return result


def absent(params, check_mode=False):
    """state=absent of seat_engine: the named containers and every one labelled as the seat's, removed."""
    names = list(params["names"]) or ([params["name"]] if params["name"] else [])
    if params["seat"]:
        names += [n for n in containers_labelled(LABEL_PREFIX + "seat", params["seat"]) if n not in names]
    if check_mode:
        present = [n for n in names if container_state(n)["exists"]]
        return {"changed": bool(present), "removed": present}
    removed = remove(names, params["stop_timeout_s"], params["env_dir"])
    return {"changed": bool(removed), "removed": removed}


def engine_result(params, check_mode=False):
    """The seat_engine module's result for its params; SeatError or ServiceError say what is wrong."""
    if params["state"] == "started":
        if not params["spec"]:
            raise SeatError("seat_engine state=started needs spec: the rank's container spec from the plan")
        return start(params, check_mode)
    return absent(params, check_mode)


def logs(name, tail=None):
    args = ["logs"] + (["--tail", str(tail)] if tail else []) + [name]
    rc, out, err = docker(*args)
    if rc is None:
        return ""
    # Engines log to stderr; docker logs replays both streams.
    return (out or "") + (err or "")


def http_probe(base_url, api_key=None):
    """(health status or None, [model ids] or None, error text or None).

    Bounded and redirect-free like every other read from an engine (openai_http.get_text): a
    redirect would carry the key to wherever it points.
    """
    health = get_text(base_url + "/health", api_key, timeout_s=HTTP_TIMEOUT_S, limit=MAX_BODY_BYTES)
    if health["problem"]:
        return health["status"], None, "health: %s" % health["problem"]
    status, models, error = health["status"], None, None
    if status == 200:
        listing = get_text(base_url + "/v1/models", api_key, timeout_s=HTTP_TIMEOUT_S, limit=MAX_BODY_BYTES)
        if listing["problem"]:
            return status, None, "models: %s" % listing["problem"]
        try:
            data = json.loads(listing["text"] or "")
            models = [item.get("id") for item in data.get("data", []) if isinstance(item, dict)]
        except (ValueError, AttributeError) as exc:
            error = "models: not a model listing (%s)" % exc
    return status, models, error


def _exec(name, *args, **kwargs):
    return docker("exec", name, *args, **kwargs)


def process_argv_env(name, pid=1):
    """(argv, env) of a process inside the container, from /proc; (None, None) when unreadable."""
    rc, out, _ = _exec(name, "cat", "/proc/%d/cmdline" % pid)
    if rc != 0 or not out:
        return None, None
    argv = out.split("\0")
    if argv and argv[-1] == "":
        argv.pop()
    rc, out, _ = _exec(name, "cat", "/proc/%d/environ" % pid)
    env = {}
    if rc == 0:
        for item in out.split("\0"):
            if "=" in item:
                key, value = item.split("=", 1)
                env[key] = value
    return argv, env


def stack_dumps(name):
    """{pid: py-spy dump text} of every Python process in the container, each bounded."""
    rc, out, err = _exec(name, "ps", "-eo", "pid=,args=")
    if rc != 0:
        return {"ps": "could not list processes: %s" % ((err or out or "overran").strip()[-300:])}
    dumps = {"ps": out}
    for pid in engine_pids(out):
        rc, text, err = _exec(name, "py-spy", "dump", "--pid", str(pid), timeout_s=DUMP_TIMEOUT_S)
        dumps[str(pid)] = (
            text
            if rc == 0
            else "py-spy dump --pid %d %s: %s%s"
            % (pid, "overran %d s" % DUMP_TIMEOUT_S if rc is None else "failed (rc %s)" % rc, err, text)
        )
    return dumps


def probe(names, base_url=None, api_key=None, log_tail=40, full_log=False, read_process=False, dump=False, host="node"):
    """Everything bring-up asks of this node's engine containers, in one bounded pass.

    evidence_files maps evidence paths (logs/<host>-<container>.log, stacks/<host>-<container>.txt)
    to what was read, for the seat's evidence folder.
    """
    result = {"containers": [], "health_status": None, "models": None, "error": None, "evidence_files": {}}
    for name in names:
        state = container_state(name)
        entry = {
            "host": host,
            "name": name,
            "running": state["running"],
            "exists": state["exists"],
            "exit_code": state["exit_code"],
            "id": state["id"],
            "started_at": state["started_at"],
        }
        if state["exists"] and (log_tail or full_log):
            text = logs(name)
            entry["log_tail"] = last_lines(text, log_tail)
            entry["root_cause"] = root_cause(text)
            if full_log:
                entry["log"] = text
                result["evidence_files"]["logs/%s-%s.log" % (host, name)] = text
        if read_process and state["running"]:
            entry["argv"], entry["env"] = process_argv_env(name)
        if dump and state["running"]:
            entry["stack_dumps"] = stack_dumps(name)
            result["evidence_files"]["stacks/%s-%s.txt" % (host, name)] = "\n".join(
                "=== %s ===\n%s" % (("ps -eo pid,args" if pid == "ps" else "py-spy dump --pid " + pid), text)
                for pid, text in entry["stack_dumps"].items()
            )
        result["containers"].append(entry)
    if base_url:
        result["health_status"], result["models"], result["error"] = http_probe(base_url, api_key)
    return result


_RAY_NODES = (
    "import json, ray; ray.init(address='auto', logging_level='ERROR', log_to_driver=False); "
    "print('SEATWRIGHT-RAY-NODES ' + json.dumps(ray.nodes(), default=str))"
)


def ray_nodes(name):
    """ray.nodes() as seen from the Ray head container, or (None, why)."""
    rc, out, err = _exec(name, "python3", "-c", _RAY_NODES, timeout_s=60)
    for line in (out or "").splitlines():
        if line.startswith("SEATWRIGHT-RAY-NODES "):
            return json.loads(line.split(" ", 1)[1]), None
    return None, "ray.nodes() in %s %s: %s" % (
        name,
        "overran 60 s" if rc is None else "gave no answer (rc %s)" % rc,
        last_lines(err or out, 3),
    )


def remove(names, stop_timeout_s, env_dir):
    """Bounded stop and force-remove of each container, and its env file; names of those removed."""
    removed = []
    for name in names:
        if remove_container(name, stop_timeout_s):
            removed.append(name)
        env_file = os.path.join(env_dir, name + ".env")
        if os.path.exists(env_file):
            os.unlink(env_file)
    return removed


def _ray_verdict(params, first, elapsed):
    nodes, why = ray_nodes(params["names"][0]) if first["running"] else (None, "%s is not running" % first["name"])
    if nodes is not None:
        return nodes, ray_alive_verdict(nodes, params["ray_expected"], elapsed or 0, params["timeout_s"])
    verdict = {"alive": False, "done": False, "failed": False, "missing": [why], "message": why}
    if not first["running"] or (elapsed is not None and elapsed >= params["timeout_s"]):
        verdict.update(done=True, failed=True)
    return None, verdict


def probe_result(params):
    """The seat_engine_probe module's result: state, verdicts, read-back differences, redacted env."""
    result = probe(
        params["names"],
        params["base_url"],
        params["api_key"],
        params["log_tail"],
        params["full_log"],
        params["read_process"],
        params["dump"],
        params["host"],
    )
    first = result["containers"][0]
    elapsed = None if params["started_epoch"] is None else time.time() - params["started_epoch"]
    if params["ray_expected"] is not None:
        result["ray_nodes"], result["verdict"] = _ray_verdict(params, first, elapsed)
    elif elapsed is not None and params["timeout_s"] is not None:
        result["verdict"] = readiness_verdict(result, elapsed, params["timeout_s"], params["served_name"])
    if "verdict" in result and elapsed is not None and params["timeout_s"] is not None:
        # Each retry of the wait prints this (callback seatwright.fleet.progress), not "FAILED - RETRYING".
        kind = "engine" if params["ray_expected"] is None else "ray"
        result["progress"] = wait_progress(kind, result, result["verdict"], elapsed, params["timeout_s"])
    specs = {spec.get("name"): spec for spec in params.get("expected_specs") or []}
    expected_argv = params["expected_argv"]
    for item in result["containers"]:
        spec = specs.get(item["name"])
        if spec and item.get("argv") is not None:
            # A flag secret (SGLang's --api-key) is in the process's argv: compared by hash, never kept.
            item["argv"] = redact_argv(item["argv"], spec, params.get("secrets"))
            if item is first and expected_argv is not None:
                expected_argv = [spec["entrypoint"]] + resolved_command(spec, params.get("secrets") or {}, shown=True)
    if expected_argv is not None and params["read_process"]:
        result["differences"] = compare_running(
            params["host"], expected_argv, first.get("argv"), params["expected_env"] or {}, first.get("env")
        )
    if params.get("expected_specs") is not None:
        differences = result.setdefault("differences", [])
        for spec in params["expected_specs"]:
            check_spec(spec)
            differences += [
                "%s: %s" % (params["host"], item)
                for item in read_back_spec(spec, params.get("secrets"), params.get("image_id"))
            ]
    for item in result["containers"]:
        if item.get("env") is not None:
            item["env"] = redact_env(item["env"])
        # The whole log travels once, as an evidence file, not twice.
        log = item.pop("log", "")
        if item is first and params["transports"] is not None:
            transports = params["transports"]
            result["nccl"] = engine_transports(log, bool(transports.get("multi_node")), bool(transports.get("roce")))
            result["transport"] = observed_transport(
                log,
                result["nccl"],
                transports.get("required"),
                # A templated "False" is false (the role passes a Jinja comparison).
                boolean(transports.get("must_show", False), strict=False),
                params["host"],
            )
    return result


def seat_containers(stopped_too=True):
    """(rc, [{name, image, running, seat, rank}], error text) of this node's seat containers, found by the
    seat label (docker ps); a ServiceError where Docker cannot be run. One listing for the drain's facts
    and the co-tenant restore."""
    argv = ["ps"] + (["--all"] if stopped_too else []) + ["--filter", "label=" + SEAT_LABEL, "--format", PS_FORMAT]
    rc, out, err = docker(*argv)
    return rc, (parse_seat_containers(out) if rc == 0 else []), err or out
