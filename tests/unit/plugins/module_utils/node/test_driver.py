"""NVIDIA driver plan (plugins/module_utils/node/driver.py) and library/nvidia_driver_plan.py."""

import json
import os
import shutil
import subprocess
from unittest.mock import MagicMock

import nvidia_driver_plan
import pytest
from ansible.errors import AnsibleActionFail
from ansible.module_utils.testing import patch_module_args
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import DriverError
from ansible_collections.seatwright.fleet.plugins.module_utils.node.driver import (
    CUDA_KEY_FINGERPRINT,
    driver_action,
    driver_packages,
    driver_plan,
    key_fingerprints,
    keyring_problem,
    pin_preferences,
    repository,
)

# `gpg --show-keys --with-colons` of the lab's test repository key (a key with one subkey would
# list a sub/fpr pair after it, which must not count).
# /etc/apt/sources.list.d/nvidia-cuda.sources on a fleet lab node, written by deb822_repository.
DEB822_REPOSITORY_WROTE = (
    "Enabled: no\n"
    "X-Repolib-Name: nvidia-cuda\n"
    "Signed-By: /etc/apt/keyrings/nvidia-cuda.asc\n"
    "Suites: /\n"
    "Types: deb\n"
    "URIs: https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/\n"
)

GPG_COLONS = (
    "pub:u:255:22:8FB637B1BCDA7F30:1796011173:::u:::scSC:::::ed25519:::0:\n"
    "fpr:::::::::08AC9C81E9B58D9CC15AAB668FB637B1BCDA7F30:\n"
    "uid:u::::1796011173::88F1A519A32FFE242EA8554C7A88C761C8169220::seatwright lab TEST EQUIPMENT "
    "repository key (not NVIDIA's) <lab@seatwright.invalid>::::::::::0:\n"
    "sub:u:255:22:1111111111111111:1796011173::::::e:::::cv25519::\n"
    "fpr:::::::::AAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAAA:\n"
)


@pytest.mark.parametrize(
    "distribution,version,arch,url",
    [
        ("Debian", "12", "x86_64", "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"),
        ("Debian", "12.8", "x86_64", "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"),
        ("Ubuntu", "22.04", "x86_64", "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2204/x86_64/"),
        ("Ubuntu", "24.04", "aarch64", "https://developer.download.nvidia.com/compute/cuda/repos/ubuntu2404/sbsa/"),
    ],
)
def test_repository_per_distribution(distribution, version, arch, url):
    repo = repository(distribution, version, arch)
    assert repo["url"] == url
    assert repo["suite"] == "/"
    assert repo["key_url"] == url + "3bf863cc.pub"
    assert repo["key_fingerprint"] == CUDA_KEY_FINGERPRINT


@pytest.mark.parametrize(
    "distribution,version,arch,message",
    [
        ("Rocky", "9", "x86_64", "Rocky 9 is not a distribution seatwright installs"),
        ("Ubuntu", "20.04", "x86_64", "supported: debian 12, debian 13, ubuntu 22.04, ubuntu 24.04"),
        ("Debian", "12", "ppc64le", "architecture 'ppc64le' has no NVIDIA CUDA repository"),
    ],
)
def test_unsupported_nodes_are_told_what_to_do(distribution, version, arch, message):
    with pytest.raises(DriverError, match=message):
        repository(distribution, version, arch)


@pytest.mark.parametrize(
    "branch,open_modules,expected",
    [
        ("580", True, ["nvidia-driver-pinning-580", "nvidia-open"]),
        ("590", True, ["nvidia-driver-pinning-590", "nvidia-open"]),
        ("580", False, ["nvidia-driver-pinning-580", "cuda-drivers"]),
        ("575", True, ["nvidia-open-575"]),
        ("570", False, ["cuda-drivers-570"]),
    ],
)
def test_packages_per_branch(branch, open_modules, expected):
    assert driver_packages(branch, open_modules, ["9.0"]) == expected


@pytest.mark.parametrize(
    "branch,open_modules,caps,message",
    [
        ("580", False, ["12.0", "12.0"], "only the open kernel modules drive"),
        ("565", True, ["12.0"], "predates Blackwell"),
        ("550", True, ["9.0"], "older than 560"),
        ("58", True, [], "expected a three-digit driver branch"),
        ("latest", True, [], "expected a three-digit driver branch"),
    ],
)
def test_package_refusals(branch, open_modules, caps, message):
    with pytest.raises(DriverError, match=message):
        driver_packages(branch, open_modules, caps)


def test_pin_holds_the_branch():
    text = pin_preferences("580")
    lines = text.splitlines()
    assert lines[0].startswith("# Written by seatwright")
    assert lines[1].startswith("Package: /^(nvidia-(open|driver")
    assert lines[2:] == ["Pin: version 580.*", "Pin-Priority: 1000"]


