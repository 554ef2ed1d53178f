"""Lossless RoCE QoS: the pure decisions (plugins/module_utils/fabric/qos.py) on recorded `dcb` outputs
and the roce_qos module's main() against a fake `dcb` and a sysfs tree of an mlx5 port.

The mlx5 JSON fixtures are reconstructed from iproute2's dcb sources and man pages
(tests/fixtures/roce_qos/README.md); the veth answer was captured with iproute2 6.1.0.
"""

import json

import pytest
import roce_qos
from ansible.errors import AnsibleFilterError
from ansible.module_utils.testing import patch_module_args
from ansible_collections.seatwright.fleet.plugins.filter.roce_qos_fleet import roce_qos_fleet
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import NcclError, SeatError
from ansible_collections.seatwright.fleet.plugins.module_utils.fabric.nccl import node_env_files, render_env
from ansible_collections.seatwright.fleet.plugins.module_utils.fabric.qos import (
    declared_problems,
    fleet_problems,
    parse_app_dscp,
    parse_ets_prio_tc,
    parse_pfc,
    plan_qos,
    port_readings,
    qos_fact,
    refusals,
    traffic_class,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.node.contract import check_fleet
from ansible_collections.seatwright.fleet.plugins.module_utils.seat import plan
from conftest import FIXTURES

QOS = FIXTURES / "roce_qos"
IFACE = "enp65s0f0np0"
DECLARED = {"priority": 3, "dscp": 26, "pfc": True, "ecn": True, "trust": "dscp"}
VETH_ERR = (QOS / "veth-dcb-pfc.stderr").read_text()


def text(name):
    return (QOS / name).read_text()


def dcb(pfc="mlx5-pfc-off.json", app="mlx5-app-empty.json", ets="mlx5-ets-default.json"):
    return {"pfc": (0, text(pfc), ""), "app": (0, text(app), ""), "ets": (0, text(ets), "")}


def readings(ecn=("0", "0"), **files):
    return port_readings(IFACE, 3, dcb(**files), {"roce_np": ecn[0], "roce_rp": ecn[1]})


def test_parsers_read_the_recorded_outputs():
    assert parse_pfc(text("mlx5-pfc-prio3.json")) == [False, False, False, True, False, False, False, False]
    assert parse_app_dscp(text("mlx5-app-dscp26-prio5.json")) == {26: [5], 48: [6]}
    assert parse_app_dscp(text("mlx5-app-empty.json")) == {}
    assert parse_ets_prio_tc(text("mlx5-ets-default.json")) == [1, 0, 2, 3, 4, 5, 6, 7]
    assert parse_pfc("") is None and parse_app_dscp("not json") is None


def test_the_dscp_to_traffic_class_relation_has_one_home():
    assert traffic_class(26) == 104
    env = {e["name"]: e["value"] for e in render_env("node-a", _roce_fabric(), IFACE, ib_dscp=26)}
    assert env["NCCL_IB_TC"] == str(traffic_class(26))


def _roce_fabric():
    port = {"port": 1, "active": True, "link_layer": "Ethernet", "roce_v2_gid_index": 3}
    return {"rdma_devices": [{"name": "mlx5_0", "ports": [port]}], "fabric_iface": {"name": IFACE, "present": True}}


@pytest.mark.parametrize(
    "change,words",
    [
        ({"priority": 8}, "seatwright_fleet_roce_qos.priority is 8; expected an integer from 0 to 7"),
        ({"priority": -1}, "priority is -1"),
        ({"priority": True}, "priority is True"),
        ({"dscp": 64}, "seatwright_fleet_roce_qos.dscp is 64; expected an integer from 0 to 63"),
        ({"dscp": "26"}, "dscp is '26'"),
        ({"pfc": "yes"}, "pfc is 'yes'; expected true or false"),
        ({"ecn": None}, "ecn is not set"),
        ({"trust": "vlan"}, "trust is 'vlan'; expected dscp or pcp"),
        ({"tc": 104}, "seatwright_fleet_roce_qos.tc is 104; expected no such setting"),
    ],
    ids=["prio-8", "prio-neg", "prio-bool", "dscp-64", "dscp-str", "pfc", "ecn-missing", "trust", "unknown-key"],
)
def test_invalid_declared_values_are_refused_by_name(change, words):
    problems = declared_problems(dict(DECLARED, **change))
    assert len(problems) == 1 and words in problems[0]


def test_a_sound_declaration_and_none_pass():
    assert declared_problems(DECLARED) == [] and declared_problems(None) == []
    assert declared_problems([3, 26]) == [
        "seatwright_fleet_roce_qos is [3, 26]; expected a mapping with priority, dscp, pfc, ecn, trust"
    ]


def test_an_unset_mlx5_port_plans_every_setting():
    plan = plan_qos(IFACE, DECLARED, readings())
    assert [(c["setting"], c.get("argv") or [c["path"], c["value"]]) for c in plan["changes"]] == [
        ("pfc", ["pfc", "set", "dev", IFACE, "prio-pfc", "3:on"]),
        ("dscp_priority", ["app", "replace", "dev", IFACE, "dscp-prio", "26:3"]),
        ("ecn_roce_np", ["sys/class/net/%s/ecn/roce_np/enable/3" % IFACE, "1"]),
        ("ecn_roce_rp", ["sys/class/net/%s/ecn/roce_rp/enable/3" % IFACE, "1"]),
    ]
    assert plan["changed"] is True


def test_a_set_port_plans_nothing_and_records_what_it_reads():
    now = readings(ecn=("1\n", "1\n"), pfc="mlx5-pfc-prio3.json", app="mlx5-app-dscp26-prio3.json")
    assert plan_qos(IFACE, DECLARED, now)["changes"] == []
    fact = qos_fact(IFACE, DECLARED, now)
    assert fact["settings"]["trust"] == "dscp" and fact["settings"]["dscp_priority"] == [3]
    assert fact["traffic_class"] == 3 and fact["pfc_priorities"] == [3]


def test_pcp_trust_flushes_the_dscp_entries():
    plan = plan_qos(IFACE, dict(DECLARED, trust="pcp"), readings(app="mlx5-app-dscp26-prio5.json"))
    assert ("dscp_priority", ["app", "flush", "dev", IFACE, "dscp-prio"]) in [
        (c["setting"], c.get("argv")) for c in plan["changes"]
    ]


def test_a_veth_port_is_not_supported_and_nothing_is_planned():
    veth = {name: (1, "", VETH_ERR) for name in ("pfc", "app", "ets")}
    now = port_readings("eth0", 3, veth, {"roce_np": None, "roce_rp": None})
    assert now["supported"] is False
    assert now["reason"].startswith("not supported by this port: eth0 answers dcb app/ets/pfc with")
    plan = plan_qos("eth0", DECLARED, now)
    assert plan["changes"] == [] and plan["changed"] is False
    fact = qos_fact("eth0", DECLARED, now)
    assert fact["declared"] == DECLARED and fact["settings"] is None


def test_a_command_the_nic_refuses_is_said_and_not_recorded_as_set():
    before = readings()
    plan = plan_qos(IFACE, DECLARED, before)
    failed = [(plan["changes"][0], "Error: Attribute write: Invalid argument")]
    # The NIC took the rest: DSCP entry and ECN read back; PFC still off.
    after = readings(ecn=("1", "1"), app="mlx5-app-dscp26-prio3.json")
    lines = refusals("node-a", IFACE, DECLARED, failed, after)
    assert lines == [
        "host node-a: %s refused PFC on priority 3 (dcb pfc set dev %s prio-pfc 3:on): Error: Attribute write: "
        "Invalid argument; it is not set. Check `dcb -j pfc show dev %s` and the NIC firmware's DCB and "
        "congestion-control settings (mlxconfig)" % (IFACE, IFACE, IFACE)
    ]
    assert qos_fact(IFACE, DECLARED, after)["settings"]["pfc"] is False


def test_a_setting_that_does_not_read_back_is_refused():
    after = readings(ecn=("0", "1"), pfc="mlx5-pfc-prio3.json", app="mlx5-app-dscp26-prio3.json")
    lines = refusals("node-a", IFACE, DECLARED, [], after)
    assert lines == [
        "host node-a: %s reads ECN roce_np on priority 3 as off after setting it to on; the NIC refused it, so "
        "it is not set (see `dcb -j app show dev %s` and /sys/class/net/%s/ecn/)" % (IFACE, IFACE, IFACE)
    ]


def _fact(**files):
    return qos_fact(IFACE, DECLARED, readings(**files))


def test_a_node_that_differs_from_the_fleet_is_named_with_the_setting():
    good = _fact(ecn=("1", "1"), pfc="mlx5-pfc-prio3.json", app="mlx5-app-dscp26-prio3.json")
    drifted = _fact(ecn=("1", "1"), pfc="mlx5-pfc-prio3.json", app="mlx5-app-dscp26-prio5.json")
    problems = fleet_problems(DECLARED, {"node-a": good, "node-b": drifted}, rdma_hosts=("node-a", "node-b"))
    assert problems == [
        "host node-b: APP table DSCP 26 is priority 5 on %s; the fleet declares priority 3 "
        "(seatwright_fleet_roce_qos); run the rdma_fabric role on it, or fix the NIC where it refuses the setting"
        % IFACE
    ]
    assert fleet_problems(DECLARED, {"node-a": good, "node-b": good}) == []


def test_fleet_check_of_unread_and_unsupported_nodes():
    veth = qos_fact("eth0", DECLARED, {"supported": False, "reason": "not supported by this port"})
    assert fleet_problems(DECLARED, {"node-a": veth}) == []
    assert fleet_problems(DECLARED, {"node-a": veth}, rdma_hosts=("node-a",)) == [
        "host node-a: its RoCE QoS cannot be read: not supported by this port"
    ]
    assert fleet_problems(DECLARED, {"node-a": None})[0].startswith("host node-a: its RoCE QoS has not been read")
    assert fleet_problems(None, {"node-a": None}) == []


# ---------------------------------------------------------------- the module against a fake port


@pytest.fixture
def port(tmp_path, monkeypatch):
    """An mlx5 port: `dcb` keeps PFC and the APP table in files; sysfs holds the ECN switches."""
    state = tmp_path / "state"
    state.mkdir()
    (state / "pfc").write_text(text("mlx5-pfc-off.json"))
    (state / "app").write_text(text("mlx5-app-empty.json"))
    (state / "ets").write_text(text("mlx5-ets-default.json"))
    root = tmp_path / "root"
    for point in ("roce_np", "roce_rp"):
        folder = root / "sys" / "class" / "net" / IFACE / "ecn" / point / "enable"
        folder.mkdir(parents=True)
        for prio in range(8):
            (folder / str(prio)).write_text("0\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    # dcb -j OBJ show dev X | dcb pfc set dev X prio-pfc P:on | dcb app replace dev X dscp-prio D:P
    (bin_dir / "dcb").write_text(
        "#!/bin/sh\n"
        "S=%s\n"
        'if [ "$1" = -j ]; then cat "$S/$2"; exit 0; fi\n'
        '[ -e "$S/refuse-$1" ] && { echo "Error: Attribute write: Invalid argument" >&2; exit 1; }\n'
        'case "$1 $2" in\n'
        '  "pfc set") cp "$S/pfc-on" "$S/pfc";;\n'
        '  "app replace") cp "$S/app-on" "$S/app";;\n'
        '  "app flush") echo "{}" > "$S/app";;\n'
        "esac\n" % state
    )
    (bin_dir / "dcb").chmod(0o755)
    (state / "pfc-on").write_text(text("mlx5-pfc-prio3.json"))
    (state / "app-on").write_text(text("mlx5-app-dscp26-prio3.json"))
    monkeypatch.setenv("PATH", "%s:/usr/bin:/bin" % bin_dir)

    class Port:
        args = {"declared": dict(DECLARED), "fabric_iface": IFACE, "sysfs_root": str(root), "host": "node-a"}
        folder = state
        ecn = root / "sys" / "class" / "net" / IFACE / "ecn"

    return Port


def run(capsys, args, check_mode=False, diff=False):
    with patch_module_args(dict(args, _ansible_check_mode=check_mode, _ansible_diff=diff)):
        with pytest.raises(SystemExit):
            roce_qos.main()
    return json.loads(capsys.readouterr().out)


def test_module_sets_reads_back_then_changes_nothing(capsys, port):
    result = run(capsys, port.args)
    assert result["changed"] is True
    assert result["fact"]["settings"]["pfc"] is True and result["fact"]["settings"]["ecn_roce_rp"] is True
    assert (port.ecn / "roce_np" / "enable" / "3").read_text() == "1"
    assert run(capsys, port.args)["changed"] is False


def test_module_check_mode_diffs_and_sets_nothing(capsys, port):
    result = run(capsys, port.args, check_mode=True, diff=True)
    assert result["changed"] is True
    assert "%s PFC on priority 3: off" % IFACE in result["diff"]["before"]
    assert "%s PFC on priority 3: on" % IFACE in result["diff"]["after"]
    assert (port.ecn / "roce_np" / "enable" / "3").read_text() == "0\n"
    assert json.loads((port.folder / "pfc").read_text())["prio_pfc"][3] is False


def test_module_fails_naming_what_the_nic_refused(capsys, port):
    (port.folder / "refuse-pfc").touch()
    result = run(capsys, port.args)
    assert result["failed"] is True
    assert result["msg"].startswith("host node-a: %s refused PFC on priority 3" % IFACE)
    assert result["fact"]["settings"]["pfc"] is False and result["fact"]["settings"]["dscp_priority"] == [3]


def test_module_refuses_an_invalid_declaration_before_reading(capsys, port):
    result = run(capsys, dict(port.args, declared=dict(DECLARED, dscp=64)))
    assert result["failed"] is True
    assert "seatwright_fleet_roce_qos.dscp is 64; expected an integer from 0 to 63" in result["msg"]


def test_module_on_a_port_without_dcb(capsys, port, tmp_path):
    (tmp_path / "bin" / "dcb").write_text('#!/bin/sh\necho "%s" >&2\nexit 1\n' % VETH_ERR.strip())
    for point in ("roce_np", "roce_rp"):
        for prio in range(8):
            (port.ecn / point / "enable" / str(prio)).unlink()
    result = run(capsys, port.args)
    assert result["changed"] is False and result["plan"]["supported"] is False
    assert result["fact"]["reason"].startswith("not supported by this port")
    assert result["fact"]["declared"] == DECLARED


# ---------------------------------------------------------------- preflight: declaration and fleet


CONTRACT_NODE = {
    "seatwright_node_gpu_profile": "rtx-pro-6000-maxq",
    "seatwright_node_gpu_count": 2,
    "seatwright_node_fabric_ip": "10.77.0.11",
    "seatwright_node_fabric_iface": IFACE,
}


@pytest.mark.parametrize(
    "qos,words",
    [
        (dict(DECLARED, priority=8), "expected priority an integer from 0 to 7"),
        (dict(DECLARED, dscp=64), "expected dscp an integer from 0 to 63"),
        (dict(DECLARED, trust="vlan"), "expected trust dscp or pcp"),
        ("26", "expected a mapping of priority (0-7)"),
    ],
    ids=["priority", "dscp", "trust", "not-a-mapping"],
)
def test_preflight_refuses_an_invalid_fleet_declaration(qos, words):
    problems = check_fleet({"node-a": dict(CONTRACT_NODE, seatwright_fleet_roce_qos=qos)})
    assert len(problems) == 1 and problems[0].startswith("seatwright_fleet_roce_qos is ") and words in problems[0]


def test_preflight_refuses_a_node_declaring_another_qos_than_the_fleet():
    other = dict(
        CONTRACT_NODE, seatwright_node_fabric_ip="10.77.0.12", seatwright_fleet_roce_qos=dict(DECLARED, dscp=24)
    )
    problems = check_fleet({"node-a": dict(CONTRACT_NODE, seatwright_fleet_roce_qos=DECLARED), "node-b": other})
    assert problems == [
        "seatwright_fleet_roce_qos differs between hosts (node-a has %r, node-b has %r); set it once for group "
        "gpu_nodes" % (DECLARED, dict(DECLARED, dscp=24))
    ]
    assert check_fleet({"node-a": dict(CONTRACT_NODE, seatwright_fleet_roce_qos=DECLARED)}) == []


def test_the_fleet_filter_names_the_drifted_node_and_refuses_a_bad_declaration():
    good = _fact(ecn=("1", "1"), pfc="mlx5-pfc-prio3.json", app="mlx5-app-dscp26-prio3.json")
    off = _fact(ecn=("1", "0"), pfc="mlx5-pfc-prio3.json", app="mlx5-app-dscp26-prio3.json")
    assert roce_qos_fleet({"node-a": good, "node-b": off}, DECLARED, ["node-a", "node-b"]) == [
        "host node-b: ECN roce_rp on priority 3 is off on %s; the fleet declares on (seatwright_fleet_roce_qos); "
        "run the rdma_fabric role on it, or fix the NIC where it refuses the setting" % IFACE
    ]
    with pytest.raises(AnsibleFilterError, match="seatwright_fleet_roce_qos.priority is 9"):
        roce_qos_fleet({"node-a": good}, dict(DECLARED, priority=9))


# ---------------------------------------------------------------- one declaration of the DSCP


@pytest.mark.parametrize(
    "ib_dscp,qos,tc",
    [(None, DECLARED, "104"), (26, DECLARED, "104"), (24, None, "96"), (None, None, None)],
    ids=["fleet-only", "node-repeats-fleet", "node-only", "neither"],
)
def test_nccl_takes_the_fleets_dscp(ib_dscp, qos, tc):
    env = node_env_files("node-a", _roce_fabric(), IFACE, ib_dscp=ib_dscp, roce_qos=qos)["variables"]
    assert env.get("NCCL_IB_TC") == tc


def test_a_node_dscp_that_contradicts_the_fleet_is_refused():
    with pytest.raises(NcclError, match="nccl_env_ib_dscp is 24 but seatwright_fleet_roce_qos.dscp is 26"):
        node_env_files("node-a", _roce_fabric(), IFACE, ib_dscp=24, roce_qos=DECLARED)


def test_the_plan_hands_the_fleets_class_to_each_ranks_nccl_env():
    assert plan._nccl_options("node-a", {"seatwright_fleet_roce_qos": DECLARED})["ib_dscp"] == 26
    with pytest.raises(SeatError, match="host node-a: nccl_env_ib_dscp is 24"):
        plan._nccl_options("node-a", {"seatwright_fleet_roce_qos": DECLARED, "nccl_env_ib_dscp": 24})
