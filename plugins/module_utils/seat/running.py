"""The running engine against its plan: its process's argv and env, and the node's NCCL env file.

The container itself is specified, started and read back in seat/container.py; this reads what
the engine process inside really runs. A multi-node rank's NCCL/Gloo env in the
plan is its node's (fabric/nccl.py node_env); bring-up checks the node's rendered env file still
says the same before it starts anything, so a plan made from stale facts cannot launch.
"""

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError

# The project's one redactor decides which env names hold secrets; redact_env is kept importable here.
from ansible_collections.seatwright.fleet.plugins.module_utils.evidence.redact import (  # noqa: F401
    redact_env,
    secret_name,
)


def container_name(seat, rank, part=None):
    """The container of one node rank (part: e.g. 'ray-head'); one name, so a re-run finds the running seat."""
    return "seatwright-%s-rank%d%s" % (seat, rank, "-" + part if part else "")


def parse_env_file(text):
    """KEY=VALUE lines of the node's nccl.env (comments and blanks skipped) as a dict."""
    env = {}
    for number, raw in enumerate((text or "").splitlines(), 1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        if "=" not in line:
            raise SeatError(
                "the node's NCCL env file, line %d: %r is not KEY=VALUE; re-run the nccl_env role" % (number, line)
            )
        key, value = line.split("=", 1)
        env[key.strip()] = value.strip()
    return env


def nccl_env_drift(host, plan_env, node_nccl_env):
    """Sentences naming every NCCL_/GLOO_ value where the node's rendered env file and the plan differ.

    Both come from fabric/nccl.py; a difference means the plan was made from other facts or
    settings than the node was prepared with.
    """
    keys = sorted({k for k in list(plan_env) + list(node_nccl_env or {}) if k.startswith(("NCCL_", "GLOO_"))})
    problems = []
    for key in keys:
        planned, rendered = plan_env.get(key), (node_nccl_env or {}).get(key)
        if planned != rendered:
            problems.append(
                "%s: %s is %s in the node's NCCL env file but %s in the plan"
                % (
                    host,
                    key,
                    "unset" if rendered is None else repr(rendered),
                    "unset" if planned is None else repr(planned),
                )
            )
    return problems


def _same_program(expected, running):
    # The kernel reports argv[0] as it was exec'ed; an image may resolve python3 to a full path.
    return expected == running or expected.rsplit("/", 1)[-1] == running.rsplit("/", 1)[-1]


def compare_running(host, expected_argv, running_argv, expected_env, running_env):
    """Differences between what the plan says a rank runs and what its process really runs.

    argv must match exactly (argv[0] by its base name); every expected env key must be present with
    the same value; extra keys the image sets are allowed. Returns a list of sentences, empty when
    they agree.
    """
    problems = []
    if running_argv is None:
        return ["%s: the engine process was not found in its container, so its argv could not be read" % host]
    if (
        not running_argv
        or len(running_argv) != len(expected_argv)
        or not _same_program(expected_argv[0], running_argv[0])
        or list(running_argv[1:]) != list(expected_argv[1:])
    ):
        shown = _first_difference(expected_argv, running_argv)
        problems.append("%s: the engine runs a different command line than the plan: %s" % (host, shown))
    for key in sorted(expected_env):
        want = expected_env[key]
        have = (running_env or {}).get(key)
        if have is None:
            problems.append("%s: env %s is not set in the engine process (the plan sets it)" % (host, key))
        elif have != want:
            if secret_name(key):
                problems.append("%s: env %s differs from the plan (value not shown)" % (host, key))
            else:
                problems.append("%s: env %s is %r in the engine process, the plan says %r" % (host, key, have, want))
    return problems


def _first_difference(expected, running):
    for index in range(max(len(expected), len(running))):
        want = expected[index] if index < len(expected) else None
        have = running[index] if index < len(running) else None
        if index == 0 and want is not None and have is not None and _same_program(want, have):
            continue
        if want != have:
            return "argument %d is %r, the plan says %r" % (index, have, want)
    return "the arguments differ"
