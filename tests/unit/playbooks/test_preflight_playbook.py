"""The preflight play itself: a bad inventory stops site.yml before any node is touched."""

import os
import sys

import pytest
import yaml
from conftest import PLAYBOOK, ROOT, run_playbook


def node(**overrides):
    declared = {
        "ansible_connection": "local",
        "ansible_python_interpreter": sys.executable,
        "seatwright_node_gpu_profile": "rtx-pro-6000-ws",
        "seatwright_node_gpu_count": 2,
        "seatwright_node_fabric_ip": "10.77.0.12",
        "seatwright_node_fabric_iface": "enp65s0f0np0",
        "seatwright_node_rdma_devices": ["mlx5_0"],
        "gpu_power_limit_w": 325,
    }
    declared.update(overrides)
    return {k: v for k, v in declared.items() if v is not None}


def run_preflight(tmp_path, hosts):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(yaml.safe_dump({"all": {"children": {"gpu_nodes": {"hosts": hosts}}}}))
    return run_playbook(tmp_path, inventory, str(ROOT / "playbooks" / "preflight.yml"))


@pytest.mark.skipif(not os.path.exists(PLAYBOOK), reason="needs the project venv (scripts/bootstrap)")
def test_missing_variable_stops_preflight_naming_host_and_variable(tmp_path):
    hosts = {"node-a": node(seatwright_node_fabric_ip="10.77.0.11"), "node-b": node(seatwright_node_fabric_iface=None)}
    result = run_preflight(tmp_path, hosts)
    assert result.returncode != 0, result.stdout
    assert "host node-b: seatwright_node_fabric_iface is not set; expected the netdev name" in result.stdout
    assert "host node-a" not in result.stdout.split("inventory preflight failed")[1].split("PLAY RECAP")[0]
    # The node play never ran: nothing gathered facts from the hosts.
    assert "Preflight | require Python 3.9" not in result.stdout


@pytest.mark.skipif(not os.path.exists(PLAYBOOK), reason="needs the project venv (scripts/bootstrap)")
def test_sound_inventory_passes_preflight(tmp_path):
    hosts = {"node-a": node(seatwright_node_fabric_ip="10.77.0.11"), "node-b": node()}
    result = run_preflight(tmp_path, hosts)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "failed=0" in result.stdout
