#!/usr/bin/python
"""Ansible module: RDMA-CM's default RoCE version on the declared ports, and the fabric MTU."""

DOCUMENTATION = r"""
module: roce_settings
short_description: Set RDMA-CM's default RoCE version on a node's RDMA ports and its fabric MTU
description:
  - Reads RDMA-CM's default RoCE version of every port of the named RDMA devices (C(cma_roce_mode),
    from rdma-core) and the fabric interface's MTU (sysfs), sets those that differ from what is
    asked (C(cma_roce_mode -m), C(ip link set ... mtu)), then reads them back and fails naming
    any that did not hold.
  - RoCE v2 runs over UDP/IP and is routable; v1 is link-local. RoCE wants the same jumbo MTU on
    every hop, switch included.
  - The MTU set here does not survive a reboot or a link flap on its own; roles/rdma_fabric adds a
    udev rule for that.
  - Leave a setting out (null) to leave it alone.
options:
  rdma_devices:
    description: RDMA devices whose ports get the RoCE version (e.g. C([mlx5_0])).
    type: list
    elements: str
    default: []
  roce_version:
    description: RoCE version RDMA-CM uses by default (1 or 2); null leaves it alone.
    type: int
    choices: [1, 2]
  fabric_iface:
    description: Netdev of the fabric port whose MTU is set.
    type: str
  mtu:
    description: MTU for I(fabric_iface); null leaves it alone.
    type: int
  sysfs_root:
    description: Folder holding C(sys/); C(/) on a real node, a prepared tree in tests.
    type: path
    default: /
  host:
    description: Name of the node in messages; the host name when not given.
    type: str
notes:
  - "Check mode: Reads and reports what would change; sets nothing."
  - "Diff mode: One line per port and the MTU, before and after."
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_full_diff
author: seatwright
"""

EXAMPLES = r"""
- name: RoCE v2 on the fabric ports and a 9000-byte MTU
  seatwright.fleet.roce_settings:
    rdma_devices: [mlx5_0]
    roce_version: 2
    fabric_iface: enp65s0f0np0
    mtu: 9000
"""

RETURN = r"""
roce:
  description: One entry per port with device, port, before (1, 2 or null when unreadable), before_text, after, changed.
  returned: always
  type: list
  elements: dict
mtu:
  description: iface, before, after and changed; null when I(mtu) is not set.
  returned: always
  type: dict
"""

import platform

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.fabric.roce import converge_roce


def main():
    module = AnsibleModule(
        argument_spec={
            "rdma_devices": {"type": "list", "elements": "str", "default": []},
            "roce_version": {"type": "int", "choices": [1, 2]},
            "fabric_iface": {"type": "str"},
            "mtu": {"type": "int"},
            "sysfs_root": {"type": "path", "default": "/"},
            "host": {"type": "str"},
        },
        supports_check_mode=True,
    )
    try:
        result = converge_roce(module, module.params["host"] or platform.node())
    except SeatwrightError as exc:
        module.fail_json(msg=str(exc), **exc.details)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
