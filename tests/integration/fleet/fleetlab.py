"""The fleet lab's helpers and fixtures: the checks run from the controller, `docker exec` into each
fleet node and Ansible against inventory/fleet, and skip, saying why, when the six nodes are not up."""

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[3]
INVENTORY = ROOT / "inventory" / "fleet"
NETWORK = "fleetfabric"
DOCKER = "/usr/bin/docker"


def fleet_hosts():
    """Host name -> its inline inventory variables, in inventory order."""
    hosts = yaml.safe_load((INVENTORY / "hosts.yml").read_text())
    return hosts["all"]["children"]["gpu_nodes"]["hosts"]


HOSTS = list(fleet_hosts())


def ansible_env():
    return dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        PATH="%s:/usr/bin:%s" % (ROOT / ".venv" / "bin", os.environ.get("PATH", "")),
    )


def run_playbook(*args, fact_cache=None):
    """ansible-playbook against the fleet inventory, with the JSON callback: (rc, parsed, raw).
    fact_cache: another folder for the facts it caches (preflight stamps them before it checks)."""
    env = dict(ansible_env(), ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json")
    if fact_cache is not None:
        env["ANSIBLE_CACHE_PLUGIN_CONNECTION"] = str(fact_cache)
    cmd = [str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", str(INVENTORY), *args]
    proc = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, check=False)
    try:
        parsed = json.loads(proc.stdout)
    except ValueError:
        parsed = None
    return proc.returncode, parsed, proc.stdout + proc.stderr


def node_exec(name, *argv):
    proc = subprocess.run([DOCKER, "exec", name, *argv], capture_output=True, text=True, check=False)
    assert proc.returncode == 0, "%s: %s failed: %s" % (name, " ".join(argv), proc.stderr)
    return proc.stdout


def fleet_addresses():
    """Container name -> its address on fleetfabric, for the fleet nodes that are running."""
    found = {}
    for name in HOSTS:
        proc = subprocess.run(
            [DOCKER, "inspect", "-f", "{{.State.Running}} {{json .NetworkSettings.Networks}}", name],
            capture_output=True,
            text=True,
            check=False,
        )
        if proc.returncode != 0 or not proc.stdout.startswith("true "):
            continue
        networks = json.loads(proc.stdout.split(" ", 1)[1])
        found[name] = networks.get(NETWORK, {}).get("IPAddress")
    return found


def running_fleet():
    """The running fleet (name -> fabric address); skips when any of the six nodes is not up."""
    if not os.path.exists(DOCKER):
        pytest.skip("the fleet lab needs Docker (%s is missing); run `make fleet-lab`" % DOCKER)
    found = fleet_addresses()
    missing = [name for name in HOSTS if name not in found]
    if missing:
        pytest.skip("the fleet lab is not up (%s not running): run `make fleet-lab`" % ", ".join(missing))
    return found


def ansible_view():
    """What Ansible sees for each fleet host without reaching it: inventory and cached facts."""
    names = ["seatwright_node_fabric_ip", "gpu_power_limit_w", "seatwright_facts_fabric_ip", "seatwright_gpu_summary"]
    env = dict(ansible_env(), ANSIBLE_LOAD_CALLBACK_PLUGINS="1", ANSIBLE_STDOUT_CALLBACK="ansible.builtin.json")
    expr = "{{ dict(%s | zip(%s | map('extract', hostvars[inventory_hostname]) | list)) | to_json }}"
    expr = expr % (json.dumps(names), json.dumps(names))
    proc = subprocess.run(
        [str(ROOT / ".venv" / "bin" / "ansible"), "-i", str(INVENTORY), "gpu_nodes", "-m", "ansible.builtin.debug"]
        + ["-a", "msg=" + expr],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    hosts = json.loads(proc.stdout)["plays"][0]["tasks"][0]["hosts"]
    return {name: json.loads(result["msg"]) for name, result in hosts.items()}
