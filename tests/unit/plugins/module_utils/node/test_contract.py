"""The node and fleet contract (plugins/module_utils/node/contract.py) and the preflight module."""

import json

import fleet_preflight
import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.seatwright.fleet.plugins.module_utils.node import contract
from ansible_collections.seatwright.fleet.plugins.module_utils.node.contract import check_fleet, check_node

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


@pytest.mark.parametrize(
    "variable",
    sorted(
        [
            "seatwright_node_gpu_profile",
            "seatwright_node_gpu_count",
            "seatwright_node_fabric_ip",
            "seatwright_node_fabric_iface",
        ]
    ),
)
def test_missing_variable_names_host_and_variable(variable):
    declared = dict(GOOD)
    del declared[variable]
    problems = check_node("node-b", declared)
    assert len(problems) == 1
    assert problems[0].startswith("host node-b: %s is not set; expected" % variable)


@pytest.mark.parametrize(
    "variable,value,expected",
    [
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
    ],
)
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
    for declared in nodes.values():
        declared["seatwright_fabric_subnet"] = "10.77.0.0/24"
    problems = check_fleet(nodes)
    assert any("host node-b: seatwright_node_fabric_ip 10.77.0.11 is also declared by node-a" in p for p in problems)
    assert any("host node-c: seatwright_node_fabric_ip 10.78.0.13 is outside" in p for p in problems)
    assert len(problems) == 2


def test_empty_fleet_and_bad_subnet():
    assert "no hosts in group gpu_nodes" in check_fleet({})[0]
    assert check_fleet({"n": dict(GOOD, seatwright_fabric_subnet="ten")}) == [
        "seatwright_fabric_subnet is 'ten'; expected a network such as 10.77.0.0/24"
    ]


