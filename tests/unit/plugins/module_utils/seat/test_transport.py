"""Issue 21 items 1 and 2: the RDMA devices reach the engine containers, and bring-up proves the
transport from the ranks' own logs, through today's entry points (the seat_plan and
seat_engine_probe modules, the spec's docker run and read-back, bringup.json, the report).

The NCCL logs are recorded ones (tests/fixtures/nccl/NOTE.md): GDRDMA over RoCE, and NET/Socket
from two 'nodes' on one H200. NCCL prints IB without GPUDirect as the same line without the
`/GDRDMA` suffix (`via NET/IB/0`); that shape is derived from the recording by removing it.
"""

import copy
import json

import pytest
import seat_engine_probe
import yaml
from ansible.module_utils.testing import patch_module_args
from ansible_collections.seatwright.fleet.plugins.module_utils.evidence.bringup import bringup_record
from ansible_collections.seatwright.fleet.plugins.module_utils.evidence.report import render
from ansible_collections.seatwright.fleet.plugins.module_utils.fabric.crossnode import container_argv, pair_plan
from ansible_collections.seatwright.fleet.plugins.module_utils.io.evidence import writer
from ansible_collections.seatwright.fleet.plugins.module_utils.io.seat import engine as io_engine
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.container import docker_run_argv, read_back
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.plan import make_plan
from seat_cases import ROOT, SCHEMA, example_nodes, seat_data
from test_container import IMAGE_ENV, inspect_of, lab_node
from test_plan_crossnode import MULTI_NODE_GPU_SEATS, plan

NCCL = ROOT / "tests" / "fixtures" / "nccl"
GDRDMA = (NCCL / "roce-2node-gdrdma-channels.txt").read_text()
# Its inter-node channels: rank 8's sends to rank 7 on the other node, over three RoCE ports.
GDR_CHANNELS = {"NET/IB/0/GDRDMA": 2, "NET/IB/4/GDRDMA": 1, "NET/IB/6/GDRDMA": 1}
NO_GDR = GDRDMA.replace("/GDRDMA", "")
SOCKET = (NCCL / "crossnode-nccl-net-socket-node0.txt").read_text()
# One log whose inter-node channels are partly RDMA, partly sockets: the worst one counts.
MIXED = GDRDMA + "\n".join(line for line in SOCKET.splitlines() if " via NET/Socket" in line) + "\n"
# vLLM's CPU build, one line per rank of lab-tp2 (mp launch across two lab nodes), as logged.
GLOO = "world_size=2 rank=0 local_rank=0 distributed_init_method=tcp://172.30.99.11:29501 backend=gloo\n"
LAB_FLEET = yaml.safe_load((ROOT / "inventory" / "lab" / "group_vars" / "gpu_nodes" / "fleet.yml").read_text())


def facts(via):
    """seatwright_fabric facts of a RoCE node in fabric_facts' shape, GPUDirect through `via` (or none)."""
    return {
        "rdma_devices": [
            {"name": "mlx5_0", "ports": [{"port": 1, "active": True, "link_layer": "Ethernet", "roce_v2_gid_index": 3}]}
        ],
        "roce_devices": ["mlx5_0"],
        "fabric_iface": {"name": "enp65s0f0np0", "present": True, "speed_mbps": 200000},
        "gpudirect": {"available": via is not None, "via": via, "peermem_loaded": via == "peermem"},
        "gpu_nic_path": "PXB",
        "acs": {"state": "off", "reason": "recorded"},
    }


def probed(capsys, monkeypatch, log, required, must_show=True):
    """seat_engine_probe on one container whose whole log is `log`."""
    monkeypatch.setattr(
        io_engine,
        "probe",
        lambda names, *args, **kwargs: {"containers": [{"name": names[0], "log": log}], "evidence_files": {}},
    )
    args = {
        "names": ["seatwright-glm53-rank0"],
        "host": "node-a",
        "full_log": True,
        "transports": {"multi_node": True, "roce": True, "required": required, "must_show": must_show},
    }
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            seat_engine_probe.main()
    return json.loads(capsys.readouterr().out)


