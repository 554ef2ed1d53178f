"""The cross-node NCCL fact in a multi-node seat's plan (issue 21, item 3), through today's entry
points: the seat_plan module on the example inventory's hosts, and playbooks/nccl_crossnode.yml
then playbooks/plan.yml on inventory/example, run on this machine with CPU (gloo) ranks."""

import json
import os

import pytest
import seat_plan
from ansible.module_utils.testing import patch_module_args
from seat_cases import ROOT, SEAT_NAMES, SEATS, example_nodes, seat_data
from test_plan_playbook import PLAYBOOK, cache_facts, run

GLOO_NODE0 = ROOT / "tests" / "fixtures" / "nccl" / "crossnode-gloo-cpu-node0.txt"
MULTI_NODE_GPU_SEATS = [
    name
    for name in SEAT_NAMES
    if seat_data(name)["topology"]["nodes"] > 1 and seat_data(name)["engine"].get("device", "cuda") != "cpu"
]
UNKNOWN = (
    "cross-node NCCL node-a<->node-b: unknown (no cross-node NCCL fact cached); "
    "run ansible-playbook playbooks/nccl_crossnode.yml --limit node-a,node-b"
)


def plan(capsys, seat, nodes):
    args = {
        "seat": seat,
        "recipe_path": str(SEATS / ("%s.yml" % seat)),
        "schema_path": str(ROOT / "schemas" / "seat.schema.json"),
        "nodes": nodes,
    }
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            seat_plan.main()
    return json.loads(capsys.readouterr().out)


def pair_record(busbw, transports, gdrdma):
    """A pair record as nccl_crossnode caches it (the fields the plan reads)."""
    return {
        "pair": "node-a<->node-b",
        "backend": "nccl",
        "world_size": 4,
        "judged_busbw_gbps": busbw,
        "judged_over_bytes": 64 << 20,
        "wrong_elements": 0,
        "line_rate_gbps": 200.0,
        "line_rate_source": "RDMA port rate (sysfs) of mlx5_0",
        "fraction": busbw / 25.0,
        "transports": {"transports": transports, "gdrdma": gdrdma},
        "image": "seatwright/glm53:0123abcd",
        "measured_at": "2026-12-01T12:00:00+00:00",
        "inputs": {"ends": {}},
    }


def test_the_shipped_multi_node_gpu_seats_are_the_ones_expected():
    assert {"glm53", "glm53-community", "glm53-fp8", "glm53-vendor", "nemotron3-ultra"} <= set(MULTI_NODE_GPU_SEATS)


@pytest.mark.parametrize("seat", MULTI_NODE_GPU_SEATS)
def test_every_multi_node_gpu_seat_shows_the_pair_as_unknown_when_nothing_is_cached(capsys, seat):
    result = plan(capsys, seat, example_nodes())
    assert result.get("failed") is not True, result.get("msg")
    assert UNKNOWN in result["summary"]
    assert [entry["status"] for entry in result["plan"].get("cross_node_nccl", [])] == ["unknown"]


@pytest.mark.parametrize(
    "record,threshold,status,words",
    [
        (pair_record(22.5, ["NET/IB", "P2P"], True), None, "passed", ["busbw 22.50 GB/s", "90 % of 25.00 GB/s"]),
        (pair_record(1.86, ["NET/Socket"], False), None, "below-threshold", ["7 %", "not NET/Socket"]),
        (pair_record(21.0, ["NET/IB"], True), 0.9, "below-threshold", ["below the 90 % threshold"]),
    ],
)
def test_a_cached_pair_fact_is_shown_with_its_verdict(capsys, record, threshold, status, words):
    nodes = example_nodes()
    # Cached on either node of the pair; here on the second.
    nodes[1]["seatwright_nccl_crossnode"] = {"node-a<->node-b": record}
    nodes[0]["rdma_fabric_nccl_threshold"] = threshold
    result = plan(capsys, "glm53", nodes)
    entries = result["plan"].get("cross_node_nccl", [])
    assert [(e["status"], e.get("busbw_gbps")) for e in entries] == [(status, record["judged_busbw_gbps"])]
    line = [text for text in result["summary"] if text.startswith("cross-node NCCL node-a<->node-b: " + status)]
    assert line, result["summary"]
    for word in words + ["image seatwright/glm53:0123abcd"]:
        assert word in line[0]


def test_a_threshold_that_is_no_fraction_is_named(capsys):
    nodes = example_nodes()
    nodes[0]["rdma_fabric_nccl_threshold"] = "90%"
    result = plan(capsys, "glm53", nodes)
    assert result.get("failed") is True
    assert result["msg"].startswith("host node-a: rdma_fabric_nccl_threshold is '90%'")


def test_a_cpu_seats_pair_is_measured_with_gloo(capsys):
    result = plan(capsys, "lab-tp2", example_nodes())
    assert [entry["run"] for entry in result["plan"].get("cross_node_nccl", [])] == [
        "ansible-playbook playbooks/nccl_crossnode.yml --limit node-a,node-b -e rdma_fabric_nccl_backend=gloo"
    ]


