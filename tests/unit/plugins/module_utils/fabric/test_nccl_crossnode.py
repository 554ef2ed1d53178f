"""The cross-node NCCL fact: the two-node all-reduce of a node pair (library/nccl_crossnode.py,
fabric/crossnode.py, io/fabric/crossnode.py); the seat plan's side is in test_plan_crossnode.py.

torch is not in the project venv, so the ranks are stand-ins: a stand-in `docker` (or interpreter)
that checks it was handed the shipped worker with the pair's ranks and rendezvous, then replays
what the real worker printed on the device machine as two "nodes" (tests/fixtures/nccl/NOTE.md).
"""

import json
import os
import time

import nccl_crossnode
import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import NcclError
from ansible_collections.seatwright.fleet.plugins.module_utils.fabric.crossnode import (
    container_argv,
    end_inputs,
    judge_pair,
    pair_plan,
    parse_result,
    plan_entries,
    worker_argv,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.io.fabric import crossnode_worker
from conftest import FIXTURES

NCCL = FIXTURES / "nccl"
SOCKET_NODE0 = NCCL / "crossnode-nccl-net-socket-node0.txt"
SOCKET_NODE1 = NCCL / "crossnode-nccl-net-socket-node1.txt"
GLOO_NODE0 = NCCL / "crossnode-gloo-cpu-node0.txt"
H200_SHARED = FIXTURES / "h200x2" / "torch-allreduce-nccl.txt"
ROCE_CHANNELS = NCCL / "roce-2node-gdrdma-channels.txt"


def roce(rate=200.0, fw="28.39.1002", mtu=9000):
    """Fabric facts of a node with one active 200 GbE RoCE port (the example fleet's)."""
    return {
        "rdma_devices": [
            {
                "name": "mlx5_0",
                "fw_ver": fw,
                "ports": [{"port": 1, "active": True, "rate_gbps": rate, "link_layer": "Ethernet"}],
            }
        ],
        "fabric_iface": {"name": "enp65s0f0np0", "present": True, "mtu": mtu, "speed_mbps": 200000},
        "gpudirect": {"available": True, "via": "peermem"},
        "nvidia_driver_version": "580.95.05",
    }


LAB = {
    "rdma_devices": [],
    "fabric_iface": {"name": "eth0", "present": True, "mtu": 1500, "speed_mbps": 10000},
    "nvidia_driver_version": None,
}
ENV_A = {"NCCL_SOCKET_IFNAME": "=enp65s0f0np0", "NCCL_IB_HCA": "=mlx5_0:1", "NCCL_IB_GID_INDEX": "3"}


# ---------------------------------------------------------------- pure decisions


def test_the_pair_runs_one_rank_per_gpu_with_rank_zero_on_the_first_node():
    plan = pair_plan("node-a", roce(), 2, "node-b", roce(), 2, "10.77.0.11", "nccl")
    assert plan["world_size"] == 4 and plan["master_addr"] == "10.77.0.11" and plan["rdma"] is True
    assert [(n["host"], n["first_rank"], n["local_ranks"]) for n in plan["nodes"]] == [
        ("node-a", 0, 2),
        ("node-b", 2, 2),
    ]
    assert plan["line_rate_gbps"] == 200.0 and "RDMA port rate" in plan["line_rate_source"]
    argv = worker_argv(plan, "node-b", 29533, [1 << 20], 5, 20, 600)
    assert argv[argv.index("--first-rank") + 1] == "2" and argv[argv.index("--world-size") + 1] == "4"
    assert argv[argv.index("--master-addr") + 1] == "10.77.0.11"


def test_the_container_gets_host_network_gpus_and_the_verbs_devices():
    plan = pair_plan("node-a", roce(), 2, "node-b", roce(), 2, "10.77.0.11", "nccl")
    inner = worker_argv(plan, "node-a", 29533, [1 << 20], 5, 20, 600)
    argv = container_argv(plan, "node-a", "seatwright/glm53:abc", "/var/lib/seatwright/w.py", ENV_A, inner)
    text = " ".join(argv)
    for part in (
        "--network host",
        "--ipc host",
        "--gpus all",
        "--device /dev/infiniband",
        "--cap-add IPC_LOCK",
        "--ulimit memlock=-1",
        "-e NCCL_IB_HCA==mlx5_0:1",
        "-v /var/lib/seatwright/w.py:/seatwright/crossnode_worker.py:ro",
        "--entrypoint python3 seatwright/glm53:abc /seatwright/crossnode_worker.py --backend nccl",
    ):
        assert part in text
    lab = pair_plan("node-a", LAB, 2, "node-b", LAB, 2, "172.30.99.11", "gloo")
    lab_argv = container_argv(lab, "node-a", "lab-vllm-cpu", "/w.py", {}, worker_argv(lab, "node-a", 1, [4], 0, 1, 60))
    assert "--gpus" not in lab_argv and "--device" not in lab_argv


@pytest.mark.parametrize(
    "args,message",
    [
        (("node-a", roce(), 0, "node-b", roce(), 2, "10.77.0.11", "nccl"), "host node-a has 0 GPUs"),
        (("node-a", roce(), 2, "node-a", roce(), 2, "10.77.0.11", "nccl"), "needs two nodes"),
        (("node-a", roce(), 2, "node-b", roce(), 2, "", "nccl"), "set seatwright_node_fabric_ip"),
        (("node-a", roce(), 2, "node-b", roce(), 2, "10.77.0.11", "mpi"), r"expected nccl \(GPUs\) or gloo"),
        (
            ("node-a", dict(LAB, fabric_iface={"name": "eth0"}), 1, "node-b", LAB, 1, "10.0.0.1", "gloo"),
            "host node-a: no link rate is known",
        ),
    ],
)
def test_a_pair_that_cannot_run_says_why(args, message):
    with pytest.raises(NcclError, match=message):
        pair_plan(*args)


@pytest.mark.parametrize(
    "fixture,world,backend,busbw,transports",
    [
        # The worker on the device as two "nodes": NCCL over its network transport (no RDMA NIC there).
        (SOCKET_NODE0, 2, "nccl", 1.86, ["NET/Socket"]),
        # The same worker with gloo: two CPU ranks per "node", no NCCL lines at all.
        (GLOO_NODE0, 4, "gloo", 2.70, []),
    ],
)
def test_rank_zeros_output_is_parsed(fixture, world, backend, busbw, transports):
    parsed = parse_result(fixture.read_text(), world)
    assert parsed["backend"] == backend and parsed["wrong_elements"] == 0
    assert max(row["busbw_gbps"] for row in parsed["rows"]) == pytest.approx(busbw)
    assert parsed["transports"]["transports"] == transports and parsed["transports"]["gdrdma"] is False


def test_an_rdma_run_is_told_from_its_channel_lines():
    # Rows of the single-node H200 recording, channel lines of the field's two-node RoCE start.
    text = ROCE_CHANNELS.read_text() + H200_SHARED.read_text() + "check_wrong_elements=0\n"
    parsed = parse_result(text, 16)
    assert "NET/IB" in parsed["transports"]["transports"] and parsed["transports"]["gdrdma"] is True
    assert parsed["nccl_version"]


@pytest.mark.parametrize(
    "text,message",
    [
        # The peer's output: it holds no rank 0, so no rows.
        (SOCKET_NODE1.read_text(), "printed no result rows"),
        # Rows without the closing check: the worker died before finishing.
        (SOCKET_NODE0.read_text().split("check_wrong_elements")[0], "did not finish"),
        (SOCKET_NODE0.read_text().replace("world_size=2", "world_size=3"), "ran 3 ranks, the pair needs 2"),
    ],
)
def test_an_incomplete_run_is_refused(text, message):
    with pytest.raises(NcclError, match=message):
        parse_result(text, 2)


def record(busbw, line_rate=200.0, wrong=0, backend="nccl", transports=("NET/IB",), gdrdma=True):
    return {
        "pair": "node-a<->node-b",
        "backend": backend,
        "world_size": 4,
        "judged_busbw_gbps": busbw,
        "judged_over_bytes": 64 << 20,
        "wrong_elements": wrong,
        "line_rate_gbps": line_rate,
        "line_rate_source": "RDMA port rate (sysfs) of mlx5_0",
        "transports": {"transports": list(transports), "gdrdma": gdrdma},
        "image": "seatwright/glm53:abc",
        "measured_at": "2026-12-01T12:00:00+00:00",
        "fraction": busbw / (line_rate / 8),
    }


@pytest.mark.parametrize(
    "rec,passed,words",
    [
        (record(22.5), True, ["busbw 22.50 GB/s", "90 % of 25.00 GB/s", "GPUDirect RDMA"]),
        (record(1.86, transports=("NET/Socket",), gdrdma=False), False, ["7 %", "not NET/Socket"]),
        (record(22.5, wrong=12), False, ["12 wrong elements"]),
        (record(1.0, line_rate=10.0, backend="gloo", transports=()), True, ["80 %", "gloo"]),
    ],
)
def test_the_pair_is_judged_against_the_link_rate(rec, passed, words):
    ok, message = judge_pair(rec, 0.8)
    assert ok is passed
    for word in words:
        assert word in message


# ---------------------------------------------------------------- the module, with stand-in ranks


def stand_in_docker(tmp_path):
    """A stand-in docker client: checks the container is the pair's, then replays a recorded rank set."""
    script = tmp_path / "docker"
    log = tmp_path / "docker.log"
    script.write_text(
        "#!/bin/sh\n"
        'echo "$@" >> %s\n'
        'worker=$(echo "$@" | tr " " "\\n" | grep ":/seatwright/crossnode_worker.py:ro" | cut -d: -f1)\n'
        'grep -q "def run(local_rank, args)" "$worker" || { echo "not the worker: $worker" >&2; exit 9; }\n'
        'case "$*" in *"--network host"*) ;; *) echo "no host network" >&2; exit 8;; esac\n'
        'case "$*" in *"--first-rank 0 "*) cat %s;; *) cat %s;; esac\n' % (log, SOCKET_NODE0, SOCKET_NODE1)
    )
    script.chmod(0o755)
    return script, log


def run_module(capsys, **args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            nccl_crossnode.main()
    return json.loads(capsys.readouterr().out)


def pair_args(tmp_path, **extra):
    args = {
        "host": "node-a",
        "peer": "node-b",
        "host_fabric": LAB,
        "peer_fabric": LAB,
        "host_gpus": 1,
        "peer_gpus": 1,
        "master_addr": "127.0.0.1",
        "image": {"reference": "seatwright/glm53:abc", "id": "sha256:" + "ab" * 32},
        "env": {"NCCL_SOCKET_IFNAME": "=lo"},
        "peer_env": {"NCCL_SOCKET_IFNAME": "=lo"},
        "line_rate_gbps": 10.0,
        "timeout_s": 60,
    }
    args.update(extra)
    return args


def peer_view(args, state_dir):
    """The same pair as a task delegated to the peer sees it: host and peer swapped."""
    swapped = dict(args, host=args["peer"], peer=args["host"], state_dir=str(state_dir))
    swapped.update(host_fabric=args["peer_fabric"], peer_fabric=args["host_fabric"])
    swapped.update(host_gpus=args["peer_gpus"], peer_gpus=args["host_gpus"])
    swapped.update(env=args["peer_env"], peer_env=args["env"])
    return swapped


def test_the_pair_is_joined_measured_cached_on_both_and_judged(capsys, tmp_path, monkeypatch):
    docker, log = stand_in_docker(tmp_path)
    monkeypatch.setenv("PATH", "%s:%s" % (tmp_path, os.environ["PATH"]))
    first, second = tmp_path / "node-a", tmp_path / "node-b"
    args = pair_args(tmp_path, state_dir=str(first))

    lookup = run_module(capsys, step="lookup", **args)
    assert lookup["cached"] is False and lookup["ansible_facts"]["seatwright_nccl_crossnode"] == {}

    joined = run_module(capsys, step="join", **peer_view(args, second))
    assert joined.get("failed") is not True, joined
    for _ in range(50):  # the peer's ranks run in the background
        if (second / "nccl_crossnode" / "node-a--node-b-node1.log").stat().st_size:
            break
        time.sleep(0.1)

    measured = run_module(capsys, step="measure", **args)
    assert measured.get("failed") is not True, measured
    rec = measured["record"]
    assert rec["world_size"] == 2 and rec["backend"] == "nccl"
    assert rec["judged_busbw_gbps"] == pytest.approx(1.86)
    assert rec["transports"]["transports"] == ["NET/Socket"]
    assert rec["fraction"] == pytest.approx(1.86 / 1.25, rel=1e-3) and measured["passed"] is True
    calls = log.read_text().splitlines()
    assert any("--first-rank 1 " in call for call in calls) and any("--first-rank 0 " in call for call in calls)
    assert all("-e NCCL_DEBUG=INFO" in call for call in calls)

    stored = run_module(capsys, step="store", record=rec, **peer_view(args, second))
    assert stored.get("failed") is not True, stored
    assert stored["ansible_facts"]["seatwright_nccl_crossnode"]["node-a<->node-b"] == rec
    for state_dir in (first, second):
        again = run_module(capsys, step="lookup", enforce=True, **dict(args, state_dir=str(state_dir)))
        assert again["cached"] is True and again["passed"] is True, again

    # Another image is another figure: the cached record no longer counts.
    other = run_module(capsys, step="lookup", **dict(args, image={"reference": "x", "id": "sha256:" + "cd" * 32}))
    assert other["cached"] is False
    # On a 100 Gb/s link the same run is far below the threshold: cached, and the enforcing lookup fails.
    fast = dict(LAB, fabric_iface=dict(LAB["fabric_iface"], speed_mbps=100000))
    faster = dict(args, host_fabric=fast, peer_fabric=fast)
    slow = run_module(capsys, step="measure", **faster)
    assert slow["passed"] is False and slow["record"]["line_rate_gbps"] == 100.0
    low = run_module(capsys, step="lookup", enforce=True, **faster)
    assert low["failed"] is True and "below the 80 % threshold" in low["msg"] and "NET/Socket" in low["msg"]


def test_the_gloo_path_runs_the_worker_under_an_interpreter(capsys, tmp_path):
    python = tmp_path / "python"
    python.write_text(
        "#!/bin/sh\n"
        'grep -q "def run(local_rank, args)" "$1" || exit 9\n'
        'case "$*" in *"--backend gloo --world-size 4 --first-rank 0 --local-ranks 2 '
        '--master-addr 127.0.0.1"*) cat %s;; *) echo "unexpected: $*" >&2; exit 7;; esac\n' % GLOO_NODE0
    )
    python.chmod(0o755)
    args = pair_args(tmp_path, backend="gloo", runtime="none", python=str(python), host_gpus=2, peer_gpus=2)
    measured = run_module(capsys, step="measure", state_dir=str(tmp_path), **args)
    assert measured.get("failed") is not True, measured
    assert measured["record"]["backend"] == "gloo" and measured["record"]["world_size"] == 4
    assert measured["record"]["judged_busbw_gbps"] == pytest.approx(2.41)


def test_a_dead_rank_set_names_the_pair_and_the_peers_log(capsys, tmp_path):
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho 'RuntimeError: connection refused' >&2\nexit 1\n")
    python.chmod(0o755)
    result = run_module(
        capsys, step="measure", runtime="none", python=str(python), state_dir=str(tmp_path), **pair_args(tmp_path)
    )
    assert result["failed"] is True
    assert result["msg"].startswith("pair node-a<->node-b: the ranks on node-a exited 1")
    assert "connection refused" in result["msg"] and "node-a--node-b-node1.log on node-b" in result["msg"]


def test_check_mode_looks_up_and_runs_nothing(capsys, tmp_path):
    args = pair_args(tmp_path, state_dir=str(tmp_path), _ansible_check_mode=True)
    result = run_module(capsys, step="measure", **args)
    assert result["changed"] is True and result["msg"] == "check mode: would measure for node-a<->node-b"
    assert not (tmp_path / "nccl_crossnode").exists()


def test_a_stored_record_of_other_inputs_is_refused(capsys, tmp_path):
    result = run_module(
        capsys,
        step="store",
        record={"pair": "node-a<->node-b", "fingerprint": "x"},
        state_dir=str(tmp_path),
        **pair_args(tmp_path),
    )
    assert result["failed"] is True and "pass the record returned by step measure" in result["msg"]


def test_the_worker_is_a_real_file_that_parses_its_arguments():
    assert crossnode_worker.__file__.endswith("crossnode_worker.py")
    args = crossnode_worker.parse_args(
        ["--world-size", "4", "--first-rank", "2", "--local-ranks", "2", "--master-addr", "10.77.0.11"]
        + ["--master-port", "29533", "--sizes", "1024"]
    )
    assert (args.backend, args.world_size, args.first_rank, args.timeout_s) == ("nccl", 4, 2, 300)


# ---------------------------------------------------------------- the seat's plan (more in test_plan_crossnode.py)


def test_a_fact_measured_on_other_fabric_facts_is_stale():
    nodes = [{"host": "node-a", "fabric": roce(fw="28.40.1000")}, {"host": "node-b", "fabric": roce()}]
    rec = record(22.5)
    rec["inputs"] = {"ends": {"node-a": end_inputs(roce()), "node-b": end_inputs(roce())}}
    entry = plan_entries(nodes, {"node-a": {"node-a<->node-b": rec}}, 0.8)[0]
    assert entry["status"] == "stale" and "fabric facts of node-a changed" in entry["detail"]
    assert entry["run"].endswith("--limit node-a,node-b")


def test_the_record_keeps_each_ends_roce_qos_beside_its_result(capsys, tmp_path, monkeypatch):
    docker, _log = stand_in_docker(tmp_path)
    monkeypatch.setenv("PATH", "%s:%s" % (tmp_path, os.environ["PATH"]))
    declared = {"priority": 3, "dscp": 26, "pfc": True, "ecn": True, "trust": "dscp"}
    # The lab's veth port, as roce_qos reports it: not supported, the declared values shown.
    veth = {"iface": "eth0", "declared": declared, "supported": False, "reason": "not supported by this port"}
    args = pair_args(tmp_path, state_dir=str(tmp_path / "node-a"), qos={"node-a": veth, "node-b": veth})
    run_module(capsys, step="join", **peer_view(args, tmp_path / "node-b"))
    measured = run_module(capsys, step="measure", **args)
    assert measured.get("failed") is not True, measured
    kept = measured["record"]["roce_qos"]
    assert kept["node-a"]["declared"] == declared and kept["node-b"]["supported"] is False
    assert kept["node-a"]["settings"] is None and kept == measured["record"]["inputs"]["roce_qos"]
    assert run_module(capsys, step="lookup", **args)["cached"] is True
    # Another QoS reading is another figure: the record no longer counts for it.
    set_port = dict(veth, supported=True, reason=None, settings={"pfc": True})
    other = run_module(capsys, step="lookup", **dict(args, qos={"node-a": set_port, "node-b": veth}))
    assert other["cached"] is False
    # The seat plan shows them with the pair's figure.
    nodes = [{"host": "node-a", "fabric": LAB}, {"host": "node-b", "fabric": LAB}]
    entry = plan_entries(nodes, {"node-a": {"node-a<->node-b": measured["record"]}}, 0.8)[0]
    assert entry["roce_qos"]["node-b"]["declared"] == declared
