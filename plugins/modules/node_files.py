#!/usr/bin/python
"""Ansible module: a role's folders and whole files on the node, made to match in one call."""

DOCUMENTATION = r"""
module: node_files
short_description: Make a role's folders and files on a node match, in one call
description:
  - Creates the I(folders) and writes the I(files) whose content or mode differs, owned by root,
    each file atomically (a reader sees the old file or the new one). Leaves the rest alone.
  - One call replaces a C(file) task per folder and a C(copy)/C(template) task per file, each of
    which costs the node a round trip or more; render templates on the controller with
    C(lookup('ansible.builtin.template', ...)) and pass the text as I(content).
options:
  folders:
    description: Folders to create, each C({path, mode}) (mode defaults to C(0755)).
    type: list
    elements: dict
    default: []
  files:
    description: Files to write, each C({path, content, mode}) (mode defaults to C(0644)).
    type: list
    elements: dict
    default: []
notes:
  - "Check mode: Reports what would change and writes nothing."
  - "Diff mode: Each changed file's text before and after."
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_full_diff
author: seatwright
"""

EXAMPLES = r"""
- name: Write the NCCL configuration and the engines' env file
  node_files:
    folders:
      - {path: /etc/seatwright}
    files:
      - {path: /etc/nccl.conf, content: "NCCL_SOCKET_IFNAME=eth0\n"}
      - {path: /etc/seatwright/nccl.env, content: "NCCL_SOCKET_IFNAME=eth0\n"}
  notify: restart something
"""

RETURN = r"""
paths:
  description: Every folder and file given, with whether it changed (or would, in check mode).
  returned: always
  type: list
  elements: dict
  sample:
    - {path: /etc/nccl.conf, kind: file, changed: false}
changed_paths:
  description: The paths that changed (or would, in check mode).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.files import node_files


def main():
    module = AnsibleModule(
        argument_spec={
            "folders": {"type": "list", "elements": "dict", "default": []},
            "files": {"type": "list", "elements": "dict", "default": []},
        },
        supports_check_mode=True,
    )
    try:
        result = node_files(module.params["folders"], module.params["files"], module.check_mode, module._diff)
    except SeatwrightError as exc:
        module.fail_json(msg=str(exc), **exc.details)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
