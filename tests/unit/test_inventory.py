"""Preflight checks of inventory declarations (module_utils/seatwright/node/inventory.py)."""
import json

import pytest
from ansible.module_utils.seatwright.node.inventory import check_fleet, check_node
from ansible.module_utils.testing import patch_module_args

import fleet_preflight

GOOD = {
    "seatwright_node_gpu_profile": "rtx-pro-6000-maxq",
    "seatwright_node_gpu_count": 2,
    "seatwright_node_fabric_ip": "10.77.0.11",
    "seatwright_node_fabric_iface": "enp65s0f0np0",
    "seatwright_node_rdma_devices": ["mlx5_0"],
    "gpu_power_limit_w": 250,
}


def test_good_declaration_has_no_problem():
    assert check_node("node-a", GOOD) == []


@pytest.mark.parametrize("variable", sorted(
    ["seatwright_node_gpu_profile", "seatwright_node_gpu_count",
     "seatwright_node_fabric_ip", "seatwright_node_fabric_iface"]))
def test_missing_variable_names_host_and_variable(variable):
    declared = dict(GOOD)
    del declared[variable]
    problems = check_node("node-b", declared)
    assert len(problems) == 1
    assert problems[0].startswith("host node-b: %s is not set; expected" % variable)


@pytest.mark.parametrize("variable,value,expected", [
    ("seatwright_node_gpu_profile", "rtx-6000", "one of: h200, rtx-pro-6000-maxq, rtx-pro-6000-ws"),
    ("seatwright_node_gpu_count", "two", "an integer from 1 to 16"),
    ("seatwright_node_gpu_count", 0, "an integer from 1 to 16"),
    ("seatwright_node_gpu_count", True, "an integer from 1 to 16"),
    ("seatwright_node_fabric_ip", "10.77.0.300", "IP address on the fabric"),
    ("seatwright_node_fabric_iface", "enp65s0f0np0-too-long", "netdev name"),
    ("seatwright_node_fabric_iface", "eth 0", "netdev name"),
    ("seatwright_node_rdma_devices", "mlx5_0", "a list of RDMA device names"),
    ("seatwright_node_rdma_devices", ["mlx5/0"], "a list of RDMA device names"),
    ("gpu_power_limit_w", 700, "no higher than the NVIDIA RTX PRO 6000 Blackwell Max-Q"),
    ("gpu_power_limit_w", -5, "a whole number of watts"),
    ("gpu_power_limit_w", "250W", "a whole number of watts"),
])
def test_wrong_value_is_named_with_what_is_expected(variable, value, expected):
    declared = dict(GOOD, **{variable: value})
    problems = check_node("node-a", declared)
    assert len(problems) == 1, problems
    assert problems[0].startswith("host node-a: %s is %r; expected" % (variable, value))
    assert expected in problems[0]


def test_fleet_duplicate_address_and_subnet():
    nodes = {
        "node-a": dict(GOOD),
        "node-b": dict(GOOD, seatwright_node_gpu_profile="rtx-pro-6000-ws", gpu_power_limit_w=325),
        "node-c": dict(GOOD, seatwright_node_fabric_ip="10.78.0.13"),
    }
    problems = check_fleet(nodes, "10.77.0.0/24")
    assert any("host node-b: seatwright_node_fabric_ip 10.77.0.11 is also declared by node-a" in p
               for p in problems)
    assert any("host node-c: seatwright_node_fabric_ip 10.78.0.13 is outside" in p for p in problems)
    assert len(problems) == 2


def test_empty_fleet_and_bad_subnet():
    assert "no hosts in group gpu_nodes" in check_fleet({})[0]
    assert "seatwright_fabric_subnet is 'ten'" in check_fleet({"n": dict(GOOD)}, "ten")[0]


def run_module(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            fleet_preflight.main()
    return json.loads(capsys.readouterr().out)


def test_module_fails_with_every_problem(capsys):
    result = run_module(capsys, {"nodes": {"node-a": dict(GOOD, seatwright_node_gpu_count=None),
                                           "node-b": {}}})
    assert result["failed"] is True
    assert "host node-a: seatwright_node_gpu_count is not set" in result["msg"]
    assert "host node-b: seatwright_node_fabric_ip is not set" in result["msg"]
    assert result["changed"] is False


def test_module_passes_a_sound_fleet(capsys):
    result = run_module(capsys, {"nodes": {"node-a": GOOD}, "fabric_subnet": "10.77.0.0/24"})
    assert result.get("failed") is not True
    assert result["problems"] == [] and result["hosts"] == ["node-a"]
