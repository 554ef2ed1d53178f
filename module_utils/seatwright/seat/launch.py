"""Exact argv and environment for every node rank of a seat, for vLLM and SGLang.

Input is the recipe after the rules (settings) and the seat's nodes in rank order. Node rank 0 is
the Ray head (vLLM across nodes) or the SGLang dist-init address; each node's processes bind to
its declared fabric address and interface. Weights are read from <model root>/<served_name>
inside the engine container, staged and revision-checked before launch, and served offline.
"""
import json

from ansible.module_utils.seatwright.errors import SeatError

MODEL_ROOT = "/models"
RAY_PORT = 6379
SGLANG_DIST_PORT = 20000

_VLLM_KV = {"auto": "auto", "bf16": "bfloat16", "fp8": "fp8", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}
_SGLANG_KV = {"auto": "auto", "bf16": "bf16", "fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"}
_SGLANG_SPECULATION = {"mtp": "NEXTN", "eagle": "EAGLE", "ngram": "NGRAM"}

# Flags seatwright renders from recipe fields; serving.extra_args may not repeat them.
RENDERED_FLAGS = {
    "vllm": {
        "--model": "model.served_name", "--served-model-name": "model.served_name",
        "--tensor-parallel-size": "topology.tensor_parallel", "--enable-expert-parallel": "topology.expert_parallel",
        "--distributed-executor-backend": "topology.executor", "--max-model-len": "serving.max_model_len",
        "--kv-cache-dtype": "serving.kv_cache_dtype", "--gpu-memory-utilization": "serving.gpu_memory_utilization",
        "--max-num-seqs": "serving.max_num_seqs", "--block-size": "serving.block_size",
        "--enforce-eager": "serving.enforce_eager",
        "--max-cudagraph-capture-size": "serving.max_cudagraph_capture_size",
        "--disable-custom-all-reduce": "serving.custom_all_reduce",
        "--compilation-config": "serving.allreduce_fusion",
        "--distributed-timeout-seconds": "serving.distributed_timeout_s",
        "--moe-backend": "serving.moe_backend", "--attention-backend": "serving.attention_backend",
        "--speculative-config": "serving.speculation", "--reasoning-parser": "serving.reasoning_parser",
        "--tool-call-parser": "serving.tool_call_parser", "--port": "serving.port",
    },
    "sglang": {
        "--model-path": "model.served_name", "--served-model-name": "model.served_name",
        "--tp": "topology.tensor_parallel", "--tp-size": "topology.tensor_parallel",
        "--ep-size": "topology.expert_parallel", "--nnodes": "topology.nodes", "--node-rank": "topology.nodes",
        "--dist-init-addr": "topology.nodes", "--context-length": "serving.max_model_len",
        "--kv-cache-dtype": "serving.kv_cache_dtype", "--mem-fraction-static": "serving.gpu_memory_utilization",
        "--max-running-requests": "serving.max_num_seqs", "--page-size": "serving.block_size",
        "--disable-cuda-graph": "serving.enforce_eager", "--cuda-graph-max-bs": "serving.max_cudagraph_capture_size",
        "--disable-custom-all-reduce": "serving.custom_all_reduce",
        "--enable-flashinfer-allreduce-fusion": "serving.allreduce_fusion",
        "--dist-timeout": "serving.distributed_timeout_s", "--moe-runner-backend": "serving.moe_backend",
        "--attention-backend": "serving.attention_backend", "--speculative-algorithm": "serving.speculation",
        "--reasoning-parser": "serving.reasoning_parser", "--tool-call-parser": "serving.tool_call_parser",
        "--port": "serving.port",
    },
}


def nccl_env(fabric_iface, rdma_devices):
    """NCCL/Gloo environment from a node's declared fabric: bind to its port, use its HCAs.

    Kept small on purpose: measured fabric facts (GID index, GDR level, ACS) refine it elsewhere.
    """
    env = {"NCCL_SOCKET_IFNAME": "=" + fabric_iface, "GLOO_SOCKET_IFNAME": fabric_iface}
    if rdma_devices:
        # '=' asks NCCL for exact device names, not prefixes (mlx5_1 would match mlx5_10).
        env["NCCL_IB_HCA"] = "=" + ",".join(rdma_devices)
    else:
        env["NCCL_IB_DISABLE"] = "1"
    return env


def _number(value):
    return repr(value) if isinstance(value, float) else str(value)


