#!/usr/bin/python
"""Ansible module: build one engine image through the node's Docker socket, showing its progress."""

DOCUMENTATION = r"""
---
module: engine_image_build
short_description: Build an engine image from a packed context, with progress as it goes
description:
  - With O(state=built), builds O(reference) from the packed context O(context_tar) through the Docker
    Engine API (C(POST /build), classic builder, no pull, intermediate containers removed), unless the
    engine already holds that tag (a content hash, so an image under it is not rebuilt).
  - Each build step (C(step 3/12 after 41 s, RUN ...)), each base-layer pull and the end are written
    to stderr and to C(SEATWRIGHT_PROGRESS_LOG) when set, and into O(progress_file).
  - With O(state=progress), reads O(progress_file) and returns C(done), C(failed) and C(progress), which
    callback C(seatwright.fleet.progress) prints on each retry of an C(until) loop, while the build runs
    under C(async).
  - A stream with an error line, or one that ends without naming the image, fails with the step it
    reached and the build's last output lines (where a patch that no longer applies names itself).
  - In check mode nothing is built; C(changed) says whether a build would run.
options:
  state:
    description: C(built) runs the build; C(progress) reports a running build's progress.
    type: str
    choices: [built, progress]
    default: built
  reference:
    description: The image reference to build (C(repository:tag)).
    type: str
    required: true
  context_tar:
    description:
      - The packed build context on the node, a tar with its Dockerfile at the root, sent to the engine as
        it is (no unpacked copy). Needed with O(state=built); the caller removes it.
    type: path
  progress_file:
    description: A JSON file on the node that the build keeps its progress in, for O(state=progress).
    type: path
  timeout_s:
    description: Seconds the whole build may take.
    type: int
    default: 7200
  idle_timeout_s:
    description: Seconds the engine may stay silent within a build (a long RUN step prints nothing).
    type: int
    default: 1800
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_full
  - seatwright.fleet.docker
author: seatwright
"""

EXAMPLES = r"""
- name: Build the image in the background
  seatwright.fleet.engine_image_build:
    reference: seatwright/vllm-sm120:0123456789abcdef
    context_tar: /var/lib/seatwright/images/context/0123456789abcdef.context.tar
    progress_file: /var/lib/seatwright/images/context/0123456789abcdef.progress.json
  async: 7200
  poll: 0
  register: build_job
"""

RETURN = r"""
built:
  description: Whether a build ran (false when the tag was already there, or in check mode).
  returned: success
  type: bool
image_id:
  description: The image's id (C(sha256:...)) once built or found.
  returned: when the image exists
  type: str
elapsed_s:
  description: Seconds the build took.
  returned: when built
  type: float
steps:
  description: How many steps the Dockerfile had.
  returned: when built
  type: int
done:
  description: With O(state=progress), whether the build has ended (well or not).
  returned: state=progress
  type: bool
progress:
  description: With O(state=progress), C(waiting_for), C(elapsed_s), C(timeout_s) and C(detail) (the last step).
  returned: state=progress
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.docker_api import DEFAULT_SOCKET
from ansible_collections.seatwright.fleet.plugins.module_utils.io.images.build import build_image, build_progress


def main():
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "default": "built", "choices": ["built", "progress"]},
            "reference": {"type": "str", "required": True},
            "context_tar": {"type": "path"},
            "progress_file": {"type": "path"},
            "docker_socket": {"type": "path", "default": DEFAULT_SOCKET},
            "timeout_s": {"type": "int", "default": 7200},
            "idle_timeout_s": {"type": "int", "default": 1800},
        },
        required_if=[("state", "built", ("context_tar",)), ("state", "progress", ("progress_file",))],
        supports_check_mode=True,
    )
    try:
        if module.params["state"] == "progress":
            module.exit_json(changed=False, **build_progress(module.params))
        result = build_image(module.params, module.check_mode)
    except SeatwrightError as exc:
        module.fail_json(msg=str(exc), **exc.details)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
