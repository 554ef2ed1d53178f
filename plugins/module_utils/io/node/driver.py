"""The NVIDIA driver plan on a node, for the nvidia_driver_plan module.

node/driver.py decides the packages, repository and actions; this file reads what the node
adds to that (the loaded kernel module's version, the repository keyrings through gpg). Failures
raise DriverError with the message for people.
"""

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import DriverError
from ansible_collections.seatwright.fleet.plugins.module_utils.node.driver import (
    driver_plan,
    key_fingerprints,
    keyring_problem,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.node.hardware import GPU_PROFILES

LOADED_VERSION = "/sys/module/nvidia/version"


def plan_driver(module):
    """{'changed': False, 'plan': ..., 'keyrings': ...} for the module's parameters."""
    params = module.params
    current = params["current_version"] or read_loaded_version()
    capabilities = params["compute_capabilities"]
    profile = params["gpu_profile"]
    if not capabilities and profile:
        if profile not in GPU_PROFILES:
            raise DriverError("gpu_profile %r is not one of %s" % (profile, ", ".join(sorted(GPU_PROFILES))))
        capabilities = [GPU_PROFILES[profile]["compute_capability"]]
    plan = driver_plan(
        params["distribution"],
        params["distribution_version"],
        params["architecture"],
        params["branch"],
        params["open_kernel_modules"],
        capabilities,
        current,
        params["container_toolkit"],
        params["toolkit_version"],
        params["cuda_key_url"],
        params["cuda_key_fingerprint"],
        params["repo_base_url"],
        params["allow_http"],
    )
    result = {"changed": False, "plan": plan}
    if params["verify_keyrings"]:
        result["keyrings"] = verify_keyrings(module, params["verify_keyrings"])
    return result


def read_loaded_version(path=LOADED_VERSION):
    """The loaded nvidia kernel module's version, or None when no driver is loaded."""
    try:
        with open(path) as handle:
            return handle.read().strip() or None
    except OSError:
        return None


def verify_keyrings(module, keyrings):
    """Each keyring's fingerprints, read with gpg; DriverError when one is not the expected key."""
    gpg = module.get_bin_path("gpg")
    if keyrings and not gpg:
        raise DriverError("gpg is needed to verify the repository keyrings; install gnupg")
    results = []
    for keyring in keyrings:
        path, expected = keyring.get("path"), str(keyring.get("fingerprint") or "").replace(" ", "").upper()
        rc, out, err = module.run_command([gpg, "--batch", "--show-keys", "--with-colons", path])
        found = key_fingerprints(out) if rc == 0 else []
        problem = keyring_problem(path, found, expected)
        if problem:
            raise DriverError(problem + ("; gpg: %s" % err.strip() if rc else ""))
        results.append({"path": path, "fingerprints": found})
    return results