# ---------------------------------------------------------------- item 1: RDMA reaches the engine


@pytest.mark.parametrize("seat", MULTI_NODE_GPU_SEATS)
def test_every_multi_node_gpu_seat_passes_the_declared_rdma_devices_labelled_declared(capsys, seat):
    result = plan(capsys, seat, example_nodes())
    assert result.get("failed") is not True, result.get("msg")
    seat_plan = result["plan"]
    for rank in seat_plan["ranks"]:
        for spec in (rank["container_spec"], rank["setup_container_spec"]):
            if spec:
                assert (spec.get("devices"), spec["cap_add"], spec.get("rdma_source")) == (
                    ["/dev/infiniband"],
                    ["IPC_LOCK", "SYS_PTRACE"],
                    "declared",
                ), spec["name"]
                run = docker_run_argv(spec, "/x.env")
                assert run[run.index("--device") + 1] == "/dev/infiniband", spec["name"]
                assert run[run.index("--cap-add") + 1] == "IPC_LOCK", spec["name"]
    transport = seat_plan.get("transport") or {}
    # Declared devices promise RDMA; GPUDirect is unknown until the fabric facts are gathered.
    assert (transport.get("required"), transport.get("source")) == ("rdma", "declared RDMA devices")
    assert [n["source"] for n in transport["nodes"]] == ["declared", "declared"]
    summary = result["summary"]
    assert (
        "transport required: rdma (declared RDMA devices: the best the seat's nodes promise; the nodes promise rdma)"
        in summary
    )
    assert any(
        line.startswith(
            "rdma (declared): host node-a: mlx5_0 (declared, fabric facts not gathered) through /dev/infiniband"
        )
        for line in summary
    )
    assert any(line.startswith("cross-node NCCL node-a<->node-b: unknown") for line in summary)


@pytest.mark.parametrize(
    "via,required,words",
    [
        ("peermem", "rdma-gdr", "GPUDirect RDMA through nvidia-peermem"),
        ("dmabuf", "rdma-gdr", "GPUDirect RDMA through DMA-BUF"),
        (None, "rdma", "GPUDirect RDMA not available (no nvidia-peermem, no DMA-BUF)"),
    ],
)
def test_fabric_facts_win_over_the_declaration_and_say_how_gpu_memory_reaches_the_nic(capsys, via, required, words):
    nodes = [dict(node, seatwright_fabric=facts(via)) for node in example_nodes()]
    result = plan(capsys, "glm53", nodes)
    assert result.get("failed") is not True, result.get("msg")
    transport = result["plan"].get("transport") or {}
    assert transport.get("required") == required
    assert [(n["source"], n["gpudirect"]) for n in transport["nodes"]] == [("facts", via or "none")] * 2
    assert (
        "rdma (facts): host node-b: mlx5_0 (from fabric facts) through /dev/infiniband with IPC_LOCK; %s" % words
        in (result["summary"])
    )
    assert all(r["container_spec"].get("rdma_source") == "facts" for r in result["plan"]["ranks"])


def test_a_node_whose_facts_show_no_active_rdma_port_gets_no_device_and_the_seat_is_refused(capsys):
    down = facts("peermem")
    down["rdma_devices"][0]["ports"][0]["active"] = False
    nodes = [dict(node, seatwright_fabric=copy.deepcopy(down)) for node in example_nodes()]
    result = plan(capsys, "glm53", nodes)
    seat = result["plan"]
    assert [r["container_spec"].get("devices") for r in seat["ranks"]] == [[], []]
    assert [r["container_spec"]["cap_add"] for r in seat["ranks"]] == [["SYS_PTRACE"], ["SYS_PTRACE"]]
    assert "transport-declared" in [item["id"] for item in seat["refusals"]]
    assert seat["launchable"] is False