@pytest.mark.parametrize(
    "current,action",
    [
        (None, "install"),
        ("", "install"),
        ("580.159.04", "none"),
        ("580.95.05", "none"),
        ("575.64.05", "change"),
        ("610.88", "change"),
    ],
)
def test_action_from_running_driver(current, action):
    assert driver_action(current, "580")[0] == action


def test_plan_for_the_lab_node():
    plan = driver_plan(
        "Debian", "12", "x86_64", "580", compute_capabilities=["12.0", "12.0"], current_version="580.159.04"
    )
    assert plan["action"] == "none"
    assert plan["driver_packages"] == ["nvidia-driver-pinning-580", "nvidia-open"]
    assert plan["toolkit_packages"] == ["nvidia-container-toolkit"]
    assert plan["toolkit_repository"]["key_fingerprint"] == "C95B321B61E88C1809C4F759DDCAE044F796ECB0"


def test_debian_13_needs_a_declared_key():
    with pytest.raises(DriverError, match="set nvidia_driver_cuda_key_url and nvidia_driver_cuda_key_fingerprint"):
        driver_plan("Debian", "13", "x86_64", "580")
    plan = driver_plan(
        "Debian",
        "13",
        "x86_64",
        "580",
        cuda_key_url="https://example.invalid/key.pub",
        cuda_key_fingerprint="08ac 9c81 e9b5 8d9c c15a ab66 8fb6 37b1 bcda 7f30",
    )
    assert plan["cuda_repository"]["key_fingerprint"] == "08AC9C81E9B58D9CC15AAB668FB637B1BCDA7F30"
    with pytest.raises(DriverError, match="not a 40-hex-digit"):
        driver_plan("Debian", "13", "x86_64", "580", cuda_key_url="u", cuda_key_fingerprint="1234")


def test_primary_key_fingerprints_only():
    assert key_fingerprints(GPG_COLONS) == ["08AC9C81E9B58D9CC15AAB668FB637B1BCDA7F30"]
    assert key_fingerprints("") == []


def run(capsys, **args):
    base = {"distribution": "Debian", "distribution_version": "12", "architecture": "x86_64", "branch": "580"}
    base.update(args)
    with patch_module_args(base):
        with pytest.raises(SystemExit):
            nvidia_driver_plan.main()
    return json.loads(capsys.readouterr().out)


def test_module_plans_without_changing_anything(capsys):
    result = run(capsys, current_version="575.64.05", compute_capabilities=["12.0"])
    assert result["changed"] is False
    assert result["plan"]["action"] == "change"
    assert "Pin: version 580.*" in result["plan"]["pin_preferences"]


@pytest.mark.parametrize(
    "args",
    [
        {"compute_capabilities": ["12.0"]},
        {"gpu_profile": "rtx-pro-6000-maxq"},
    ],
)
def test_module_refusal_is_a_message(capsys, args):
    result = run(capsys, open_kernel_modules=False, **args)
    assert result["failed"] is True
    assert "set nvidia_driver_open_kernel_modules: true" in result["msg"]


def test_module_takes_the_declared_profile_before_facts_exist(capsys):
    assert run(capsys, open_kernel_modules=False, gpu_profile="h200")["plan"]["driver_packages"] == [
        "nvidia-driver-pinning-580",
        "cuda-drivers",
    ]
    result = run(capsys, gpu_profile="rtx-6000")
    assert result["failed"] is True
    assert "gpu_profile 'rtx-6000' is not one of" in result["msg"]


@pytest.fixture
def gpg_homes(tmp_path):
    """Make throwaway GnuPG homes; stop the agent gpg starts in each, so no test leaves one running."""
    if not shutil.which("gpg"):
        pytest.skip("gpg is not installed")
    made = []

    def make(name):
        home = tmp_path / name
        home.mkdir(mode=0o700)
        made.append(home)
        return dict(os.environ, GNUPGHOME=str(home))

    yield make
    for home in made:
        subprocess.run(["gpgconf", "--homedir", str(home), "--kill", "all"], capture_output=True, check=False)


@pytest.fixture
def test_key(tmp_path, gpg_homes):
    """A throwaway OpenPGP key made with the machine's gpg, exported to an armored file."""
    env = gpg_homes("gnupg")
    subprocess.run(
        [
            "gpg",
            "--batch",
            "--passphrase",
            "",
            "--quick-gen-key",
            "seatwright unit test <t@invalid>",
            "ed25519",
            "sign",
            "never",
        ],
        env=env,
        check=True,
        capture_output=True,
    )
    armored = subprocess.run(["gpg", "--armor", "--export"], env=env, check=True, capture_output=True).stdout
    colons = subprocess.run(["gpg", "--with-colons", "--list-keys"], env=env, check=True, capture_output=True).stdout
    path = tmp_path / "key.asc"
    path.write_bytes(armored)
    return str(path), key_fingerprints(colons.decode())[0]


