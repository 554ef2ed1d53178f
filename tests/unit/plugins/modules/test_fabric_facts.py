"""fabric_facts against sysfs trees laid out as the kernel lays them out, built in tmp folders.

/sys/class/infiniband/<dev> and /sys/bus/pci/devices/<bdf> are symlinks into /sys/devices/pci*/,
a device's `device` link points at its PCI function, bridges carry a binary `config` with the
extended capability list, and unpopulated GID attributes refuse to be read.
"""

import json
import os

import fabric_facts
import pytest
from ansible.module_utils.testing import patch_module_args

ACS_CAP_ID = 0x000D
AER_CAP_ID = 0x0001


def bridge_config(acs_control=None, size=4096):
    """Config space of a PCIe root port: AER at 0x100, then ACS at 0x148 when acs_control is set."""
    config = bytearray(size)
    config[0:4] = (0x1022 | 0x1483 << 16).to_bytes(4, "little")
    if size >= 0x150:
        next_offset = 0x148 if acs_control is not None else 0
        config[0x100:0x104] = (AER_CAP_ID | 1 << 16 | next_offset << 20).to_bytes(4, "little")
        if acs_control is not None:
            config[0x148:0x14C] = (ACS_CAP_ID | 1 << 16).to_bytes(4, "little")
            config[0x14C:0x14E] = (0x005F).to_bytes(2, "little")
            config[0x14E:0x150] = acs_control.to_bytes(2, "little")
    return bytes(config)


def write(path, content):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    mode = "wb" if isinstance(content, bytes) else "w"
    with open(path, mode) as handle:
        handle.write(content)


def link(target, name):
    os.makedirs(os.path.dirname(name), exist_ok=True)
    os.symlink(os.path.relpath(target, os.path.dirname(name)), name)


def pci_function(root, chain, vendor, pci_class, numa="0", config=None):
    """Create /sys/devices/<chain...> for one PCI function and its /sys/bus/pci/devices link."""
    path = os.path.join(root, "sys", "devices", *chain)
    write(os.path.join(path, "vendor"), vendor + "\n")
    write(os.path.join(path, "class"), pci_class + "\n")
    write(os.path.join(path, "numa_node"), numa + "\n")
    if config is not None:
        write(os.path.join(path, "config"), config)
    link(path, os.path.join(root, "sys", "bus", "pci", "devices", chain[-1]))
    return path


def rdma_device(
    root,
    pci_path,
    name,
    netdev,
    gids,
    rate="200 Gb/sec (4X HDR)",
    state="4: ACTIVE",
    link_layer="Ethernet",
    fw="28.39.1002",
):
    base = os.path.join(pci_path, "infiniband", name)
    write(os.path.join(base, "fw_ver"), fw + "\n")
    write(os.path.join(base, "board_id"), "MT_0000000970\n")
    write(os.path.join(base, "hca_type"), "MT4129\n")
    link(pci_path, os.path.join(base, "device"))
    os.makedirs(os.path.join(pci_path, "net", netdev), exist_ok=True)
    port = os.path.join(base, "ports", "1")
    write(os.path.join(port, "state"), state + "\n")
    write(os.path.join(port, "phys_state"), "5: LinkUp\n")
    write(os.path.join(port, "rate"), rate + "\n")
    write(os.path.join(port, "link_layer"), link_layer + "\n")
    for index, (gid_type, gid) in enumerate(gids):
        write(os.path.join(port, "gids", str(index)), gid + "\n")
        write(os.path.join(port, "gid_attrs", "types", str(index)), gid_type + "\n")
        write(os.path.join(port, "gid_attrs", "ndevs", str(index)), netdev + "\n")
    # The kernel answers EINVAL for unpopulated GID slots; a folder in their place refuses too.
    os.makedirs(os.path.join(port, "gid_attrs", "types", str(len(gids))))
    link(base, os.path.join(root, "sys", "class", "infiniband", name))


