"""node_drain_facts: the seats running on a node, its co-tenant record and the lab test changes made."""

import json

import node_drain_facts
import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.seatwright.fleet.plugins.module_utils.io.node import drain_probe
from ansible_collections.seatwright.fleet.plugins.module_utils.io.seat import engine
from ansible_collections.seatwright.fleet.plugins.module_utils.node import drain
from conftest import FIXTURES

CREATED = (FIXTURES / "drain" / "docker-ps-created.txt").read_text()
# Written by hand in the captured columns (tests/fixtures/drain/README.md): two running ranks.
RUNNING = "seatwright-lab-rank0\tseatwright/vllm-cpu:c3df\trunning\tlab\t0\nlab-cotenant\tbusybox\trunning\t\t\n"


def run(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            node_drain_facts.main()
    return json.loads(capsys.readouterr().out)


def test_the_captured_docker_ps_line_parses():
    assert drain.parse_seat_containers(CREATED) == [
        {"name": "drainfx-lab-rank0", "image": "seatwright/lab:current", "running": False, "seat": "drainfx", "rank": 0}
    ]


def test_the_module_reports_seats_record_and_made_changes(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(engine, "docker", lambda *argv, **kw: (0, RUNNING, ""))
    record = {"format": "seatwright-cotenants/1", "host": "node-a", "seat": "lab", "entries": []}
    (tmp_path / "cotenants.json").write_text(json.dumps(record))
    (tmp_path / "drain").mkdir()
    (tmp_path / "drain" / "lab-driver-590.done").write_text("")
    args = {"drain_dir": str(tmp_path / "drain"), "cotenants_record": str(tmp_path / "cotenants.json")}
    fact = run(capsys, args)["ansible_facts"]["seatwright_drain_node"]
    assert [c["seat"] for c in fact["containers"]] == ["lab"] and fact["containers"][0]["running"]
    assert fact["cotenants"] == record and fact["done"] == ["lab-driver-590"] and fact["docker"]


def test_a_node_without_docker_runs_no_seat(capsys, tmp_path, monkeypatch):
    def missing(*argv, **kw):
        raise drain_probe.ServiceError("docker is not installed on this node")

    monkeypatch.setattr(engine, "docker", missing)
    args = {"drain_dir": str(tmp_path / "none"), "cotenants_record": str(tmp_path / "none.json")}
    fact = run(capsys, args)["ansible_facts"]["seatwright_drain_node"]
    assert fact == {"docker": False, "containers": [], "cotenants": None, "done": []}


def test_a_failing_docker_is_named(capsys, tmp_path, monkeypatch):
    monkeypatch.setattr(engine, "docker", lambda *argv, **kw: (1, "", "Cannot connect to the Docker daemon"))
    result = run(capsys, {"drain_dir": str(tmp_path), "cotenants_record": str(tmp_path / "c.json")})
    assert result["failed"] and "docker ps on this node failed: Cannot connect" in result["msg"]


@pytest.mark.parametrize(
    "fleet, marker, refused", [("lab", True, False), ("example", True, True), ("lab", False, True)]
)
def test_simulated_changes_are_taken_only_in_the_lab(capsys, tmp_path, monkeypatch, fleet, marker, refused):
    monkeypatch.setattr(engine, "docker", lambda *argv, **kw: (0, "", ""))
    (tmp_path / "marker").write_text("{}")
    args = {
        "drain_dir": str(tmp_path),
        "cotenants_record": str(tmp_path / "c.json"),
        "test_changes": [{"kind": "driver", "id": "lab-driver-590"}],
        "fleet_name": fleet,
        "lab_marker": str(tmp_path / ("marker" if marker else "absent")),
    }
    result = run(capsys, args)
    assert bool(result.get("failed")) == refused
    if refused:
        assert "seatwright_drain_test_changes is lab test equipment" in result["msg"]
