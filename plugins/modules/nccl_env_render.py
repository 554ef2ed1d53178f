#!/usr/bin/python
"""Ansible module: the NCCL/Gloo environment of a node, decided from its fabric facts."""

DOCUMENTATION = r"""
module: nccl_env_render
short_description: Decide a node's NCCL environment from its fabric facts
description:
  - Returns the variables NCCL and Gloo need on this node, each with the reason it was set, and
    the text of C(/etc/nccl.conf) and of an env file for engine containers.
  - C(NCCL_SOCKET_IFNAME) and C(GLOO_SOCKET_IFNAME) name the fabric port; with active RDMA ports,
    C(NCCL_IB_HCA) lists them in the exact-match C(=) form, C(NCCL_IB_GID_INDEX) is the RoCE v2
    IPv4 GID index shared by all of them, C(NCCL_IB_TC) is DSCP x 4 when a DSCP is given, and
    C(NCCL_NET_GDR_LEVEL) is raised to PHB or SYS when GPUDirect is possible but the GPU-NIC path
    crosses the CPU. Without RDMA, C(NCCL_IB_DISABLE=1). When ACS redirects peer traffic,
    C(NCCL_P2P_DISABLE=1) is the fallback.
  - Decides only; writing the files is the caller's (roles/nccl_env). Changes nothing.
  - Runs on the controller, in the action plugin of the same name; the decision reads nothing on
    the node, so a converge spends no module run per node on it.
options:
  host:
    description: Inventory name of the node, used in messages.
    type: str
    required: true
  fabric:
    description: The node's C(seatwright_fabric) facts (module fabric_facts).
    type: dict
    required: true
  socket_ifname:
    description: Netdev of the fabric port.
    type: str
    required: true
  rdma_devices:
    description: RDMA devices declared for NCCL; empty means every device the facts list.
    type: list
    elements: str
    default: []
  ib_dscp:
    description:
      - DSCP of the lossless RoCE class; NCCL_IB_TC is rendered as DSCP x 4 when set.
      - Taken from O(roce_qos) when the fleet declares its class.
    type: int
  gdr_level:
    description: C(auto) to decide from the GPU-NIC path, or a level to force.
    type: str
    choices: [auto, LOC, PIX, PXB, PHB, SYS]
    default: auto
  p2p_disable:
    description: C(auto) sets NCCL_P2P_DISABLE=1 when ACS is on; C(true)/C(false) force it.
    type: str
    choices: [auto, "true", "false"]
    default: auto
  gid_index:
    description: RoCE GID index to force instead of the one found in the facts.
    type: int
  rdma_mitigation:
    description:
      - Mitigation of the intermittent RDMA fault of field report 002 (docs/field.md#rdma-fault), declared per node.
      - C(dmabuf-off) renders NCCL_DMABUF_ENABLE=0; C(lower-gdr-level) renders NCCL_NET_GDR_LEVEL one step nearer.
    type: str
    choices: [none, dmabuf-off, lower-gdr-level]
    default: none
  node_kind:
    description:
      - The node's kind (plugins/module_utils/node/kind.py). C(wsl2) renders the WSL2 NCCL contract (peer
        copies off, shared memory on, cuMem off, no IB), each entry with its sources, instead of deciding
        from fabric facts.
    type: str
    choices: [linux, wsl2]
    default: linux
  roce_qos:
    description:
      - The fleet's lossless RoCE class (C(seatwright_fleet_roce_qos), docs/fabric.md); its C(dscp) gives
        C(NCCL_IB_TC). O(ib_dscp) may only repeat it; a different value is refused.
    type: dict
notes:
  - "Check mode: Decides only; runs the same in check mode."
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_full
author: seatwright
"""

EXAMPLES = r"""
- name: Decide the NCCL environment
  nccl_env_render:
    host: "{{ inventory_hostname }}"
    fabric: "{{ ansible_facts.seatwright_fabric }}"
    socket_ifname: "{{ seatwright_node_fabric_iface }}"
    rdma_devices: "{{ seatwright_node_rdma_devices }}"
    ib_dscp: 26
  register: nccl
"""

RETURN = r"""
env:
  description: Ordered list of {name, value, reason}.
  returned: success
  type: list
  elements: dict
variables:
  description: The same as a name to value mapping.
  returned: success
  type: dict
defaults:
  description: Variables deliberately left to NCCL's defaults, with the reason.
  returned: success
  type: list
  elements: str
nccl_conf:
  description: Text of /etc/nccl.conf (the NCCL_ variables).
  returned: success
  type: str
env_file:
  description: Text of the engines' env file (every variable, KEY=VALUE, no quoting).
  returned: success
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.fabric.nccl import node_env_files

# The action plugin of the same name validates with this spec too (one home).
ARGUMENT_SPEC = {
    "host": {"type": "str", "required": True},
    "fabric": {"type": "dict", "required": True},
    "socket_ifname": {"type": "str", "required": True},
    "rdma_devices": {"type": "list", "elements": "str", "default": []},
    "ib_dscp": {"type": "int"},
    "gdr_level": {"type": "str", "choices": ["auto", "LOC", "PIX", "PXB", "PHB", "SYS"], "default": "auto"},
    "p2p_disable": {"type": "str", "choices": ["auto", "true", "false"], "default": "auto"},
    "gid_index": {"type": "int"},
    "rdma_mitigation": {"type": "str", "choices": ["none", "dmabuf-off", "lower-gdr-level"], "default": "none"},
    "node_kind": {"type": "str", "choices": ["linux", "wsl2"], "default": "linux"},
    "roce_qos": {"type": "dict"},
}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        files = node_env_files(**module.params)
    except SeatwrightError as exc:
        module.fail_json(msg=str(exc), **exc.details)
    module.exit_json(changed=False, **files)


if __name__ == "__main__":
    main()
