#!/usr/bin/python
"""Ansible module: a node's Secure Boot state and module-signing state, as facts."""

DOCUMENTATION = r"""
module: secure_boot_facts
short_description: Gather a node's Secure Boot and kernel module signing state
description:
  - Runs C(mokutil --sb-state) and reads C(/sys/firmware/efi), C(/sys/module/module/parameters/sig_enforce)
    and C(/sys/kernel/security/lockdown); with a declared Machine Owner Key, checks that its files are on
    the node and asks C(mokutil --test-key) whether its certificate is enrolled.
  - C(state) is C(enabled), C(disabled), C(not_applicable) (a container, or a node that did not boot
    through UEFI, where mokutil says "EFI variables are not supported on this system") or C(unknown)
    (UEFI but no mokutil, or an answer it does not recognise), with the reason.
  - Changes nothing on the node.
options:
  in_container:
    description: The node is a container; Secure Boot is the host's and is reported as not applicable.
    type: bool
    default: false
  mok_key:
    description: Path of the declared Machine Owner Key's private key on the node.
    type: path
  mok_cert:
    description: Path of the declared Machine Owner Key's DER certificate on the node.
    type: path
  sysfs_root:
    description: Folder holding C(sys/); C(/) on a real node, a prepared tree in tests.
    type: path
    default: /
notes:
  - "Check mode: reads only, so it runs the same in check mode."
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_full
author: seatwright
"""

EXAMPLES = r"""
- name: Read Secure Boot and module signing
  seatwright.fleet.secure_boot_facts:
    mok_key: /var/lib/shim-signed/mok/MOK.priv
    mok_cert: /var/lib/shim-signed/mok/MOK.der
"""

RETURN = r"""
ansible_facts:
  description: Facts added under C(seatwright_secure_boot).
  returned: always
  type: dict
  contains:
    seatwright_secure_boot:
      description: >-
        state (enabled, disabled, not_applicable, unknown), setup_mode, source (what mokutil said), reason,
        module_signing (enforced, lockdown), mok (key, cert, key_present, cert_present, enrolled; null when
        no key is declared).
      type: dict
      returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.io.node.secureboot import read_secure_boot


def main():
    module = AnsibleModule(
        argument_spec={
            "in_container": {"type": "bool", "default": False},
            "mok_key": {"type": "path"},
            "mok_cert": {"type": "path"},
            "sysfs_root": {"type": "path", "default": "/"},
        },
        supports_check_mode=True,
    )
    module.exit_json(changed=False, ansible_facts={"seatwright_secure_boot": read_secure_boot(module)})


if __name__ == "__main__":
    main()