ROCE_GIDS = [
    ("IB/RoCE v1", "fe80:0000:0000:0000:0ac0:ebff:fe4a:1f2e"),
    ("RoCE v2", "fe80:0000:0000:0000:0ac0:ebff:fe4a:1f2e"),
    ("IB/RoCE v1", "0000:0000:0000:0000:0000:ffff:0a4d:000b"),
    ("RoCE v2", "0000:0000:0000:0000:0000:ffff:0a4d:000b"),
]


def workstation(root, nic_behind_gpu_switch=False, acs_control=0, config_size=4096, peermem=False, open_modules=True):
    """A two-GPU workstation with a 200 GbE ConnectX on its own root port (or under the GPU's switch)."""
    for bdf in ("0000:00:01.1", "0000:00:03.1"):
        pci_function(root, ["pci0000:00", bdf], "0x1022", "0x060400", config=bridge_config(acs_control, config_size))
    for gpu_port, gpu in (("0000:00:01.1", "0000:01:00.0"), ("0000:00:03.1", "0000:21:00.0")):
        pci_function(root, ["pci0000:00", gpu_port, gpu], "0x10de", "0x030000")
    if nic_behind_gpu_switch:
        pci_function(root, ["pci0000:00", "0000:00:01.1", "0000:01:00.1"], "0x15b3", "0x020000")
        nic = os.path.join(root, "sys", "devices", "pci0000:00", "0000:00:01.1", "0000:01:00.1")
    else:
        pci_function(
            root, ["pci0000:40", "0000:40:01.1"], "0x1022", "0x060400", config=bridge_config(acs_control, config_size)
        )
        nic = pci_function(root, ["pci0000:40", "0000:40:01.1", "0000:41:00.0"], "0x15b3", "0x020000")
    rdma_device(root, nic, "mlx5_0", "enp65s0f0np0", ROCE_GIDS)
    write(os.path.join(root, "sys", "class", "net", "enp65s0f0np0", "mtu"), "9000\n")
    write(os.path.join(root, "sys", "class", "net", "enp65s0f0np0", "speed"), "200000\n")
    write(os.path.join(root, "sys", "module", "nvidia", "version"), "580.95.05\n")
    if peermem:
        os.makedirs(os.path.join(root, "sys", "module", "nvidia_peermem"))
    flavour = "Open Kernel Module" if open_modules else "Kernel Module"
    write(
        os.path.join(root, "proc", "driver", "nvidia", "version"),
        "NVRM version: NVIDIA UNIX %s for x86_64  580.95.05  Release Build\n" % flavour,
    )
    write(os.path.join(root, "proc", "sys", "kernel", "osrelease"), "6.8.0-49-generic\n")
    for group in range(4):
        os.makedirs(os.path.join(root, "sys", "kernel", "iommu_groups", str(group)))
    return root


def lab_container(root):
    """What a lab container shows: a veth eth0, host PCI without GPUs, no RDMA, no NVIDIA module."""
    pci_function(root, ["pci0000:00", "0000:00:01.0"], "0x8086", "0x060000")
    write(os.path.join(root, "sys", "class", "net", "eth0", "mtu"), "1500\n")
    write(os.path.join(root, "sys", "class", "net", "eth0", "speed"), "10000\n")
    write(os.path.join(root, "proc", "sys", "kernel", "osrelease"), "6.1.0-27-cloud-amd64\n")
    return root


def run_facts(capsys, root, iface, address=None):
    args = {"sysfs_root": str(root), "fabric_iface": iface}
    if address:
        args["fabric_ip"] = address
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            fabric_facts.main()
    return json.loads(capsys.readouterr().out)


def test_lab_container_has_no_rdma(tmp_path, capsys):
    result = run_facts(capsys, lab_container(str(tmp_path)), "eth0")
    facts = result["ansible_facts"]["seatwright_fabric"]
    assert result["changed"] is False
    assert facts["has_rdma"] is False
    assert facts["rdma_summary"] == "no RDMA devices"
    assert facts["fabric_iface"] == {"name": "eth0", "present": True, "mtu": 1500, "speed_mbps": 10000}
    assert facts["gpudirect"]["available"] is False
    assert facts["gpu_nic_path"] is None
    assert facts["acs"]["state"] == "not_present"


