"""Secure Boot and module signing on a node, and what the driver role does about them.

Pure: io/node/secureboot.py runs `mokutil --sb-state` and `mokutil --test-key <cert>` and reads
`/sys/firmware/efi`, `/sys/module/module/parameters/sig_enforce` and `/sys/kernel/security/lockdown`;
this file turns those answers into the node's fact and decides, before anything is installed, whether
the NVIDIA open kernel modules that DKMS builds on the node will load:

- Secure Boot off (or not applicable) and signatures not enforced: nothing to do;
- Secure Boot on (or signatures enforced): DKMS signs the modules with a declared Machine Owner Key,
  whose certificate must already be enrolled (enrolment is a manual step at the console), else the
  install is refused with the reason.

mokutil's answers are from its source (https://github.com/lcp/mokutil, src/mokutil.c: "SecureBoot
enabled|disabled", "Platform is in Setup Mode", "EFI variables are not supported on this system";
`--test-key` prints "<file> is already enrolled" or "<file> is not enrolled"). DKMS signs with
`mok_signing_key` / `mok_certificate` from its framework configuration
(https://github.com/dkms-project/dkms/blob/master/dkms_framework.conf.in).
"""

import re

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import DriverError

STATES = ("enabled", "disabled", "not_applicable", "unknown")
# Where the driver role writes DKMS's signing configuration (a drop-in: framework.conf stays the package's).
DKMS_SIGNING_CONF = "/etc/dkms/framework.conf.d/seatwright-mok.conf"
# DKMS sources its framework configuration as shell: a path with quotes or $ would run as code.
SAFE_PATH = re.compile(r"^/[A-Za-z0-9._/-]+$")
EFI_UNSUPPORTED = "EFI variables are not supported on this system"
NO_SECURE_BOOT = "This system doesn't support Secure Boot"


def parse_sb_state(rc, out, err):
    """(state, setup_mode, text) from `mokutil --sb-state`; state is one of STATES."""
    text = "\n".join(part.strip() for part in (out, err) if part and part.strip())
    setup_mode = "Platform is in Setup Mode" in text
    if EFI_UNSUPPORTED in text or NO_SECURE_BOOT in text:
        return "not_applicable", False, text
    if re.search(r"^SecureBoot enabled$", text, re.M):
        return "enabled", setup_mode, text
    if re.search(r"^SecureBoot disabled$", text, re.M):
        return "disabled", setup_mode, text
    return "unknown", setup_mode, text


def parse_enrolled(rc, out):
    """True/False from `mokutil --test-key <cert>`; None when it said neither."""
    text = out or ""
    if "is already enrolled" in text:
        return True
    if "is not enrolled" in text:
        return False
    return None


def parse_lockdown(text):
    """The active kernel lockdown mode from /sys/kernel/security/lockdown ('[none] integrity ...')."""
    found = re.search(r"\[(\w+)\]", text or "")
    return found.group(1) if found else None


def secure_boot_fact(in_container, efi_present, mokutil, sig_enforce, lockdown, mok=None):
    """The node's `seatwright_secure_boot` fact.

    `mokutil`: (rc, out, err) of `mokutil --sb-state`, None when mokutil is not installed.
    `sig_enforce`: the text of sig_enforce ('Y'/'N'), None when absent. `lockdown`: the lockdown file's
    text or None. `mok`: {key, cert, key_present, cert_present, enrolled} when a MOK is declared.
    """
    fact = {"state": "unknown", "setup_mode": False, "source": None, "reason": None}
    if in_container:
        fact.update(
            state="not_applicable",
            reason="a container: the host's kernel loads the modules and its firmware owns Secure Boot",
        )
    elif mokutil is not None:
        state, setup_mode, text = parse_sb_state(*mokutil)
        fact.update(state=state, setup_mode=setup_mode, source="mokutil --sb-state: %s" % (text or "no output"))
        if state == "not_applicable":
            fact["reason"] = (
                "the firmware has no Secure Boot"
                if NO_SECURE_BOOT in text
                else "no EFI variables: the node did not boot through UEFI, so there is no Secure Boot"
            )
        elif state == "unknown":
            fact["reason"] = "mokutil --sb-state said neither enabled nor disabled"
    elif not efi_present:
        fact.update(state="not_applicable", reason="no /sys/firmware/efi: a BIOS boot has no Secure Boot")
    else:
        fact["reason"] = "the node booted through UEFI but mokutil is not installed; install mokutil"
    enforced = {"Y": True, "N": False}.get((sig_enforce or "").strip())
    fact["module_signing"] = {"enforced": enforced, "lockdown": parse_lockdown(lockdown)}
    fact["mok"] = mok
    return fact


