"""The PCI platform of a node, read one way: IOMMU, ACS and PCI bridges.

Pure: io/platform_probe.py reads sysfs, procfs and `lspci -vvv`; gpu_facts, fabric_facts and the
NCCL peer-to-peer decision all interpret those readings here, in one vocabulary:
IOMMU `enabled | disabled | unknown`, ACS `enabled | disabled | not_present | unknown`
(enabled: some device redirects peer-to-peer requests or completions up to the root complex).
"""

import re

# PCI class code prefix of a PCI-to-PCI bridge (first two bytes of the 24-bit class).
BRIDGE_CLASS = "0x0604"

# PCIe extended capability id of Access Control Services and the bits of its control register.
ACS_CAPABILITY_ID = 0x000D
ACS_CONTROL_BITS = {"src_valid": 0, "req_redir": 2, "cmplt_redir": 3, "egress_ctrl": 5}
_EXTENDED_START = 0x100


def is_bridge(pci_class):
    """True for a PCI class code ('0x060400') that names a PCI-to-PCI bridge."""
    return str(pci_class or "").startswith(BRIDGE_CLASS)


def acs_control(config):
    """ACS control bits of one device from its config space bytes.

    Returns {src_valid, req_redir, cmplt_redir, egress_ctrl} when the ACS capability is present,
    {} when the device has none, and None when the extended space was not readable (sysfs hands
    readers other than root only the first 64 or 256 bytes).
    """
    if config is None or len(config) <= _EXTENDED_START + 4:
        return None
    offset, seen = _EXTENDED_START, set()
    while offset and offset not in seen and offset + 8 <= len(config):
        seen.add(offset)
        header = int.from_bytes(config[offset : offset + 4], "little")
        if header in (0, 0xFFFFFFFF):
            return {}
        if header & 0xFFFF == ACS_CAPABILITY_ID:
            control = int.from_bytes(config[offset + 6 : offset + 8], "little")
            return dict((name, bool(control >> bit & 1)) for name, bit in ACS_CONTROL_BITS.items())
        offset = (header >> 20) & 0xFFC
    return {}


def redirects(bits):
    """True when ACS control bits send peer-to-peer traffic up to the root complex."""
    return bool(bits) and bool(bits.get("req_redir") or bits.get("cmplt_redir"))


def parse_lspci_acs(text):
    """ACS control bits per device from `lspci -vvv`, in acs_control's shape, plus whether lspci
    was refused the extended capabilities (it prints '<access denied>' without root)."""
    devices = []
    current = None
    denied = False
    for line in text.splitlines():
        if line and not line[0].isspace():
            current = line.strip()
            continue
        if "<access denied>" in line:
            denied = True
        match = re.search(r"ACSCtl:\s*(.*)", line)
        if match and current:
            bits = dict(re.findall(r"(\w+)([+-])", match.group(1)))
            devices.append(
                {
                    "device": current,
                    "req_redir": bits.get("ReqRedir") == "+",
                    "cmplt_redir": bits.get("CmpltRedir") == "+",
                    "src_valid": bits.get("SrcValid") == "+",
                    "egress_ctrl": bits.get("EgressCtrl") == "+",
                }
            )
    return {"devices": devices, "access_denied": denied}


def acs_from_config_spaces(config_spaces):
    """One entry per device with an ACS capability, from raw config spaces ({address: bytes}).

    Returns None when no config space shows the extended space (a read without root).
    """
    if not any(blob is not None and len(blob) > 256 for blob in config_spaces.values()):
        return None
    devices = []
    for address, blob in sorted(config_spaces.items()):
        bits = acs_control(blob)
        if bits:
            entry = {"device": address}
            entry.update(bits)
            devices.append(entry)
    return devices


def acs_state(devices, origin, denied=False, unreadable=None, none_reason=None):
    """The ACS verdict in the one vocabulary from devices with ACS control bits.

    `unreadable`: devices whose bits could not be read; `none_reason`: why there is nothing to
    judge (e.g. no bridge), which makes the state not_present.
    """
    redirecting = [d["device"] for d in devices if redirects(d)]
    count = len(devices)
    unreadable = list(unreadable or [])
    if redirecting:
        state, why = (
            "enabled",
            "%d of %d ACS-capable devices redirect peer-to-peer traffic (%s): %s"
            % (len(redirecting), count, origin, ", ".join(redirecting)),
        )
    elif none_reason:
        state, why = "not_present", none_reason
    elif unreadable or (denied and not count):
        state = "unknown"
        why = (
            "config space of %s was not readable (run as root)" % ", ".join(unreadable)
            if unreadable
            else "%s hides extended capabilities without root" % origin
        )
    elif count:
        state, why = "disabled", "%d ACS-capable devices, none redirects peer-to-peer traffic (%s)" % (count, origin)
    else:
        state, why = "not_present", "no device reports an ACS control register (%s)" % origin
    return {"state": state, "redirecting": redirecting, "bridges_with_acs": count, "reason": why}


def interpret_acs(lspci_text=None, reason=None, config_spaces=None):
    """ACS of the whole host: from `lspci -vvv` text when there is some, else the bridges' config spaces."""
    if lspci_text is not None:
        parsed = parse_lspci_acs(lspci_text)
        return acs_state(parsed["devices"], "lspci -vvv", denied=parsed["access_denied"])
    if config_spaces == {}:
        return acs_state(
            [],
            "PCI config space",
            none_reason="no PCI bridge on this host, so nothing can redirect peer-to-peer traffic",
        )
    if config_spaces:
        devices = acs_from_config_spaces(config_spaces)
        return acs_state(devices or [], "PCI config space", denied=devices is None)
    return {
        "state": "unknown",
        "redirecting": [],
        "bridges_with_acs": None,
        "reason": reason or "neither lspci nor PCI config space is readable",
    }


def acs_of_bridges(config_spaces, bridges):
    """ACS of the bridges above given devices ({address: config bytes or None}, addresses)."""
    bridges = sorted(set(bridges))
    if not bridges:
        return acs_state([], "PCI config space", none_reason="no PCI bridge above a GPU or RDMA device was found")
    devices, unreadable = [], []
    for address in bridges:
        bits = acs_control(config_spaces.get(address))
        if bits is None:
            unreadable.append(address)
        elif bits:
            entry = {"device": address}
            entry.update(bits)
            devices.append(entry)
    return acs_state(devices, "PCI config space", unreadable=unreadable)


def interpret_iommu(group_count, cmdline, reason=None):
    """IOMMU state from the number of /sys/kernel/iommu_groups entries (None: unreadable) and /proc/cmdline."""
    arguments = [word for word in (cmdline or "").split() if "iommu" in word]
    passthrough = any(word in ("iommu=pt", "iommu.passthrough=1") for word in arguments)
    if group_count is None:
        state = "unknown"
        reason = reason or "/sys/kernel/iommu_groups is not readable"
    elif group_count == 0:
        state = "disabled"
        reason = "no IOMMU groups in /sys/kernel/iommu_groups"
    else:
        state = "enabled"
        reason = "%d IOMMU groups%s" % (group_count, " (passthrough mode)" if passthrough else "")
    return {
        "state": state,
        "groups": group_count,
        "passthrough": passthrough,
        "kernel_args": arguments,
        "reason": reason,
    }


def p2p_redirected(acs):
    """True when the ACS verdict says peer-to-peer traffic is redirected (the NCCL P2P decision's input)."""
    return (acs or {}).get("state") == "enabled"
