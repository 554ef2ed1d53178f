"""The six-node fleet lab after `make fleet-lab`: every node converged, its facts cached on the
controller, and the fleet's preflight passing for six (and refusing what only a fleet can get wrong)."""

import json

import pytest
from fleetlab import HOSTS, ansible_view, fleet_hosts, node_exec, run_playbook, running_fleet

DECLARED = fleet_hosts()


@pytest.fixture(scope="module")
def fleet():
    """The running fleet (name -> fabric address); skips when any of the six nodes is not up."""
    return running_fleet()


@pytest.fixture(scope="module")
def fleet_vars(fleet):
    """Inventory variables and cached facts, as Ansible sees them without reaching the nodes."""
    return ansible_view()


def test_six_nodes_on_their_declared_fabric_addresses(fleet):
    assert len(HOSTS) == 6
    assert fleet == {name: DECLARED[name]["seatwright_node_fabric_ip"] for name in HOSTS}


@pytest.mark.parametrize("name", HOSTS)
def test_node_base_published_the_checked_declaration(fleet, name):
    fact = json.loads(node_exec(name, "cat", "/etc/ansible/facts.d/seatwright.fact"))
    assert fact["node"] == name
    assert fact["fleet"] == "lab"
    assert fact["gpu_count"] == 2
    assert fact["fabric_ip"] == DECLARED[name]["seatwright_node_fabric_ip"]
    assert fact["gpu_profile"] == DECLARED[name]["seatwright_node_gpu_profile"]


@pytest.mark.parametrize("name", HOSTS)
def test_power_caps_applied_through_the_emulator(fleet, fleet_vars, name):
    # TEST EQUIPMENT: the emulator's state file holds what gpu_settings told it to set.
    state = json.loads(node_exec(name, "cat", "/var/lib/seatwright-lab/nvidia-smi-state.json"))
    cap = float(fleet_vars[name]["gpu_power_limit_w"])
    assert cap in (250.0, 325.0)
    assert [gpu["power_limit_w"] for gpu in state["gpus"].values()] == [cap, cap]
    assert all(gpu["persistence_mode"] for gpu in state["gpus"].values())


@pytest.mark.parametrize("name", HOSTS)
def test_nccl_env_rendered_from_the_fabric(fleet, name):
    conf = node_exec(name, "cat", "/etc/nccl.conf").splitlines()
    assert "NCCL_SOCKET_IFNAME==eth0" in conf
    assert "NCCL_IB_DISABLE=1" in conf


@pytest.mark.parametrize("name", HOSTS)
def test_gpu_facts_cached_on_the_node(fleet, name):
    cache = json.loads(node_exec(name, "cat", "/var/lib/seatwright/gpu_facts.json"))
    text = json.dumps(cache)
    assert text.count("GPU-fake") == 2, "expected the emulator's two GPUs in %s's gpu_facts.json" % name


def test_facts_cached_on_the_controller_for_all_six(fleet, fleet_vars):
    assert sorted(fleet_vars) == sorted(HOSTS)
    for name, seen in fleet_vars.items():
        # The plan trusts cached facts only when they carry the probed node's fabric address.
        assert seen["seatwright_facts_fabric_ip"] == seen["seatwright_node_fabric_ip"] == fleet[name]
        assert seen["seatwright_gpu_summary"]["count"] == 2
        assert seen["seatwright_gpu_summary"]["source"] == "nvidia-smi"


def test_preflight_passes_for_six(fleet):
    rc, parsed, raw = run_playbook("playbooks/preflight.yml")
    assert rc == 0, raw[-3000:]
    stats = parsed["stats"]
    assert sorted(stats) == sorted(HOSTS)
    assert all(s["failures"] == 0 and s["unreachable"] == 0 and s["ok"] > 0 for s in stats.values())


def test_preflight_refuses_one_address_shared_by_the_fleet(fleet, tmp_path):
    shared = ("-e", "seatwright_node_fabric_ip=172.30.96.21")
    rc, _, raw = run_playbook("playbooks/preflight.yml", *shared, fact_cache=tmp_path)
    assert rc != 0
    # One line per node that repeats fleet-1's address: five problems, all listed in one run.
    for name in HOSTS[1:]:
        assert "host %s: seatwright_node_fabric_ip 172.30.96.21 is also declared by fleet-1" % name in raw


# What a no-op converge checks on each node, changed behind its back (issue 25: folding the checks
# into fewer module runs must still find and repair drift). Paths and their tampered content.
DRIFT = {
    "/etc/apt/keyrings/nvidia-cuda.asc": "not the key NVIDIA publishes\n",
    "/etc/nccl.conf": "NCCL_SOCKET_IFNAME==wrong0\n",
    "/etc/apt/preferences.d/seatwright-nvidia-driver.pref": "Package: *\n",
    "/etc/apt/sources.list.d/nvidia-cuda.sources": "Types: deb\n",
    "/etc/systemd/system/seatwright-gpu-power.service": "[Unit]\n",
}
WANTS = "/etc/systemd/system/multi-user.target.wants/seatwright-gpu-power.service"


def test_a_converge_repairs_drift_and_the_next_changes_nothing(fleet):
    name = HOSTS[-1]
    before = {path: node_exec(name, "cat", path) for path in DRIFT}
    for path, content in DRIFT.items():
        node_exec(name, "sh", "-c", 'printf %s "$1" > "$2" && chmod 0600 "$2"', "-", content, path)
    # Disabled behind the converge's back: `systemctl enable` must run again.
    node_exec(name, "rm", WANTS)
    rc, parsed, raw = run_playbook("playbooks/nodes.yml", "--limit", name)
    assert rc == 0, raw[-3000:]
    assert parsed["stats"][name]["changed"] > 0
    assert node_exec(name, "readlink", WANTS).strip() == "/etc/systemd/system/seatwright-gpu-power.service"
    assert {path: node_exec(name, "cat", path) for path in DRIFT} == before
    assert node_exec(name, "stat", "-c", "%a", *DRIFT).split() == ["644"] * len(DRIFT)
    rc, parsed, raw = run_playbook("playbooks/nodes.yml", "--limit", name)
    assert rc == 0 and parsed["stats"][name]["changed"] == 0, raw[-3000:]
