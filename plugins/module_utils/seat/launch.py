"""Exact argv and environment for every node rank of a seat, for vLLM and SGLang.

Input is the recipe after the rules (settings) and the seat's nodes in rank order. Node rank 0 is
the Ray head or the multiprocessing master (vLLM across nodes) or the SGLang dist-init address;
each node's processes bind to its declared fabric address and interface. Weights are read from
MODEL_ROOT/<served_name> inside the engine container, staged and revision-checked before launch, and served offline.
A multi-node rank's NCCL/Gloo environment is its node's, decided by fabric/nccl.py node_env, the
function behind the node's /etc/nccl.conf and env file.
"""

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import NcclError, SeatError
from ansible_collections.seatwright.fleet.plugins.module_utils.fabric.nccl import seat_rank_env
from ansible_collections.seatwright.fleet.plugins.module_utils.node.kind import engine_env
from ansible_collections.seatwright.fleet.plugins.module_utils.ranks import RAY_WORKER
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.engines import check_extra_args, server_argv

# Where the engine container sees the checkpoints: <MODEL_ROOT>/<served name>, mounted read-only.
MODEL_ROOT = "/models"
RAY_PORT = 6379


def rank_nccl_env(node, device="cuda"):
    """A multi-node rank's NCCL/Gloo env: exactly what roles/nccl_env renders for its node.

    From the node's cached fabric facts when the plan has them, else from its declared fabric
    interface and RDMA devices, with the node's nccl_env_* settings; a GPU rank also logs NCCL's
    init and net lines, which bring-up reads for the transport (fabric/nccl.py seat_rank_env).
    """
    try:
        return seat_rank_env(
            node["host"],
            node["fabric_iface"],
            node["rdma_devices"],
            node.get("fabric"),
            node.get("nccl_options"),
            device,
        )
    except NcclError as exc:
        raise SeatError("%s; the seat's ranks take the node's NCCL environment" % exc)


def _base_env(settings, node, reserved):
    env = {"HF_HUB_OFFLINE": "1"}
    if settings["engine"]["device"] == "cuda":
        # Relative to the container: Docker passes only the rank's GPUs, renumbered from 0 ([003]).
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(node["gpus"])))
        # A WSL2 node's NCCL contract and its kind for the patched engine (node/kind.py engine_env).
        env.update(engine_env(node.get("kind") or "linux"))
    if settings["topology"]["nodes"] > 1:
        env.update(rank_nccl_env(node, settings["engine"]["device"]))
        if settings["engine"]["name"] == "vllm":
            env["VLLM_HOST_IP"] = node["fabric_ip"]
    reserved.update(env)
    return env


def model_dir(served_name):
    """The checkpoint's folder inside the engine container: the one spelling of the /models mount."""
    return "%s/%s" % (MODEL_ROOT, served_name)


def render(settings, seat_nodes, source):
    """[{host, rank, role, tp_ranks, gpus, serve, setup, wait_for, argv, env}] for each node, rank order.

    The engine's argv comes from its table (seat/engines.py). Returns [] when the engine is
    unknown: there is nothing exact to render.
    """
    engine = settings["engine"]["name"]
    if engine == "unknown":
        return []
    check_extra_args(settings, source)
    checkpoint_dir = model_dir(settings["model"]["served_name"])
    head_ip = seat_nodes[0]["fabric_ip"]
    multi_node = settings["topology"]["nodes"] > 1
    executor = settings["topology"]["executor"]
    if multi_node and engine == "vllm" and executor not in ("ray", "mp"):
        raise SeatError(
            "%s: topology.executor is %r; vLLM across nodes runs on Ray (ray) or on its own "
            "multiprocessing launch (mp): choose one" % (source, executor)
        )
    per_node = settings["topology"]["tensor_parallel"] // settings["topology"]["nodes"]
    ranks = []
    for node_rank, node in enumerate(seat_nodes):
        reserved = {}
        env = _base_env(settings, node, reserved)
        clashes = sorted(set(settings["serving"]["env"]) & set(reserved))
        if clashes:
            raise SeatError(
                "%s: serving.env sets %s, which seatwright derives from the inventory and "
                "topology; remove %s from serving.env"
                % (source, ", ".join(clashes), "it" if len(clashes) == 1 else "them")
            )
        env.update(settings["serving"]["env"])
        entry = {
            "host": node["host"],
            "rank": node_rank,
            "tp_ranks": list(range(node_rank * per_node, (node_rank + 1) * per_node)),
            "gpus": [gpu["index"] for gpu in node["gpus"]],
            "setup": [],
            "wait_for": None,
            "env": env,
        }
        # The API binds where the inventory says the seat is served; only node rank 0 serves it.
        bind = node.get("serve_address") or node["fabric_ip"]
        entry["serve"] = "%s:%d" % (bind, settings["serving"]["port"]) if node_rank == 0 else None
        argv = server_argv(settings, checkpoint_dir, node_rank, head_ip, serve_host=bind)
        if engine == "sglang":
            entry["role"] = "server" if node_rank == 0 else "worker"
            entry["argv"] = argv
        elif not multi_node:
            entry["role"] = "server"
            entry["argv"] = argv
        elif executor == "mp":
            entry["role"] = "server" if node_rank == 0 else "headless"
            entry["argv"] = argv
        elif node_rank == 0:
            entry["role"] = "ray-head+server"
            entry["setup"] = [
                ["ray", "start", "--head", "--port=%d" % RAY_PORT, "--node-ip-address=%s" % node["fabric_ip"]]
            ]
            # Every node alive in Ray with the resources its rank brings, before the engine starts.
            entry["wait_for"] = {
                "ray_nodes": [
                    {
                        "host": other["host"],
                        "address": other["fabric_ip"],
                        "resources": {"GPU": len(other["gpus"])} if other["gpus"] else {"CPU": 1},
                    }
                    for other in seat_nodes
                ]
            }
            # The engine runs in its own container beside the Ray head's and joins it as a driver.
            entry["env"]["RAY_ADDRESS"] = "%s:%d" % (node["fabric_ip"], RAY_PORT)
            entry["argv"] = argv
        else:
            entry["role"] = RAY_WORKER
            entry["argv"] = [
                "ray",
                "start",
                "--block",
                "--address=%s:%d" % (head_ip, RAY_PORT),
                "--node-ip-address=%s" % node["fabric_ip"],
            ]
        ranks.append(entry)
    return ranks
