"""library/fabric_bandwidth.py: cache lookup, storing on the peer, the threshold gate, refusals."""

import json
import time

import fabric_bandwidth
import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.files import atomic_write_json

LAB_FABRIC = {
    "rdma_devices": [],
    "fabric_iface": {"name": "eth0", "present": True, "mtu": 1500, "speed_mbps": 10000},
    "nvidia_driver_version": None,
}


def run(capsys, **args):
    base = {"host": "node-a", "peer": "node-b", "host_fabric": LAB_FABRIC, "peer_fabric": LAB_FABRIC}
    base.update(args)
    with patch_module_args(base):
        with pytest.raises(SystemExit):
            fabric_bandwidth.main()
    return json.loads(capsys.readouterr().out)


def measured(capsys, state_dir, rate=13.5, age_s=0):
    """A record as step measure writes it, for the current fingerprint."""
    lookup = run(capsys, step="lookup", state_dir=str(state_dir))
    record = {
        "pair": "node-a<->node-b",
        "client": "node-a",
        "server": "node-b",
        "method": "tcp",
        "rate_gbps": rate,
        "line_rate_gbps": 10.0,
        "fraction": rate / 10.0,
        "measured_at_epoch": time.time() - age_s,
        "fingerprint": lookup["fingerprint"],
    }
    return lookup, record


def test_first_lookup_finds_nothing(tmp_path, capsys):
    result = run(capsys, step="lookup", state_dir=str(tmp_path))
    assert result["cached"] is False
    assert result["changed"] is False
    assert result["plan"]["method"] == "tcp"
    assert result["plan"]["line_rate_gbps"] == 10.0
    assert result["ansible_facts"]["seatwright_fabric_bandwidth"] == {}


def test_store_then_lookup_is_cached_and_reported_as_fact(tmp_path, capsys):
    _, record = measured(capsys, tmp_path)
    stored = run(capsys, step="store", host="node-b", peer="node-a", state_dir=str(tmp_path), record=record)
    assert stored["changed"] is True
    again = run(capsys, step="store", host="node-b", peer="node-a", state_dir=str(tmp_path), record=record)
    assert again["changed"] is False
    lookup = run(capsys, step="lookup", state_dir=str(tmp_path), enforce=True)
    assert lookup["cached"] is True
    assert lookup["passed"] is True
    assert lookup["record"]["rate_gbps"] == 13.5
    assert lookup["ansible_facts"]["seatwright_fabric_bandwidth"]["node-a<->node-b"]["method"] == "tcp"
    assert (tmp_path / "fabric_bandwidth" / "node-a--node-b.json").exists()


@pytest.mark.parametrize(
    "change",
    [
        {"peer_fabric": dict(LAB_FABRIC, fabric_iface=dict(LAB_FABRIC["fabric_iface"], mtu=9000))},
        {"duration_s": 30},
        {"max_age_s": 60},
    ],
)
def test_changed_inputs_or_age_invalidate_the_cache(tmp_path, capsys, change):
    _, record = measured(capsys, tmp_path, age_s=120)
    atomic_write_json(str(tmp_path / "fabric_bandwidth" / "node-a--node-b.json"), record)
    assert run(capsys, step="lookup", state_dir=str(tmp_path))["cached"] is True
    assert run(capsys, step="lookup", state_dir=str(tmp_path), **change)["cached"] is False


def test_gate_fails_below_threshold_naming_pair_and_numbers(tmp_path, capsys):
    _, record = measured(capsys, tmp_path, rate=4.2)
    atomic_write_json(str(tmp_path / "fabric_bandwidth" / "node-a--node-b.json"), record)
    result = run(capsys, step="lookup", state_dir=str(tmp_path), enforce=True)
    assert result["failed"] is True
    assert result["msg"].startswith("fabric below threshold: node-a<->node-b: 4.20 Gb/s over tcp = 42 %")
    relaxed = run(capsys, step="lookup", state_dir=str(tmp_path), enforce=True, threshold=0.4)
    assert relaxed["passed"] is True


def test_enforce_without_a_record_fails(tmp_path, capsys):
    result = run(capsys, step="lookup", state_dir=str(tmp_path), enforce=True)
    assert result["failed"] is True
    assert "no valid measurement is cached" in result["msg"]


def test_store_refuses_a_record_of_other_inputs(tmp_path, capsys):
    _, record = measured(capsys, tmp_path)
    record["fingerprint"] = "0" * 64
    result = run(capsys, step="store", host="node-b", peer="node-a", state_dir=str(tmp_path), record=record)
    assert result["failed"] is True
    assert "not a measurement of node-a<->node-b" in result["msg"]
    assert not (tmp_path / "fabric_bandwidth" / "node-a--node-b.json").exists()


def test_check_mode_measures_nothing(tmp_path, capsys):
    result = run(capsys, step="measure", state_dir=str(tmp_path), server_address="192.0.2.12", _ansible_check_mode=True)
    assert result["changed"] is True
    assert result["msg"] == "check mode: would measure for node-a<->node-b"
    assert not (tmp_path / "fabric_bandwidth").exists()


@pytest.mark.parametrize(
    "args,message",
    [
        ({"peer": "node-a"}, "a probe needs two different nodes"),
        ({"threshold": 90}, "expected a fraction of line rate"),
        ({"method": "rdma"}, "has no active RDMA port"),
        ({"host_fabric": dict(LAB_FABRIC, fabric_iface={"name": "eth0"})}, "declare line_rate_gbps"),
    ],
)
def test_bad_input_is_refused_clearly(tmp_path, capsys, args, message):
    result = run(capsys, step="lookup", state_dir=str(tmp_path), **args)
    assert result["failed"] is True
    assert message in result["msg"]
