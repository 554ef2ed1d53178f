"""playbooks/monitoring.yml converged for real on a container of the lab image (not the lab: one node
of its own, which is both the Prometheus host and an exporter node), then a seat's target brought up,
moved under an alias and torn down as bring-up, promote.yml and teardown do.

Checks: --check on the bare node says what it would install and changes nothing; the first run
converges, a second changes nothing, --check then changes nothing; Prometheus
reports the node and the seat `up` with the seat's labels; the seats' key is in no Prometheus config,
targets page or log; the alias label moves; teardown removes the target. The seat is a static file
server in the container serving the lab engine's recorded /metrics.
Needs Docker and the lab image (make lab-up builds it) and apt inside the container (~3 min):
  make monitoring-test   (SEATWRIGHT_MONITORING_CONTAINER=1)
"""

import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
DOCKER = "/usr/bin/docker"
NODE = "seatwright-monitoring-test"
KEY = "sk-monitoring-role-test-5d2c8e"

pytestmark = pytest.mark.skipif(
    os.environ.get("SEATWRIGHT_MONITORING_CONTAINER") != "1", reason="make monitoring-test runs it (Docker, ~3 min)"
)

SEAT_PLAY = """
- name: A seat's target, as bring-up, promote.yml and teardown change it
  hosts: localhost
  connection: local
  gather_facts: false
  tasks:
    - name: Target
      ansible.builtin.include_role:
        name: seatwright.fleet.monitoring
        tasks_from: "{{ step }}"
      vars:
        monitoring_seat: lab
        monitoring_seat_state: "{{ state | default('present') }}"
        monitoring_alias: "{{ alias | default('') }}"
        monitoring_seat_plan: {engine: {name: vllm}, ranks: [{host: %s, rank: 0, serve: "%s:8000"}]}
"""


def docker(*args, check=True):
    return subprocess.run([DOCKER, *args], capture_output=True, text=True, check=check, timeout=300)


def playbook(inventory, path, *extra):
    result = subprocess.run(
        [str(ROOT / ".venv/bin/ansible-playbook"), "-i", str(inventory), str(path), *extra],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    recap = result.stdout[result.stdout.rindex("PLAY RECAP") :]
    return result.stdout, sum(int(part.split("=")[1]) for part in recap.split() if part.startswith("changed="))


def get(url):
    with urllib.request.urlopen(url, timeout=10) as answer:
        return answer.read().decode()


def targets(base):
    return json.loads(get(base + "/api/v1/targets"))["data"]["activeTargets"]


def wait(check, limit_s=60):
    deadline = time.monotonic() + limit_s
    while not check():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(1)


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    docker("rm", "-f", NODE, check=False)
    docker("run", "-d", "--name", NODE, "--hostname", NODE, "seatwright/lab:current", "sleep", "infinity")
    address = docker("inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", NODE).stdout.strip()
    work = tmp_path_factory.mktemp("monitoring-role")
    inventory = work / "hosts.yml"
    node_vars = {"ansible_host": NODE, "seatwright_node_fabric_ip": address}
    connection = {"ansible_connection": "community.docker.docker", "ansible_python_interpreter": "/usr/bin/python3"}
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "children": {"gpu_nodes": {"hosts": {NODE: node_vars}, "vars": connection}},
                    "vars": {
                        "monitoring_server_node": NODE,
                        "monitoring_server_listen": "%s:9090" % address,
                        "seat_api_key": KEY,
                    },
                }
            }
        )
    )
    (work / "seat.yml").write_text(SEAT_PLAY % (NODE, address))
    docker("exec", NODE, "mkdir", "-p", "/srv/seat")
    docker("cp", str(ROOT / "tests/fixtures/bench/vllm-0.32.0-cpu-metrics-tiny.txt"), NODE + ":/srv/seat/metrics")
    docker("exec", "-d", NODE, "python3", "-m", "http.server", "8000", "--bind", address, "--directory", "/srv/seat")
    yield {"inventory": inventory, "seat": work / "seat.yml", "base": "http://%s:9090" % address}
    docker("rm", "-f", NODE, check=False)


