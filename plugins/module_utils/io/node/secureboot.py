"""Secure Boot and module signing as a node reports them, for the secure_boot_facts module.

node/secureboot.py interprets; this file runs `mokutil --sb-state` (and `mokutil --test-key` on a
declared Machine Owner Key certificate) and reads the EFI folder, sig_enforce and lockdown from sysfs.
"""

import os

from ansible_collections.seatwright.fleet.plugins.module_utils.node.secureboot import parse_enrolled, secure_boot_fact


def _read(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


def read_secure_boot(module):
    """The node's seatwright_secure_boot fact."""
    params = module.params
    root = params["sysfs_root"]
    mokutil = module.get_bin_path("mokutil")
    sb_state = module.run_command([mokutil, "--sb-state"]) if mokutil and not params["in_container"] else None
    mok = None
    if params["mok_key"] or params["mok_cert"]:
        cert = params["mok_cert"]
        enrolled = None
        if mokutil and cert and os.path.isfile(cert):
            rc, out, _err = module.run_command([mokutil, "--test-key", cert])
            enrolled = parse_enrolled(rc, out)
        mok = {
            "key": params["mok_key"],
            "cert": cert,
            "key_present": bool(params["mok_key"]) and os.path.isfile(params["mok_key"]),
            "cert_present": bool(cert) and os.path.isfile(cert),
            "enrolled": enrolled,
        }
    return secure_boot_fact(
        params["in_container"],
        os.path.isdir(os.path.join(root, "sys", "firmware", "efi")),
        sb_state,
        _read(os.path.join(root, "sys", "module", "module", "parameters", "sig_enforce")),
        _read(os.path.join(root, "sys", "kernel", "security", "lockdown")),
        mok,
    )
