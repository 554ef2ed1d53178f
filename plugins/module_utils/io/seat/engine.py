"""An engine rank's container on a node: start it to a spec, probe it, read it back, dump its stacks.

Every docker call is bounded (io/services.py). HTTP probes go to the address the seat serves on.
"""

import json
import os
import urllib.error
import urllib.request

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import ServiceError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.files import atomic_write_bytes
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.services import (
    container_state,
    docker,
    remove_container,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.readiness import engine_pids, last_lines
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.running import docker_run_argv

HTTP_TIMEOUT_S = 5
DUMP_TIMEOUT_S = 60


def image_id(reference):
    rc, out, err = docker("image", "inspect", "--format", "{{.Id}}", reference)
    if rc != 0:
        return None
    return out.strip() or None


def run_container(name, image, argv, env, env_file, labels, mounts, run_args):
    """Start the container (seat/running.py docker_run_argv); the env file is written 0600 first."""
    payload = "".join("%s=%s\n" % (key, value) for key, value in sorted(env.items()))
    atomic_write_bytes(env_file, payload.encode("utf-8"), mode=0o600)
    command = docker_run_argv(name, image, argv, env_file, labels, mounts, run_args)
    rc, out, err = docker(*command, timeout_s=120)
    if rc != 0:
        raise ServiceError(
            "docker run of %s failed: %s" % (name, "overran 120 s" if rc is None else (err or out).strip()[-600:])
        )
    return out.strip()


def logs(name, tail=None):
    args = ["logs"] + (["--tail", str(tail)] if tail else []) + [name]
    rc, out, err = docker(*args)
    if rc is None:
        return ""
    # Engines log to stderr; docker logs replays both streams.
    return (out or "") + (err or "")


def http_probe(base_url, api_key=None):
    """(health status or None, [model ids] or None, error text or None)."""
    headers = {"Authorization": "Bearer %s" % api_key} if api_key else {}
    status, models, error = None, None, None
    try:
        with urllib.request.urlopen(
            urllib.request.Request(base_url + "/health", headers=headers), timeout=HTTP_TIMEOUT_S
        ) as response:
            status = response.status
    except urllib.error.HTTPError as exc:
        status = exc.code
    except (urllib.error.URLError, OSError) as exc:
        return None, None, "health: %s" % getattr(exc, "reason", exc)
    if status == 200:
        try:
            with urllib.request.urlopen(
                urllib.request.Request(base_url + "/v1/models", headers=headers), timeout=HTTP_TIMEOUT_S
            ) as response:
                data = json.loads(response.read().decode("utf-8"))
            models = [item.get("id") for item in data.get("data", []) if isinstance(item, dict)]
        except (urllib.error.URLError, OSError, ValueError) as exc:
            error = "models: %s" % getattr(exc, "reason", exc)
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
