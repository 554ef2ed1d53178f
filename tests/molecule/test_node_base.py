"""Lab verify: node_base left the folders and the node's declaration on every node."""

import json

import pytest

DECLARED = {
    "node-a": {"gpu_profile": "rtx-pro-6000-maxq", "fabric_ip": "172.30.99.11"},
    "node-b": {"gpu_profile": "rtx-pro-6000-ws", "fabric_ip": "172.30.99.12"},
}


@pytest.mark.parametrize("path", ["/etc/seatwright", "/var/lib/seatwright"])
def test_folders(host, path):
    folder = host.file(path)
    assert folder.is_directory
    assert folder.user == "root"
    assert folder.mode == 0o755


def test_declaration_is_a_local_fact(host):
    name = host.backend.get_hostname()
    fact = json.loads(host.file("/etc/ansible/facts.d/seatwright.fact").content_string)
    assert fact["node"] == name
    assert fact["fleet"] == "lab"
    assert fact["gpu_count"] == 2
    for key, value in DECLARED[name].items():
        assert fact[key] == value


def test_fabric_address_is_on_the_node(host):
    name = host.backend.get_hostname()
    addresses = host.interface("eth0").addresses
    assert DECLARED[name]["fabric_ip"] in addresses
