"""Reading the PCI platform of a node: IOMMU groups, the kernel command line, `lspci -vvv` and the
raw config space of PCI bridges. Raw readings only; node/platform.py interprets them.
"""

import os

from ansible_collections.seatwright.fleet.plugins.module_utils.node.platform import is_bridge


def _sys(root, *parts):
    return os.path.join(root, "sys", *parts)


def read_bridge_configs(root="/"):
    """{address: config space bytes (None where unreadable)} of every PCI bridge; None if unlistable."""
    devices = _sys(root, "bus", "pci", "devices")
    try:
        addresses = sorted(os.listdir(devices))
    except OSError:
        return None
    configs = {}
    for address in addresses:
        base = os.path.join(devices, address)
        try:
            with open(os.path.join(base, "class"), encoding="ascii") as handle:
                if not is_bridge(handle.read().strip()):
                    continue
        except OSError:
            continue
        try:
            with open(os.path.join(base, "config"), "rb") as handle:
                configs[address] = handle.read(4096)
        except OSError:
            configs[address] = None
    return configs


def iommu_group_count(root="/"):
    """(entries in /sys/kernel/iommu_groups, None) or (None, why it is unreadable)."""
    try:
        return len(os.listdir(_sys(root, "kernel", "iommu_groups"))), None
    except OSError as exc:
        return None, "/sys/kernel/iommu_groups is not readable: %s" % exc.strerror


def read_platform(module, bus_ids):
    """IOMMU groups, kernel command line, each GPU's IOMMU group and `lspci -vvv` text, where readable;
    the bridges' config spaces when lspci is missing or fails."""
    count, reason = iommu_group_count()
    platform = {
        "iommu_group_count": count,
        "iommu_reason": reason,
        "cmdline": None,
        "gpu_groups": {},
        "lspci": None,
        "lspci_reason": None,
        "bridge_configs": None,
    }
    try:
        with open("/proc/cmdline", encoding="utf-8") as handle:
            platform["cmdline"] = handle.read().strip()
    except OSError:
        pass
    for address in bus_ids:
        if not address:
            continue
        link = _sys("/", "bus", "pci", "devices", address, "iommu_group")
        if os.path.islink(link):
            platform["gpu_groups"][address] = os.path.basename(os.readlink(link))
    lspci = module.get_bin_path("lspci")
    if lspci is None:
        platform["lspci_reason"] = "lspci is not installed (pciutils)"
    else:
        rc, out, err = module.run_command([lspci, "-vvv"])
        if rc == 0:
            platform["lspci"] = out
        else:
            platform["lspci_reason"] = "lspci -vvv exited %d: %s" % (rc, err.strip())
    if platform["lspci"] is None:
        platform["bridge_configs"] = read_bridge_configs()
    return platform
