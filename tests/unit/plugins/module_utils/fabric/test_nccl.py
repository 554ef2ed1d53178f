"""NCCL decisions (plugins/module_utils/fabric/nccl.py) and the two NCCL modules."""

import json
import sys
from unittest.mock import MagicMock

import nccl_bandwidth
import nccl_env_render
import pytest
from ansible.errors import AnsibleActionFail
from ansible.module_utils.testing import patch_module_args
from ansible.playbook.play_context import PlayContext
from ansible.playbook.task import Task
from ansible_collections.seatwright.fleet.plugins.action.nccl_env_render import ActionModule as NcclEnvRenderAction
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import NcclError
from ansible_collections.seatwright.fleet.plugins.module_utils.fabric.nccl import (
    bus_bandwidth,
    env_decisions,
    judge_sweep,
    nccl_conf_names,
    nccl_version,
    parse_all_reduce_perf,
    parse_all_reduce_perf_json,
    parse_channels,
    parse_torch_sweep,
    render_env,
    render_file,
    summarise_transports,
    transport_class,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.io.fabric import allreduce_worker
from conftest import FIXTURES

NCCL = FIXTURES / "nccl"
H200_SHARED = FIXTURES / "h200x2" / "torch-allreduce-nccl.txt"


def roce_fabric(gid=3, path="PHB", gpudirect=True, acs="disabled", second_gid=None, active=True):
    ports = [{"port": 1, "active": active, "link_layer": "Ethernet", "roce_v2_gid_index": gid}]
    devices = [{"name": "mlx5_0", "ports": ports}]
    if second_gid is not None:
        devices.append(
            {
                "name": "mlx5_1",
                "ports": [{"port": 1, "active": True, "link_layer": "Ethernet", "roce_v2_gid_index": second_gid}],
            }
        )
    return {
        "rdma_devices": devices,
        "roce_devices": [d["name"] for d in devices],
        "fabric_iface": {"name": "enp65s0f0np0", "present": True},
        "gpudirect": {"available": gpudirect},
        "gpu_nic_path": path,
        "acs": {"state": acs, "reason": "test", "redirecting": ["0000:00:01.1"] if acs == "enabled" else []},
    }


LAB_FABRIC = {
    "rdma_devices": [],
    "roce_devices": [],
    "fabric_iface": {"name": "eth0", "present": True},
    "gpudirect": {"available": False},
    "gpu_nic_path": None,
    "acs": {"state": "unknown", "reason": "no PCI bridge above a GPU or RDMA device was found"},
}


def as_dict(entries):
    return {entry["name"]: entry["value"] for entry in entries}


def test_lab_node_gets_sockets_only():
    env = as_dict(render_env("node-a", LAB_FABRIC, "eth0"))
    assert env == {"NCCL_SOCKET_IFNAME": "=eth0", "GLOO_SOCKET_IFNAME": "eth0", "NCCL_IB_DISABLE": "1"}


@pytest.mark.parametrize(
    "fabric,options,expected",
    [
        (roce_fabric(), {}, {"NCCL_IB_HCA": "=mlx5_0:1", "NCCL_IB_GID_INDEX": "3", "NCCL_NET_GDR_LEVEL": "PHB"}),
        (roce_fabric(path="SYS"), {}, {"NCCL_NET_GDR_LEVEL": "SYS"}),
        (roce_fabric(path="PIX"), {}, {"NCCL_NET_GDR_LEVEL": None}),
        (roce_fabric(gpudirect=False), {}, {"NCCL_NET_GDR_LEVEL": None}),
        (roce_fabric(), {"gdr_level": "PXB"}, {"NCCL_NET_GDR_LEVEL": "PXB"}),
        (roce_fabric(), {"ib_dscp": 26}, {"NCCL_IB_TC": "104"}),
        (roce_fabric(acs="enabled"), {}, {"NCCL_P2P_DISABLE": "1"}),
        (roce_fabric(acs="enabled"), {"p2p_disable": False}, {"NCCL_P2P_DISABLE": None}),
        (roce_fabric(acs="unknown"), {"p2p_disable": True}, {"NCCL_P2P_DISABLE": "1"}),
        (roce_fabric(second_gid=3), {}, {"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_IB_GID_INDEX": "3"}),
        (roce_fabric(second_gid=5), {}, {"NCCL_IB_HCA": "=mlx5_0:1,mlx5_1:1", "NCCL_IB_GID_INDEX": None}),
        (
            roce_fabric(second_gid=5),
            {"declared_devices": ["mlx5_1"]},
            {"NCCL_IB_HCA": "=mlx5_1:1", "NCCL_IB_GID_INDEX": "5"},
        ),
        (roce_fabric(active=False), {}, {"NCCL_IB_DISABLE": "1", "NCCL_IB_HCA": None}),
    ],
)
def test_roce_decisions(fabric, options, expected):
    env = as_dict(render_env("node-a", fabric, "enp65s0f0np0", **options))
    assert env["NCCL_SOCKET_IFNAME"] == "=enp65s0f0np0"
    for name, value in expected.items():
        assert env.get(name) == value, name


@pytest.mark.parametrize(
    "fabric,options,message",
    [
        (
            roce_fabric(),
            {"declared_devices": ["mlx5_2"]},
            "declared RDMA device(s) mlx5_2 not found on the node (found: mlx5_0)",
        ),
        (roce_fabric(gid=None), {}, "have no RoCE v2 IPv4 GID"),
        (roce_fabric(), {"ib_dscp": 64}, "expected a DSCP value from 0 to 63"),
        (roce_fabric(), {"gdr_level": "NODE"}, "expected auto or one of"),
        (dict(LAB_FABRIC, fabric_iface={"name": "eth0", "present": False}), {}, "fabric interface eth0 does not exist"),
    ],
)
def test_refusals_name_host_and_fix(fabric, options, message):
    with pytest.raises(NcclError) as error:
        render_env("node-b", fabric, fabric["fabric_iface"]["name"], **options)
    assert str(error.value).startswith("host node-b:")
    assert message in str(error.value)


def test_defaults_are_explained():
    _, defaults = env_decisions("node-a", roce_fabric(gpudirect=False), "enp65s0f0np0")
    assert any("no GPUDirect path" in line for line in defaults)
    assert any(line.startswith("NCCL_P2P_DISABLE left unset: ACS disabled") for line in defaults)


def test_rendered_files():
    entries = render_env("node-a", roce_fabric(), "enp65s0f0np0", ib_dscp=26)
    conf = render_file(entries, "banner", nccl_conf_names(entries))
    envfile = render_file(entries, "banner")
    assert conf.splitlines()[0] == "# banner"
    assert "NCCL_IB_HCA==mlx5_0:1" in conf.splitlines()
    assert "GLOO_SOCKET_IFNAME" not in conf
    assert "GLOO_SOCKET_IFNAME=enp65s0f0np0" in envfile.splitlines()
    assert envfile.endswith("\n")


@pytest.mark.parametrize("path", [H200_SHARED, NCCL / "h200x2-torch-sweep.txt"])
def test_torch_sweep_recorded_on_h200(path):
    text = path.read_text()
    rows = parse_torch_sweep(text)
    assert [r["size_bytes"] for r in rows] == [1 << 20, 8 << 20, 64 << 20, 256 << 20, 1 << 30]
    verdict = judge_sweep(rows, threshold_gbps=297.0)
    assert verdict["max_busbw_gbps"] == pytest.approx(330, rel=0.01)
    assert verdict["max_busbw_at_bytes"] == 1 << 30
    assert verdict["passed"] is True
    transports = summarise_transports(parse_channels(text))
    assert transports["channels"] == 48
    assert transports["transports"] == ["P2P"]
    assert transports["gdrdma"] is False
    assert nccl_version(text) == "2.28.9+cuda13.0"


def test_gdr_summary_line_alone_proves_nothing():
    text = H200_SHARED.read_text()
    assert "use ring PXN 0 GDR 1" in text
    assert summarise_transports(parse_channels(text))["gdrdma"] is False


def test_roce_channels_prove_gdrdma():
    channels = parse_channels((NCCL / "roce-2node-gdrdma-channels.txt").read_text())
    summary = summarise_transports(channels)
    assert summary["gdrdma"] is True
    assert summary["transports"] == ["NET/IB", "P2P"]
    assert summary["counts"]["NET/IB/0/GDRDMA"] == 2
    receive = [c for c in channels if c["direction"] == "receive"]
    assert [(c["src_rank"], c["dst_rank"], c["via"]) for c in receive] == [
        (4, 12, "NET/IB/4/GDRDMA"),
        (6, 14, "NET/IB/6/GDRDMA"),
    ]


@pytest.mark.parametrize(
    "via,expected",
    [
        ("P2P/CUMEM/read", "P2P"),
        ("P2P/IPC", "P2P"),
        ("SHM/direct/direct", "SHM"),
        ("NET/Socket/0", "NET/Socket"),
        ("NET/IB/2(3)/GDRDMA", "NET/IB"),
        ("NVLS", "NVLS"),
    ],
)
def test_transport_class(via, expected):
    assert transport_class(via) == expected


def test_older_ring_lines_are_read():
    channels = parse_channels(
        "NCCL INFO Ring 00 : 3 -> 10 [send] via NET/IB/0/GDRDMA\n"
        "NCCL INFO Channel 00 : 0[3000] -> 1[44000] via SHM/direct/direct\n"
    )
    assert [(c["transport"], c["gdrdma"]) for c in channels] == [("NET/IB", True), ("SHM", False)]


def test_all_reduce_perf_table_with_mpirun_prefixes():
    rows = parse_all_reduce_perf((NCCL / "rtx5090-socket-all_reduce_perf.txt").read_text())
    assert len(rows) == 8
    assert rows[0]["size_bytes"] == 1048576
    assert rows[-1]["busbw_gbps"] == 2.31
    assert rows[-1]["in_place_busbw_gbps"] == 2.31
    verdict = judge_sweep(rows)
    assert verdict["judged_busbw_gbps"] == 2.31
    assert verdict["wrong_elements"] == 0


def test_all_reduce_perf_json_matches_its_table():
    rows = parse_all_reduce_perf_json((NCCL / "all_reduce_perf-handmade.json").read_text())
    table = {
        r["size_bytes"]: r["busbw_gbps"]
        for r in parse_all_reduce_perf((NCCL / "rtx5090-socket-all_reduce_perf.txt").read_text())
    }
    assert [r["size_bytes"] for r in rows] == [1048576, 8388608, 67108864, 134217728]
    for row in rows:
        assert row["busbw_gbps"] == table[row["size_bytes"]]


def test_judging_ignores_small_sizes_and_counts_wrong_results():
    rows = [{"size_bytes": 1 << 20, "busbw_gbps": 50.0}, {"size_bytes": 1 << 30, "busbw_gbps": 20.0, "wrong": 0}]
    verdict = judge_sweep(rows, threshold_gbps=30.0)
    assert verdict["max_busbw_gbps"] == 50.0
    assert verdict["judged_busbw_gbps"] == 20.0
    assert verdict["passed"] is False
    rows[1]["wrong"] = 4
    assert judge_sweep(rows)["passed"] is False
    with pytest.raises(NcclError, match="no result rows"):
        judge_sweep([])


@pytest.mark.parametrize("algbw,nranks,busbw", [(100.0, 2, 100.0), (100.0, 4, 150.0), (100.0, 8, 175.0), (7.0, 1, 0.0)])
def test_bus_bandwidth(algbw, nranks, busbw):
    assert bus_bandwidth(algbw, nranks) == busbw


def run_module(module, capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            module.main()
    return json.loads(capsys.readouterr().out)


def test_env_module_returns_files_and_reasons(capsys):
    result = run_module(
        nccl_env_render,
        capsys,
        {
            "host": "node-a",
            "fabric": roce_fabric(),
            "socket_ifname": "enp65s0f0np0",
            "rdma_devices": ["mlx5_0"],
            "ib_dscp": 26,
            "p2p_disable": "auto",
        },
    )
    assert result["changed"] is False
    assert result["variables"]["NCCL_IB_TC"] == "104"
    assert "NCCL_IB_GID_INDEX=3" in result["nccl_conf"].splitlines()
    assert all(entry["reason"] for entry in result["env"])


def test_env_module_fails_with_the_reason(capsys):
    result = run_module(
        nccl_env_render,
        capsys,
        {"host": "node-b", "fabric": roce_fabric(), "socket_ifname": "enp65s0f0np0", "rdma_devices": ["mlx5_9"]},
    )
    assert result["failed"] is True
    assert result["msg"].startswith("host node-b: declared RDMA device(s) mlx5_9 not found")


@pytest.mark.parametrize(
    "args,message",
    [
        ({"sizes": [1000, 6]}, "positive multiples of 4"),
        ({"iters": 0}, "iters >= 1"),
        ({"method": "torch", "python": sys.executable}, "cannot import torch"),
        ({"method": "nccl-tests", "all_reduce_perf": None}, "all_reduce_perf was not found"),
    ],
)
def test_sweep_module_refusals(capsys, args, message):
    result = run_module(nccl_bandwidth, capsys, args)
    assert result["failed"] is True
    assert message in result["msg"]


def fake_torch_python(tmp_path, recorded, rc=0):
    """A stand-in for the node's PyTorch interpreter: answers the torch probe, then replays a
    recorded sweep after checking it was handed the shipped worker with the module's sizes."""
    script = tmp_path / "python"
    log = tmp_path / "argv.log"
    script.write_text(
        "#!/bin/sh\n"
        'echo "$@" >> %s\n'
        'if [ "$1" = "-c" ]; then echo 2; exit 0; fi\n'
        'grep -q "def run(rank, args)" "$1" || { echo "not the worker: $1" >&2; exit 9; }\n'
        "cat %s\n"
        "exit %d\n" % (log, recorded, rc)
    )
    script.chmod(0o755)
    return script, log


def test_sweep_module_runs_the_shipped_torch_worker(capsys, tmp_path):
    python, log = fake_torch_python(tmp_path, NCCL / "h200x2-torch-sweep.txt")
    sizes = [1 << 20, 8 << 20, 64 << 20, 256 << 20, 1 << 30]
    result = run_module(
        nccl_bandwidth, capsys, {"method": "torch", "python": str(python), "sizes": sizes, "threshold_gbps": 297}
    )
    assert result.get("failed") is not True, result
    assert result["method"] == "torch" and result["nranks"] == 2 and result["passed"] is True
    assert result["ansible_facts"]["seatwright_nccl_bandwidth"]["judged_busbw_gbps"] == pytest.approx(330, rel=0.01)
    worker_call = log.read_text().splitlines()[-1].split()
    assert worker_call[0].endswith("allreduce_sweep.py")
    assert worker_call[worker_call.index("--sizes") + 1 :] == [str(size) for size in sizes]


def test_sweep_module_fails_below_threshold_with_the_figures(capsys, tmp_path):
    python, _log = fake_torch_python(tmp_path, NCCL / "h200x2-torch-sweep.txt")
    result = run_module(nccl_bandwidth, capsys, {"method": "torch", "python": str(python), "threshold_gbps": 900})
    assert result["failed"] is True
    assert result["passed"] is False and result["rows"]
    assert "900" in result["msg"]


def test_sweep_module_reports_a_dead_worker(capsys, tmp_path):
    python, _log = fake_torch_python(tmp_path, NCCL / "h200x2-torch-sweep.txt", rc=3)
    result = run_module(nccl_bandwidth, capsys, {"method": "torch", "python": str(python)})
    assert result["failed"] is True
    assert result["msg"].startswith("the torch all-reduce sweep exited 3")


def test_sweep_module_reads_the_all_reduce_perf_table(capsys, tmp_path):
    binary = tmp_path / "all_reduce_perf"
    binary.write_text(
        '#!/bin/sh\nif [ "$1" = "--help" ]; then echo "usage: -b -e -f -g"; exit 0; fi\ncat %s\n'
        % (NCCL / "rtx5090-socket-all_reduce_perf.txt")
    )
    binary.chmod(0o755)
    result = run_module(nccl_bandwidth, capsys, {"all_reduce_perf": str(binary), "gpus": 2, "threshold_gbps": 2})
    assert result.get("failed") is not True, result
    assert result["method"] == "nccl-tests" and result["nranks"] == 2
    assert result["max_busbw_gbps"] == pytest.approx(2.31, abs=0.01)


def test_torch_worker_is_a_real_file_that_parses_its_arguments():
    assert allreduce_worker.__file__.endswith("allreduce_worker.py")
    args = allreduce_worker.parse_args(["--port", "29500", "--sizes", "1024", "4096"])
    assert (args.nranks, args.port, args.sizes, args.iters) == (0, 29500, [1024, 4096], 20)


def run_action(args):
    """The controller-side nccl_env_render (plugins/action), through ActionBase as a task runs it."""
    task = Task()
    task.action = "seatwright.fleet.nccl_env_render"
    task.args = args
    action = NcclEnvRenderAction(task, MagicMock(), PlayContext(), loader=None, templar=None, shared_loader_obj=None)
    return action.run(task_vars={})


@pytest.mark.parametrize(
    "args",
    [
        {"host": "node-a", "fabric": roce_fabric(), "socket_ifname": "enp65s0f0np0", "rdma_devices": ["mlx5_0"]},
        {"host": "node-a", "fabric": roce_fabric(), "socket_ifname": "eth0", "ib_dscp": 26, "gdr_level": "SYS"},
        {"host": "fleet-1", "fabric": {}, "socket_ifname": "eth0"},
    ],
    ids=["roce", "dscp-and-gdr", "no-rdma"],
)
def test_env_action_decides_what_the_module_does(capsys, args):
    """The role runs the decision on the controller (issue 25); it must be the module's decision."""
    module_result = run_module(nccl_env_render, capsys, args)
    module_result.pop("invocation", None)
    assert run_action(args) == module_result


@pytest.mark.parametrize(
    "args,message",
    [
        (
            {"host": "node-b", "fabric": roce_fabric(), "socket_ifname": "x", "rdma_devices": ["mlx5_9"]},
            "mlx5_9 not found",
        ),
        ({"host": "node-b", "fabric": {}, "socket_ifname": "x", "gdr_level": "FAR"}, "gdr_level"),
        ({"host": "node-b", "fabric": {}}, "socket_ifname"),
    ],
    ids=["missing-device", "bad-choice", "missing-argument"],
)
def test_env_action_refuses_with_the_reason(args, message):
    with pytest.raises(AnsibleActionFail, match=message):
        run_action(args)
