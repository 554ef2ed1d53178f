"""Secure Boot as a node fact and the driver's module-signing decision (plugins/module_utils/node/secureboot.py),
on mokutil's answers (tests/fixtures/secure_boot, reconstructed from mokutil's source: see its README),
and secure_boot_facts' main() against a stand-in mokutil and a sysfs tree."""

import json

import pytest
import secure_boot_facts
from ansible.module_utils.testing import patch_module_args
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import DriverError
from ansible_collections.seatwright.fleet.plugins.module_utils.node.driver import plan_from_params
from ansible_collections.seatwright.fleet.plugins.module_utils.node.secureboot import (
    DKMS_SIGNING_CONF,
    module_signing_plan,
    parse_enrolled,
    parse_lockdown,
    parse_sb_state,
    secure_boot_fact,
)
from conftest import FIXTURES

SB = FIXTURES / "secure_boot"
KEY, CERT = "/var/lib/shim-signed/mok/MOK.priv", "/var/lib/shim-signed/mok/MOK.der"


def text(name):
    return (SB / name).read_text()


MOKUTIL = {
    "enabled": (0, text("sb-state-enabled.stdout"), ""),
    "disabled": (0, text("sb-state-disabled.stdout"), ""),
    "setup": (0, text("sb-state-setup-mode.stdout"), ""),
    "no-efi": (255, "", text("sb-state-no-efi.stderr")),
    "no-sb": (255, "", text("sb-state-no-sb.stderr")),
}


@pytest.mark.parametrize(
    "answer,state,setup",
    [
        ("enabled", "enabled", False),
        ("disabled", "disabled", False),
        ("setup", "disabled", True),
        ("no-efi", "not_applicable", False),
        ("no-sb", "not_applicable", False),
    ],
)
def test_mokutil_answers_are_read(answer, state, setup):
    assert parse_sb_state(*MOKUTIL[answer])[:2] == (state, setup)


def test_an_unrecognised_answer_is_unknown():
    assert parse_sb_state(1, "", "Failed to read SecureBoot")[0] == "unknown"


def test_enrolment_and_lockdown_are_read():
    assert parse_enrolled(1, text("test-key-enrolled.stdout")) is True
    assert parse_enrolled(0, text("test-key-not-enrolled.stdout")) is False
    assert parse_enrolled(255, "") is None
    assert parse_lockdown(text("lockdown-none.txt")) == "none"
    assert parse_lockdown(text("lockdown-integrity.txt")) == "integrity"


@pytest.mark.parametrize(
    "in_container,efi,mokutil,state,words",
    [
        (True, True, MOKUTIL["enabled"], "not_applicable", "a container: the host's kernel loads the modules"),
        (False, True, MOKUTIL["enabled"], "enabled", None),
        (False, True, MOKUTIL["disabled"], "disabled", None),
        (False, False, MOKUTIL["no-efi"], "not_applicable", "did not boot through UEFI"),
        (False, False, None, "not_applicable", "no /sys/firmware/efi"),
        (False, True, None, "unknown", "mokutil is not installed; install mokutil"),
    ],
    ids=["lab-container", "enabled", "disabled", "efi-unsupported", "no-mokutil-bios", "no-mokutil-uefi"],
)
def test_the_fact(in_container, efi, mokutil, state, words):
    fact = secure_boot_fact(in_container, efi, mokutil, "N\n", text("lockdown-none.txt"))
    assert fact["state"] == state
    assert fact["module_signing"] == {"enforced": False, "lockdown": "none"}
    if words:
        assert words in fact["reason"]


def _fact(answer="enabled", enrolled=True, key=True, cert=True, sig_enforce="N"):
    mok = {"key": KEY, "cert": CERT, "key_present": key, "cert_present": cert, "enrolled": enrolled}
    return secure_boot_fact(False, True, MOKUTIL[answer], sig_enforce, None, mok)


def test_secure_boot_off_needs_nothing():
    plan = module_signing_plan("node-a", _fact("disabled"), True)
    assert plan["action"] == "none" and plan["conf"] is None
    lab = secure_boot_fact(True, False, None, None, None)
    assert module_signing_plan("node-a", lab, True)["reason"].startswith("Secure Boot is not applicable (a container")


def test_secure_boot_on_signs_with_the_enrolled_mok():
    plan = module_signing_plan("node-a", _fact(), True, KEY, CERT)
    assert plan["action"] == "sign"
    assert plan["conf"][0] == DKMS_SIGNING_CONF
    assert 'mok_signing_key="%s"\nmok_certificate="%s"\n' % (KEY, CERT) in plan["conf"][1]


