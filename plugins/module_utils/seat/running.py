"""The running engine against its plan: the container spec bring-up starts, and what it reads back.

One home for how a rank's container is specified (argv, env, labels) so that the start, the
idempotence check and the read-back comparison all agree. A multi-node rank's NCCL/Gloo env in the
plan is its node's (fabric/nccl.py node_env); bring-up checks the node's rendered env file still
says the same before it starts anything, so a plan made from stale facts cannot launch.
"""

import hashlib
import json

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError

# The project's one redactor decides which env names hold secrets; redact_env is kept importable here.
from ansible_collections.seatwright.fleet.plugins.module_utils.evidence.redact import (  # noqa: F401
    redact_env,
    secret_name,
)

LABEL_PREFIX = "io.seatwright."


def container_name(seat, rank, part=None):
    """The container of one node rank (part: e.g. 'ray-head'); one name, so a re-run finds the running seat."""
    return "seatwright-%s-rank%d%s" % (seat, rank, "-" + part if part else "")


def docker_run_argv(name, image, argv, env_file, labels, mounts, run_args):
    """The `docker run` arguments of a rank's container (after `docker`).

    Host network (the engine binds the node's addresses), the engine as PID 1 through
    --entrypoint (so its argv reads back exactly), the env from a file (it may hold the API key).
    """
    command = ["run", "--detach", "--name", name, "--network", "host", "--env-file", env_file]
    for key, value in sorted(labels.items()):
        command += ["--label", "%s%s=%s" % (LABEL_PREFIX, key, value)]
    for mount in mounts:
        command += ["--volume", mount]
    return command + list(run_args) + ["--entrypoint", argv[0], image] + list(argv[1:])


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


def spec_hash(image_id, argv, env, extra=None):
    """Fingerprint of what a rank's container runs; a changed plan changes it and replaces the seat.

    Secret values are hashed in, so a new API key also replaces the seat, without storing the key.
    """
    blob = json.dumps(
        {"image_id": image_id, "argv": list(argv), "env": sorted(env.items()), "extra": extra or {}},
        sort_keys=True,
        separators=(",", ":"),
    )
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


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