def _vllm_argv(settings, model_dir):
    serving, topo = settings["serving"], settings["topology"]
    argv = [settings["engine"]["python"], "-m", "vllm.entrypoints.openai.api_server",
            "--model", model_dir, "--served-model-name", settings["model"]["served_name"],
            "--host", "0.0.0.0", "--port", str(serving["port"]),
            "--tensor-parallel-size", str(topo["tensor_parallel"])]
    if topo["expert_parallel"] > 1:
        argv.append("--enable-expert-parallel")
    if topo["executor"]:
        argv += ["--distributed-executor-backend", topo["executor"]]
    if serving["max_model_len"]:
        argv += ["--max-model-len", str(serving["max_model_len"])]
    if serving["kv_cache_dtype"]:
        argv += ["--kv-cache-dtype", _VLLM_KV[serving["kv_cache_dtype"]]]
    if serving["gpu_memory_utilization"] is not None and settings["engine"]["device"] == "cuda":
        argv += ["--gpu-memory-utilization", _number(serving["gpu_memory_utilization"])]
    if serving["max_num_seqs"]:
        argv += ["--max-num-seqs", str(serving["max_num_seqs"])]
    if serving["block_size"]:
        argv += ["--block-size", str(serving["block_size"])]
    if serving["enforce_eager"]:
        argv.append("--enforce-eager")
    if serving["max_cudagraph_capture_size"]:
        argv += ["--max-cudagraph-capture-size", str(serving["max_cudagraph_capture_size"])]
    if serving["custom_all_reduce"] is False:
        argv.append("--disable-custom-all-reduce")
    if serving["allreduce_fusion"] is not None:
        argv += ["--compilation-config", json.dumps(
            {"pass_config": {"fuse_allreduce_rms": serving["allreduce_fusion"]}}, separators=(",", ":"))]
    if serving["distributed_timeout_s"]:
        argv += ["--distributed-timeout-seconds", str(serving["distributed_timeout_s"])]
    if serving["moe_backend"]:
        argv += ["--moe-backend", serving["moe_backend"]]
    if serving["attention_backend"]:
        argv += ["--attention-backend", serving["attention_backend"]]
    if serving["speculation"]:
        argv += ["--speculative-config", json.dumps(
            {"method": serving["speculation"]["method"],
             "num_speculative_tokens": serving["speculation"]["num_speculative_tokens"]},
            separators=(",", ":"), sort_keys=True)]
    if serving["reasoning_parser"]:
        argv += ["--reasoning-parser", serving["reasoning_parser"]]
    if serving["tool_call_parser"]:
        argv += ["--enable-auto-tool-choice", "--tool-call-parser", serving["tool_call_parser"]]
    return argv + list(serving["extra_args"])


def _sglang_argv(settings, model_dir, node_rank, head_ip):
    serving, topo = settings["serving"], settings["topology"]
    argv = [settings["engine"]["python"], "-m", "sglang.launch_server",
            "--model-path", model_dir, "--served-model-name", settings["model"]["served_name"],
            "--host", "0.0.0.0", "--port", str(serving["port"]), "--tp", str(topo["tensor_parallel"])]
    if topo["expert_parallel"] > 1:
        argv += ["--ep-size", str(topo["expert_parallel"])]
    if topo["nodes"] > 1:
        argv += ["--nnodes", str(topo["nodes"]), "--node-rank", str(node_rank),
                 "--dist-init-addr", "%s:%d" % (head_ip, SGLANG_DIST_PORT)]
    if serving["max_model_len"]:
        argv += ["--context-length", str(serving["max_model_len"])]
    if serving["kv_cache_dtype"]:
        argv += ["--kv-cache-dtype", _SGLANG_KV[serving["kv_cache_dtype"]]]
    if serving["gpu_memory_utilization"] is not None:
        argv += ["--mem-fraction-static", _number(serving["gpu_memory_utilization"])]
    if serving["max_num_seqs"]:
        argv += ["--max-running-requests", str(serving["max_num_seqs"])]
    if serving["block_size"]:
        argv += ["--page-size", str(serving["block_size"])]
    if serving["enforce_eager"]:
        argv.append("--disable-cuda-graph")
    if serving["max_cudagraph_capture_size"]:
        argv += ["--cuda-graph-max-bs", str(serving["max_cudagraph_capture_size"])]
    if serving["custom_all_reduce"] is False:
        argv.append("--disable-custom-all-reduce")
    if serving["allreduce_fusion"]:
        argv.append("--enable-flashinfer-allreduce-fusion")
    if serving["distributed_timeout_s"]:
        argv += ["--dist-timeout", str(serving["distributed_timeout_s"])]
    if serving["moe_backend"]:
        argv += ["--moe-runner-backend", serving["moe_backend"]]
    if serving["attention_backend"]:
        argv += ["--attention-backend", serving["attention_backend"]]
    if serving["speculation"]:
        argv += ["--speculative-algorithm", _SGLANG_SPECULATION[serving["speculation"]["method"]],
                 "--speculative-num-draft-tokens", str(serving["speculation"]["num_speculative_tokens"])]
    if serving["reasoning_parser"]:
        argv += ["--reasoning-parser", serving["reasoning_parser"]]
    if serving["tool_call_parser"]:
        argv += ["--tool-call-parser", serving["tool_call_parser"]]
    return argv + list(serving["extra_args"])