def test_roce_workstation_port_gid_and_netdev(tmp_path, capsys):
    facts = run_facts(capsys, workstation(str(tmp_path)), "enp65s0f0np0", "10.77.0.11")["ansible_facts"][
        "seatwright_fabric"
    ]
    (device,) = facts["rdma_devices"]
    assert device["name"] == "mlx5_0"
    assert device["fw_ver"] == "28.39.1002"
    assert device["pci_address"] == "0000:41:00.0"
    assert device["netdevs"] == ["enp65s0f0np0"]
    (port,) = device["ports"]
    assert port["active"] is True
    assert port["rate_gbps"] == 200.0
    assert port["link_layer"] == "Ethernet"
    assert port["roce_v2_gid_index"] == 3
    assert port["roce_v2_ipv4"] == "10.77.0.11"
    assert port["netdev"] == "enp65s0f0np0"
    assert facts["roce_devices"] == ["mlx5_0"]
    assert facts["rdma_summary"] == "mlx5_0 port 1 ACTIVE 200 Gb/s Ethernet RoCE v2 GID 3 on enp65s0f0np0"
    assert facts["fabric_iface"]["mtu"] == 9000
    assert facts["nvidia_driver_version"] == "580.95.05"


@pytest.mark.parametrize(
    "peermem,open_modules,available,via",
    [
        (False, True, True, "dmabuf"),
        (True, True, True, "peermem"),
        (True, False, True, "peermem"),
        (False, False, False, None),
    ],
)
def test_gpudirect_paths(tmp_path, capsys, peermem, open_modules, available, via):
    root = workstation(str(tmp_path), peermem=peermem, open_modules=open_modules)
    gpudirect = run_facts(capsys, root, "enp65s0f0np0")["ansible_facts"]["seatwright_fabric"]["gpudirect"]
    assert gpudirect["available"] is available
    assert gpudirect["via"] == via
    assert gpudirect["peermem_loaded"] is peermem
    assert gpudirect["proven"] is False


@pytest.mark.parametrize("behind_switch,expected", [(False, "PHB"), (True, "PIX")])
def test_gpu_nic_path(tmp_path, capsys, behind_switch, expected):
    root = workstation(str(tmp_path), nic_behind_gpu_switch=behind_switch)
    facts = run_facts(capsys, root, "enp65s0f0np0")["ansible_facts"]["seatwright_fabric"]
    paths = {(p["gpu"], p["nic"]): p["path"] for p in facts["gpu_nic_paths"]}
    assert paths[("0000:01:00.0", "mlx5_0")] == expected
    assert facts["gpu_nic_path"] == "PHB"


@pytest.mark.parametrize(
    "acs_control,config_size,state",
    [
        (0x0000, 4096, "disabled"),
        (0x001D, 4096, "enabled"),
        (None, 4096, "not_present"),
        (0x001D, 64, "unknown"),
    ],
)
def test_acs_state_from_bridge_config(tmp_path, capsys, acs_control, config_size, state):
    root = workstation(str(tmp_path), acs_control=acs_control, config_size=config_size)
    acs = run_facts(capsys, root, "enp65s0f0np0")["ansible_facts"]["seatwright_fabric"]["acs"]
    assert acs["state"] == state
    if state == "enabled":
        assert acs["redirecting"] == ["0000:00:01.1", "0000:00:03.1", "0000:40:01.1"]
    if state == "unknown":
        assert "not readable" in acs["reason"]


def test_missing_sysfs_root_is_a_clear_error(tmp_path, capsys):
    with patch_module_args({"sysfs_root": str(tmp_path / "nothing")}):
        with pytest.raises(SystemExit):
            fabric_facts.main()
    result = json.loads(capsys.readouterr().out)
    assert result["failed"] is True
    assert "has no sys/ folder" in result["msg"]
