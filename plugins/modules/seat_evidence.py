#!/usr/bin/python
"""Write files into a seat run's evidence folder on the controller, each through the redactor."""

DOCUMENTATION = r"""
---
module: seat_evidence
short_description: Write redacted files into evidence/<seat>/<UTC>/
description:
  - Writes each entry of I(files) under I(dir) atomically, a string as text and anything else as JSON.
    Every file goes through the project's redactor first (C(plugins/module_utils/evidence/redact.py)),
    with one numbering across the files of the call, so one host or GPU keeps one placeholder.
  - Runs on the controller (C(delegate_to) localhost).
options:
  dir:
    description: The run's evidence folder.
    type: path
    required: true
  files:
    description: Relative path to content (text, or a JSON-like value).
    type: dict
    required: true
  hostnames:
    description:
      - Host names to replace as well. The seat playbooks pass none, because inventory names name the
        ranks in plan.json and bringup.json and must read the same across files.
    type: list
    elements: str
    default: []
attributes:
  check_mode:
    support: full
    details: Reports the files it would write; writes nothing.
  diff_mode:
    support: none
author:
  - seatwright
"""

EXAMPLES = r"""
- name: Record the bring-up
  seat_evidence:
    dir: evidence/lab/20261130T150000Z
    files:
      bringup.json: "{{ bringup }}"
      logs/node-a-rank0.log: "{{ probe.containers[0].log }}"
  delegate_to: localhost
"""

RETURN = r"""
written:
  description: Paths written.
  returned: always
  type: list
  elements: str
"""

import json
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.evidence.redact import Redactor
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.files import atomic_write_bytes


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dir=dict(type="path", required=True),
            files=dict(type="dict", required=True),
            hostnames=dict(type="list", elements="str", default=[]),
        ),
        supports_check_mode=True,
    )
    root = os.path.abspath(module.params["dir"])
    redactor = Redactor(hostnames=module.params["hostnames"])
    written = []
    for relative, content in sorted(module.params["files"].items()):
        path = os.path.abspath(os.path.join(root, relative))
        if not path.startswith(root + os.sep):
            module.fail_json(msg="evidence file %r lies outside %s; give a path inside the folder" % (relative, root))
        if isinstance(content, str):
            payload = redactor.redact(content)
        else:
            payload = json.dumps(redactor.redact(content), indent=1, sort_keys=True) + "\n"
        if not module.check_mode:
            try:
                atomic_write_bytes(path, payload.encode("utf-8"))
            except OSError as exc:
                module.fail_json(msg="cannot write evidence file %s: %s" % (path, exc))
        written.append(path)
    module.exit_json(changed=bool(written) and not module.check_mode, written=written)


if __name__ == "__main__":
    main()
