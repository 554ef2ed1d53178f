#!/usr/bin/python
"""Ansible module: hold a registry image pinned by digest on a node: found, tagged, pulled once, or recorded."""

DOCUMENTATION = r"""
---
module: engine_image_pull
short_description: Pull a registry image pinned by digest once, keep it under its local tag, record its digest
description:
  - For an image definition that names a registry image (C(registry) = C(<name>@sha256:<64 hex>)).
    The image is kept under the local tag C(<name>:sha256-<64 hex>), which docker save/load carries
    to the other nodes; the repo digest does not survive save/load, so each node records the digest
    beside the image id in C(<state_dir>/registry/sha256-<hex>.json).
  - O(state=held) finds the image (local tag tied to the digest by the engine or the record,
    so nothing to do), tags it where the node pulled the digest itself, and pulls it only with
    O(allow_pull) (the builder); with O(progress_file) a background pull writes how far it is.
  - O(state=progress) reads that file for the role's waiting task. O(state=recorded) requires the
    local tag at O(image_id) after a load and records the digest.
  - Talks to the node's Docker engine over its API socket; Python standard library only.
options:
  state:
    description: C(held), C(progress) or C(recorded).
    type: str
    default: held
    choices: [held, progress, recorded]
  registry:
    description: The pinned reference, as the image definition's C(registry) says it.
    type: str
    required: true
  platform:
    description: The platform of the digest to pull.
    type: str
    default: linux/amd64
  state_dir:
    description: The node's folder for image state; the records go under its C(registry/).
    type: path
    required: true
  allow_pull:
    description: Pull the image when the node does not hold it (the builder); otherwise report it missing.
    type: bool
    default: false
  image_id:
    description: With O(state=recorded), the builder's image id the loaded image must have.
    type: str
  progress_file:
    description: File a background pull writes its progress to (and O(state=progress) reads).
    type: path
  timeout_s:
    description: Seconds the whole pull may take.
    type: int
    default: 7200
  idle_timeout_s:
    description: Seconds the registry may stay silent during the pull.
    type: int
    default: 1800
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_full
  - seatwright.fleet.docker
author: seatwright
"""

EXAMPLES = r"""
- name: Pull the vLLM image once on the builder, in the background
  seatwright.fleet.engine_image_pull:
    registry: docker.io/vllm/vllm-openai@sha256:0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef
    state_dir: /var/lib/seatwright/images
    allow_pull: true
    progress_file: /var/lib/seatwright/images/context/pull.progress.json
  async: 7320
  poll: 0
  register: pull_job
"""

RETURN = r"""
held:
  description: Whether the node holds the image under its local tag now (false in check mode before a pull).
  returned: state=held or state=recorded
  type: bool
action:
  description: C(held) (nothing to do), C(tag) (the node had the digest) or C(pull).
  returned: state=held
  type: str
pulled:
  description: Whether a pull ran.
  returned: state=held
  type: bool
image_id:
  description: The image's id on this node, or null when it lacks the image.
  returned: state=held or state=recorded
  type: str
done:
  description: With O(state=progress), whether the pull has ended (well or not).
  returned: state=progress
  type: bool
progress:
  description: With O(state=progress), C(waiting_for), C(elapsed_s), C(timeout_s) and C(detail).
  returned: state=progress
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.docker_api import DEFAULT_SOCKET
from ansible_collections.seatwright.fleet.plugins.module_utils.io.images.pull import (
    hold_image,
    pull_progress,
    record_loaded,
)


def main():
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "default": "held", "choices": ["held", "progress", "recorded"]},
            "registry": {"type": "str", "required": True},
            "platform": {"type": "str", "default": "linux/amd64"},
            "state_dir": {"type": "path", "required": True},
            "allow_pull": {"type": "bool", "default": False},
            "image_id": {"type": "str"},
            "progress_file": {"type": "path"},
            "docker_socket": {"type": "path", "default": DEFAULT_SOCKET},
            "timeout_s": {"type": "int", "default": 7200},
            "idle_timeout_s": {"type": "int", "default": 1800},
        },
        required_if=[("state", "progress", ("progress_file",)), ("state", "recorded", ("image_id",))],
        supports_check_mode=True,
    )
    steps = {"held": hold_image, "recorded": record_loaded}
    try:
        if module.params["state"] == "progress":
            module.exit_json(changed=False, **pull_progress(module.params))
        result = steps[module.params["state"]](module.params, module.check_mode)
    except SeatwrightError as exc:
        module.fail_json(msg=str(exc), **exc.details)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