def signing_needed(fact):
    """True when unsigned modules would be refused: Secure Boot on, or the kernel enforces signatures."""
    return fact.get("state") == "enabled" or bool((fact.get("module_signing") or {}).get("enforced"))


def module_signing_plan(host, fact, open_modules, mok_key=None, mok_cert=None):
    """{'action': 'none'|'sign', 'reason', 'conf': (path, text) or None}; DriverError refuses the install.

    `fact` is secure_boot_fact (with its `mok` readings when a key is declared). Decided before any
    package is installed: a refusal leaves the node as it was.
    """
    if bool(mok_key) != bool(mok_cert):
        raise DriverError(
            "host %s: nvidia_driver_mok_key and nvidia_driver_mok_cert go together; set both (the private key "
            "and the DER certificate of one Machine Owner Key) or neither" % host
        )
    for name, path in (("nvidia_driver_mok_key", mok_key), ("nvidia_driver_mok_cert", mok_cert)):
        if path and not SAFE_PATH.match(path):
            raise DriverError(
                "host %s: %s is %r; expected an absolute path of letters, digits and ._-/ (DKMS sources its "
                "configuration as shell)" % (host, name, path)
            )
    state = fact.get("state")
    if not signing_needed(fact) and state != "unknown":
        why = {
            "disabled": "Secure Boot is disabled",
            "not_applicable": "Secure Boot is not applicable (%s)" % fact.get("reason"),
        }.get(state, "Secure Boot is %s" % state)
        return {"action": "none", "reason": why + " and the kernel does not enforce module signatures", "conf": None}
    what = (
        "Secure Boot is enabled"
        if state == "enabled"
        else "the kernel enforces module signatures (sig_enforce)"
        if signing_needed(fact)
        else "the Secure Boot state is unknown (%s)" % fact.get("reason")
    )
    modules = "the NVIDIA %s kernel modules DKMS builds on the node" % ("open" if open_modules else "proprietary")
    if not mok_key:
        raise DriverError(
            "host %s: %s, so %s must be signed by a key the firmware trusts or they will not load. Refused before "
            "installing anything. Declare a Machine Owner Key (nvidia_driver_mok_key, nvidia_driver_mok_cert) "
            "enrolled on this node, or turn Secure Boot off in the firmware (docs/driver.md#secure-boot)"
            % (host, what, modules)
        )
    mok = fact.get("mok") or {}
    for path, present in ((mok_key, mok.get("key_present")), (mok_cert, mok.get("cert_present"))):
        if not present:
            raise DriverError(
                "host %s: %s, and the declared Machine Owner Key file %s is not on the node; put the key pair "
                "there (root-only) or fix nvidia_driver_mok_key / nvidia_driver_mok_cert" % (host, what, path)
            )
    if mok.get("enrolled") is not True:
        said = "is not enrolled" if mok.get("enrolled") is False else "could not be checked (mokutil --test-key)"
        raise DriverError(
            "host %s: %s, and the Machine Owner Key certificate %s %s. Enrolment is a manual step at the node's "
            "console: run `mokutil --import %s` (it asks for a one-time password), reboot, choose 'Enroll MOK' "
            "in the MOK Manager and give that password; then run again. Refused before installing anything "
            "(docs/driver.md#secure-boot)" % (host, what, mok_cert, said, mok_cert)
        )
    text = (
        "# Written by seatwright (roles/nvidia_driver): DKMS signs the modules it builds with this\n"
        "# Machine Owner Key, enrolled on this node, so that they load with Secure Boot on.\n"
        'mok_signing_key="%s"\nmok_certificate="%s"\n' % (mok_key, mok_cert)
    )
    return {
        "action": "sign",
        "reason": "%s: DKMS signs %s with the enrolled Machine Owner Key %s" % (what, modules, mok_cert),
        "conf": [DKMS_SIGNING_CONF, text],
    }