def test_read_back_names_a_container_started_without_the_rdma_devices():
    nodes = [dict(node, seatwright_fabric=facts("peermem")) for node in example_nodes()]
    spec = make_plan(seat_data("glm53"), SCHEMA, "glm53", nodes, "seats/glm53.yml")["ranks"][0]["container_spec"]
    inspect = inspect_of(spec)
    assert read_back(spec, inspect, image_env=IMAGE_ENV) == []
    inspect["HostConfig"]["Devices"] = []
    inspect["HostConfig"]["CapAdd"] = None
    assert read_back(spec, inspect, image_env=IMAGE_ENV) == [
        '%s: cap_add: [], the plan says ["IPC_LOCK", "SYS_PTRACE"]' % spec["name"],
        '%s: devices: [], the plan says ["/dev/infiniband"]' % spec["name"],
    ]


@pytest.mark.parametrize("peer_rdma", [True, False], ids=["both ends RDMA", "peer without RDMA"])
def test_the_crossnode_probe_takes_the_same_device_decision(peer_rdma):
    peer = facts("dmabuf") if peer_rdma else dict(facts(None), rdma_devices=[], roce_devices=[])
    pair = pair_plan("node-a", facts("peermem"), 2, "node-b", peer, 2, "10.77.0.11", "nccl", line_rate_gbps=200)
    argv = container_argv(pair, "node-a", "img:1", "/w.py", {}, ["python3", "/seatwright/w.py"])
    devices = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--device"]
    caps = [argv[i + 1] for i, arg in enumerate(argv) if arg == "--cap-add"]
    assert (devices, caps) == ((["/dev/infiniband"], ["IPC_LOCK"]) if peer_rdma else ([], []))


# ---------------------------------------------------------------- item 2: the transport proven at bring-up


def test_every_multi_node_gpu_rank_logs_nccls_init_and_net_lines(capsys):
    for seat in MULTI_NODE_GPU_SEATS:
        result = plan(capsys, seat, example_nodes())
        for rank in result["plan"]["ranks"]:
            assert (rank["env"].get("NCCL_DEBUG"), rank["env"].get("NCCL_DEBUG_SUBSYS")) == ("INFO", "INIT,NET"), seat


REQUIRE_GDR = {"required": "rdma-gdr", "source": "fabric facts", "reason": "the best the seat's nodes promise"}


@pytest.mark.parametrize(
    "log,kind,channels,problem",
    [
        (GDRDMA, "rdma-gdr", GDR_CHANNELS, None),
        (
            NO_GDR,
            "rdma",
            {"NET/IB/0": 2, "NET/IB/4": 1, "NET/IB/6": 1},
            "host node-a: the rank talks over rdma (NET/IB/0 x2, NET/IB/4 x1, NET/IB/6 x1), "
            "the seat requires rdma-gdr (fabric facts); "
            "likely cause: nvidia-peermem is not loaded",
        ),
        (
            SOCKET,
            "socket",
            {"NET/Socket/0": 4},
            "host node-a: the rank talks over socket (NET/Socket/0 x4), the seat requires rdma-gdr (fabric facts); "
            "likely cause: the container has no /dev/infiniband",
        ),
        (
            MIXED,
            "socket",
            dict(GDR_CHANNELS, **{"NET/Socket/0": 4}),
            "host node-a: the rank talks over socket (NET/IB/0/GDRDMA x2, NET/IB/4/GDRDMA x1, NET/IB/6/GDRDMA x1, "
            "NET/Socket/0 x4), the seat requires rdma-gdr (fabric facts); "
            "likely cause: the container has no /dev/infiniband",
        ),
    ],
    ids=["GDRDMA", "IB without GDR", "socket fallback", "mixed"],
)
def test_bring_up_reads_the_transport_from_the_rank_log(capsys, monkeypatch, log, kind, channels, problem):
    result = probed(capsys, monkeypatch, log, REQUIRE_GDR)
    seen = result.get("transport") or {}
    assert (seen.get("kind"), seen.get("backend"), seen.get("channels")) == (kind, "nccl", channels)
    assert seen.get("source") == "rank logs (NCCL channel lines)"
    if problem is None:
        assert seen["problem"] is None
    else:
        assert seen["problem"].startswith(problem), seen["problem"]
        assert "NCCL_IB_HCA" in seen["problem"] or "NCCL_NET_GDR_LEVEL" in seen["problem"]


