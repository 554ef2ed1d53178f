"""Launch rendering (plugins/module_utils/seat/launch.py): exact argv and env per node rank."""

import json

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.launch import render
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.recipe import validate_recipe
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.rules import RULE_IDS, evaluate
from seat_cases import FIXTURE_SEATS, SCHEMA, h200_gpus, mutated, profile_gpus, seat_data


def node(host, ip, profile="rtx-pro-6000-maxq", count=2, iface="enp65s0f0np0", rdma=("mlx5_0",)):
    return {
        "host": host,
        "fabric_ip": ip,
        "fabric_iface": iface,
        "rdma_devices": list(rdma),
        "gpus": profile_gpus(profile, count),
    }


EXAMPLE = [node("node-a", "10.77.0.11"), node("node-b", "10.77.0.12", "rtx-pro-6000-ws")]


def settings(name, changes=(), nodes=EXAMPLE, folder=None):
    data = seat_data(name) if folder is None else seat_data(name, folder)
    for path, value in changes:
        data = mutated(data, path, value)
    recipe = validate_recipe(data, SCHEMA, name, RULE_IDS)
    return evaluate(recipe, [g for n in nodes for g in n["gpus"]], name)["settings"]


def test_glm53_vendor_two_nodes_renders_ray_head_and_worker_exactly():
    ranks = render(settings("glm53-vendor"), EXAMPLE, "seats/glm53-vendor.yml")
    head, worker = ranks
    assert head["setup"] == [["ray", "start", "--head", "--port=6379", "--node-ip-address=10.77.0.11"]]
    assert head["wait_for"] == {
        "ray_nodes": [
            {"host": "node-a", "address": "10.77.0.11", "resources": {"GPU": 2}},
            {"host": "node-b", "address": "10.77.0.12", "resources": {"GPU": 2}},
        ]
    }
    assert head["env"]["RAY_ADDRESS"] == "10.77.0.11:6379" and "RAY_ADDRESS" not in worker["env"]
    assert head["argv"] == [
        "python3",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "/models/glm-5.3-flash-nvfp4-vendor",
        "--served-model-name",
        "glm-5.3-flash-nvfp4-vendor",
        "--host",
        "10.77.0.11",
        "--port",
        "8000",
        "--tensor-parallel-size",
        "4",
        "--distributed-executor-backend",
        "ray",
        "--max-model-len",
        "131072",
        "--kv-cache-dtype",
        "fp8",
        "--gpu-memory-utilization",
        "0.75",
        "--max-cudagraph-capture-size",
        "256",
        "--disable-custom-all-reduce",
        "--compilation-config",
        '{"pass_config":{"fuse_allreduce_rms":false}}',
        "--reasoning-parser",
        "glm45",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "glm47",
    ]
    assert head["env"] == {
        "HF_HUB_OFFLINE": "1",
        "CUDA_VISIBLE_DEVICES": "0,1",
        "VLLM_HOST_IP": "10.77.0.11",
        "NCCL_SOCKET_IFNAME": "=enp65s0f0np0",
        "GLOO_SOCKET_IFNAME": "enp65s0f0np0",
        "NCCL_IB_HCA": "=mlx5_0",
        # NCCL logs its init and net lines: bring-up reads the channel transports from them.
        "NCCL_DEBUG": "INFO",
        "NCCL_DEBUG_SUBSYS": "INIT,NET",
        "RAY_ADDRESS": "10.77.0.11:6379",
    }
    assert (head["host"], head["rank"], head["role"], head["tp_ranks"]) == ("node-a", 0, "ray-head+server", [0, 1])
    assert worker["argv"] == ["ray", "start", "--block", "--address=10.77.0.11:6379", "--node-ip-address=10.77.0.12"]
    assert worker["env"]["VLLM_HOST_IP"] == "10.77.0.12"
    assert (worker["host"], worker["rank"], worker["role"], worker["tp_ranks"]) == ("node-b", 1, "ray-worker", [2, 3])


def test_single_node_vllm_has_no_fabric_env_and_no_ray():
    (rank,) = render(settings("qwen35-122b", nodes=EXAMPLE[:1]), EXAMPLE[:1], "qwen35")
    assert rank["env"] == {"HF_HUB_OFFLINE": "1", "CUDA_VISIBLE_DEVICES": "0,1"}
    assert rank["setup"] == [] and rank["role"] == "server"
    assert "--distributed-executor-backend" not in rank["argv"]
    assert rank["argv"][rank["argv"].index("--kv-cache-dtype") + 1] == "bfloat16"
    assert rank["argv"][rank["argv"].index("--max-num-seqs") + 1] == "1"


