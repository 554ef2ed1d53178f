#!/usr/bin/python
"""Ansible module: plan a pinned NVIDIA driver install, and verify the repository keyrings."""

DOCUMENTATION = r"""
module: nvidia_driver_plan
short_description: Decide the NVIDIA repository, keys, packages and pin for one driver branch
description:
  - From the node's distribution, architecture and GPUs, returns NVIDIA's CUDA repository for it,
    the signing key to trust (URL and fingerprint), the packages of the pinned branch with the
    open kernel modules, the container toolkit repository and packages, the apt preferences that
    hold the branch, and whether the running driver already is of that branch.
  - The running driver version comes from O(current_version) (GPU facts) or, when not given, from
    C(/sys/module/nvidia/version).
  - With O(verify_keyrings), also checks that each keyring file holds the expected primary key
    fingerprint (C(gpg --show-keys)) and fails naming the file and both fingerprints when not.
  - A verified keyring that has a C(keyring) is then installed there (mode 0644, one rename) when
    it differs, so apt reads a key only once it is verified; nothing else on the node changes.
  - Runs on the controller (its action plugin) when O(current_version) is given and there is no
    keyring to verify and no repository to write, since then nothing on the node is needed.
options:
  distribution:
    description: C(ansible_facts.distribution) (Debian, Ubuntu).
    type: str
    required: true
  distribution_version:
    description: C(ansible_facts.distribution_version) (12, 22.04, 24.04).
    type: str
    required: true
  architecture:
    description: C(ansible_facts.architecture) (x86_64, aarch64).
    type: str
    required: true
  branch:
    description: Driver branch to pin, three digits (e.g. 580).
    type: str
    required: true
  open_kernel_modules:
    description: Install the open kernel modules (required for Blackwell GPUs).
    type: bool
    default: true
  compute_capabilities:
    description: Compute capabilities of the node's GPUs (e.g. ["12.0", "12.0"]), for the Blackwell checks.
    type: list
    elements: str
    default: []
  gpu_profile:
    description: The node's declared GPU profile (C(seatwright_node_gpu_profile)); its compute
      capability is used when O(compute_capabilities) is empty (before any GPU facts exist).
    type: str
  current_version:
    description: Driver version the node runs now; read from sysfs when not given.
    type: str
  container_toolkit:
    description: Also plan the NVIDIA Container Toolkit repository and package.
    type: bool
    default: true
  toolkit_version:
    description: Pin the container toolkit to this package version.
    type: str
  cuda_key_url:
    description: Signing key URL to use instead of the one recorded for the repository.
    type: str
  cuda_key_fingerprint:
    description: Fingerprint of O(cuda_key_url).
    type: str
  repo_base_url:
    description: Base of NVIDIA's CUDA repositories (a mirror can replace it).
    type: str
    default: https://developer.download.nvidia.com/compute/cuda/repos
  verify_keyrings:
    description:
      - Keyring files to check, each with C(path) and the expected C(fingerprint). A keyring must
        hold exactly that primary key and no other (apt's signed-by trusts every key in the file).
      - With C(keyring), the verified file is copied there, where apt reads it.
    type: list
    elements: dict
    default: []
  repositories:
    description:
      - Repositories to add once every keyring is verified and installed, each with C(name), C(url)
        and C(keyring); each is written to C(/etc/apt/sources.list.d/<name>.sources) in deb822
        form (as M(ansible.builtin.deb822_repository) writes it) where it differs.
    type: list
    elements: dict
    default: []
  repositories_enabled:
    description: Whether apt uses the O(repositories) (C(Enabled)).
    type: bool
    default: true
  allow_http:
    description:
      - Accept plain C(http://) repository and key URLs (a mirror on a network you trust).
        Otherwise only C(https://) is accepted.
    type: bool
    default: false
  secure_boot:
    description:
      - The node's C(seatwright_secure_boot) fact (C(secure_boot_facts)). With Secure Boot on, the plan
        signs the DKMS-built modules with the declared Machine Owner Key, or fails before anything is
        installed, saying why. Unset, no module signing is decided.
    type: dict
  host:
    description: Name of the node in messages.
    type: str
  mok_key:
    description: Private key of the declared Machine Owner Key on the node (with O(mok_cert)).
    type: path
  mok_cert:
    description: DER certificate of the declared Machine Owner Key, enrolled with C(mokutil --import).
    type: path
notes:
  - "Check mode: Decides and reads keyrings; in check mode reports the keyring it would install."
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_full
author: seatwright
"""

EXAMPLES = r"""
- name: Plan the driver
  nvidia_driver_plan:
    distribution: "{{ ansible_facts.distribution }}"
    distribution_version: "{{ ansible_facts.distribution_version }}"
    architecture: "{{ ansible_facts.architecture }}"
    branch: "580"
  register: plan

- name: Verify the keyring written for the CUDA repository
  nvidia_driver_plan:
    distribution: Debian
    distribution_version: "12"
    architecture: x86_64
    branch: "580"
    verify_keyrings:
      - path: /etc/apt/keyrings/nvidia-cuda.asc
        fingerprint: EB693B3035CD5710E231E123A4B469963BF863CC
"""

RETURN = r"""
plan:
  description: >-
    branch, open_kernel_modules, cuda_repository (url, suite, key_url, key_fingerprint),
    toolkit_repository, driver_packages, toolkit_packages, pin_preferences (text), action
    (install, change or none), reason, current_version, module_signing (action none or sign, reason,
    conf as [path, text] of DKMS's signing configuration; null without O(secure_boot)).
  returned: success
  type: dict
sources:
  description: Per repository, its source file's path and whether it changed (or would).
  returned: when repositories is given
  type: list
  elements: dict
keyrings:
  description: Per verified file, its path and the primary key fingerprints found.
  returned: when verify_keyrings is given
  type: list
  elements: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.node.driver import plan_driver

# The action plugin of the same name validates with this spec too (one home).
ARGUMENT_SPEC = {
    "distribution": {"type": "str", "required": True},
    "distribution_version": {"type": "str", "required": True},
    "architecture": {"type": "str", "required": True},
    "branch": {"type": "str", "required": True},
    "open_kernel_modules": {"type": "bool", "default": True},
    "compute_capabilities": {"type": "list", "elements": "str", "default": []},
    "gpu_profile": {"type": "str"},
    "current_version": {"type": "str"},
    "container_toolkit": {"type": "bool", "default": True},
    "toolkit_version": {"type": "str"},
    "cuda_key_url": {"type": "str"},
    "cuda_key_fingerprint": {"type": "str"},
    "repo_base_url": {"type": "str", "default": "https://developer.download.nvidia.com/compute/cuda/repos"},
    "verify_keyrings": {"type": "list", "elements": "dict", "default": []},
    "allow_http": {"type": "bool", "default": False},
    "repositories": {"type": "list", "elements": "dict", "default": []},
    "repositories_enabled": {"type": "bool", "default": True},
    "secure_boot": {"type": "dict"},
    "host": {"type": "str"},
    "mok_key": {"type": "path"},
    "mok_cert": {"type": "path"},
}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        result = plan_driver(module)
    except SeatwrightError as exc:
        module.fail_json(msg=str(exc), **exc.details)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
