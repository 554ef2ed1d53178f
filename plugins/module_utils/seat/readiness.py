"""Bounded waits of a bring-up: is the engine ready, dead, or out of time; is the Ray cluster whole.

The field's failures this answers: ranks that hung for 30 minutes printing nothing (a timeout
with a stack dump of every engine process, not an endless wait) and a container that died before
readiness while the client kept waiting (fail at once, with its last log lines).
"""

import re

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError

LOG_TAIL_LINES = 40
# One line of output per retry: a longer log line (a JSON dump, a traceback frame) is cut here.
PROGRESS_LOG_CHARS = 200
# What each bounded wait of a bring-up waits for, as the progress line names it.
WAITING_FOR = {
    "engine": "the engine to answer",
    "ray": "every node to join the Ray cluster",
}
_CONTROL = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]|[\x00-\x1f\x7f]")


# vLLM's line prefix: "(Worker pid=39) ERROR 12-03 20:29:16 [multiproc_executor.py:953] ".
_LOG_PREFIX = re.compile(r"^(\([\w ]+ pid=\d+\) )?((DEBUG|INFO|WARNING|ERROR|CRITICAL) [\d-]+ [\d:.]+ \[[^\]]*\] ?)?")
_EXCEPTION_LINE = re.compile(r"^(([A-Za-z_][\w.]*)?(Error|Exception|Exit|Interrupt))(: (.*))?$")
# Exceptions that only report another process's failure: the root cause is logged before them.
_WRAPPERS = ("see root cause above", "see stack trace for root cause", "engine core initialization failed")
ROOT_CAUSE_CHARS = 400


def root_cause(text):
    """The first exception an engine's log raised that is not a wrapper of another ("Engine core
    initialization failed. See root cause above."), with the lines that continue its message; None
    when the log raised none. A dead engine's last lines are often only the wrappers."""
    lines = []
    for line in (text or "").splitlines():
        prefix = _LOG_PREFIX.match(line.rstrip())
        lines.append((prefix.group(1) or "", line.rstrip()[prefix.end() :]))
    for index, (process, body) in enumerate(lines):
        if not _EXCEPTION_LINE.match(body) or any(w in body.lower() for w in _WRAPPERS):
            continue
        parts = [body]
        # The message goes on in the lines that follow from the same process, up to the next frame.
        for other, more in lines[index + 1 : index + 4]:
            if other != process or not more.strip() or _EXCEPTION_LINE.match(more):
                break
            if more.startswith((" ", "Traceback", "The above", "During handling")):
                break
            parts.append(more.strip())
        cause = " ".join(parts)
        return cause if len(cause) <= ROOT_CAUSE_CHARS else cause[: ROOT_CAUSE_CHARS - 3] + "..."
    return None


def last_lines(text, count=LOG_TAIL_LINES):
    """The last `count` non-empty lines of a log, oldest first."""
    lines = [line.rstrip() for line in (text or "").splitlines() if line.strip()]
    return lines[-count:] if count > 0 else []


def readiness_verdict(probe, elapsed_s, timeout_s, served_name):
    """The verdict of one readiness probe, with the seconds since the engine started (elapsed_s)."""
    verdict = _readiness(probe, elapsed_s, timeout_s, served_name)
    verdict["elapsed_s"] = round(elapsed_s, 1)
    return verdict


def _readiness(probe, elapsed_s, timeout_s, served_name):
    """{state: ready|waiting|exited|timeout, done, failed, message} from one probe of the seat.

    `probe`: {containers: [{host, name, running, exit_code}], health_status: HTTP status of
    /health or None, models: ids listed by /v1/models or None, error: why HTTP failed}.
    A container that is not running ends the wait at once, before the clock is looked at.
    """
    if not isinstance(timeout_s, (int, float)) or isinstance(timeout_s, bool) or timeout_s <= 0:
        raise SeatError(
            "the startup timeout is %r; expected a positive number of seconds "
            "(qualification.startup_timeout_s in the recipe)" % (timeout_s,)
        )
    containers = probe.get("containers") or []
    if not containers:
        return {
            "state": "exited",
            "done": True,
            "failed": True,
            "message": "no engine container is present; it was removed before it became ready",
        }
    dead = [c for c in containers if not c.get("running")]
    if dead:
        first = dead[0]
        return {
            "state": "exited",
            "done": True,
            "failed": True,
            "message": "engine container %s on %s is not running (exit code %s) after %.0f s, before it "
            "became ready%s"
            % (
                first["name"],
                first.get("host", "?"),
                first.get("exit_code"),
                elapsed_s,
                "; its log's first error: %s" % first["root_cause"] if first.get("root_cause") else "",
            ),
        }
    models = probe.get("models")
    healthy = probe.get("health_status") == 200
    if healthy and isinstance(models, list) and served_name in models:
        return {
            "state": "ready",
            "done": True,
            "failed": False,
            "message": "ready after %.0f s: /health answers 200 and /v1/models lists %s" % (elapsed_s, served_name),
        }
    if healthy and isinstance(models, list):
        # Serving, but not the model the plan named: waiting longer will not change that.
        return {
            "state": "exited",
            "done": True,
            "failed": True,
            "message": "the engine serves %s, not %s; the plan's served name and the engine disagree"
            % (", ".join(models) or "no model", served_name),
        }
    if elapsed_s >= timeout_s:
        return {
            "state": "timeout",
            "done": True,
            "failed": True,
            "message": "not ready after %.0f s (startup timeout %s s) while every engine container is "
            "still running: a hang; stack dumps of every engine process are in the evidence" % (elapsed_s, timeout_s),
        }
    return {
        "state": "waiting",
        "done": False,
        "failed": False,
        "message": "waiting %.0f/%s s (%s)"
        % (elapsed_s, timeout_s, probe.get("error") or "health %s" % (probe.get("health_status"),)),
    }