def test_sglang_single_node_flags():
    (rank,) = render(settings("inkling-small", nodes=EXAMPLE[:1]), EXAMPLE[:1], "inkling")
    argv = rank["argv"]
    assert argv[:3] == ["python3", "-m", "sglang.launch_server"]
    for flag, value in (
        ("--model-path", "/models/inkling-small-nvfp4-tp2"),
        ("--tp", "2"),
        ("--context-length", "32768"),
        ("--kv-cache-dtype", "bf16"),
        ("--max-running-requests", "1"),
        ("--moe-runner-backend", "marlin"),
        ("--attention-backend", "triton"),
        ("--port", "30000"),
    ):
        assert argv[argv.index(flag) + 1] == value
    # Custom all-reduce off on one node rests on a vLLM report (PR #47751): SGLang keeps its default [issue 11].
    assert "--disable-custom-all-reduce" not in argv
    assert "--enable-flashinfer-allreduce-fusion" not in argv
    assert "--nnodes" not in argv


def test_sglang_across_nodes_uses_nnodes_node_rank_and_dist_init_addr():
    changes = [(("topology", "nodes"), 2), (("topology", "tensor_parallel"), 4)]
    ranks = render(settings("deepseek-v4-flash", changes), EXAMPLE, "deepseek")
    for index, rank in enumerate(ranks):
        argv = rank["argv"]
        assert argv[argv.index("--nnodes") + 1] == "2"
        assert argv[argv.index("--node-rank") + 1] == str(index)
        assert argv[argv.index("--dist-init-addr") + 1] == "10.77.0.11:20000"
        # The timeout and the capture cap were seen on vLLM only [000]: warnings for SGLang, not flags.
        assert "--dist-timeout" not in argv and "--cuda-graph-max-bs" not in argv
        assert "--disable-custom-all-reduce" in argv
        assert rank["env"]["NCCL_SOCKET_IFNAME"] == "=enp65s0f0np0"
        assert "VLLM_HOST_IP" not in rank["env"]
    assert [rank["role"] for rank in ranks] == ["server", "worker"]


def test_each_node_binds_its_own_interface():
    nodes = [node("a", "10.0.0.1", iface="ens1"), node("b", "10.0.0.2", iface="ens2", rdma=())]
    ranks = render(settings("glm53", nodes=nodes), nodes, "glm53")
    assert [r["env"]["GLOO_SOCKET_IFNAME"] for r in ranks] == ["ens1", "ens2"]
    assert ranks[0]["env"]["NCCL_IB_HCA"] == "=mlx5_0" and ranks[1]["env"]["NCCL_IB_DISABLE"] == "1"


def test_speculation_renders_as_json():
    data = settings(
        "glm53-b12x-mtp",
        # On one node without Ray: a one-node seat that names Ray is refused (issue 22).
        [(("topology", "nodes"), 1), (("topology", "tensor_parallel"), 2), (("topology", "executor"), None)],
        nodes=EXAMPLE[:1],
        folder=FIXTURE_SEATS,
    )
    (rank,) = render(data, EXAMPLE[:1], "x")
    spec = rank["argv"][rank["argv"].index("--speculative-config") + 1]
    assert json.loads(spec) == {"method": "mtp", "num_speculative_tokens": 4}


def test_cpu_lab_seat_renders_the_module_server_with_its_env():
    lab = [dict(node("node-a", "172.30.99.11", iface="eth0", rdma=()), gpus=[])]
    (rank,) = render(settings("lab", nodes=lab), lab, "lab")
    assert rank["argv"] == [
        "python3",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "/models/smollm2-135m-instruct",
        "--served-model-name",
        "smollm2-135m-instruct",
        "--host",
        "172.30.99.11",
        "--port",
        "8000",
        "--tensor-parallel-size",
        "1",
        "--enable-auto-tool-choice",
        "--tool-call-parser",
        "pythonic",
    ]
    assert rank["env"] == {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}
    assert rank["tp_ranks"] == [0] and rank["gpus"] == []


def test_h200_single_node_keeps_custom_all_reduce():
    h200 = [
        {"host": "gpu-h200", "fabric_ip": "10.88.0.21", "fabric_iface": "eth1", "rdma_devices": [], "gpus": h200_gpus()}
    ]
    (rank,) = render(settings("qwen35-122b", nodes=h200), h200, "qwen35")
    assert "--disable-custom-all-reduce" not in rank["argv"]
    assert "--compilation-config" not in rank["argv"]


def test_unknown_engine_renders_nothing():
    assert render(settings("qwen38-flash-next", nodes=EXAMPLE[:1]), EXAMPLE[:1], "qwen38") == []


@pytest.mark.parametrize(
    "extra,fragment",
    [
        (
            ["--disable-custom-all-reduce"],
            "serving.extra_args[0]: --disable-custom-all-reduce is rendered from serving.custom_all_reduce",
        ),
        (
            ["--trust-remote-code", "--block-size=1152"],
            "serving.extra_args[1]: --block-size is rendered from serving.block_size",
        ),
    ],
)
def test_extra_args_may_not_repeat_rendered_flags(extra, fragment):
    with pytest.raises(SeatError) as caught:
        render(settings("glm53", [(("serving", "extra_args"), extra)]), EXAMPLE, "seats/glm53.yml")
    assert fragment in str(caught.value)


