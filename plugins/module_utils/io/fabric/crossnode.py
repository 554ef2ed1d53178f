"""The cross-node all-reduce of a node pair on a node: look up the cached fact, join, measure, store.

A pair runs in the pair probe's four steps (io/fabric/pair_probe.py drives them, as for the fabric
probe): `lookup` on the first node (node rank 0, which hosts the rendezvous) reads the cached
record; `join`, delegated to the peer, starts the peer's ranks in the background (bounded by
timeout; they wait for rank 0); `measure` on the first node runs its ranks in the foreground,
parses rank 0's output, caches the record and judges it; `store`, delegated to the peer, caches the
same record there. The ranks run in the engine image (the container spec of fabric/crossnode.py,
rendered by seat/container.py) or, with runtime `none`, under a local interpreter. Failures raise
NcclError with the message for people.
"""

import datetime
import inspect
import os
import subprocess
import sys
import time

from ansible_collections.seatwright.fleet.plugins.module_utils.defaults import STATE_DIR
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import NcclError
from ansible_collections.seatwright.fleet.plugins.module_utils.fabric.crossnode import (
    FACT,
    WORKER_IN_CONTAINER,
    container_argv,
    judge_pair,
    make_record,
    pair_inputs,
    pair_plan,
    parse_result,
    worker_argv,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.io.fabric import crossnode_worker
from ansible_collections.seatwright.fleet.plugins.module_utils.io.fabric.pair_probe import PairProbe, run_pair_step

FOLDER = "nccl_crossnode"
WARMUP = 5
# Sizes from here up are judged; smaller ones measure latency, not bandwidth.
JUDGE_MIN_BYTES = 64 * 1024 * 1024


def check_request(params):
    bad = [size for size in params["sizes"] if size < 4 or size % 4]
    if not params["sizes"] or bad:
        raise NcclError(
            "sizes must be byte counts that are positive multiples of 4 (float32 elements); got %s"
            % (bad or "an empty list")
        )
    if params["iters"] < 1 or params["timeout_s"] < 10:
        raise NcclError("iters must be >= 1 and timeout_s >= 10")
    if not 0 < params["threshold"] <= 1.0:
        raise NcclError("threshold is %r; expected a fraction of the link rate such as 0.8" % params["threshold"])
    if params["runtime"] == "docker" and not image_of(params)[0] and params["step"] in ("join", "measure"):
        raise NcclError(
            "runtime docker needs image (the engine image, e.g. from seatwright_engine_images); "
            "build it with playbooks/images.yml first"
        )


def image_of(params):
    """(reference, id) of the image parameter: the engine image's facts, or none."""
    image = params["image"] or {}
    return image.get("reference"), image.get("id")


def _worker_file(state_dir):
    """The worker written to the node (a real file: spawned interpreters re-import it)."""
    path = os.path.join(state_dir, FOLDER, "crossnode_worker.py")
    os.makedirs(os.path.dirname(path), exist_ok=True)
    source = inspect.getsource(crossnode_worker)
    try:
        with open(path) as handle:
            if handle.read() == source:
                return path
    except OSError:
        pass
    with open(path, "w") as handle:
        handle.write(source)
    return path


def command(module, params, plan, host):
    """(argv, environ_update) of `host`'s ranks: in the engine image, or under a local interpreter."""
    worker = _worker_file(params["state_dir"])
    run_env = {"NCCL_DEBUG": "INFO"}
    run_env.update({str(k): str(v) for k, v in (params["env"] or {}).items()})
    sizes, timeout = params["sizes"], params["timeout_s"]
    if params["runtime"] == "none":
        python = params["python"] or sys.executable
        argv = worker_argv(plan, host, params["port"], sizes, WARMUP, params["iters"], timeout, python, worker)
        return argv, run_env
    inner = worker_argv(
        plan,
        host,
        params["port"],
        sizes,
        WARMUP,
        params["iters"],
        timeout,
        params["python"] or "python3",
        WORKER_IN_CONTAINER,
    )
    docker = module.get_bin_path("docker")
    if not docker:
        raise NcclError("host %s: docker is not installed; the cross-node all-reduce runs in the engine image" % host)
    return container_argv(plan, host, image_of(params)[0], worker, run_env, inner, docker=docker), {}


def bounded(module, argv, seconds):
    timeout = module.get_bin_path("timeout")
    if not timeout:
        raise NcclError("coreutils timeout is missing; a hung collective must not hold the play")
    return [timeout, "--kill-after=10", str(seconds)] + argv


def peer_log(params, plan):
    return os.path.join(params["state_dir"], FOLDER, "%s-node1.log" % plan["pair"].replace("<->", "--"))


def join(module, params, plan, peer):
    """Start the peer's ranks in the background; they wait up to timeout_s for rank 0."""
    argv, env = command(module, params, plan, peer)
    log_path = peer_log(params, plan)
    with open(log_path, "wb") as log:
        process = subprocess.Popen(
            bounded(module, argv, params["timeout_s"] + 30),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
            env=dict(os.environ, **env),
        )
    # A container that cannot start (no image, no GPU) dies at once; say so here, not as a timeout later.
    time.sleep(2)
    if process.poll() not in (None, 0):
        with open(log_path, "rb") as log:
            tail = log.read()[-2000:].decode("utf-8", "replace").strip()
        raise NcclError(
            "host %s: its ranks of %s exited %d at start: %s" % (peer, plan["pair"], process.returncode, tail),
            argv=argv,
        )
    return process.pid, argv, log_path


def measure(module, params, plan, inputs, digest, host, peer):
    argv, env = command(module, params, plan, host)
    rc, out, err = module.run_command(bounded(module, argv, params["timeout_s"]), environ_update=env)
    output = out + err
    where = "the peer's ranks log to %s on %s" % (peer_log(params, plan), peer)
    if rc != 0:
        raise NcclError(
            "pair %s: the ranks on %s exited %d%s: %s; %s"
            % (plan["pair"], host, rc, " (timed out)" if rc in (124, 137) else "", _tail(output), where),
            argv=argv,
        )
    try:
        parsed = parse_result(output, plan["world_size"])
    except NcclError as exc:
        raise NcclError("pair %s: %s; last output:\n%s\n%s" % (plan["pair"], exc, _tail(output), where), argv=argv)
    now = time.time()
    record = make_record(
        plan,
        parsed,
        JUDGE_MIN_BYTES,
        inputs,
        digest,
        datetime.datetime.fromtimestamp(now, datetime.UTC).isoformat(),
        now,
    )
    return record


class CrossnodeProbe(PairProbe):
    """The two-node all-reduce: the peer joins (its ranks wait for rank 0), the first node measures."""

    folder = FOLDER
    fact = FACT
    error = NcclError
    start_step = "join"
    what = "cross-node all-reduce"

    def checked(self, params):
        params = dict(params, state_dir=params.get("state_dir") or STATE_DIR)
        check_request(params)
        return params

    def plan(self, params, first, first_fabric, second, second_fabric, swapped):
        envs = {params["host"]: params["env"] or {}, params["peer"]: params["peer_env"] or {}}
        first_gpus, second_gpus = params["host_gpus"], params["peer_gpus"]
        if swapped:
            first_gpus, second_gpus = second_gpus, first_gpus
        plan = pair_plan(
            first,
            first_fabric,
            first_gpus,
            second,
            second_fabric,
            second_gpus,
            params["master_addr"],
            params["backend"],
            params["line_rate_gbps"],
        )
        inputs = pair_inputs(
            plan,
            image_of(params)[1] or image_of(params)[0],
            {first: first_fabric, second: second_fabric},
            envs,
            params["sizes"],
            params.get("qos"),
        )
        return plan["pair"], plan, inputs

    def judge(self, record, threshold):
        return judge_pair(record, threshold)

    def missing(self, label, digest):
        return (
            "pair %s: no cross-node all-reduce is cached for these inputs (fingerprint %s); "
            "run playbooks/nccl_crossnode.yml" % (label, digest[:12])
        )

    def start(self, module, params, plan, label):
        pid, argv, log_path = join(module, params, plan, params["host"])
        return {
            "changed": True,
            "pid": pid,
            "argv": argv,
            "msg": "ranks %d-%d of %s started on %s, waiting for rank 0 at %s:%d (log %s)"
            % (
                plan["nodes"][1]["first_rank"],
                plan["world_size"] - 1,
                label,
                params["host"],
                plan["master_addr"],
                params["port"],
                log_path,
            ),
        }

    def measure(self, module, params, plan, label, inputs, digest):
        return measure(module, params, plan, inputs, digest, params["host"], params["peer"])


def run_step(module, params, check_mode):
    """One step of the pair's run (lookup, join, measure, store); returns the module's result."""
    return run_pair_step(CrossnodeProbe(), module, params, check_mode)


def _tail(text, lines=15):
    return "\n".join((text or "").strip().splitlines()[-lines:])
