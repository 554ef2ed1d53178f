"""Containers and systemd units on a node, every call bounded in time.

The field's shutdown that hung Docker blocked the restore of the services it had evicted; so no
call here waits without a bound: each runs under a wall-clock timeout, and a stop that overruns
is escalated (kill for a co-tenant, which must survive to be restarted; force-remove for an engine
container, which the next bring-up recreates).
"""

import json
import os
import shutil
import subprocess

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import ServiceError

# Seconds a docker or systemctl call that is not itself a stop may take.
CALL_TIMEOUT_S = 30


def _binary(name):
    path = shutil.which(name) or next(
        (p for p in ("/usr/bin/" + name, "/usr/sbin/" + name, "/bin/" + name) if os.path.exists(p)), None
    )
    if path is None:
        raise ServiceError("%s is not installed on this node" % name)
    return path


def run(argv, timeout_s=CALL_TIMEOUT_S, input_text=None):
    """(rc, stdout, stderr); rc is None when the call overran `timeout_s` and was killed."""
    try:
        done = subprocess.run(argv, input=input_text, capture_output=True, text=True, timeout=timeout_s, check=False)
    except subprocess.TimeoutExpired as exc:

        def text(value):
            return value.decode("utf-8", "replace") if isinstance(value, bytes) else (value or "")

        return None, text(exc.stdout), text(exc.stderr)
    return done.returncode, done.stdout, done.stderr


def docker(*args, **kwargs):
    return run([_binary("docker")] + list(args), **kwargs)


def systemctl(*args, **kwargs):
    return run([_binary("systemctl")] + list(args), **kwargs)


def container_state(name):
    """{exists, running, exit_code, id, image, started_at, finished_at, labels, pid} of a container."""
    rc, out, err = docker("container", "inspect", name)
    if rc != 0:
        if rc is not None and "no such" in (err + out).lower():
            return {
                "exists": False,
                "running": False,
                "exit_code": None,
                "id": None,
                "image": None,
                "started_at": None,
                "finished_at": None,
                "labels": {},
                "pid": None,
            }
        raise ServiceError(
            "docker container inspect %s %s: %s"
            % (name, "overran %d s" % CALL_TIMEOUT_S if rc is None else "failed", (err or out).strip()[-400:])
        )
    data = json.loads(out)[0]
    state = data.get("State") or {}
    return {
        "exists": True,
        "running": bool(state.get("Running")),
        "exit_code": state.get("ExitCode"),
        "id": data.get("Id"),
        "image": data.get("Image"),
        "started_at": state.get("StartedAt"),
        "finished_at": state.get("FinishedAt"),
        "labels": (data.get("Config") or {}).get("Labels") or {},
        "pid": state.get("Pid"),
    }


def unit_running(name):
    rc, out, _ = systemctl("is-active", name)
    return rc == 0 and out.strip() == "active"


def is_running(kind, name):
    return container_state(name)["running"] if kind == "container" else unit_running(name)


def stop_cotenant(kind, name, timeout_s):
    """Stop a co-tenant within about timeout_s + 10 s; returns how: 'stopped' or 'killed'.

    A stop that overruns is escalated to a kill (never a removal: the restore starts it again).
    """
    if kind == "container":
        rc, out, err = docker("stop", "--time", str(timeout_s), name, timeout_s=timeout_s + 10)
        if rc == 0:
            return "stopped"
        rc, out, err = docker("kill", name, timeout_s=CALL_TIMEOUT_S)
        if rc == 0 or not container_state(name)["running"]:
            return "killed"
    else:
        rc, out, err = systemctl("stop", name, timeout_s=timeout_s + 10)
        if rc == 0:
            return "stopped"
        rc, out, err = systemctl("kill", "--signal=SIGKILL", name, timeout_s=CALL_TIMEOUT_S)
        if rc == 0 or not unit_running(name):
            return "killed"
    raise ServiceError(
        "could not stop %s %s within %d s, nor kill it: %s"
        % (kind, name, timeout_s + 10, (err or out or "no output").strip()[-400:])
    )


def start_cotenant(kind, name):
    if kind == "container":
        rc, out, err = docker("start", name)
    else:
        rc, out, err = systemctl("start", name, timeout_s=120)
    if rc != 0:
        raise ServiceError(
            "could not start %s %s: %s"
            % (kind, name, "overran" if rc is None else (err or out or "no output").strip()[-400:])
        )


def remove_container(name, stop_timeout_s):
    """Bounded stop, then force-remove; returns True when a container was there."""
    if not container_state(name)["exists"]:
        return False
    docker("stop", "--time", str(stop_timeout_s), name, timeout_s=stop_timeout_s + 10)
    rc, out, err = docker("rm", "--force", name, timeout_s=CALL_TIMEOUT_S)
    if rc != 0 and container_state(name)["exists"]:
        raise ServiceError(
            "could not remove container %s: %s"
            % (name, "docker rm --force overran %d s" % CALL_TIMEOUT_S if rc is None else (err or out).strip()[-400:])
        )
    return True


def containers_labelled(label, value):
    """Names of every container (running or not) whose label `label` is `value`."""
    rc, out, err = docker("ps", "--all", "--filter", "label=%s=%s" % (label, value), "--format", "{{.Names}}")
    if rc != 0:
        raise ServiceError(
            "docker ps --filter label=%s=%s %s: %s"
            % (label, value, "overran" if rc is None else "failed", (err or out).strip()[-400:])
        )
    return sorted(line.strip() for line in out.splitlines() if line.strip())
