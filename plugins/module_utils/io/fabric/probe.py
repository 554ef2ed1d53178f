"""Reading the fabric side of a node from sysfs and procfs: RDMA devices and ports, the fabric
interface, PCI devices (bridges' config spaces through io/platform_probe.py), GPUDirect modules.
Raw readings only; fabric/links.py interprets them.
"""

import os

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import FabricError
from ansible_collections.seatwright.fleet.plugins.module_utils.fabric.links import fabric_facts
from ansible_collections.seatwright.fleet.plugins.module_utils.io.node.platform_probe import (
    iommu_group_count,
    read_bridge_configs,
)


def _read(path, binary=False):
    """File contents, or None when the file is missing or the kernel refuses the read."""
    try:
        with open(path, "rb" if binary else "r") as handle:
            return handle.read() if binary else handle.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def _listdir(path):
    try:
        return sorted(os.listdir(path))
    except OSError:
        return []


def _relative(root, path):
    real = os.path.realpath(path)
    root = os.path.realpath(root)
    return "/" + os.path.relpath(real, root) if root != "/" else real


def _port(path):
    port = {name: _read(os.path.join(path, name)) for name in ("state", "phys_state", "rate", "link_layer")}
    types, gids, ndevs = {}, {}, {}
    for index in _listdir(os.path.join(path, "gid_attrs", "types")):
        gid_type = _read(os.path.join(path, "gid_attrs", "types", index))
        if not gid_type:
            continue
        types[index] = gid_type
        gids[index] = _read(os.path.join(path, "gids", index))
        ndevs[index] = _read(os.path.join(path, "gid_attrs", "ndevs", index))
    port.update(gid_types=types, gids=gids, gid_ndevs=ndevs)
    return port


def read_snapshot(root, fabric_iface):
    """What fabric_facts() needs from sysfs and procfs under `root`."""
    sys_dir = os.path.join(root, "sys")
    infiniband = {}
    ib_class = os.path.join(sys_dir, "class", "infiniband")
    for name in _listdir(ib_class):
        base = os.path.join(ib_class, name)
        device = os.path.join(base, "device")
        infiniband[name] = {
            "fw_ver": _read(os.path.join(base, "fw_ver")),
            "board_id": _read(os.path.join(base, "board_id")),
            "hca_type": _read(os.path.join(base, "hca_type")),
            "device_path": _relative(root, device) if os.path.exists(device) else None,
            "numa_node": _read(os.path.join(device, "numa_node")),
            "netdevs": _listdir(os.path.join(device, "net")),
            "ports": {port: _port(os.path.join(base, "ports", port)) for port in _listdir(os.path.join(base, "ports"))},
        }

    net = {}
    if fabric_iface:
        iface = os.path.join(sys_dir, "class", "net", fabric_iface)
        if os.path.exists(iface):
            net[fabric_iface] = {"mtu": _read(os.path.join(iface, "mtu")), "speed": _read(os.path.join(iface, "speed"))}

    pci = {}
    bridges = read_bridge_configs(root) or {}
    pci_dir = os.path.join(sys_dir, "bus", "pci", "devices")
    for bdf in _listdir(pci_dir):
        path = os.path.join(pci_dir, bdf)
        pci_class = _read(os.path.join(path, "class")) or ""
        pci[bdf] = {
            "vendor": _read(os.path.join(path, "vendor")),
            "class": pci_class,
            "numa_node": _read(os.path.join(path, "numa_node")),
            "path": _relative(root, path),
        }
        if bdf in bridges:
            pci[bdf]["config"] = bridges[bdf]

    kernel = _read(os.path.join(root, "proc", "sys", "kernel", "osrelease"))
    if kernel is None and os.path.realpath(root) == "/":
        kernel = os.uname().release
    return {
        "infiniband": infiniband,
        "net": net,
        "pci": pci,
        "modules": {
            "nvidia_peermem": os.path.isdir(os.path.join(sys_dir, "module", "nvidia_peermem")),
            "nvidia": _read(os.path.join(sys_dir, "module", "nvidia", "version")),
        },
        "memory_peers": _listdir(os.path.join(sys_dir, "kernel", "mm", "memory_peers")),
        "nvidia_version_text": _read(os.path.join(root, "proc", "driver", "nvidia", "version")),
        "kernel_release": kernel,
        "iommu_groups": iommu_group_count(root)[0] or 0,
    }


def read_fabric_facts(root, fabric_iface=None, fabric_ip=None):
    """The fabric_facts module's run: a sysfs snapshot under `root`, interpreted by fabric/links.py.

    FabricError when `root` holds no sys/ folder (a mistyped sysfs_root, not a node without RDMA).
    """
    if not os.path.isdir(os.path.join(root, "sys")):
        raise FabricError("sysfs_root %s has no sys/ folder; pass the folder that holds sys/ and proc/" % root)
    facts = fabric_facts(read_snapshot(root, fabric_iface), fabric_iface, fabric_ip)
    return dict(changed=False, ansible_facts={"seatwright_fabric": facts})
