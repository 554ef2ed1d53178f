"""The rdma_fabric role's lossless RoCE step on a port without DCB, run on this machine: its eth0 (a
virtio or veth port) answers `dcb` as the lab nodes' veth fabric does, "Operation not supported".
roce_qos reports "not supported by this port", sets nothing, and the fact and the report show the
declared values; --check says the same."""

import json
import os
import shutil
import subprocess
import sys

import pytest
from conftest import ROOT

DECLARED = {"priority": 3, "dscp": 26, "pfc": True, "ecn": True, "trust": "dscp"}
PLAY = """
- name: The lossless RoCE step on a port without DCB
  hosts: gpu_nodes
  gather_facts: false
  tasks:
    - name: QoS
      ansible.builtin.include_role: {name: seatwright.fleet.rdma_fabric, tasks_from: qos.yml}
    - name: Show the fact
      ansible.builtin.debug: {var: ansible_facts.seatwright_roce_qos}
"""


def _no_dcb():
    """True when eth0 exists and `dcb` says it has no DCB support."""
    if not shutil.which("dcb") or not os.path.exists("/sys/class/net/eth0"):
        return False
    proc = subprocess.run(["dcb", "-j", "pfc", "show", "dev", "eth0"], capture_output=True, text=True, check=False)
    return proc.returncode != 0 and "not supported" in proc.stderr


@pytest.mark.skipif(not _no_dcb(), reason="needs an eth0 without DCB support and iproute2's dcb")
@pytest.mark.parametrize("check", [False, True], ids=["run", "check"])
def test_a_port_without_dcb_is_reported_not_supported_with_the_declared_values(tmp_path, check):
    host = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "seatwright_node_fabric_iface": "eth0",
        "seatwright_node_rdma_devices": [],
        "seatwright_fleet_roce_qos": DECLARED,
    }
    inventory = {"all": {"children": {"gpu_nodes": {"hosts": {"plain-node": host}}}}}
    (tmp_path / "hosts.yml").write_text(json.dumps(inventory))
    (tmp_path / "play.yml").write_text(PLAY)
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_CACHE_PLUGIN="memory",
        ANSIBLE_CALLBACK_RESULT_FORMAT="json",
    )
    command = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(tmp_path / "hosts.yml")]
    proc = subprocess.run(
        command + [str(tmp_path / "play.yml")] + (["--check"] if check else []),
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    assert "not set: not supported by this port: eth0 answers dcb" in proc.stdout
    assert "'priority': 3" in proc.stdout and "(traffic class 104)" in proc.stdout
    assert '"supported": false' in proc.stdout and '"settings": null' in proc.stdout
    assert "changed=0" in proc.stdout
