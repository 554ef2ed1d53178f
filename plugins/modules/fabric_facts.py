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
notes:
  - "Check mode: Reads only; runs the same in check mode."
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_full
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
        memory_peers, open_kernel_modules, dmabuf_capable, proven), acs (state enabled/disabled/not_present/unknown,
        reason, redirecting), iommu, gpus_on_pci, gpu_nic_paths, gpu_nic_path,
        nvidia_driver_version, kernel_release.
      type: dict
      returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.fabric.probe import read_fabric_facts


def main():
    module = AnsibleModule(
        argument_spec={
            "fabric_iface": {"type": "str"},
            "fabric_ip": {"type": "str"},
            "sysfs_root": {"type": "path", "default": "/"},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        result = read_fabric_facts(params["sysfs_root"], params["fabric_iface"], params["fabric_ip"])
    except SeatwrightError as exc:
        module.fail_json(msg=str(exc), **exc.details)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
