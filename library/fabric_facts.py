#!/usr/bin/python
"""Ansible module: RDMA, GPUDirect and PCI facts of a node, read from sysfs."""

DOCUMENTATION = r"""
module: fabric_facts
short_description: Gather a node's RDMA fabric facts from sysfs
description:
  - Reads C(/sys/class/infiniband) (devices, firmware, port state, rate, link layer, the RoCE v2
    IPv4 GID index and netdev of each port), the fabric interface's MTU and speed, whether
    GPUDirect RDMA is possible (C(nvidia_peermem) loaded, C(nv_mem) memory peers, or DMA-BUF with
    the open kernel modules), ACS redirection on the PCI bridges above GPUs and RDMA devices, the
    IOMMU, and how far each GPU sits from each RDMA device (PIX, PXB, PHB, SYS).
  - A node without RDMA devices (such as a lab container) gets C(has_rdma=false) and the summary
    C(no RDMA devices); that is a fact, not an error.
  - GPUDirect is reported as possible only; proof is a data path (C(ib_write_bw --use_cuda) or NCCL
    channel lines with C(GDRDMA)), so C(gpudirect.proven) is always false here.
  - Changes nothing on the node.
options:
  fabric_iface:
    description: Netdev of the fabric port; its MTU and speed are reported and its RoCE v2 GID preferred.
    type: str
  fabric_ip:
    description: The node's fabric address; the RoCE v2 GID carrying it is preferred.
    type: str
  sysfs_root:
    description: Folder holding C(sys/) and C(proc/); C(/) on a real node, a prepared tree in tests.
    type: path
    default: /
author: seatwright
"""

EXAMPLES = r"""
- name: Gather fabric facts
  fabric_facts:
    fabric_iface: "{{ seatwright_node_fabric_iface }}"
    fabric_ip: "{{ seatwright_node_fabric_ip }}"

- name: Show what the node has
  ansible.builtin.debug:
    msg: "{{ ansible_facts.seatwright_fabric.rdma_summary }}"
"""

RETURN = r"""
ansible_facts:
  description: Facts added under C(seatwright_fabric).
  returned: always
  type: dict
  contains:
    seatwright_fabric:
      description: >-
        has_rdma, rdma_devices (name, fw_ver, board_id, pci_address, numa_node, netdevs, ports with
        state, rate_gbps, link_layer, roce_v2_gid_index, netdev), rdma_summary, roce_devices,
        fabric_iface (name, present, mtu, speed_mbps), gpudirect (available, via, peermem_loaded,
        memory_peers, open_kernel_modules, dmabuf_capable, proven), acs (state on/off/unknown,
        reason, redirecting_bridges), iommu, gpus_on_pci, gpu_nic_paths, gpu_nic_path,
        nvidia_driver_version, kernel_release.
      type: dict
      returned: always
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.seatwright.fabric.links import fabric_facts

_BRIDGE_CLASS_PREFIX = "0x0604"


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
            "ports": {port: _port(os.path.join(base, "ports", port))
                      for port in _listdir(os.path.join(base, "ports"))},
        }

    net = {}
    if fabric_iface:
        iface = os.path.join(sys_dir, "class", "net", fabric_iface)
        if os.path.exists(iface):
            net[fabric_iface] = {"mtu": _read(os.path.join(iface, "mtu")),
                                 "speed": _read(os.path.join(iface, "speed"))}

    pci = {}
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
        if pci_class.startswith(_BRIDGE_CLASS_PREFIX):
            pci[bdf]["config"] = _read(os.path.join(path, "config"), binary=True)

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
        "iommu_groups": len(_listdir(os.path.join(sys_dir, "kernel", "iommu_groups"))),
    }


def main():
    module = AnsibleModule(
        argument_spec={
            "fabric_iface": {"type": "str"},
            "fabric_ip": {"type": "str"},
            "sysfs_root": {"type": "path", "default": "/"},
        },
        supports_check_mode=True,
    )
    root = module.params["sysfs_root"]
    if not os.path.isdir(os.path.join(root, "sys")):
        module.fail_json(msg="sysfs_root %s has no sys/ folder; pass the folder that holds sys/ and proc/" % root)
    snapshot = read_snapshot(root, module.params["fabric_iface"])
    facts = fabric_facts(snapshot, module.params["fabric_iface"], module.params["fabric_ip"])
    module.exit_json(changed=False, ansible_facts={"seatwright_fabric": facts})


if __name__ == "__main__":
    main()