def _check_extra_args(settings, source):
    flags = RENDERED_FLAGS[settings["engine"]["name"]]
    problems = []
    for index, arg in enumerate(settings["serving"]["extra_args"]):
        flag = arg.split("=", 1)[0]
        if flag in flags:
            problems.append("%s: serving.extra_args[%d]: %s is rendered from %s; set that field instead"
                            % (source, index, flag, flags[flag]))
    if problems:
        raise SeatError("\n".join(problems))


def _base_env(settings, node, reserved):
    env = {"HF_HUB_OFFLINE": "1"}
    if settings["engine"]["device"] == "cuda":
        env["CUDA_VISIBLE_DEVICES"] = ",".join(str(i) for i in range(len(node["gpus"])))
    if settings["topology"]["nodes"] > 1:
        env.update(nccl_env(node["fabric_iface"], node["rdma_devices"]))
        if settings["engine"]["name"] == "vllm":
            env["VLLM_HOST_IP"] = node["fabric_ip"]
    reserved.update(env)
    return env


def render(settings, seat_nodes, source, model_root=MODEL_ROOT):
    """[{host, rank, role, tp_ranks, gpus, setup, wait_for, argv, env}] for each node, rank order.

    Returns [] when the engine is unknown: there is nothing exact to render.
    """
    engine = settings["engine"]["name"]
    if engine == "unknown":
        return []
    _check_extra_args(settings, source)
    model_dir = "%s/%s" % (model_root.rstrip("/"), settings["model"]["served_name"])
    head_ip = seat_nodes[0]["fabric_ip"]
    multi_node = settings["topology"]["nodes"] > 1
    if multi_node and engine == "vllm" and settings["topology"]["executor"] != "ray":
        raise SeatError("%s: topology.executor is %r; seatwright launches vLLM across nodes only with Ray "
                        "(rule ray-executor)" % (source, settings["topology"]["executor"]))
    per_node = settings["topology"]["tensor_parallel"] // settings["topology"]["nodes"]
    ranks = []
    for node_rank, node in enumerate(seat_nodes):
        reserved = {}
        env = _base_env(settings, node, reserved)
        clashes = sorted(set(settings["serving"]["env"]) & set(reserved))
        if clashes:
            raise SeatError("%s: serving.env sets %s, which seatwright derives from the inventory and "
                            "topology; remove %s from serving.env" % (
                                source, ", ".join(clashes), "it" if len(clashes) == 1 else "them"))
        env.update(settings["serving"]["env"])
        entry = {"host": node["host"], "rank": node_rank,
                 "tp_ranks": list(range(node_rank * per_node, (node_rank + 1) * per_node)),
                 "gpus": [gpu["index"] for gpu in node["gpus"]], "setup": [], "wait_for": None,
                 "env": env}
        if engine == "sglang":
            entry["role"] = "server" if node_rank == 0 else "worker"
            entry["argv"] = _sglang_argv(settings, model_dir, node_rank, head_ip)
        elif not multi_node:
            entry["role"] = "server"
            entry["argv"] = _vllm_argv(settings, model_dir)
        elif node_rank == 0:
            entry["role"] = "ray-head+server"
            entry["setup"] = [["ray", "start", "--head", "--port=%d" % RAY_PORT,
                               "--node-ip-address=%s" % node["fabric_ip"]]]
            entry["wait_for"] = {"ray_nodes": len(seat_nodes)}
            entry["argv"] = _vllm_argv(settings, model_dir)
        else:
            entry["role"] = "ray-worker"
            entry["argv"] = ["ray", "start", "--block", "--address=%s:%d" % (head_ip, RAY_PORT),
                             "--node-ip-address=%s" % node["fabric_ip"]]
        ranks.append(entry)
    return ranks