def test_extra_args_are_appended_verbatim():
    ranks = render(settings("glm53", [(("serving", "extra_args"), ["--trust-remote-code"])]), EXAMPLE, "glm53")
    assert ranks[0]["argv"][-1] == "--trust-remote-code"


def test_env_may_not_replace_what_the_inventory_decides():
    data = settings("glm53", [(("serving", "env"), {"NCCL_SOCKET_IFNAME": "eth9"})])
    with pytest.raises(SeatError, match="serving.env sets NCCL_SOCKET_IFNAME, which seatwright derives"):
        render(data, EXAMPLE, "seats/glm53.yml")


def test_multi_node_vllm_on_mp_renders_the_serve_cli_with_a_headless_follower():
    # The shape verified across two lab containers: `vllm serve` on every node, --headless on rank 1.
    head, follower = render(settings("nemotron3-ultra"), EXAMPLE, "nemotron3-ultra")
    assert head["argv"][:5] == [
        "python3",
        "-m",
        "vllm.entrypoints.cli.main",
        "serve",
        "/models/nemotron-3-ultra-550b-nvfp4",
    ]
    assert "--model" not in head["argv"]
    for index, rank in enumerate((head, follower)):
        argv = rank["argv"]
        assert argv[argv.index("--nnodes") + 1] == "2"
        assert argv[argv.index("--node-rank") + 1] == str(index)
        assert argv[argv.index("--master-addr") + 1] == "10.77.0.11"
        assert argv[argv.index("--master-port") + 1] == "29501"
        assert argv[argv.index("--distributed-executor-backend") + 1] == "mp"
        assert rank["setup"] == [] and rank["wait_for"] is None
    assert "--headless" not in head["argv"] and "--headless" in follower["argv"]
    assert (head["role"], follower["role"]) == ("server", "headless")


def test_multi_node_vllm_without_an_executor_is_refused():
    data = settings("glm53")
    data["topology"]["executor"] = None
    with pytest.raises(SeatError, match="vLLM across nodes runs on Ray"):
        render(data, EXAMPLE, "glm53")


def test_two_node_cpu_seat_renders_vllms_multiprocessing_launch():
    lab = [
        dict(node("node-a", "172.30.99.11", iface="eth0", rdma=()), gpus=[]),
        dict(node("node-b", "172.30.99.12", iface="eth0", rdma=()), gpus=[]),
    ]
    head, follower = render(settings("lab-tp2", nodes=lab), lab, "lab-tp2")
    assert head["argv"][:5] == ["python3", "-m", "vllm.entrypoints.cli.main", "serve", "/models/tiny-llama"]
    for index, (rank, own_ip) in enumerate(((head, "172.30.99.11"), (follower, "172.30.99.12"))):
        argv = rank["argv"]
        flag = {
            name: argv[argv.index(name) + 1]
            for name in (
                "--host",
                "--port",
                "--tensor-parallel-size",
                "--nnodes",
                "--node-rank",
                "--master-addr",
                "--distributed-executor-backend",
            )
        }
        assert flag == {
            "--host": own_ip,
            "--port": "8001",
            "--tensor-parallel-size": "2",
            "--nnodes": "2",
            "--node-rank": str(index),
            "--master-addr": "172.30.99.11",
            "--distributed-executor-backend": "mp",
        }
        assert rank["env"]["VLLM_HOST_IP"] == own_ip and rank["env"]["GLOO_SOCKET_IFNAME"] == "eth0"
    assert "--headless" in follower["argv"] and "--headless" not in head["argv"]
    assert (head["serve"], follower["serve"]) == ("172.30.99.11:8001", None)
    assert (head["tp_ranks"], follower["tp_ranks"]) == ([0], [1])


def test_the_api_binds_to_the_declared_serve_address():
    lab = [dict(node("node-a", "172.30.99.11", iface="eth0", rdma=()), gpus=[], serve_address="127.0.0.1")]
    (rank,) = render(settings("lab", nodes=lab), lab, "lab")
    assert rank["argv"][rank["argv"].index("--host") + 1] == "127.0.0.1"
    assert rank["serve"] == "127.0.0.1:8000"


@pytest.mark.parametrize(
    "extra",
    [
        ["--api-key", "sk-in-extra-args-0123456789"],
        ["--api-key=sk-in-extra-args-0123456789"],
        ["--api_key", "sk-in-extra-args-0123456789"],
        ["--trust-remote-code", "--api-k", "sk-in-extra-args-0123456789"],
        ["--admin-api-key=sk-in-extra-args-0123456789"],
    ],
    ids=["--api-key KEY", "--api-key=KEY", "--api_key KEY", "--api-k KEY", "--admin-api-key=KEY"],
)
def test_a_key_given_in_extra_args_never_reaches_the_plan(extra):
    # Issue 50 item 7: the key then landed three times in the 0644 plan file.
    with pytest.raises(SeatError) as caught:
        render(settings("glm53", [(("serving", "extra_args"), extra)]), EXAMPLE, "seats/glm53.yml")
    message = str(caught.value)
    assert "seat_api_key" in message and "sk-in-extra-args" not in message
