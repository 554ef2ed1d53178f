"""The fleet lab's pieces agree with each other without starting it: molecule/fleet's six containers
sit at the fabric addresses inventory/fleet declares, on a subnet of their own, converged by the
node preparation playbook with forks for all six; the benchmark reads every recap counter."""

import ipaddress
import re
import sys

import pytest
import yaml
from conftest import ROOT

SCENARIO = ROOT / "molecule" / "fleet" / "molecule.yml"
INVENTORY = ROOT / "inventory" / "fleet"
# The other labs' networks: the two-node lab (molecule/default) and the staging tests.
OTHER_SUBNETS = {"labfabric": "172.30.99.0/24", "ckptnet": "172.30.98.0/24"}


def load(path):
    assert path.is_file(), "%s is missing" % path.relative_to(ROOT)
    return yaml.safe_load(path.read_text())


def scenario_addresses():
    platforms = load(SCENARIO)["platforms"]
    return {p["name"]: p["networks"][0]["ipv4_address"] for p in platforms}


def test_six_containers_at_the_inventory_fabric_addresses():
    hosts = load(INVENTORY / "hosts.yml")["all"]["children"]["gpu_nodes"]["hosts"]
    declared = {name: hostvars["seatwright_node_fabric_ip"] for name, hostvars in hosts.items()}
    assert len(declared) == 6
    assert scenario_addresses() == declared


def test_fleet_subnet_holds_every_node_and_no_other_lab():
    subnet = ipaddress.ip_network(
        load(INVENTORY / "group_vars" / "gpu_nodes" / "fleet.yml")["seatwright_fabric_subnet"]
    )
    created = load(SCENARIO)["platforms"][0]["docker_networks"][0]["ipam_config"][0]["subnet"]
    assert ipaddress.ip_network(created) == subnet
    assert all(ipaddress.ip_address(ip) in subnet for ip in scenario_addresses().values())
    for name, other in OTHER_SUBNETS.items():
        assert not subnet.overlaps(ipaddress.ip_network(other)), "fleetfabric overlaps %s" % name


def test_light_nodes_run_no_docker_engine():
    for platform in load(SCENARIO)["platforms"]:
        assert platform["command"] == "sleep infinity", platform["name"]
        assert "volumes" not in platform and "capabilities" not in platform, platform["name"]
        assert platform["groups"] == ["gpu_nodes"]


def test_converged_with_node_preparation_and_forks_for_the_fleet():
    provisioner = load(SCENARIO)["provisioner"]
    assert provisioner["playbooks"]["converge"] == "../../playbooks/nodes.yml"
    assert provisioner["playbooks"]["prepare"] == "../../lab/prepare.yml"
    assert int(provisioner["config_options"]["defaults"]["forks"]) >= len(load(SCENARIO)["platforms"])
    # The lab's node preparation settings are shared, not copied.
    assert (INVENTORY / "group_vars" / "gpu_nodes" / "node_prep.yml").resolve() == (
        ROOT / "inventory" / "lab" / "group_vars" / "gpu_nodes" / "node_prep.yml"
    )


def test_fleet_targets_stay_out_of_make_test():
    makefile = (ROOT / "Makefile").read_text()
    for target in ("fleet-lab", "fleet-test", "fleet-down"):
        assert re.search(r"^%s:" % target, makefile, re.M), "Makefile has no %s target" % target
    test_line = re.search(r"^test:(.*)$", makefile, re.M).group(1)
    assert "fleet" not in test_line


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (
            "fleet-1                    : ok=40   changed=0    unreachable=0    failed=0    "
            "skipped=33   rescued=0    ignored=0",
            {"ok": 40, "changed": 0, "unreachable": 0, "failed": 0, "skipped": 33, "rescued": 0, "ignored": 0},
        ),
        ("node-a : ok=52 changed=3 unreachable=0 failed=1 skipped=9", {"ok": 52, "changed": 3, "unreachable": 0}),
    ],
)
def test_bench_recap_reads_every_counter(line, expected):
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        from converge import recap
    finally:
        sys.path.remove(str(ROOT / "bench"))
    counters = recap("PLAY RECAP ****\n%s\n" % line)[line.split()[0]]
    for name, value in expected.items():
        assert counters.get(name) == value, name
    assert counters.get("skipped") == int(re.search(r"skipped=(\d+)", line).group(1))
