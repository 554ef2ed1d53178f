"""One NCCL decision: every rank of a multi-node seat runs with exactly its node's rendered NCCL env.

The node's /etc/nccl.conf and env file come from library/nccl_env_render.py (roles/nccl_env); the
plan's per-rank env comes from seat/launch.py. Both call fabric/nccl.py node_env/render_env, so
for the same facts and nccl_env_* settings they must agree key for key.
"""

import copy
import json

import nccl_env_render
import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError
from ansible_collections.seatwright.fleet.plugins.module_utils.fabric.nccl import (
    NCCL_DEBUG_ENV,
    declared_fabric,
    node_env,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.plan import make_plan
from seat_cases import SCHEMA, example_nodes, mutated, seat_data


def roce(gid, path, acs, port=1):
    """seatwright_fabric facts of a RoCE node in fabric_facts' shape."""
    return {
        "rdma_devices": [
            {
                "name": "mlx5_0",
                "ports": [{"port": port, "active": True, "link_layer": "Ethernet", "roce_v2_gid_index": gid}],
            }
        ],
        "roce_devices": ["mlx5_0"],
        "fabric_iface": {"name": "enp65s0f0np0", "present": True},
        "gpudirect": {"available": True},
        "gpu_nic_path": path,
        "acs": {"state": acs, "reason": "recorded", "redirecting_bridges": ["0000:00:01.1"] if acs == "on" else []},
    }


# Two different nodes, so a rank taking the other node's env (or a second copy of the decision) shows.
FACTS = {"node-a": roce(3, "PHB", "off"), "node-b": roce(5, "PXB", "on", port=2)}
SETTINGS = {
    "node-a": {"nccl_env_ib_dscp": 26},
    "node-b": {"nccl_env_ib_dscp": 26, "nccl_env_gdr_level": "SYS", "nccl_env_p2p_disable": "false"},
}

SHAPES = {
    "glm53-vendor (vLLM on Ray)": ("glm53-vendor", ()),
    "nemotron3-ultra (vLLM multiprocessing)": ("nemotron3-ultra", ()),
    "deepseek across two nodes (SGLang)": (
        "deepseek-v4-flash",
        [(("topology", "nodes"), 2), (("topology", "tensor_parallel"), 4)],
    ),
}


def candidates(with_facts, with_settings):
    nodes = example_nodes()
    for node in nodes:
        if with_facts:
            node["seatwright_fabric"] = copy.deepcopy(FACTS[node["host"]])
        if with_settings:
            node.update(SETTINGS[node["host"]])
    return nodes


def role_env(node, capsys):
    """What roles/nccl_env writes to the node's env file, through the module the role calls."""
    fabric = node.get("seatwright_fabric") or declared_fabric(
        node["seatwright_node_fabric_iface"], node["seatwright_node_rdma_devices"]
    )
    args = {
        "host": node["host"],
        "fabric": fabric,
        "socket_ifname": node["seatwright_node_fabric_iface"],
        "rdma_devices": node["seatwright_node_rdma_devices"],
    }
    for key in ("ib_dscp", "gdr_level", "p2p_disable", "gid_index"):
        if node.get("nccl_env_" + key) is not None:
            args[key] = node["nccl_env_" + key]
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            nccl_env_render.main()
    result = json.loads(capsys.readouterr().out)
    assert "failed" not in result, result
    lines = [line for line in result["env_file"].splitlines() if line and not line.startswith("#")]
    return dict(line.split("=", 1) for line in lines)


@pytest.mark.parametrize("with_settings", [False, True], ids=["role defaults", "nccl_env_* set"])
@pytest.mark.parametrize("with_facts", [True, False], ids=["cached fabric facts", "inventory only"])
@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_every_rank_runs_with_its_nodes_rendered_nccl_env(shape, with_facts, with_settings, capsys):
    name, changes = SHAPES[shape]
    data = seat_data(name)
    for path, value in changes:
        data = mutated(data, path, value)
    nodes = candidates(with_facts, with_settings)
    plan = make_plan(data, SCHEMA, name, nodes, "seats/%s.yml" % name)
    assert len(plan["ranks"]) == 2
    by_host = {node["host"]: node for node in nodes}
    for rank in plan["ranks"]:
        launch = {k: v for k, v in rank["env"].items() if k.startswith(("NCCL_", "GLOO_"))}
        # The node's env, plus NCCL's init and net logging that bring-up reads the transport from.
        assert launch == dict(role_env(by_host[rank["host"]], capsys), **NCCL_DEBUG_ENV), rank["host"]
    assert [h["nccl_env_source"] for h in plan["hosts"]] == ["facts" if with_facts else "inventory"] * 2


def test_facts_refine_the_declaration_with_port_gid_gdr_and_p2p():
    plan = make_plan(seat_data("glm53"), SCHEMA, "glm53", candidates(True, True), "seats/glm53.yml")
    a, b = (rank["env"] for rank in plan["ranks"])
    assert (a["NCCL_IB_HCA"], a["NCCL_IB_GID_INDEX"], a["NCCL_NET_GDR_LEVEL"], a["NCCL_IB_TC"]) == (
        "=mlx5_0:1",
        "3",
        "PHB",
        "104",
    )
    assert (b["NCCL_IB_HCA"], b["NCCL_IB_GID_INDEX"], b["NCCL_NET_GDR_LEVEL"]) == ("=mlx5_0:2", "5", "SYS")
    assert "NCCL_P2P_DISABLE" not in b  # ACS is on, but the inventory forces p2p on
    assert "NCCL_P2P_DISABLE" not in a


@pytest.mark.parametrize(
    "iface,devices,expected",
    [
        (
            "enp65s0f0np0",
            ["mlx5_0"],
            {"NCCL_SOCKET_IFNAME": "=enp65s0f0np0", "GLOO_SOCKET_IFNAME": "enp65s0f0np0", "NCCL_IB_HCA": "=mlx5_0"},
        ),
        ("eth0", [], {"NCCL_SOCKET_IFNAME": "=eth0", "GLOO_SOCKET_IFNAME": "eth0", "NCCL_IB_DISABLE": "1"}),
        (
            "ens1",
            ["mlx5_0", "mlx5_1"],
            {"NCCL_SOCKET_IFNAME": "=ens1", "GLOO_SOCKET_IFNAME": "ens1", "NCCL_IB_HCA": "=mlx5_0,mlx5_1"},
        ),
    ],
)
def test_declared_fallback_names_the_devices_without_guessing_ports(iface, devices, expected):
    assert node_env("node-a", iface, devices) == {"env": expected, "source": "inventory"}


def test_a_declared_device_missing_from_the_facts_stops_the_plan_with_the_host():
    nodes = candidates(True, False)
    nodes[1]["seatwright_node_rdma_devices"] = ["mlx5_9"]
    with pytest.raises(SeatError, match="host node-b: declared RDMA device.s. mlx5_9 not found"):
        make_plan(seat_data("glm53"), SCHEMA, "glm53", nodes, "seats/glm53.yml")


def test_a_bad_p2p_setting_is_named_with_its_host():
    nodes = candidates(False, False)
    nodes[0]["nccl_env_p2p_disable"] = "sometimes"
    with pytest.raises(SeatError, match="host node-a: nccl_env_p2p_disable is 'sometimes'"):
        make_plan(seat_data("glm53"), SCHEMA, "glm53", nodes, "seats/glm53.yml")
