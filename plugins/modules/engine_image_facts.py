#!/usr/bin/python
"""Ansible module: what an engine image really holds, read by running it once on the node."""

DOCUMENTATION = r"""
---
module: engine_image_facts
short_description: Read an engine image's versions, CUDA arch list, patches and flag set
description:
  - Runs the image once through the node's Docker engine (no network, no entrypoint, removed
    afterwards) with its own Python, and reads the engine's, torch's, FlashInfer's, Ray's and
    py-spy's installed versions, torch's CUDA version and arch list, C(TORCH_CUDA_ARCH_LIST), the
    patches the build applied, and the engine's own flag set from its C(--help).
  - The result is cached on the node by image id (an id names exactly one content), so a second
    call reads the cache and runs nothing.
  - Returns C(ansible_facts.seatwright_engine_images), keyed by O(name), which the seat plan
    reads from the fact cache to check a seat against the image it will run.
  - Changes nothing but its own cache; C(changed) is always false.
options:
  name:
    description: The image definition's name; the key of the returned facts.
    type: str
    required: true
  image:
    description: The image reference (C(repository:tag)) in the node's Docker engine.
    type: str
    required: true
  engine:
    description: Which engine's C(--help) to read.
    type: str
    choices: [vllm, sglang]
    required: true
  python:
    description: The image's Python that holds the engine (a path inside the image, or python3).
    type: str
    default: python3
  cache_dir:
    description: Folder on the node for the cached facts, one file per image id.
    type: path
    default: /var/lib/seatwright/images/facts
  timeout_s:
    description: Seconds the probe may run (the engine's C(--help) imports it).
    type: int
    default: 900
  check_rank:
    description:
      - One rank of a seat's plan (its C(rank), C(host), C(role) and C(argv)). When given, the module
        fails unless every flag the rank passes is one the image's engine lists in its C(--help)
        (read the way the engine reads it, with aliases, C(_) for C(-), C(--no-) forms and prefixes), and
        no extra argument sets a flag the plan renders from the recipe. Bring-up calls it with the
        image it is about to run, before it starts the rank.
    type: dict
  check_extra_args:
    description: The seat's C(serving.extra_args), checked with O(check_rank).
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_full
  - seatwright.fleet.docker
author: seatwright
"""

EXAMPLES = r"""
- name: Read what the lab engine image holds
  engine_image_facts:
    name: lab-vllm-cpu
    image: seatwright/vllm-cpu:3f0c2a9e1b7d4c55
    engine: vllm
    python: /opt/vllm/bin/python
"""

RETURN = r"""
ansible_facts:
  description: C(seatwright_engine_images), a mapping of O(name) to the image's facts.
  returned: success
  type: dict
  contains:
    seatwright_engine_images:
      description:
        - Per image C(id), C(reference), C(size_bytes), C(engine) (C(name), C(version)), C(torch),
          C(torch_cuda), C(flashinfer), C(ray), C(py_spy), C(cuda_arch_list), C(torch_arch_list),
          C(patches), C(flags) (the engine's long flags), C(flag_count), C(aliases) (every spelling
          its C(--help) lists for an option, mapped to the option's first long name), C(versions),
          C(notes).
      type: dict
cached:
  description: Whether the facts came from the node's cache (no container ran).
  returned: success
  type: bool
launch_checked:
  description: Whether O(check_rank)'s flags were checked against the image (and found good).
  returned: success
  type: bool
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.defaults import IMAGE_FACTS_DIR
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.docker_api import DEFAULT_SOCKET
from ansible_collections.seatwright.fleet.plugins.module_utils.io.images.probe import image_facts


def main():
    module = AnsibleModule(
        argument_spec={
            "name": {"type": "str", "required": True},
            "image": {"type": "str", "required": True},
            "engine": {"type": "str", "required": True, "choices": ["vllm", "sglang"]},
            "python": {"type": "str", "default": "python3"},
            "cache_dir": {"type": "path", "default": IMAGE_FACTS_DIR},
            "docker_socket": {"type": "path", "default": DEFAULT_SOCKET},
            "timeout_s": {"type": "int", "default": 900},
            "check_rank": {"type": "dict"},
            "check_extra_args": {"type": "list", "elements": "str", "default": []},
        },
        supports_check_mode=True,
    )
    try:
        result = image_facts(module.params, may_write=not module.check_mode)
    except SeatwrightError as exc:
        module.fail_json(msg=str(exc), **exc.details)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
