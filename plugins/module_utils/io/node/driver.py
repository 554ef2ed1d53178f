"""The NVIDIA driver plan on a node, for the nvidia_driver_plan module.

node/driver.py decides the packages, repository and actions; this file reads what the node
adds to that (the loaded kernel module's version, the repository keyrings through gpg) and
installs a verified keyring where apt reads it. Failures raise DriverError with the message for
people.
"""

import os

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import DriverError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.files import (
    atomic_write_bytes,
    converge_files,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.node.driver import (
    deb822_source,
    key_fingerprints,
    keyring_problem,
    plan_from_params,
)

LOADED_VERSION = "/sys/module/nvidia/version"
# Where apt reads a key: readable by everyone, as apt's own keyrings are.
KEYRING_MODE = 0o644


def plan_driver(module):
    """{'changed': ..., 'plan': ..., 'keyrings': ...} for the module's parameters."""
    params = module.params
    plan = plan_from_params(params, params["current_version"] or read_loaded_version())
    result = {"changed": False, "plan": plan}
    if params["verify_keyrings"]:
        result["keyrings"] = verify_keyrings(module, params["verify_keyrings"])
        result["changed"] = any(entry.get("installed") for entry in result["keyrings"])
    if params["repositories"]:
        # Only once every key is verified and in place: a source names the keyring apt checks it with.
        sources = write_sources(params["repositories"], params["repositories_enabled"], module.check_mode)
        result["sources"] = sources
        result["changed"] = result["changed"] or any(entry["changed"] for entry in sources)
    return result


def write_sources(repositories, enabled, check_mode=False):
    """Each repository's deb822 source written where it differs: [{path, changed}]."""
    files = []
    for repo in repositories:
        path, text = deb822_source(repo.get("name"), repo.get("url"), repo.get("keyring"), enabled)
        files.append({"path": path, "content": text, "mode": "0644"})
    try:
        written = converge_files([], files, check_mode)
    except (OSError, ValueError) as exc:
        raise DriverError("could not write %s: %s" % (getattr(exc, "filename", None) or "a source", exc))
    return [{"path": entry["path"], "changed": entry["changed"]} for entry in written]


def read_loaded_version(path=LOADED_VERSION):
    """The loaded nvidia kernel module's version, or None when no driver is loaded."""
    try:
        with open(path) as handle:
            return handle.read().strip() or None
    except OSError:
        return None


def verify_keyrings(module, keyrings):
    """Each keyring's fingerprints, read with gpg; DriverError when one is not the expected key.

    A verified file with a `keyring` is then installed there when that differs (not in check mode).
    """
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
        entry = {"path": path, "fingerprints": found}
        if keyring.get("keyring"):
            entry["keyring"] = keyring["keyring"]
            entry["installed"] = install_keyring(path, keyring["keyring"], module.check_mode)
        results.append(entry)
    return results


def install_keyring(source, keyring, check_mode=False):
    """Copies the verified `source` to `keyring` (one rename) when it differs; True when it did."""
    with open(source, "rb") as handle:
        payload = handle.read()
    try:
        with open(keyring, "rb") as handle:
            same = handle.read() == payload
        status = os.stat(keyring)
        # Replaced also when another user owns it: apt trusts whoever can write the file.
        kept = status.st_mode & 0o7777 == KEYRING_MODE and status.st_uid == os.geteuid()
    except OSError:
        same, kept = False, False
    if same and kept:
        return False
    if not check_mode:
        atomic_write_bytes(keyring, payload, KEYRING_MODE)
    return True
