"""The router role's wiring: the contract promote.yml calls (roles/router/meta/argument_specs.yml),
the lab inventory's router, and the admin key's task kept out of logs."""

import json

import yaml
from ansible_collections.seatwright.fleet.plugins.module_utils.router import adapter
from conftest import ROOT


def test_the_role_offers_the_contract_promote_calls():
    specs = ROOT / "roles" / "router" / "meta" / "argument_specs.yml"
    assert specs.exists(), "roles/router has no argument spec"
    entry = yaml.safe_load(specs.read_text())["argument_specs"]
    assert {"main", "apply_targets", "read_targets", "deregister"} <= set(entry)
    assert {"router_alias", "router_targets"} <= set(entry["apply_targets"]["options"])
    assert entry["main"]["options"]["router_admin_key"].get("no_log") is True
    for name in ("apply_targets", "read_targets", "deregister"):
        assert (ROOT / "roles" / "router" / "tasks" / ("%s.yml" % name)).exists()


def test_the_lab_declares_its_router_with_production_on_lab_and_runs_it_from_the_wheelhouse():
    path = ROOT / "inventory" / "lab" / "group_vars" / "all" / "router.yml"
    assert path.exists(), "the lab inventory declares no router"
    declared = yaml.safe_load(path.read_text())
    assert declared["router"]["aliases"] == {"production": "lab"}
    assert declared["router"]["node"] == "node-a" and declared["router"]["kind"] in adapter.KINDS
    assert declared["seatwright_router_enabled"] is True
    # The lab's nodes reach no package index: the router comes from `make router-venvs`'s wheels.
    assert ".cache/router-wheels" in declared["router_wheelhouse_dir"]
    makefile = (ROOT / "Makefile").read_text()
    assert "\nlab: lab-up aiperf router-venvs\n" in makefile and "\nmolecule: router-venvs\n" in makefile


def test_the_key_task_is_no_log():
    tasks = yaml.safe_load((ROOT / "roles" / "router" / "tasks" / "main.yml").read_text())
    with_key = [task for task in tasks if "router_admin_key" in json.dumps(task)]
    assert with_key and all(task.get("no_log") is True for task in with_key)