def test_an_enforcing_kernel_needs_signing_even_with_secure_boot_off():
    with pytest.raises(DriverError, match="the kernel enforces module signatures"):
        module_signing_plan("node-a", _fact("disabled", sig_enforce="Y\n"), True)


@pytest.mark.parametrize(
    "fact,key,cert,words",
    [
        (_fact(), None, None, "Secure Boot is enabled, so the NVIDIA open kernel modules DKMS builds"),
        (
            _fact(enrolled=False),
            KEY,
            CERT,
            "is not enrolled. Enrolment is a manual step at the node's console: run `mokutil --import %s`" % CERT,
        ),
        (_fact(enrolled=None), KEY, CERT, "could not be checked (mokutil --test-key)"),
        (_fact(key=False), KEY, CERT, "the declared Machine Owner Key file %s is not on the node" % KEY),
        (_fact(), KEY, None, "nvidia_driver_mok_key and nvidia_driver_mok_cert go together"),
        (_fact(), '/tmp/x";reboot;"', CERT, "expected an absolute path"),
        (secure_boot_fact(False, True, None, None, None), None, None, "the Secure Boot state is unknown"),
    ],
    ids=["no-mok", "not-enrolled", "enrolment-unknown", "key-missing", "half-declared", "unsafe-path", "unknown"],
)
def test_refused_before_install_with_the_reason(fact, key, cert, words):
    with pytest.raises(DriverError) as raised:
        module_signing_plan("node-a", fact, True, key, cert)
    assert str(raised.value).startswith("host node-a: ") and words in str(raised.value)


def test_the_driver_plan_carries_the_decision_and_refuses_before_packages():
    params = {
        "distribution": "Ubuntu",
        "distribution_version": "24.04",
        "architecture": "x86_64",
        "branch": "580",
        "open_kernel_modules": True,
        "compute_capabilities": ["12.0"],
        "gpu_profile": None,
        "container_toolkit": True,
        "toolkit_version": None,
        "cuda_key_url": None,
        "cuda_key_fingerprint": None,
        "repo_base_url": "https://developer.download.nvidia.com/compute/cuda/repos",
        "allow_http": False,
        "host": "node-a",
    }
    assert plan_from_params(params, None)["module_signing"] is None
    signed = plan_from_params(dict(params, secure_boot=_fact(), mok_key=KEY, mok_cert=CERT), None)
    assert signed["module_signing"]["action"] == "sign" and signed["driver_packages"]
    with pytest.raises(DriverError, match="host node-a: Secure Boot is enabled"):
        plan_from_params(dict(params, secure_boot=_fact()), None)


# ---------------------------------------------------------------- the module


def run(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            secure_boot_facts.main()
    return json.loads(capsys.readouterr().out)["ansible_facts"]["seatwright_secure_boot"]


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A UEFI node with a stand-in mokutil (Secure Boot on, the MOK enrolled) and its key pair."""
    (tmp_path / "sys" / "firmware" / "efi").mkdir(parents=True)
    params = tmp_path / "sys" / "module" / "module" / "parameters"
    params.mkdir(parents=True)
    (params / "sig_enforce").write_text("Y\n")
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "mokutil").write_text(
        "#!/bin/sh\n"
        'case "$1" in\n'
        '  --sb-state) cat %s;;\n'
        '  --test-key) echo "$2 is already enrolled"; exit 1;;\n'
        "esac\n" % (SB / "sb-state-enabled.stdout")
    )
    (bin_dir / "mokutil").chmod(0o755)
    monkeypatch.setenv("PATH", "%s:/usr/bin:/bin" % bin_dir)
    key, cert = tmp_path / "MOK.priv", tmp_path / "MOK.der"
    key.write_text("key")
    cert.write_text("cert")
    return {"sysfs_root": str(tmp_path), "mok_key": str(key), "mok_cert": str(cert)}


def test_module_reads_secure_boot_signing_and_the_mok(capsys, node):
    fact = run(capsys, node)
    assert fact["state"] == "enabled" and fact["module_signing"]["enforced"] is True
    assert fact["mok"]["enrolled"] is True and fact["mok"]["key_present"] is True
    assert module_signing_plan("node-a", fact, True, node["mok_key"], node["mok_cert"])["action"] == "sign"


def test_module_in_a_container_reports_not_applicable(capsys, node):
    fact = run(capsys, {"sysfs_root": node["sysfs_root"], "in_container": True})
    assert fact["state"] == "not_applicable" and fact["mok"] is None


def test_module_without_mokutil_on_uefi_is_unknown(capsys, node, tmp_path):
    (tmp_path / "bin" / "mokutil").unlink()
    fact = run(capsys, {"sysfs_root": node["sysfs_root"]})
    assert fact["state"] == "unknown" and "install mokutil" in fact["reason"]
