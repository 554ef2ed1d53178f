"""Lab verify: what nvidia_driver, rdma_fabric and nccl_env left on every node.

The lab's nodes are containers with no RDMA device and no reach to NVIDIA's repository, so the
driver role must have set up and verified the repositories and pin without installing, the
fabric must be sockets only, and the pair must have been measured over TCP once, on both ends.
"""

import json

import pytest

# The lab's stand-in repository key (test equipment, inventory/lab only).
LAB_KEY_FINGERPRINT = "08AC9C81E9B58D9CC15AAB668FB637B1BCDA7F30"
FABRIC_IFACE = "eth0"


def lines(host, path):
    return [line for line in host.file(path).content_string.splitlines() if not line.startswith("#")]


def test_nccl_conf_is_sockets_only_on_the_fabric_port(host):
    assert lines(host, "/etc/nccl.conf") == ["NCCL_SOCKET_IFNAME==%s" % FABRIC_IFACE, "NCCL_IB_DISABLE=1"]
    conf = host.file("/etc/nccl.conf")
    assert conf.user == "root" and conf.mode == 0o644


def test_engine_env_file_adds_gloo(host):
    assert lines(host, "/etc/seatwright/nccl.env") == [
        "NCCL_SOCKET_IFNAME==%s" % FABRIC_IFACE,
        "GLOO_SOCKET_IFNAME=%s" % FABRIC_IFACE,
        "NCCL_IB_DISABLE=1",
    ]


def test_nccl_reads_the_rendered_file(host):
    assert "NCCL_IB_HCA" not in host.file("/etc/nccl.conf").content_string
    assert "NCCL_P2P_DISABLE" not in host.file("/etc/nccl.conf").content_string


@pytest.mark.parametrize(
    "name,url",
    [
        ("nvidia-cuda", "https://developer.download.nvidia.com/compute/cuda/repos/debian12/x86_64/"),
        ("nvidia-container-toolkit", "https://nvidia.github.io/libnvidia-container/stable/deb/$(ARCH)"),
    ],
)
def test_repository_is_signed_and_disabled_in_the_lab(host, name, url):
    fields = dict(
        line.split(": ", 1)
        for line in host.file("/etc/apt/sources.list.d/%s.sources" % name).content_string.splitlines()
        if ": " in line
    )
    assert fields["URIs"] == url
    assert fields["Suites"] == "/"
    assert fields["Signed-By"] == "/etc/apt/keyrings/%s.asc" % name
    assert fields["Enabled"] == "no"


@pytest.mark.parametrize("keyring", ["nvidia-cuda.asc", "nvidia-container-toolkit.asc"])
def test_keyring_holds_the_declared_key(host, keyring):
    out = host.check_output("gpg --batch --show-keys --with-colons /etc/apt/keyrings/%s" % keyring)
    fingerprints = [line.split(":")[9] for line in out.splitlines() if line.startswith("fpr:")]
    assert fingerprints[0] == LAB_KEY_FINGERPRINT


def test_branch_is_pinned(host):
    pref = lines(host, "/etc/apt/preferences.d/seatwright-nvidia-driver.pref")
    assert pref[0].startswith("Package: /^(nvidia-(open|driver")
    assert pref[1:] == ["Pin: version 580.*", "Pin-Priority: 1000"]
    assert host.run("apt-cache policy").rc == 0


def test_package_selection_is_recorded(host):
    selection = json.loads(host.file("/var/lib/seatwright/nvidia_driver_plan.json").content_string)
    assert selection["branch"] == 580
    assert selection["open_kernel_modules"] is True
    assert selection["driver_packages"] == ["nvidia-driver-pinning-580", "nvidia-open"]
    assert selection["toolkit_packages"] == ["nvidia-container-toolkit"]
    assert selection["cuda_repository"]["key_fingerprint"] == LAB_KEY_FINGERPRINT


def test_driver_was_not_installed_in_the_lab(host):
    assert not host.package("nvidia-open").is_installed
    assert not host.file("/etc/modules-load.d/nvidia_peermem.conf").exists


def test_docker_knows_the_nvidia_runtime(host):
    config = json.loads(host.file("/etc/docker/daemon.json").content_string)
    assert config["runtimes"]["nvidia"] == {"path": "nvidia-container-runtime", "args": []}


@pytest.mark.parametrize("package", ["rdma-core", "perftest", "ibverbs-utils", "iperf3"])
def test_fabric_tools_are_installed(host, package):
    assert host.package(package).is_installed


def test_mtu_was_left_alone(host):
    assert host.file("/sys/class/net/%s/mtu" % FABRIC_IFACE).content_string.strip() == "1500"
    assert not host.file("/etc/udev/rules.d/70-seatwright-fabric-mtu.rules").exists


def test_pair_measured_over_tcp_and_kept_on_both_nodes(host):
    folder = "/var/lib/seatwright/fabric_bandwidth"
    records = [name for name in host.file(folder).listdir() if name.endswith(".json") and "--" in name]
    assert len(records) == 1
    record = json.loads(host.file("%s/%s" % (folder, records[0])).content_string)
    assert record["method"] == "tcp"
    assert record["tool"] == "iperf3"
    assert record["rate_gbps"] > 0.5
    assert record["line_rate_gbps"] == 10.0
    assert record["line_rate_source"] == "interface speed (sysfs)"
    assert record["fraction"] == pytest.approx(record["rate_gbps"] / 10.0, abs=1e-3)
    assert len(record["fingerprint"]) == 64
    assert host.backend.get_hostname() in record["pair"].split("<->")


def test_no_probe_server_is_left_running(host):
    assert host.run("pgrep -x iperf3").rc != 0
