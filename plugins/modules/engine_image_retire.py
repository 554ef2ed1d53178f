#!/usr/bin/python
"""Ansible module: drop a node's superseded, unused builds of one engine image."""

DOCUMENTATION = r"""
---
module: engine_image_retire
short_description: Remove the earlier builds of an engine image that nothing uses, keeping the newest few
description:
  - Every build of a definition carries the label C(org.seatwright.image=<name>) and its own content
    tag, so a node that followed a definition through several changes holds one image per change.
  - Removes each build that is not O(reference), that no container (running or stopped) was made
    from, and that carries no tag outside O(reference)'s repository, beyond the O(keep) newest of them.
  - Removal is by tag, never forced. In check mode nothing is removed and the result says what would be.
  - Talks to the node's Docker engine over its API socket; Python standard library only.
options:
  name:
    description: The image definition's name (the value of the C(org.seatwright.image) label).
    type: str
    required: true
  reference:
    description: The planned build, C(repository:tag); it is never removed.
    type: str
    required: true
  keep:
    description: Superseded, unused builds to keep, newest first (a rollback may want the last one).
    type: int
    default: 1
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_full
  - seatwright.fleet.docker
author: seatwright
"""

EXAMPLES = r"""
- name: Keep the planned lab image and the build before it
  seatwright.fleet.engine_image_retire:
    name: lab-vllm-cpu
    reference: seatwright/lab-vllm-cpu:e4e7cf7012a54b71
    keep: 1
"""

RETURN = r"""
retired:
  description: The builds removed (in check mode, that would be), each C(id), C(tags) and C(size_bytes).
  returned: always
  type: list
  elements: dict
kept:
  description: Superseded, unused builds kept under O(keep).
  returned: always
  type: list
  elements: dict
in_use:
  description: Superseded builds kept because a container was made from them.
  returned: always
  type: list
  elements: dict
foreign:
  description: Labelled builds kept because they carry a tag outside the planned repository, or none.
  returned: always
  type: list
  elements: dict
freed_bytes:
  description: The size of the builds retired, as the engine reports it (layers shared with kept images free less).
  returned: always
  type: int
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.docker_api import DEFAULT_SOCKET
from ansible_collections.seatwright.fleet.plugins.module_utils.io.images.retire import retire_images


def main():
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "reference": {"type": "str", "required": True},
            "keep": {"type": "int", "default": 1},
            "docker_socket": {"type": "path", "default": DEFAULT_SOCKET},
        },
        supports_check_mode=True,
    )
    if module.params["keep"] < 0:
        module.fail_json(msg="keep is %d; give 0 or more builds to keep" % module.params["keep"])
    try:
        result = retire_images(module.params, module.check_mode)
    except SeatwrightError as exc:
        module.fail_json(msg=str(exc), **exc.details)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
