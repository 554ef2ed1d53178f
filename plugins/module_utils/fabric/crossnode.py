"""The cross-node all-reduce of a node pair: who runs which ranks, the container, the result, the verdict.

Pure decisions for the nccl_crossnode module (io/fabric/crossnode.py runs them) and for the seat
plan (seat/plan.py shows the cached fact of each node pair of a multi-node seat):

- `pair_plan`: world size (the GPUs of both nodes), each node's ranks, the rendezvous address (the
  first node's fabric address), the backend, and the line rate the result is judged against;
- `worker_argv` / `container_spec`: the worker's command and the container it runs in (the engine
  image, host networking, the GPUs and the RDMA devices), a spec like a seat rank's;
  `container_argv` is that spec's `docker run`;
- `parse_result`: the busbw per size and the channel transports from rank 0's output;
- `pair_inputs`: what the figure depends on (image, both ends' fabric facts and NCCL env), whose
  fingerprint keys the cached record;
- `judge_pair`: the record against a fraction of the link rate;
- `plan_entries`: the `cross_node_nccl` entries of a seat's plan, or `unknown` with what to run.

The container is a seat container spec's fields (seat/container.py), so its `docker run` is rendered
by the same function as a seat rank's (docker_run_argv), and the RDMA devices and capabilities of
both come from one decision, fabric/transport.py container_rdma.
"""

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import NcclError, SeatError
from ansible_collections.seatwright.fleet.plugins.module_utils.fabric.links import pair_label
from ansible_collections.seatwright.fleet.plugins.module_utils.fabric.nccl import (
    MIB,
    judge_sweep,
    nccl_version,
    parse_channels,
    parse_torch_sweep,
    summarise_transports,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.fabric.transport import container_rdma
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.container import docker_run_argv

BACKENDS = ("nccl", "gloo")
FACT = "seatwright_nccl_crossnode"
# A project choice: NCCL's ring all-reduce between two nodes reaches most of the link; below 80 %
# something (sockets instead of RDMA, no GPUDirect, a wrong GID) is in the way.
DEFAULT_THRESHOLD = 0.8
# Where the worker file is mounted inside the container.
WORKER_IN_CONTAINER = "/seatwright/crossnode_worker.py"
# What an operator runs to measure a pair; the plan names it where no fact is cached.
RUN_HINT = "ansible-playbook playbooks/nccl_crossnode.yml --limit %s"


def _active_ports(fabric):
    ports = []
    for device in (fabric or {}).get("rdma_devices") or []:
        for port in device.get("ports") or []:
            if port.get("active"):
                ports.append((device["name"], port))
    return ports


def link_rate(host, fabric, declared_gbps=None):
    """(Gb/s, source) of one node's share of the fabric: its active RDMA ports' rates summed (NCCL
    spreads rings over every NIC it is given), else its fabric interface's speed, else declared."""
    rates = [port.get("rate_gbps") for _, port in _active_ports(fabric)]
    if rates and all(rates):
        return float(sum(rates)), "RDMA port rate (sysfs) of %s" % ", ".join(n for n, _ in _active_ports(fabric))
    speed = ((fabric or {}).get("fabric_iface") or {}).get("speed_mbps")
    if not rates and speed:
        return speed / 1000.0, "interface speed (sysfs)"
    if declared_gbps:
        return float(declared_gbps), "declared line_rate_gbps"
    raise NcclError(
        "host %s: no link rate is known (sysfs reports none for its fabric port); declare "
        "line_rate_gbps (e.g. 200 for 200 GbE) so the cross-node all-reduce can be judged" % host
    )


def pair_plan(host, host_fabric, host_gpus, peer, peer_fabric, peer_gpus, master_addr, backend, line_rate_gbps=None):
    """The run of one pair, from `host`'s side: `host` is node rank 0 and hosts the rendezvous.

    `*_gpus` are the ranks each node runs: its GPU count for nccl, its process count for gloo.
    The result is judged against the slower node's link rate.
    """
    if backend not in BACKENDS:
        raise NcclError("backend is %r; expected nccl (GPUs) or gloo (CPU, the lab's orchestration test)" % backend)
    if host == peer:
        raise NcclError("host and peer are both %s; the cross-node all-reduce needs two nodes" % host)
    for name, count in ((host, host_gpus), (peer, peer_gpus)):
        if not isinstance(count, int) or isinstance(count, bool) or count < 1:
            what = "GPUs" if backend == "nccl" else "ranks"
            raise NcclError(
                "host %s has %r %s for the cross-node all-reduce; it runs one rank per GPU, so "
                "gather its GPU facts (or run backend gloo on CPU)" % (name, count, what)
            )
    if not master_addr:
        raise NcclError("host %s: no fabric address for the rendezvous; set seatwright_node_fabric_ip" % host)
    rates = [link_rate(host, host_fabric, line_rate_gbps), link_rate(peer, peer_fabric, line_rate_gbps)]
    slower = min(rates, key=lambda rate: rate[0])
    # Each end's containers get the RDMA devices its facts show (the seat's engine containers get the same).
    ends = [container_rdma(host, host_fabric, None), container_rdma(peer, peer_fabric, None)]
    rdma = all(end["devices"] for end in ends)
    return {
        "pair": pair_label(host, peer),
        "backend": backend,
        "master": host,
        "master_addr": master_addr,
        "world_size": host_gpus + peer_gpus,
        "nodes": [
            {"host": host, "node_rank": 0, "first_rank": 0, "local_ranks": host_gpus, "rdma": ends[0]},
            {"host": peer, "node_rank": 1, "first_rank": host_gpus, "local_ranks": peer_gpus, "rdma": ends[1]},
        ],
        "rdma": rdma,
        "line_rate_gbps": slower[0],
        "line_rate_source": slower[1],
    }


def node_of(plan, host):
    for node in plan["nodes"]:
        if node["host"] == host:
            return node
    raise NcclError("host %s is not in pair %s" % (host, plan["pair"]))


def worker_argv(plan, host, port, sizes, warmup, iters, timeout_s, python="python3", worker=WORKER_IN_CONTAINER):
    """The worker's command for `host`'s ranks of the pair."""
    node = node_of(plan, host)
    argv = [python, worker, "--backend", plan["backend"], "--world-size", str(plan["world_size"])]
    argv += ["--first-rank", str(node["first_rank"]), "--local-ranks", str(node["local_ranks"])]
    argv += ["--master-addr", plan["master_addr"], "--master-port", str(port)]
    argv += ["--warmup", str(warmup), "--iters", str(iters), "--timeout-s", str(timeout_s), "--sizes"]
    return argv + [str(size) for size in sizes]


def container_spec(plan, host, image, worker_path, env, command):
    """The container spec (seat/container.py's fields) of `host`'s ranks in the engine image: host
    network (the fabric address is the host's), host IPC, unlimited locked memory, every GPU and,
    when the pair runs over RDMA, the verbs devices with IPC_LOCK; the worker file mounted read-only.
    `command` is `worker_argv` with the in-container worker path."""
    if not image:
        raise NcclError(
            "pair %s: no engine image to run in; build it first (playbooks/images.yml) or pass image" % plan["pair"]
        )
    node = node_of(plan, host)
    rdma = (node.get("rdma") or {}) if plan["rdma"] else {}
    return {
        "name": "seatwright-nccl-%s-%d" % (plan["pair"].replace("<->", "-"), node["node_rank"]),
        "part": "nccl-crossnode",
        "image": image,
        "image_id": None,
        "entrypoint": command[0],
        "command": list(command[1:]),
        "env": {str(key): str(value) for key, value in env.items()},
        "secrets": [],
        "labels": {},
        "network_mode": "host",
        "ipc_mode": "host",
        # Host IPC: the host's /dev/shm, so no size of its own.
        "shm_size_bytes": None,
        # Every GPU of the node: one rank each.
        "gpus": {"device_ids": None, "capabilities": [["gpu"]]} if plan["backend"] == "nccl" else None,
        "ulimits": [
            {"name": "memlock", "soft": -1, "hard": -1},
            {"name": "stack", "soft": 67108864, "hard": 67108864},
        ],
        "cap_add": list(rdma.get("cap_add") or []),
        "devices": list(rdma.get("devices") or []),
        "rdma_source": rdma.get("source"),
        "privileged": False,
        "mounts": [{"source": worker_path, "target": command[1], "read_only": True}],
        "run_args": [],
    }


def container_argv(plan, host, image, worker_path, env, command, docker="docker"):
    """`docker run` of `host`'s ranks in the foreground: container_spec rendered by the one renderer
    of a spec (seat/container.py docker_run_argv), its env on the command line (it holds no secret)."""
    spec = container_spec(plan, host, image, worker_path, env, command)
    return [docker] + docker_run_argv(spec, None, detach=False)


def parse_result(output, world_size):
    """Rows, transports and the check of rank 0's output; NcclError when the run gave none."""
    rows = parse_torch_sweep(output)
    logged_world, wrong, backend = None, None, None
    for line in (output or "").splitlines():
        if line.startswith("world_size="):
            fields = dict(item.split("=", 1) for item in line.split() if "=" in item)
            logged_world, backend = int(fields["world_size"]), fields.get("backend")
        elif line.startswith("check_wrong_elements="):
            wrong = int(line.split("=", 1)[1])
    if not rows:
        raise NcclError("the cross-node all-reduce printed no result rows")
    if logged_world is not None and logged_world != world_size:
        raise NcclError("the worker ran %d ranks, the pair needs %d" % (logged_world, world_size))
    if wrong is None:
        raise NcclError("the worker printed no correctness check (check_wrong_elements=); it did not finish")
    rows[0]["wrong"] = wrong
    channels = parse_channels(output)
    return {
        "rows": rows,
        "backend": backend,
        "wrong_elements": wrong,
        "transports": summarise_transports(channels),
        "nccl_version": nccl_version(output),
    }


def end_inputs(fabric):
    return {
        "devices": [
            [d["name"], d.get("fw_ver"), [p.get("rate_gbps") for p in d.get("ports") or []]]
            for d in (fabric or {}).get("rdma_devices") or []
        ],
        "mtu": ((fabric or {}).get("fabric_iface") or {}).get("mtu"),
        "driver": (fabric or {}).get("nvidia_driver_version"),
        "gpudirect": ((fabric or {}).get("gpudirect") or {}).get("via"),
    }


def pair_inputs(plan, image, fabrics, envs, sizes, qos=None):
    """What the pair's figure depends on, the same from either end: the image, both ends' fabric
    facts and NCCL env, the backend, the ranks and the sizes; and, where given, each end's RoCE QoS
    as its port reads it (fabric/qos.py qos_fact), so a change of PFC, trust or ECN measures again."""
    inputs = {
        "pair": plan["pair"],
        "image": image,
        "backend": plan["backend"],
        "ranks": {node["host"]: node["local_ranks"] for node in plan["nodes"]},
        "ends": {host: end_inputs(fabrics.get(host)) for host in sorted(fabrics)},
        "env": {host: dict(sorted((envs.get(host) or {}).items())) for host in sorted(envs)},
        "line_rate_gbps": plan["line_rate_gbps"],
        "sizes": sorted(sizes),
    }
    if qos and any(qos.values()):
        inputs["roce_qos"] = dict((host, qos_inputs(qos.get(host))) for host in sorted(qos))
    return inputs


def qos_inputs(fact):
    """The part of a node's RoCE QoS fact a record keeps: declared, supported, why not, and the settings read."""
    if not fact:
        return None
    return dict((key, fact.get(key)) for key in ("iface", "declared", "supported", "reason", "settings"))


def judge_pair(record, threshold):
    """(passed, message): the best busbw over large sizes against `threshold` of the link rate.

    busbw is in GB/s (bytes), the link in Gb/s: a pair's ring crosses each node's links once per
    direction, so busbw can reach the slower node's link rate / 8.
    """
    link_gbytes = record["line_rate_gbps"] / 8.0
    fraction = record["judged_busbw_gbps"] / link_gbytes if link_gbytes else 0.0
    transports = record.get("transports") or {}
    text = (
        "%s: %s all-reduce over %d ranks, busbw %.2f GB/s at sizes >= %d MiB = %.0f %% of %.2f GB/s (%g Gb/s, %s)"
        % (
            record["pair"],
            record["backend"],
            record["world_size"],
            record["judged_busbw_gbps"],
            record["judged_over_bytes"] // MIB,
            fraction * 100,
            link_gbytes,
            record["line_rate_gbps"],
            record["line_rate_source"],
        )
    )
    text += ", transports %s%s" % (
        ", ".join(transports.get("transports") or []) or "not logged",
        ", GPUDirect RDMA" if transports.get("gdrdma") else "",
    )
    if record["wrong_elements"]:
        return False, "%s; %d wrong elements: the collective returned wrong sums" % (text, record["wrong_elements"])
    if fraction < threshold:
        hint = (
            "check that NCCL used NET/IB with GDRDMA (not NET/Socket), the RoCE GID and PFC/ECN"
            if record["backend"] == "nccl"
            else "gloo runs on the CPU over TCP and shows the orchestration, not the fabric"
        )
        return False, "%s; below the %.0f %% threshold: %s" % (text, threshold * 100, hint)
    return True, "%s (threshold %.0f %%)" % (text, threshold * 100)


def make_record(plan, parsed, judge_min_bytes, inputs, digest, measured_at, measured_at_epoch):
    """The cached fact of a pair: the figures, what they were judged against, and the fingerprint."""
    verdict = judge_sweep(parsed["rows"], None, judge_min_bytes)
    return {
        "pair": plan["pair"],
        "backend": plan["backend"],
        "world_size": plan["world_size"],
        "nodes": plan["nodes"],
        "rows": parsed["rows"],
        "max_busbw_gbps": verdict["max_busbw_gbps"],
        "judged_busbw_gbps": verdict["judged_busbw_gbps"],
        "judged_over_bytes": verdict["judged_over_bytes"],
        "wrong_elements": verdict["wrong_elements"],
        "transports": parsed["transports"],
        "nccl_version": parsed["nccl_version"],
        "line_rate_gbps": plan["line_rate_gbps"],
        "line_rate_source": plan["line_rate_source"],
        "fraction": round(verdict["judged_busbw_gbps"] / (plan["line_rate_gbps"] / 8.0), 4),
        "image": inputs["image"],
        "measured_at": measured_at,
        "measured_at_epoch": measured_at_epoch,
        "fingerprint": digest,
        "inputs": inputs,
        # Beside the result: each end's lossless RoCE settings as read (null when not given).
        "roce_qos": inputs.get("roce_qos"),
    }


def plan_entries(seat_nodes, records_by_host, threshold, backend="nccl"):
    """The seat plan's `cross_node_nccl`: one entry per neighbouring pair of seat nodes (node rank
    order), from the pair's record cached on either node, else `unknown` with the command to run.

    A record whose fabric inputs differ from a node's current cached fabric facts is `stale`.
    """
    entries = []
    for left, right in zip(seat_nodes, seat_nodes[1:]):
        label = pair_label(left["host"], right["host"])
        record = None
        for node in (left, right):
            cached = records_by_host.get(node["host"])
            if isinstance(cached, dict) and isinstance(cached.get(label), dict):
                record = cached[label]
                break
        run = RUN_HINT % ",".join(sorted([left["host"], right["host"]]))
        if backend != "nccl":
            run += " -e rdma_fabric_nccl_backend=%s" % backend
        if record is None:
            entries.append({"pair": label, "status": "unknown", "detail": "no cross-node NCCL fact cached", "run": run})
            continue
        try:
            passed, message = judge_pair(record, threshold)
        except (KeyError, TypeError, ZeroDivisionError):
            entries.append(
                {
                    "pair": label,
                    "status": "unknown",
                    "detail": "the cached fact is unreadable; measure again",
                    "run": run,
                }
            )
            continue
        ends = (record.get("inputs") or {}).get("ends") or {}
        changed = sorted(
            node["host"]
            for node in (left, right)
            if node.get("fabric") and node["host"] in ends and end_inputs(node["fabric"]) != ends[node["host"]]
        )
        status = "stale" if changed else ("passed" if passed else "below-threshold")
        entry = {
            "pair": label,
            "status": status,
            "backend": record["backend"],
            "busbw_gbps": record["judged_busbw_gbps"],
            "fraction": record.get("fraction"),
            "line_rate_gbps": record["line_rate_gbps"],
            "image": record.get("image"),
            "measured_at": record.get("measured_at"),
            "detail": message,
        }
        if record.get("roce_qos"):
            # Each end's lossless RoCE class as declared and as its port read it, beside the figure.
            entry["roce_qos"] = record["roce_qos"]
        if changed:
            entry["detail"] += "; the fabric facts of %s changed since, measure again" % ", ".join(changed)
            entry["run"] = run
        entries.append(entry)
    return entries


def seat_entries(seat_nodes, candidates, device="cuda"):
    """`plan_entries` for a seat plan: the records and the threshold come from the candidates'
    cached facts (seatwright_nccl_crossnode) and settings (rdma_fabric_nccl_threshold). A CPU
    seat's ranks talk gloo, so its pairs are measured with backend gloo."""
    backend = "gloo" if device == "cpu" else "nccl"
    if len(seat_nodes) < 2:
        return []
    by_host = {c.get("host"): c for c in candidates if isinstance(c, dict)}
    records = {host: (by_host.get(host) or {}).get(FACT) for host in by_host}
    setting = (by_host.get(seat_nodes[0]["host"]) or {}).get("rdma_fabric_nccl_threshold")
    if setting in (None, ""):
        return plan_entries(seat_nodes, records, DEFAULT_THRESHOLD, backend)
    try:
        threshold = float(setting)  # -e key=value hands it over as text
    except (TypeError, ValueError):
        threshold = None
    if isinstance(setting, bool) or threshold is None or not 0 < threshold <= 1:
        raise SeatError(
            "host %s: rdma_fabric_nccl_threshold is %r; expected a fraction of the link rate such as 0.8"
            % (seat_nodes[0]["host"], setting)
        )
    return plan_entries(seat_nodes, records, threshold, backend)


def plan_line(entry):
    """One line of the plan a person reads."""
    if entry["status"] == "unknown":
        return "cross-node NCCL %s: unknown (%s); run %s" % (entry["pair"], entry["detail"], entry["run"])
    text = "cross-node NCCL %s: %s, %s" % (entry["pair"], entry["status"], entry["detail"])
    text += "; measured %s in image %s" % (entry.get("measured_at") or "at an unknown time", entry.get("image"))
    if entry.get("run"):
        text += "; run %s" % entry["run"]
    return text