def ray_alive_verdict(nodes, expected, elapsed_s, timeout_s):
    """{alive, done, failed, missing, message}: every expected node alive in Ray with its resources.

    `nodes` is ray.nodes() as JSON (NodeManagerAddress, Alive, Resources); `expected` is
    [{host, address, resources: {name: minimum}}].
    """
    if not isinstance(nodes, list):
        raise SeatError("ray.nodes() gave %s, expected a list of nodes" % type(nodes).__name__)
    alive = {}
    for node in nodes:
        if isinstance(node, dict) and node.get("Alive"):
            alive[node.get("NodeManagerAddress")] = node.get("Resources") or {}
    missing = []
    for want in expected:
        have = alive.get(want["address"])
        if have is None:
            missing.append("%s (%s) is not alive in the Ray cluster" % (want["host"], want["address"]))
            continue
        for name, minimum in sorted((want.get("resources") or {}).items()):
            if have.get(name, 0) < minimum:
                missing.append(
                    "%s (%s) offers %s %s, the seat needs %s"
                    % (want["host"], want["address"], name, have.get(name, 0), minimum)
                )
    if not missing:
        return {
            "alive": True,
            "done": True,
            "failed": False,
            "missing": [],
            "message": "Ray cluster whole after %.0f s: %s"
            % (elapsed_s, ", ".join("%s (%s)" % (w["host"], w["address"]) for w in expected)),
        }
    if elapsed_s >= timeout_s:
        return {
            "alive": False,
            "done": True,
            "failed": True,
            "missing": missing,
            "message": "Ray cluster not whole after %.0f s (bound %s s): %s"
            % (elapsed_s, timeout_s, "; ".join(missing)),
        }
    return {
        "alive": False,
        "done": False,
        "failed": False,
        "missing": missing,
        "message": "waiting for Ray: %s" % "; ".join(missing),
    }


def progress_log_line(containers):
    """The newest log line of the first container that has one, fit for one line of output.

    Colour codes and control characters are dropped (tqdm's carriage returns already split the
    log into lines), runs of blanks are folded and the line is cut at PROGRESS_LOG_CHARS.
    """
    for container in containers or []:
        tail = container.get("log_tail") or []
        if not tail:
            continue
        line = " ".join(_CONTROL.sub(" ", tail[-1]).split())
        if len(line) > PROGRESS_LOG_CHARS:
            line = line[: PROGRESS_LOG_CHARS - 3] + "..."
        return line or None
    return None


def wait_progress(kind, probe, verdict, elapsed_s, timeout_s):
    """How far a bounded wait of the bring-up is, for the line each retry prints.

    {waiting_for, elapsed_s, timeout_s, detail, last_log}: `kind` is a key of WAITING_FOR;
    `detail` is what the last probe saw (the endpoint's answer, or the Ray nodes still missing);
    `last_log` the engine's newest log line. The seatwright.fleet.progress callback prints it.
    """
    if kind not in WAITING_FOR:
        raise SeatError("no bounded wait is called %r; expected one of %s" % (kind, ", ".join(sorted(WAITING_FOR))))
    if kind == "ray":
        detail = "; ".join(verdict.get("missing") or []) or None
    elif probe.get("health_status") is None:
        detail = "no answer from /health yet"
    elif probe.get("health_status") != 200:
        detail = "/health answers %s" % probe["health_status"]
    else:
        detail = "/health answers 200; /v1/models %s" % (
            "does not answer yet (%s)" % probe["error"] if probe.get("error") else "does not list the model yet"
        )
    return {
        "waiting_for": WAITING_FOR[kind],
        "elapsed_s": round(elapsed_s, 1),
        "timeout_s": timeout_s,
        "detail": detail,
        "last_log": progress_log_line(probe.get("containers")),
    }


def engine_pids(ps_text):
    """PIDs of the Python processes in an engine container, from `ps -eo pid=,args=`.

    Every one is dumped on a hang: the API server, the engine core and each worker (the field's
    rank-divergent deadlock showed only when local rank 0 and 1 were compared).
    """
    pids = []
    for line in (ps_text or "").splitlines():
        parts = line.strip().split(None, 1)
        if len(parts) != 2 or not parts[0].isdigit():
            continue
        command = parts[1]
        program = command.split()[0].rsplit("/", 1)[-1]
        if (
            program.startswith("python")
            or program in ("vllm", "ray", "sglang")
            or command.startswith(("VLLM::", "ray::"))
        ):
            if "py-spy" not in command:
                pids.append(int(parts[0]))
    return pids
