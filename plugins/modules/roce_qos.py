#!/usr/bin/python
"""Ansible module: the lossless RoCE settings of a node's fabric port (PFC, DSCP trust, ECN)."""

DOCUMENTATION = r"""
module: roce_qos
short_description: Set and read back the lossless RoCE settings of a node's fabric port
description:
  - Reads the fabric port's PFC per priority (C(dcb -j pfc show)), its APP table's DSCP-to-priority
    entries (C(dcb -j app show); an mlx5 port trusts DSCP once it holds one), the priority's traffic
    class (C(dcb -j ets show)) and the per-priority ECN switches of RoCE
    (C(/sys/class/net/<iface>/ecn/roce_np|roce_rp/enable/<priority>)), compares them with the fleet's
    declaration, sets those that differ (C(dcb pfc set), C(dcb app replace|flush), the sysfs switches)
    and reads everything back.
  - A setting the NIC refuses (its command fails, or it does not read back) fails the task naming
    the setting; the returned fact holds what the port reads, never what was asked.
  - A port without DCB support (veth, lo, where C(dcb) answers "Operation not supported" and sysfs
    has no C(ecn) folder) is reported as not supported by this port and left alone, not failed.
  - Settings made here do not survive a reboot on their own; the role sets them on every run.
options:
  declared:
    description:
      - The fleet's declaration (C(seatwright_fleet_roce_qos)) with C(priority) (0-7), C(dscp) (0-63),
        C(pfc) and C(ecn) (booleans) and C(trust) (C(dscp) or C(pcp)); null reads nothing and sets nothing.
    type: dict
  fabric_iface:
    description: Netdev of the fabric port.
    type: str
    required: true
  sysfs_root:
    description: Folder holding C(sys/); C(/) on a real node, a prepared tree in tests.
    type: path
    default: /
  host:
    description: Name of the node in messages; the host name when not given.
    type: str
notes:
  - "Check mode: Reads and reports what would change; sets nothing."
  - "Diff mode: One line per setting, before and after."
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_full_diff
author: seatwright
"""

EXAMPLES = r"""
- name: Lossless RoCE on priority 3, DSCP 26
  seatwright.fleet.roce_qos:
    fabric_iface: enp65s0f0np0
    declared: {priority: 3, dscp: 26, pfc: true, ecn: true, trust: dscp}
"""

RETURN = r"""
plan:
  description:
    - iface, supported, reason (why not supported), changed, and changes (setting, before, after, and the
      dcb argv or the sysfs path and value).
  returned: always
  type: dict
fact:
  description:
    - iface, declared, supported, reason, and settings as the port reads them (pfc, dscp_priority, trust,
      ecn_roce_np, ecn_roce_rp, priority, dscp; null where unreadable), traffic_class, pfc_priorities.
  returned: always
  type: dict
ansible_facts:
  description: C(seatwright_roce_qos), the same as C(fact); a failed run sets no fact.
  returned: success
  type: dict
"""

import platform

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.fabric.qos import converge_qos


def main():
    module = AnsibleModule(
        argument_spec={
            "declared": {"type": "dict"},
            "fabric_iface": {"type": "str", "required": True},
            "sysfs_root": {"type": "path", "default": "/"},
            "host": {"type": "str"},
        },
        supports_check_mode=True,
    )
    try:
        result = converge_qos(module, module.params["host"] or platform.node())
    except SeatwrightError as exc:
        module.fail_json(msg=str(exc), **exc.details)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
