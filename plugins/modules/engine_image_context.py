#!/usr/bin/python
"""Ansible module: pack an engine image's build context on the controller, once per content tag."""

DOCUMENTATION = r"""
---
module: engine_image_context
short_description: Pack the build context of an engine image into one tar, named by its content tag
description:
  - Writes one tar holding the rendered Dockerfile, the patch script, the patches, extra CA
    certificates and, for offline builds, every wheel of the wheelhouse under C(wheelhouse/). One
    file crosses to the building node instead of hundreds.
  - The tar's name carries the content tag, so an existing file is complete and nothing is
    written (C(changed=false)). The write is atomic; owners and times inside are fixed so the same
    inputs give the same bytes.
  - In check mode nothing is written and C(changed) says whether it would have been.
options:
  dest:
    description: Path of the tar to write (its name should carry the content tag).
    type: path
    required: true
  files:
    description: Files to pack, as a mapping of the name inside the context to the path on the controller.
    type: dict
    required: true
  wheelhouse:
    description: Folder whose C(*.whl) files go under C(wheelhouse/) in the context.
    type: path
  wheel_target:
    description:
      - The image's Python and platform (C(python_version), C(platform)). Every wheel of the
        wheelhouse must install there; one resolved for another Python or machine fails the task
        before anything is packed or built.
    type: dict
  lock:
    description:
      - The image's package lock. Only the wheels it names (package and version) are packed, each with
        a sha256 it names where it names any; a swapped wheel fails the task, an extra one is left out.
    type: path
  local_wheels:
    description: The definition's local wheels, file name to pinned sha256; each is packed only with those bytes.
    type: dict
  named_wheels:
    description: More pinned wheels (the FlashInfer set), each C({name, version, sha256}).
    type: list
    elements: dict
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_full
author: seatwright
"""

EXAMPLES = r"""
- name: Pack the lab image's context
  engine_image_context:
    dest: .cache/images/lab-vllm-cpu/3f0c2a9e1b7d4c55.context.tar
    files:
      Dockerfile: .cache/images/lab-vllm-cpu/3f0c2a9e1b7d4c55.Dockerfile
      apply-patches: roles/engine_image/files/apply-patches
    wheelhouse: .cache/wheelhouse/9a8b7c6d5e4f3a2b
"""

RETURN = r"""
dest:
  description: The tar.
  returned: success
  type: str
wheels_left_out:
  description: Wheels of the wheelhouse that no pin named, not packed.
  returned: when the tar was written from a wheelhouse
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.images.inputs import build_context


def main():
    module = AnsibleModule(
        argument_spec={
            "dest": {"type": "path", "required": True},
            "files": {"type": "dict", "required": True},
            "wheelhouse": {"type": "path"},
            "wheel_target": {"type": "dict"},
            "lock": {"type": "path"},
            "local_wheels": {"type": "dict"},
            "named_wheels": {"type": "list", "elements": "dict"},
        },
        supports_check_mode=True,
    )
    params = module.params
    try:
        result = build_context(
            params["dest"],
            params["files"],
            params["wheelhouse"],
            module.check_mode,
            params["wheel_target"],
            lock=params["lock"],
            local_wheels=params["local_wheels"],
            named_wheels=params["named_wheels"],
        )
    except SeatwrightError as exc:
        module.fail_json(msg=str(exc), **exc.details)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
