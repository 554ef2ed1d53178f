"""RoCE mode and MTU: the pure plan (plugins/module_utils/fabric/roce.py) and roce_settings' main().

The module runs against a prepared sysfs tree with stand-ins for cma_roce_mode and ip on PATH that
keep their state in that tree, so read, set and read-back are the module's own calls.
"""

import json

import pytest
import roce_settings
from ansible.module_utils.testing import patch_module_args
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import FabricError
from ansible_collections.seatwright.fleet.plugins.module_utils.fabric.roce import (
    check_request,
    parse_roce_mode,
    plan_settings,
    readback_failures,
    settings_diff,
)


@pytest.mark.parametrize(
    "text, version",
    [("RoCE v2", 2), ("RoCE v2\n", 2), ("IB/RoCE v1", 1), ("", None), (None, None), ("RoCE v3", None)],
)
def test_parse_roce_mode(text, version):
    assert parse_roce_mode(text) == version


def port(text, device="mlx5_0", number=1):
    return {"device": device, "port": number, "text": text}


@pytest.mark.parametrize(
    "readings, version, mtu_before, mtu, changed, roce_changes, mtu_changed",
    [
        ([port("RoCE v2")], 2, 9000, 9000, False, [False], False),
        ([port("IB/RoCE v1")], 2, 9000, 9000, True, [True], False),
        ([port("RoCE v2")], 2, 1500, 9000, True, [False], True),
        ([port(None)], 2, None, None, True, [True], None),  # unreadable: set, to end known
        ([port("RoCE v2"), port("IB/RoCE v1", number=2)], 2, None, None, True, [False, True], None),
        ([port("IB/RoCE v1")], None, 1500, 9000, True, [], True),  # RoCE left alone
        ([], None, 9000, None, False, [], None),  # nothing asked
    ],
)
def test_plan(readings, version, mtu_before, mtu, changed, roce_changes, mtu_changed):
    plan = plan_settings(readings, version, "enp65s0f0np0", mtu_before, mtu)
    assert plan["changed"] is changed
    assert [item["changed"] for item in plan["roce"]] == roce_changes
    assert (plan["mtu"] or {}).get("changed") == mtu_changed


@pytest.mark.parametrize(
    "devices, version, iface, mtu, words",
    [
        ([], 2, None, None, "no RDMA device is named"),
        (["mlx5_0"], None, None, 9000, "no interface is named"),
        (["mlx5_0"], None, "eth0", 90000, "outside 1280-9978"),
        (["mlx5_0"], 3, None, None, "give 1 or 2"),
    ],
)
def test_requests_that_cannot_be_applied(devices, version, iface, mtu, words):
    with pytest.raises(FabricError, match=words):
        check_request("node-a", devices, version, iface, mtu)


def test_readback_names_what_did_not_hold():
    plan = plan_settings([port("IB/RoCE v1")], 2, "eth9", 1500, 9000)
    assert readback_failures("node-a", plan, {("mlx5_0", 1): "RoCE v2"}, 9000) == []
    failures = readback_failures("node-a", plan, {("mlx5_0", 1): "IB/RoCE v1"}, 1500)
    assert failures[0].startswith("host node-a: mlx5_0 port 1 still reports 'IB/RoCE v1' after setting RoCE v2")
    assert failures[1].startswith("host node-a: eth9 reports MTU 1500 after setting 9000")


def test_diff_shows_each_port_and_the_mtu():
    diff = settings_diff(plan_settings([port(None)], 2, "eth9", 1500, 9000))
    assert diff["before"] == "mlx5_0 port 1: unknown\neth9 mtu: 1500\n"
    assert diff["after"] == "mlx5_0 port 1: RoCE v2\neth9 mtu: 9000\n"


