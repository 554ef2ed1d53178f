#!/usr/bin/python
"""Ansible module: read an engine image's definition and inputs on the controller and name the build."""

DOCUMENTATION = r"""
---
module: engine_image_plan
short_description: Check an engine image definition and compute its content tag
description:
  - Reads an image definition (C(images/<name>.yml)), the Dockerfile template, the patch script,
    each patch the definition names (plus O(extra_patches)), the package lock, local wheels and
    extra CA certificates, and checks them; a patch without a why/upstream/gates/changes header, a
    registry base not pinned by digest or a package not pinned exactly is refused with the file and field.
  - A definition that names a registry image (C(registry), pinned by digest) reads no template or
    patch; its reference is the local tag the pulled image is kept under.
  - The tag is a hash of all of these and of the base image's id, so unchanged inputs name an
    image that already exists and nothing is rebuilt.
  - Reads only files on the controller and never changes anything.
options:
  definition_path:
    description: The image definition file.
    type: path
    required: true
  template_paths:
    description: The Dockerfile template the definition's C(template) names, and the templates it includes.
    type: list
    elements: path
    required: true
  apply_script_path:
    description: The script that dry-runs and applies each patch inside the build.
    type: path
    required: true
  patch_dirs:
    description: Folders searched in order for C(<id>.patch).
    type: list
    elements: path
    required: true
  extra_patches:
    description: Patch ids applied after the definition's own.
    type: list
    elements: str
    default: []
  locks_dir:
    description: Folder of the package locks that definitions name.
    type: path
    required: true
  local_wheels_dir:
    description: Folder of wheels that no package index has (the definition's C(local_wheels)).
    type: path
    required: true
  ca_certificates:
    description: PEM files added to the image's trust store.
    type: list
    elements: path
    default: []
  base_image_id:
    description: Id of the base image in the controller's Docker engine, for bases loaded from the controller.
    type: str
  offline:
    description: Install Python packages from a wheelhouse the controller prepares, with no index.
    type: bool
    default: true
  flashinfer_override:
    description:
      - Name of one of the definition's C(flashinfer_overrides) to build instead of its FlashInfer
        set (a PyPI release where the nightly index is out of reach). The name goes into the
        content tag, the image's labels and its facts.
    type: str
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_full
author: seatwright
"""

EXAMPLES = r"""
- name: Name the lab engine image's build
  engine_image_plan:
    definition_path: images/lab-vllm-cpu.yml
    template_paths:
      - roles/engine_image/templates/vllm-cpu.Dockerfile.j2
      - roles/engine_image/templates/ca-certificates.Dockerfile.j2
      - roles/engine_image/templates/labels.Dockerfile.j2
    apply_script_path: roles/engine_image/files/apply-patches
    patch_dirs: [roles/engine_image/files/patches]
    locks_dir: roles/engine_image/files/locks
    local_wheels_dir: /opt/wheels
    base_image_id: sha256:73efa0670ff0...
"""

RETURN = r"""
definition:
  description: The checked definition, with every optional field filled in.
  returned: success
  type: dict
patches:
  description: Each patch applied, in order, with C(id), C(why), C(upstream), C(gates), C(files), C(path) and C(sha256).
  returned: success
  type: list
  elements: dict
tag:
  description: The content tag (16 hex digits of a sha256 over every input).
  returned: success
  type: str
reference:
  description: C(<repository>:<tag>), the image the build makes.
  returned: success
  type: str
wheelhouse_key:
  description: Name of the controller's wheelhouse for this package set (null when not offline).
  returned: success
  type: str
wheel_platforms:
  description: The C(--platform) values of the wheelhouse download (every glibc the target runs), or empty.
  returned: success
  type: list
  elements: str
lock_path:
  description: The package lock used as pip constraints, or null.
  returned: success
  type: str
local_wheels:
  description: The local wheels, each with C(name), C(path) and C(sha256).
  returned: success
  type: list
  elements: dict
ca_certificates:
  description: The extra CA certificates, each with C(path), C(name) inside the image and C(sha256).
  returned: success
  type: list
  elements: dict
pull:
  description:
    - For a definition that names a registry image (C(registry)), what to pull and keep; null for a build.
    - C(pinned) (C(<name>@sha256:...), as Docker keeps it), C(pull_name), C(digest), C(platform) and
      C(local), the tag every node keeps it under (also O(reference)); nothing is built.
  returned: success
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import ImageError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.images.inputs import build_inputs


def main():
    module = AnsibleModule(
        argument_spec={
            "definition_path": {"type": "path", "required": True},
            "template_paths": {"type": "list", "elements": "path", "required": True},
            "apply_script_path": {"type": "path", "required": True},
            "patch_dirs": {"type": "list", "elements": "path", "required": True},
            "extra_patches": {"type": "list", "elements": "str", "default": []},
            "locks_dir": {"type": "path", "required": True},
            "local_wheels_dir": {"type": "path", "required": True},
            "ca_certificates": {"type": "list", "elements": "path", "default": []},
            "base_image_id": {"type": "str"},
            "offline": {"type": "bool", "default": True},
            "flashinfer_override": {"type": "str"},
        },
        supports_check_mode=True,
    )
    try:
        plan = build_inputs(module.params)
    except ImageError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **plan)


if __name__ == "__main__":
    main()