def test_the_nic_and_gid_come_from_the_log(capsys, monkeypatch):
    seen = probed(capsys, monkeypatch, SOCKET, REQUIRE_GDR).get("transport") or {}
    assert (seen.get("nics"), seen.get("gid_index")) == (["Socket [0]lo:127.0.0.1<0>"], None)
    seen = probed(capsys, monkeypatch, GDRDMA, REQUIRE_GDR).get("transport") or {}
    assert seen.get("gid_index") == 3


def test_a_head_rank_that_logged_no_channel_has_not_proven_its_transport(capsys, monkeypatch):
    seen = probed(capsys, monkeypatch, "INFO: engine started\n", REQUIRE_GDR).get("transport") or {}
    assert seen.get("kind") is None
    assert "not proven" in (seen.get("problem") or "") and "NCCL_DEBUG=INFO" in seen["problem"]
    # A Ray worker's container logs nothing of its own: only what it shows is judged.
    for quiet in (False, "False"):
        seen = probed(capsys, monkeypatch, "", REQUIRE_GDR, must_show=quiet).get("transport") or {}
        assert (seen.get("kind"), seen.get("problem", "not judged")) == (None, None), quiet


# ---------------------------------------------------------------- the lab: gloo, accepted by declaration


def lab_tp2(**fleet):
    nodes = [dict(lab_node(host), **fleet) for host in ("node-a", "node-b")]
    return make_plan(seat_data("lab-tp2"), SCHEMA, "lab-tp2", nodes, "seats/lab-tp2.yml")


def test_the_lab_two_node_cpu_seat_is_refused_without_the_fleets_declaration():
    refused = lab_tp2()
    assert "transport-declared" in [item["id"] for item in refused["refusals"]]
    assert refused["launchable"] is False
    fleet = {k: v for k, v in LAB_FLEET.items() if k.startswith("seatwright_fleet_transport")}
    allowed = lab_tp2(**fleet)
    assert "transport-declared" not in [item["id"] for item in allowed["refusals"]]
    assert allowed["transport"]["required"] == "socket"
    assert allowed["transport"]["source"] == "fleet declaration"
    assert "no RDMA" in allowed["transport"]["reason"]


def test_the_lab_rank_logs_name_gloo_and_bringup_json_records_it(capsys, monkeypatch):
    fleet = {k: v for k, v in LAB_FLEET.items() if k.startswith("seatwright_fleet_transport")}
    seat = lab_tp2(**fleet)
    requirement = seat.get("transport") or {"required": "socket"}
    seen = probed(capsys, monkeypatch, "INFO 12-01 [parallel_state.py] " + GLOO, requirement).get("transport") or {}
    assert (seen.get("kind"), seen.get("backend"), seen.get("source"), seen.get("problem", "not judged")) == (
        "socket",
        "gloo",
        "rank logs (torch.distributed backend line)",
        None,
    )
    ranks = [{"host": "node-a", "rank": 0, "argv": [], "env": {}, "transport": seen}]
    record = bringup_record("lab-tp2", seat, {"state": "serving", "ranks": ranks}, 1.0)
    transport = record.get("transport") or {}
    assert (transport.get("kind"), transport.get("backend"), transport.get("required")) == ("socket", "gloo", "socket")
    assert writer.validate_part("bringup", record) == []
    assert transport["source"] == "rank logs (torch.distributed backend line)"
    report = render({"seat": "lab-tp2", "bringup": record})
    assert (
        "- Transport: socket (gloo, from rank logs (torch.distributed backend line)); required socket "
        "(fleet declaration: a CPU lab" in report
    )


def test_a_cpu_log_without_the_backend_line_shows_no_transport(capsys, monkeypatch):
    result = probed(capsys, monkeypatch, "world_size=2 rank=0 nothing else\n", {"required": "socket"})
    seen = result.get("transport") or {}
    assert seen.get("kind") is None and "not proven" in (seen.get("problem") or "")
