"""Pure fabric decisions (plugins/module_utils/fabric/links.py) against recorded tool outputs."""

import json

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import FabricError
from ansible_collections.seatwright.fleet.plugins.module_utils.fabric.links import (
    bandwidth_inputs,
    farthest_path,
    gid_to_ipv4,
    ib_write_bw_argv,
    iperf3_argv,
    judge,
    pair_label,
    parse_ib_write_bw,
    parse_ib_write_bw_json,
    parse_iperf3_json,
    parse_rate_gbps,
    pci_path_type,
    probe_plan,
    roce_v2_gid,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.files import fingerprint
from ansible_collections.seatwright.fleet.plugins.module_utils.node.platform import acs_control, is_bridge, redirects
from conftest import FIXTURES

IB = FIXTURES / "ib_write_bw"


@pytest.mark.parametrize(
    "text,expected",
    [
        ("200 Gb/sec (4X HDR)", 200.0),
        ("100 Gb/sec (4X EDR)", 100.0),
        ("25 Gb/sec (1X EDR)", 25.0),
        ("2.5 Gb/sec (1X SDR)", 2.5),
        ("", None),
        (None, None),
    ],
)
def test_port_rate(text, expected):
    assert parse_rate_gbps(text) == expected


@pytest.mark.parametrize(
    "gid,expected",
    [
        ("0000:0000:0000:0000:0000:ffff:0a4d:000b", "10.77.0.11"),
        ("0000:0000:0000:0000:0000:ffff:c000:0274", "192.0.2.116"),
        ("fe80:0000:0000:0000:0ac0:ebff:fe4a:1f2e", None),
        ("0000:0000:0000:0000:0000:0000:0000:0000", None),
    ],
)
def test_gid_to_ipv4(gid, expected):
    assert gid_to_ipv4(gid) == expected


def test_roce_v2_gid_prefers_the_fabric_address():
    port = {
        "gid_types": {"1": "RoCE v2", "3": "RoCE v2", "5": "RoCE v2", "2": "IB/RoCE v1"},
        "gids": {
            "1": "fe80:0000:0000:0000:0ac0:ebff:fe4a:1f2e",
            "3": "0000:0000:0000:0000:0000:ffff:c0a8:0101",
            "5": "0000:0000:0000:0000:0000:ffff:0a4d:000b",
            "2": "0000:0000:0000:0000:0000:ffff:0a4d:000b",
        },
        "gid_ndevs": {"1": "enp65s0f0np0", "3": "docker0", "5": "enp65s0f0np0", "2": "enp65s0f0np0"},
    }
    assert roce_v2_gid(port, "enp65s0f0np0", "10.77.0.11") == (5, "10.77.0.11", "enp65s0f0np0")
    assert roce_v2_gid(port) == (3, "192.168.1.1", "docker0")
    assert roce_v2_gid({"gid_types": {}}) == (None, None, None)


@pytest.mark.parametrize(
    "control,expected",
    [
        (0x0000, {"src_valid": False, "req_redir": False, "cmplt_redir": False, "egress_ctrl": False}),
        (0x0004, {"src_valid": False, "req_redir": True, "cmplt_redir": False, "egress_ctrl": False}),
        (0x001D, {"src_valid": True, "req_redir": True, "cmplt_redir": True, "egress_ctrl": False}),
        (0x0020, {"src_valid": False, "req_redir": False, "cmplt_redir": False, "egress_ctrl": True}),
    ],
)
def test_acs_bits(control, expected):
    config = bytearray(4096)
    config[0x100:0x104] = (0x000D | 1 << 16).to_bytes(4, "little")
    config[0x106:0x108] = control.to_bytes(2, "little")
    assert acs_control(bytes(config)) == expected
    assert redirects(acs_control(bytes(config))) is (control & 0b1100 != 0)


def test_acs_unreadable_and_absent():
    assert acs_control(bytes(64)) is None
    assert acs_control(None) is None
    assert acs_control(bytes(4096)) == {}


@pytest.mark.parametrize(
    "pci_class,bridge", [("0x060400", True), ("0x060401", True), ("0x030000", False), ("", False), (None, False)]
)
def test_bridge_class_is_decided_once(pci_class, bridge):
    assert is_bridge(pci_class) is bridge


@pytest.mark.parametrize(
    "a,numa_a,b,numa_b,expected",
    [
        (
            ["pci0000:00", "0000:00:01.1", "0000:01:00.0"],
            "0",
            ["pci0000:00", "0000:00:01.1", "0000:01:00.1"],
            "0",
            "PIX",
        ),
        (
            ["pci0000:00", "0000:00:01.1", "0000:02:00.0", "0000:03:00.0"],
            "0",
            ["pci0000:00", "0000:00:01.1", "0000:02:01.0", "0000:04:00.0"],
            "0",
            "PXB",
        ),
        (
            ["pci0000:00", "0000:00:01.1", "0000:01:00.0"],
            "0",
            ["pci0000:00", "0000:00:03.1", "0000:41:00.0"],
            "0",
            "PHB",
        ),
        (
            ["pci0000:00", "0000:00:01.1", "0000:01:00.0"],
            "0",
            ["pci0000:40", "0000:40:01.1", "0000:41:00.0"],
            "0",
            "PHB",
        ),
        (
            ["pci0000:00", "0000:00:01.1", "0000:01:00.0"],
            "0",
            ["pci0000:80", "0000:80:01.1", "0000:81:00.0"],
            "1",
            "SYS",
        ),
        ([], "0", ["pci0000:80"], "1", None),
    ],
)
def test_pci_path_type(a, numa_a, b, numa_b, expected):
    assert pci_path_type(a, numa_a, b, numa_b) == expected


def test_farthest_path():
    assert farthest_path(["PIX", "SYS", "PHB"]) == "SYS"
    assert farthest_path([None]) is None


@pytest.mark.parametrize(
    "fixture,average,unit",
    [
        ("roce-100g-bidirectional.txt", 98.02, "Gb/sec"),
        ("ib-compliance-example.txt", 51.04, "Gb/sec"),
    ],
)
def test_ib_write_bw_table(fixture, average, unit):
    parsed = parse_ib_write_bw((IB / fixture).read_text())
    assert parsed["average_gbps"] == pytest.approx(average)
    assert parsed["unit"] == unit
    assert parsed["msg_size"] == 65536


def test_ib_write_bw_table_in_mib_is_converted():
    text = (
        " #bytes     #iterations    BW peak[MiB/sec]    BW average[MiB/sec]   MsgRate[Mpps]\n"
        " 65536      5000             5293.52            2229.27              0.035668\n"
    )
    assert parse_ib_write_bw(text)["average_gbps"] == pytest.approx(2229.27 * 8 * 2**20 / 1e9)


def test_ib_write_bw_json_carries_no_unit():
    text = (IB / "out-json-mbsec.json").read_text()
    as_mib = parse_ib_write_bw_json(text, unit="MiB/sec")
    assert as_mib["average_gbps"] == pytest.approx(18.70, abs=0.01)
    assert as_mib["device"] == "mlx5_11"
    assert as_mib["link_type"] == "Ethernet"
    assert parse_ib_write_bw_json(text, unit="Gb/sec")["average_gbps"] == 2229.27


@pytest.mark.parametrize("text", ["", "Couldn't connect to 10.77.0.12:18515\n", "#bytes #iterations\n"])
def test_ib_write_bw_without_result_says_so(text):
    with pytest.raises(FabricError, match="no result table"):
        parse_ib_write_bw(text)


def test_iperf3_json_recorded_in_the_lab():
    rate = parse_iperf3_json((FIXTURES / "iperf3" / "lab-veth-4-streams.json").read_text())
    assert rate == pytest.approx(13.522, abs=0.001)


@pytest.mark.parametrize(
    "text,message",
    [
        ("iperf3: error - unable to connect", "did not print JSON"),
        (json.dumps({"error": "unable to connect to server: Connection refused"}), "Connection refused"),
        (json.dumps({"end": {}}), "no end.sum_received"),
    ],
)
def test_iperf3_errors(text, message):
    with pytest.raises(FabricError, match=message):
        parse_iperf3_json(text)


def fabric(rdma=True, rate="200 Gb/sec (4X HDR)", speed=None, mtu=9000, fw="28.39.1002"):
    devices = []
    if rdma:
        devices = [
            {
                "name": "mlx5_0",
                "fw_ver": fw,
                "ports": [
                    {
                        "port": 1,
                        "active": True,
                        "rate_gbps": 200.0 if rate else None,
                        "link_layer": "Ethernet",
                        "roce_v2_gid_index": 3,
                    }
                ],
            }
        ]
    return {
        "rdma_devices": devices,
        "fabric_iface": {"mtu": mtu, "speed_mbps": speed},
        "nvidia_driver_version": "580.95.05",
    }


def test_plan_takes_rdma_when_both_ends_have_it():
    plan = probe_plan("node-a", fabric(), "node-b", fabric())
    assert plan["method"] == "rdma"
    assert plan["line_rate_gbps"] == 200.0
    assert (plan["device"], plan["gid_index"], plan["peer_device"]) == ("mlx5_0", 3, "mlx5_0")


def test_plan_falls_back_to_tcp_with_interface_speed():
    plan = probe_plan("node-a", fabric(rdma=False, speed=10000), "node-b", fabric(rdma=False, speed=25000))
    assert plan["method"] == "tcp"
    assert plan["line_rate_gbps"] == 10.0
    assert plan["line_rate_source"] == "interface speed (sysfs)"


def test_plan_uses_declared_line_rate_when_sysfs_has_none():
    plan = probe_plan("node-a", fabric(rdma=False), "node-b", fabric(rdma=False), line_rate_gbps=200)
    assert (plan["line_rate_gbps"], plan["line_rate_source"]) == (200.0, "declared line_rate_gbps")


@pytest.mark.parametrize(
    "kwargs,message",
    [
        ({}, "no line rate is known"),
        ({"method": "rdma"}, "node-a has no active RDMA port"),
        ({"use_cuda": 0, "line_rate_gbps": 10}, "use_cuda needs an RDMA path"),
    ],
)
def test_plan_errors_name_the_pair(kwargs, message):
    with pytest.raises(FabricError, match=message) as error:
        probe_plan("node-a", fabric(rdma=False), "node-b", fabric(rdma=False), **kwargs)
    assert "node-a<->node-b" in str(error.value)


def test_fingerprint_is_the_same_from_both_ends_and_moves_with_inputs():
    a, b = fabric(), fabric()
    plan = probe_plan("node-a", a, "node-b", b)
    from_a = fingerprint(bandwidth_inputs("node-a", a, "node-b", b, plan, 10))
    from_b = fingerprint(bandwidth_inputs("node-b", b, "node-a", a, plan, 10))
    assert from_a == from_b
    for changed in (fabric(mtu=1500), fabric(fw="28.40.1000")):
        assert fingerprint(bandwidth_inputs("node-a", changed, "node-b", b, plan, 10)) != from_a
    assert fingerprint(bandwidth_inputs("node-a", a, "node-b", b, plan, 20)) != from_a


def test_pair_label_is_ordered():
    assert pair_label("node-b", "node-a") == pair_label("node-a", "node-b") == "node-a<->node-b"


@pytest.mark.parametrize("rate,passed", [(195.87, True), (180.0, True), (150.0, False)])
def test_judge_names_the_pair_and_numbers(rate, passed):
    record = {
        "pair": "node-a<->node-b",
        "rate_gbps": rate,
        "method": "rdma",
        "line_rate_gbps": 200.0,
        "fraction": rate / 200.0,
    }
    ok, message = judge(record, 0.9)
    assert ok is passed
    assert "node-a<->node-b: %.2f Gb/s over rdma" % rate in message
    if not passed:
        assert message.startswith("fabric below threshold")
        assert "threshold 90 %" in message


def test_argv_of_both_sides():
    plan = dict(probe_plan("node-a", fabric(), "node-b", fabric()), use_cuda=0)
    server = ib_write_bw_argv(plan, 10, 4, 18515)
    client = ib_write_bw_argv(plan, 10, 4, 18515, server_address="10.77.0.12", json_file="/tmp/bw.json")
    assert server[:3] == ["ib_write_bw", "-d", "mlx5_0"]
    assert "--report_gbits" in server and "-x" in server and "--use_cuda=0" in server
    assert "10.77.0.12" not in server
    assert client[-1] == "10.77.0.12"
    assert "--out_json_file=/tmp/bw.json" in client
    assert iperf3_argv(10, 5201) == ["iperf3", "-s", "-1", "-p", "5201"]
    assert iperf3_argv(10, 5201, "10.77.0.12", 4)[-3:] == ["-P", "4", "-J"]