def test_module_verifies_keyrings(capsys, test_key):
    path, fingerprint = test_key
    good = run(capsys, verify_keyrings=[{"path": path, "fingerprint": fingerprint.lower()}])
    assert good["keyrings"] == [{"path": path, "fingerprints": [fingerprint]}]
    bad = run(capsys, verify_keyrings=[{"path": path, "fingerprint": CUDA_KEY_FINGERPRINT}])
    assert bad["failed"] is True
    assert bad["msg"].startswith(
        "keyring %s does not hold the expected key %s (found: %s" % (path, CUDA_KEY_FINGERPRINT, fingerprint)
    )


@pytest.mark.parametrize(
    "drift",
    [
        None,  # a fresh node: no key where apt reads it
        b"not the key NVIDIA publishes\n",  # changed behind the converge's back
        "mode",  # the right key, writable by others
    ],
)
def test_verified_key_is_installed_where_apt_reads_it_and_drift_repaired(capsys, test_key, tmp_path, drift):
    """Issue 25: the verifying run installs the key (no copy task per key), and repairs a changed one."""
    path, fingerprint = test_key
    keyring = tmp_path / "keyrings" / "nvidia-cuda.asc"
    keyring.parent.mkdir()
    if drift == "mode":
        shutil.copyfile(path, keyring)
        os.chmod(keyring, 0o666)
    elif drift is not None:
        keyring.write_bytes(drift)
    entry = {"path": path, "fingerprint": fingerprint, "keyring": str(keyring)}
    first = run(capsys, verify_keyrings=[entry])
    assert first["changed"] is True
    assert first["keyrings"] == [
        {"path": path, "fingerprints": [fingerprint], "keyring": str(keyring), "installed": True}
    ]
    with open(path, "rb") as handle:
        assert keyring.read_bytes() == handle.read()
    assert os.stat(keyring).st_mode & 0o7777 == 0o644
    again = run(capsys, verify_keyrings=[entry])
    assert again["changed"] is False and again["keyrings"][0]["installed"] is False


def test_sources_written_after_the_keys_as_deb822_repository_wrote_them(capsys, test_key, tmp_path, monkeypatch):
    """The deb822 source comes from the verifying run (issue 25: no deb822_repository task per node),
    byte for byte what ansible.builtin.deb822_repository wrote, so converged nodes see no change."""
    from ansible_collections.seatwright.fleet.plugins.module_utils.node import driver

    monkeypatch.setattr(driver, "SOURCES_DIR", str(tmp_path / "sources"))
    path, fingerprint = test_key
    repo = {"name": "nvidia-cuda", "url": "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"}
    repo["keyring"] = "/etc/apt/keyrings/nvidia-cuda.asc"
    args = dict(verify_keyrings=[{"path": path, "fingerprint": fingerprint}], repositories=[repo])
    first = run(capsys, repositories_enabled=False, **args)
    source = tmp_path / "sources" / "nvidia-cuda.sources"
    assert first["changed"] is True and first["sources"] == [{"path": str(source), "changed": True}]
    assert source.read_text() == DEB822_REPOSITORY_WROTE
    assert run(capsys, repositories_enabled=False, **args)["changed"] is False
    source.write_text(DEB822_REPOSITORY_WROTE.replace("Suites: /", "Suites: bookworm"))
    repaired = run(capsys, repositories_enabled=False, **args)
    assert repaired["changed"] is True and source.read_text() == DEB822_REPOSITORY_WROTE
    enabled = run(capsys, repositories_enabled=True, **args)
    assert enabled["changed"] is True and "Enabled: yes\n" in source.read_text()
    # A key that fails verification stops the run before any source is touched.
    source.write_text("left as found\n")
    refused = run(capsys, verify_keyrings=[{"path": path, "fingerprint": CUDA_KEY_FINGERPRINT}], repositories=[repo])
    assert refused["failed"] is True and source.read_text() == "left as found\n"


def test_a_refused_key_is_never_installed(capsys, test_key, tmp_path):
    path, _ = test_key
    keyring = tmp_path / "nvidia-cuda.asc"
    result = run(capsys, verify_keyrings=[{"path": path, "fingerprint": CUDA_KEY_FINGERPRINT, "keyring": str(keyring)}])
    assert result["failed"] is True
    assert not keyring.exists()


def _action(args):
    """The nvidia_driver_plan action plugin on a task with `args`, its module run recorded."""
    from ansible_collections.seatwright.fleet.plugins.action.nvidia_driver_plan import ActionModule

    task = MagicMock(args=args, async_val=0, check_mode=False, diff=False, action="seatwright.fleet.nvidia_driver_plan")
    plugin = ActionModule(task, MagicMock(), MagicMock(), loader=None, templar=None, shared_loader_obj=None)
    plugin._execute_module = MagicMock(return_value={"changed": False, "plan": "from the node"})
    return plugin


