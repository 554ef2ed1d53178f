"""The cross-node all-reduce of a node pair on a node: look up the cached fact, join, measure, store.

A pair is run in four steps, like the fabric probe (io/fabric/bandwidth.py): `lookup` on the first
node (node rank 0, which hosts the rendezvous) reads the cached record; `join`, delegated to the
peer, starts the peer's ranks in the background (bounded by timeout; they wait for rank 0);
`measure` on the first node runs its ranks in the foreground, parses rank 0's output, caches the
record and judges it; `store`, delegated to the peer, caches the same record there. The ranks run
in the engine image (`docker run`, fabric/crossnode.py builds the argv) or, with runtime `none`,
under a local interpreter. Failures raise NcclError with the message for people.
"""

import datetime
import inspect
import os
import subprocess
import sys
import time

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
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.files import (
    atomic_write_json,
    cache_lookup,
    fingerprint,
    read_json,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.io.fabric import crossnode_worker
from ansible_collections.seatwright.fleet.plugins.module_utils.node.defaults import STATE_DIR

FOLDER = "nccl_crossnode"
WARMUP = 5
# Sizes from here up are judged; smaller ones measure latency, not bandwidth.
JUDGE_MIN_BYTES = 64 * 1024 * 1024


def cache_path(state_dir, label):
    return os.path.join(state_dir, FOLDER, label.replace("<->", "--") + ".json")


def cached_records(state_dir):
    folder = os.path.join(state_dir, FOLDER)
    records = {}
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        record = read_json(os.path.join(folder, name)) if name.endswith(".json") else None
        if isinstance(record, dict) and record.get("pair"):
            records[record["pair"]] = record
    return records


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


def run_step(module, params, check_mode):
    """One step of the pair's run (lookup, join, measure, store); returns the module's result."""
    params = dict(params, state_dir=params.get("state_dir") or STATE_DIR)
    check_request(params)
    # The plan is always made from the first node's point of view, so both ends agree on it.
    first, second = params["host"], params["peer"]
    first_fabric, second_fabric = params["host_fabric"], params["peer_fabric"]
    first_gpus, second_gpus = params["host_gpus"], params["peer_gpus"]
    envs = {first: params["env"] or {}, second: params["peer_env"] or {}}
    if params["step"] in ("join", "store"):
        first, second = second, first
        first_fabric, second_fabric = second_fabric, first_fabric
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
    )
    digest = fingerprint(inputs)
    path = cache_path(params["state_dir"], plan["pair"])
    result = {"changed": False, "fingerprint": digest, "plan": plan, "pair": plan["pair"]}

    if params["step"] == "lookup":
        record = cache_lookup(path, digest, params["max_age_s"])
        result["cached"] = record is not None
        if record is not None:
            passed, message = judge_pair(record, params["threshold"])
            result.update(record=record, passed=passed, msg=message)
        result["ansible_facts"] = {FACT: cached_records(params["state_dir"])}
        if params["enforce"] and record is None:
            raise NcclError(
                "pair %s: no cross-node all-reduce is cached for these inputs (fingerprint %s); "
                "run playbooks/nccl_crossnode.yml" % (plan["pair"], digest[:12]),
                **result,
            )
        if params["enforce"] and not result["passed"]:
            raise NcclError(result.pop("msg"), **result)
        return result

    if check_mode:
        return dict(result, changed=True, msg="check mode: would %s for %s" % (params["step"], plan["pair"]))

    if params["step"] == "join":
        pid, argv, log_path = join(module, params, plan, params["host"])
        return dict(
            result,
            changed=True,
            pid=pid,
            argv=argv,
            msg="ranks %d-%d of %s started on %s, waiting for rank 0 at %s:%d (log %s)"
            % (
                plan["nodes"][1]["first_rank"],
                plan["world_size"] - 1,
                plan["pair"],
                params["host"],
                plan["master_addr"],
                params["port"],
                log_path,
            ),
        )

    if params["step"] == "measure":
        record = measure(module, params, plan, inputs, digest, first, second)
    else:
        record = params["record"]
        if not isinstance(record, dict) or record.get("fingerprint") != digest or record.get("pair") != plan["pair"]:
            raise NcclError(
                "step store: the record given is not a cross-node all-reduce of %s with fingerprint %s; "
                "pass the record returned by step measure" % (plan["pair"], digest[:12]),
                **result,
            )
    changed = read_json(path) != record
    if changed:
        atomic_write_json(path, record)
    passed, message = judge_pair(record, params["threshold"])
    result = dict(
        result,
        changed=changed,
        record=record,
        passed=passed,
        msg=message,
        ansible_facts={FACT: cached_records(params["state_dir"])},
    )
    return result


def _tail(text, lines=15):
    return "\n".join((text or "").strip().splitlines()[-lines:])