# ---------------------------------------------------------------- the module


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A sysfs tree with mlx5_0 (ports 1 and 2) and enp65s0f0np0, and tools that change it."""
    root = tmp_path / "root"
    for number in (1, 2):
        (root / "sys/class/infiniband/mlx5_0/ports" / str(number)).mkdir(parents=True)
    net = root / "sys/class/net/enp65s0f0np0"
    net.mkdir(parents=True)
    (net / "mtu").write_text("1500\n")
    modes = tmp_path / "modes"
    modes.mkdir()
    for number in (1, 2):
        (modes / ("mlx5_0-%d" % number)).write_text("IB/RoCE v1\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "cma_roce_mode").write_text(
        "#!/bin/sh\n"
        'dev=$2; port=$4; state=%s/$dev-$port\n'
        '[ -e "$state" ] || { echo "no such port" >&2; exit 1; }\n'
        'if [ "$5" = "-m" ]; then\n'
        '  [ -e %s/stuck ] && exit 0\n'
        '  case $6 in 1) echo "IB/RoCE v1" > "$state";; 2) echo "RoCE v2" > "$state";; *) exit 1;; esac\n'
        "  exit 0\n"
        "fi\n"
        'cat "$state"\n' % (modes, tmp_path)
    )
    # `ip link set dev IFACE mtu N`
    (bin_dir / "ip").write_text('#!/bin/sh\necho "$6" > %s/sys/class/net/$4/mtu\n' % root)
    for tool in ("cma_roce_mode", "ip"):
        (bin_dir / tool).chmod(0o755)
    monkeypatch.setenv("PATH", "%s:/usr/bin:/bin" % bin_dir)

    class Node:
        args = {
            "rdma_devices": ["mlx5_0"],
            "roce_version": 2,
            "fabric_iface": "enp65s0f0np0",
            "mtu": 9000,
            "sysfs_root": str(root),
            "host": "node-a",
        }
        mode_files = modes
        mtu_file = net / "mtu"
        stuck = tmp_path / "stuck"

    return Node


def run(capsys, args, check_mode=False, diff=False):
    args = dict(args, _ansible_check_mode=check_mode, _ansible_diff=diff)
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            roce_settings.main()
    return json.loads(capsys.readouterr().out)


def test_sets_roce_v2_and_the_mtu_then_changes_nothing(capsys, node):
    result = run(capsys, node.args)
    assert result["changed"] is True
    assert [(p["port"], p["before"], p["after"]) for p in result["roce"]] == [(1, 1, 2), (2, 1, 2)]
    assert (result["mtu"]["before"], result["mtu"]["after"]) == (1500, 9000)
    assert node.mtu_file.read_text().strip() == "9000"
    assert {f.read_text().strip() for f in node.mode_files.iterdir()} == {"RoCE v2"}
    assert run(capsys, node.args)["changed"] is False


def test_check_mode_predicts_and_diffs_without_setting(capsys, node):
    result = run(capsys, node.args, check_mode=True, diff=True)
    assert result["changed"] is True
    assert result["diff"]["before"].splitlines() == [
        "mlx5_0 port 1: IB/RoCE v1",
        "mlx5_0 port 2: IB/RoCE v1",
        "enp65s0f0np0 mtu: 1500",
    ]
    assert node.mtu_file.read_text().strip() == "1500"
    assert {f.read_text().strip() for f in node.mode_files.iterdir()} == {"IB/RoCE v1"}


def test_a_setting_that_does_not_hold_fails_by_name(capsys, node):
    node.stuck.touch()
    result = run(capsys, {k: v for k, v in node.args.items() if k != "mtu"})
    assert result["failed"] is True
    assert result["msg"].startswith("host node-a: mlx5_0 port 1 still reports 'IB/RoCE v1' after setting RoCE v2")


def test_an_undeclared_device_is_named(capsys, node):
    result = run(capsys, dict(node.args, rdma_devices=["mlx5_9"]))
    assert result["failed"] is True
    assert result["msg"].startswith("host node-a: RDMA device mlx5_9 is not on this node")


def test_mtu_alone_needs_no_rdma_tool(capsys, node, tmp_path):
    (tmp_path / "bin" / "cma_roce_mode").unlink()
    args = dict(node.args, rdma_devices=[])
    del args["roce_version"]
    result = run(capsys, args)
    assert result["changed"] is True and result["roce"] == []
    assert node.mtu_file.read_text().strip() == "9000"


def test_a_missing_tool_says_what_to_install(capsys, node, tmp_path):
    (tmp_path / "bin" / "cma_roce_mode").unlink()
    result = run(capsys, node.args)
    assert result["failed"] is True
    assert result["msg"].startswith("cma_roce_mode is not installed on this node; install rdma-core")