LAB_NODE = {"distribution": "Debian", "distribution_version": "12", "architecture": "x86_64", "branch": "580"}


@pytest.mark.parametrize(
    "args, on_node",
    [
        # The GPU facts give the running driver: nothing on the node is needed.
        (dict(LAB_NODE, current_version="580.159.04", gpu_profile="rtx-pro-6000-maxq"), False),
        # No driver version yet: the module reads /sys/module/nvidia/version on the node.
        (dict(LAB_NODE, gpu_profile="rtx-pro-6000-maxq"), True),
        # Keyrings are files on the node.
        (dict(LAB_NODE, current_version="580.159.04", verify_keyrings=[{"path": "/k", "fingerprint": "F"}]), True),
    ],
)
def test_plan_is_decided_on_the_controller_when_the_node_has_nothing_to_add(args, on_node):
    plugin = _action(args)
    result = plugin.run(task_vars={})
    assert plugin._execute_module.called is on_node
    if not on_node:
        with patch_module_args(args):
            module_run = nvidia_driver_plan.plan_driver(
                nvidia_driver_plan.AnsibleModule(nvidia_driver_plan.ARGUMENT_SPEC)
            )
        assert result["plan"] == module_run["plan"] and result["changed"] is False


def test_controller_plan_refusal_is_a_message():
    plugin = _action(
        dict(LAB_NODE, current_version="580.159.04", compute_capabilities=["12.0"], open_kernel_modules=False)
    )
    with pytest.raises(AnsibleActionFail, match="set nvidia_driver_open_kernel_modules: true"):
        plugin.run(task_vars={})


def test_keyring_with_the_expected_key_plus_another_is_refused(capsys, test_key, tmp_path, gpg_homes):
    """Finding 10: signed-by trusts every key in the file, so an extra key must fail the check."""
    path, fingerprint = test_key
    env = gpg_homes("gnupg2")
    subprocess.run(
        ["gpg", "--batch", "--passphrase", "", "--quick-gen-key", "intruder <i@invalid>", "ed25519", "sign", "never"],
        env=env,
        check=True,
        capture_output=True,
    )
    intruder = subprocess.run(["gpg", "--armor", "--export"], env=env, check=True, capture_output=True).stdout
    both = tmp_path / "both.asc"
    with open(path, "rb") as handle:
        both.write_bytes(handle.read() + intruder)
    result = run(capsys, verify_keyrings=[{"path": str(both), "fingerprint": fingerprint}])
    assert result["failed"] is True
    assert "holds the expected key %s and also" % fingerprint in result["msg"]
    assert "signed-by would trust all of them" in result["msg"]


@pytest.mark.parametrize(
    "found, problem",
    [
        (["A" * 40], None),
        (["A" * 40, "B" * 40], "and also " + "B" * 40),
        (["B" * 40], "does not hold the expected key"),
        ([], "found: none"),
    ],
)
def test_keyring_must_hold_exactly_the_expected_primary_key(found, problem):
    message = keyring_problem("/etc/apt/keyrings/k.asc", found, "a" * 40)
    assert (message is None) if problem is None else (problem in message)


@pytest.mark.parametrize(
    "changes, words",
    [
        (
            {"base_url": "http://mirror.example/cuda"},
            "nvidia_driver_repo_base_url is http://mirror.example/cuda, a plain http URL",
        ),
        (
            {"cuda_key_url": "http://mirror.example/key.pub"},
            "nvidia_driver_cuda_key_url is http://mirror.example/key.pub",
        ),
        ({"base_url": "ftp://mirror.example/cuda"}, "expected an https:// URL"),
    ],
)
def test_plain_http_repository_or_key_is_refused_unless_allowed(changes, words):
    with pytest.raises(DriverError, match=words):
        driver_plan("Debian", "12", "x86_64", "580", **changes)
    if "http://" in str(changes):
        plan = driver_plan("Debian", "12", "x86_64", "580", allow_http=True, **changes)
        assert plan["cuda_repository"]["url"].startswith("http") and plan["cuda_repository"]["key_url"]


def test_module_refuses_http_mirror_without_allow_http(capsys):
    refused = run(capsys, repo_base_url="http://mirror.example/cuda")
    assert refused["failed"] is True and "nvidia_driver_allow_http: true" in refused["msg"]
    allowed = run(capsys, repo_base_url="http://mirror.example/cuda", allow_http=True)
    assert allowed["plan"]["cuda_repository"]["url"].startswith("http://mirror.example/cuda/debian12/")