def test_a_single_node_seat_has_no_pair(capsys):
    result = plan(capsys, "qwen35-122b", example_nodes())
    assert result["plan"].get("cross_node_nccl") == [] and not any("cross-node" in s for s in result["summary"])


# ---------------------------------------------------------------- the playbooks, end to end

ROCE_FACTS = {
    "rdma_devices": [
        {
            "name": "mlx5_0",
            "fw_ver": "28.39.1002",
            "ports": [
                {"port": 1, "active": True, "rate_gbps": 200.0, "link_layer": "Ethernet", "roce_v2_gid_index": 3}
            ],
        }
    ],
    "roce_devices": ["mlx5_0"],
    "fabric_iface": {"name": "enp65s0f0np0", "present": True, "mtu": 9000, "speed_mbps": 200000},
    "gpudirect": {"available": True, "via": "peermem"},
    "gpu_nic_path": "PIX",
    "acs": {"state": "disabled", "reason": "recorded"},
    "nvidia_driver_version": "580.95.05",
}


@pytest.mark.skipif(not os.path.exists(PLAYBOOK), reason="needs the project venv (scripts/bootstrap)")
def test_the_playbook_measures_the_pair_and_the_plan_shows_it(tmp_path):
    # Both example nodes are this machine (connection local); their ranks are a stand-in
    # interpreter that checks it got the shipped worker, then replays the worker's gloo output.
    python = tmp_path / "python"
    python.write_text(
        "#!/bin/sh\n"
        'grep -q "def run(local_rank, args)" "$1" || { echo "not the worker: $1" >&2; exit 9; }\n'
        'case "$*" in *"--backend gloo --world-size 4 --first-rank 0 --local-ranks 2 --master-addr 10.77.0.11"*)'
        " cat %s;;\n"
        '  *"--first-rank 2 --local-ranks 2 --master-addr 10.77.0.11"*) sleep 1;;\n'
        '  *) echo "unexpected ranks: $*" >&2; exit 7;;\nesac\n' % GLOO_NODE0
    )
    python.chmod(0o755)
    for host in ("node-a", "node-b"):
        cache_facts(tmp_path, {"seatwright_fabric": ROCE_FACTS}, host=host)
    local = {
        "ansible_connection": "local",
        "ansible_python_interpreter": str(ROOT / ".venv" / "bin" / "python"),
        "ansible_become": False,
        "rdma_fabric_state_dir": str(tmp_path / "state"),
        "rdma_fabric_nccl_backend": "gloo",
        "rdma_fabric_nccl_runtime": "none",
        "rdma_fabric_nccl_python": str(python),
        "rdma_fabric_nccl_sizes": [1048576, 8388608, 67108864],
        "rdma_fabric_nccl_threshold": 0.05,
        "rdma_fabric_nccl_timeout_s": 60,
        # This machine has no enp65s0f0np0 to read the example fleet's lossless class from (docs/fabric.md).
        "rdma_fabric_roce_qos": None,
    }
    # --check looks up the cache and measures nothing.
    checked = run(tmp_path, "playbooks/nccl_crossnode.yml", "--check", "-e", json.dumps(local))
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert not (tmp_path / "state" / "nccl_crossnode" / "node-a--node-b.json").exists()

    measured = run(tmp_path, "playbooks/nccl_crossnode.yml", "-e", json.dumps(local))
    assert measured.returncode == 0, measured.stdout + measured.stderr
    assert "node-a<->node-b: gloo all-reduce over 4 ranks, busbw 2.41 GB/s" in measured.stdout
    stored = json.loads((tmp_path / "state" / "nccl_crossnode" / "node-a--node-b.json").read_text())
    assert stored["world_size"] == 4 and stored["line_rate_gbps"] == 200.0

    # Run again: the record is cached for these inputs, nothing is measured.
    again = run(tmp_path, "playbooks/nccl_crossnode.yml", "-e", json.dumps(local))
    assert again.returncode == 0 and "cached, nothing measured now" in again.stdout, again.stdout

    out = tmp_path / "glm53.json"
    planned = run(
        tmp_path,
        "playbooks/plan.yml",
        "-e",
        "seat=glm53",
        "-e",
        "plan_out=%s" % out,
        "-e",
        "rdma_fabric_nccl_threshold=0.05",
    )
    assert planned.returncode == 0, planned.stdout + planned.stderr
    entry = json.loads(out.read_text())["cross_node_nccl"]
    assert [(e["pair"], e["status"], e["backend"], e["busbw_gbps"]) for e in entry] == [
        ("node-a<->node-b", "passed", "gloo", 2.41)
    ]
    assert "cross-node NCCL node-a<->node-b: passed, node-a<->node-b: gloo all-reduce" in planned.stdout