def run_module(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            fleet_preflight.main()
    return json.loads(capsys.readouterr().out)


def test_module_fails_with_every_problem(capsys):
    result = run_module(capsys, {"nodes": {"node-a": dict(GOOD, seatwright_node_gpu_count=None), "node-b": {}}})
    assert result["failed"] is True
    assert "host node-a: seatwright_node_gpu_count is not set" in result["msg"]
    assert "host node-b: seatwright_node_fabric_ip is not set" in result["msg"]
    assert result["changed"] is False


def test_module_passes_a_sound_fleet(capsys):
    result = run_module(capsys, {"nodes": {"node-a": dict(GOOD, seatwright_fabric_subnet="10.77.0.0/24")}})
    assert result.get("failed") is not True
    assert result["problems"] == [] and result["hosts"] == ["node-a"]
    fact = result["declarations"]["node-a"]
    assert fact["node"] == "node-a" and fact["gpu_power_limit_w"] == 250
    assert fact["state_dir"] == "/var/lib/seatwright" and fact["cotenants"] == []


COTENANT = {"name": "embedder", "kind": "container", "gpus": [1]}


@pytest.mark.parametrize(
    "value", [[], [COTENANT], [dict(COTENANT, gpus="all"), {"name": "tei.service", "kind": "systemd", "gpus": [0, 1]}]]
)
def test_cotenants_that_hold(value):
    assert check_node("node-a", dict(GOOD, seatwright_node_cotenants=value)) == []


@pytest.mark.parametrize(
    "value,words",
    [
        ("embedder", "a list of {name, kind"),
        ([dict(COTENANT, kind="pod")], "kind must be container or systemd"),
        ([dict(COTENANT, gpus=[2])], "GPU 2 does not exist on a 2-GPU node"),
        ([dict(COTENANT, gpus=[])], "gpus must be a list of GPU indices or all"),
        ([COTENANT, COTENANT], "embedder is listed twice"),
        ([dict(COTENANT, name="a b")], "name must be a container or unit name"),
        ([dict(COTENANT, image="x")], "has other keys"),
    ],
)
def test_cotenants_that_break_the_contract(value, words):
    problems = check_node("node-a", dict(GOOD, seatwright_node_cotenants=value))
    assert len(problems) == 1 and problems[0].startswith("host node-a: seatwright_node_cotenants is ")
    assert words in problems[0]


@pytest.mark.parametrize(
    "variable,value,words",
    [
        ("seatwright_fleet_incumbents", ["glm53", "glm53"], "a list of seat names"),
        ("seatwright_fleet_incumbents", ["GLM"], "a list of seat names"),
        ("seatwright_fleet_incumbent_max_age_days", 0, "a whole number of days"),
        ("seatwright_fleet_incumbent_max_age_days", 7.5, "a whole number of days"),
        ("seatwright_fleet_promotion_margin", 1.5, "a fraction from 0 to 1"),
        ("seatwright_fleet_promotion_margin", "5%", "a fraction from 0 to 1"),
        ("seatwright_fleet_promotion_levels", [4, 4], "a list of concurrency levels"),
        ("seatwright_fleet_promotion_levels", "1,4,16", "a list of concurrency levels"),
        ("seatwright_fleet_promotion_levels", [0, 16], "a list of concurrency levels"),
        ("seatwright_fleet_promotion_ttft_p95_ms", 0, "a number of milliseconds above 0"),
        ("seatwright_fleet_promotion_ttft_p95_ms", "2 s", "a number of milliseconds above 0"),
        ("seatwright_state_dir", "var/lib", "an absolute path"),
        ("seatwright_fleet_name", "my fleet", "a name of letters"),
        ("seatwright_fleet_stability_spread", 0, "a fraction above 0 and at most 0.5"),
        ("seatwright_fleet_stability_spread", 0.6, "a fraction above 0 and at most 0.5"),
        ("seatwright_fleet_stability_reason", "two\nlines", "a one-line sentence"),
    ],
)
def test_fleet_variables_are_checked_once(variable, value, words):
    nodes = {
        "node-a": dict(GOOD, **{variable: value}),
        "node-b": dict(GOOD, seatwright_node_fabric_ip="10.77.0.12", **{variable: value}),
    }
    problems = check_fleet(nodes)
    assert problems == ["%s is %r; expected %s" % (variable, value, contract.BY_NAME[variable].expected)]
    assert words in problems[0]


def test_fleet_variables_that_hold_and_their_defaults():
    nodes = {"node-a": dict(GOOD, seatwright_fleet_incumbents=["glm53"], seatwright_fleet_promotion_margin=0)}
    assert check_fleet(nodes) == []
    fleet = contract.normalised({}, contract.FLEET_VARIABLES)
    assert fleet["seatwright_fleet_incumbents"] == [] and fleet["seatwright_fleet_incumbent_max_age_days"] == 14
    assert fleet["seatwright_fleet_promotion_margin"] == 0.10
    assert fleet["seatwright_fleet_promotion_levels"] == [] and fleet["seatwright_fleet_promotion_ttft_p95_ms"] is None
    declared = dict(GOOD, seatwright_fleet_promotion_levels=[1, 4, 16], seatwright_fleet_promotion_ttft_p95_ms=2000)
    assert check_fleet({"node-a": declared}) == []


def test_fleet_variables_must_agree_on_every_host():
    nodes = {
        "node-a": dict(GOOD, seatwright_fabric_subnet="10.77.0.0/24"),
        "node-b": dict(GOOD, seatwright_node_fabric_ip="10.77.0.12", seatwright_fabric_subnet="10.78.0.0/24"),
    }
    problems = check_fleet(nodes)
    assert problems == [
        "seatwright_fabric_subnet differs between hosts (node-a has '10.77.0.0/24', node-b has "
        "'10.78.0.0/24'); set it once for group gpu_nodes"
    ]


def test_unknown_contract_name_is_a_typo():
    problems = check_node("node-a", dict(GOOD, seatwright_node_cotenant=[]))
    assert problems == [
        "host node-a: seatwright_node_cotenant is not a seatwright variable (did you mean "
        "seatwright_node_cotenants?); remove or rename it"
    ]


def test_collect_pattern_collects_every_contract_variable():
    """The plays collect hosts' variables by COLLECT_PATTERN; a variable it missed would go unchecked."""
    import re

    for variable in contract.VARIABLES:
        assert re.match(contract.COLLECT_PATTERN, variable.name), variable.name


@pytest.mark.parametrize(
    "spread,reason,problem",
    [
        (0.05, "", None),
        (0.10, "", None),
        (0.4, "two cores: passes spread 7-42 % in the lab's own runs", None),
        (0.4, "", "above 0.1 only with seatwright_fleet_stability_reason giving the spreads measured"),
        (0.4, "  ", "above 0.1 only with seatwright_fleet_stability_reason giving the spreads measured"),
    ],
)
def test_a_looser_stability_spread_needs_its_measured_reason(spread, reason, problem):
    declared = dict(GOOD, seatwright_fleet_stability_spread=spread, seatwright_fleet_stability_reason=reason)
    problems = check_fleet({"node-a": declared})
    expected = [] if problem is None else ["seatwright_fleet_stability_spread is %r; expected %s" % (spread, problem)]
    assert problems == expected