def test_the_role_converges_then_changes_nothing(node):
    # --check on the bare node: says what it would install, changes nothing, fails nowhere.
    checked, _ = playbook(node["inventory"], ROOT / "playbooks/monitoring.yml", "--check", "--diff")
    assert "would install prometheus-node-exporter" in checked and "would install prometheus;" in checked
    assert docker("exec", NODE, "test", "-e", "/usr/bin/prometheus", check=False).returncode != 0
    first, _ = playbook(node["inventory"], ROOT / "playbooks/monitoring.yml")
    assert "Prometheus: http://" in first
    assert playbook(node["inventory"], ROOT / "playbooks/monitoring.yml")[1] == 0
    assert playbook(node["inventory"], ROOT / "playbooks/monitoring.yml", "--check", "--diff")[1] == 0


def test_a_seat_target_comes_up_with_its_labels_and_the_key_stays_hidden(node):
    assert playbook(node["inventory"], node["seat"], "-e", "step=seat_targets")[1] == 1
    assert playbook(node["inventory"], node["seat"], "-e", "step=seat_targets")[1] == 0

    def all_up():
        found = targets(node["base"])
        return len(found) == 2 and all(t["health"] == "up" for t in found)

    wait(all_up)
    seat = next(t for t in targets(node["base"]) if t["labels"]["job"] == "seatwright_seats")
    assert {k: seat["labels"].get(k) for k in ("seat", "node", "rank", "engine")} == {
        "seat": "lab",
        "node": NODE,
        "rank": "0",
        "engine": "vllm",
    }
    shown = get(node["base"] + "/api/v1/status/config") + get(node["base"] + "/api/v1/targets")
    shown += docker("exec", NODE, "sh", "-c", "cat /etc/prometheus/prometheus.yml /var/log/prometheus/*.log").stdout
    assert KEY not in shown
    mode = docker("exec", NODE, "stat", "-c", "%a %U", "/etc/prometheus/seatwright/seat-api-key").stdout.split()
    assert mode == ["600", "prometheus"]


def test_the_alias_label_follows_then_teardown_removes_the_target(node):
    assert playbook(node["inventory"], node["seat"], "-e", "step=alias", "-e", "alias=production")[1] == 1
    wait(lambda: any(t["labels"].get("alias") == "production" for t in targets(node["base"])))
    assert playbook(node["inventory"], node["seat"], "-e", "step=seat_targets", "-e", "state=absent")[1] == 1
    wait(lambda: [t["labels"]["job"] for t in targets(node["base"])] == ["seatwright_nodes"])


def test_a_changed_rule_is_reloaded_and_a_changed_argument_restarts(node):
    """Without systemd as PID 1 Debian's init scripts lose the daemon: the handlers must still apply
    a new rule (SIGHUP) and a new argument (a restart) to the one Prometheus running."""

    def stall_for():
        groups = json.loads(get(node["base"] + "/api/v1/rules"))["data"]["groups"]
        return next(r["duration"] for g in groups for r in g["rules"] if r["name"] == "SeatTokensStalled")

    settings = json.dumps({"monitoring_alert_settings": {"stall_for_s": 300}, "monitoring_retention_days": 7})
    assert playbook(node["inventory"], ROOT / "playbooks/monitoring.yml", "-e", settings)[1] > 0
    wait(lambda: stall_for() == 300)
    processes = docker("exec", NODE, "pgrep", "-a", "-f", "^/usr/bin/prometheus ").stdout.splitlines()
    assert len(processes) == 1 and "--storage.tsdb.retention.time=7d" in processes[0], processes
    assert playbook(node["inventory"], ROOT / "playbooks/monitoring.yml")[1] > 0
    wait(lambda: stall_for() == 120)
