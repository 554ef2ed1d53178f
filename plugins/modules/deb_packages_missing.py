#!/usr/bin/python
"""Ansible module: list which of the given Debian packages are not installed (read-only)."""

DOCUMENTATION = r"""
module: deb_packages_missing
short_description: Tell which Debian packages a node still lacks, without opening apt's cache
description:
  - Asks dpkg which of I(names) are installed and returns the others, in the order given.
  - Roles call C(ansible.builtin.apt) only when the list is not empty, so a converged node is
    checked in a fraction of a second instead of the seconds apt's cache takes to open.
  - Reads only; never changes the host; runs in check mode.
options:
  names:
    description: Package names, optionally with an apt version pin (C(name=version)).
    type: list
    elements: str
    required: true
notes:
  - "Check mode: Reads only; runs the same in check mode."
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_full
author: seatwright
"""

EXAMPLES = r"""
- name: Find the packages still missing
  deb_packages_missing:
    names: [rdma-core, perftest, iperf3]
  register: missing

- name: Install them
  ansible.builtin.apt:
    name: "{{ missing.missing }}"
  when: missing.missing | length > 0
"""

RETURN = r"""
missing:
  description: The packages of I(names) that dpkg does not report as installed.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.node.packages import missing_on_node


def main():
    module = AnsibleModule(
        argument_spec={"names": {"type": "list", "elements": "str", "required": True}},
        supports_check_mode=True,
    )
    host = module.params.get("_ansible_remote_host", "this host")
    try:
        missing = missing_on_node(module, module.params["names"], host)
    except SeatwrightError as exc:
        module.fail_json(msg=str(exc), **exc.details)
    module.exit_json(changed=False, missing=missing)


if __name__ == "__main__":
    main()
