"""The node kind (linux or wsl2) and what each role does on it, on the reconstructed outputs of a WSL2
node with Docker Desktop (tests/fixtures/wsl2/, [003]) and on the recorded Linux node (h200x2)."""

import json

import node_kind
import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import GpuInputError, NodeContractError
from ansible_collections.seatwright.fleet.plugins.module_utils.node import kind
from ansible_collections.seatwright.fleet.plugins.module_utils.node.gpu import (
    devices_from_smi_rows,
    driver_version_from_smi_rows,
    parse_query_csv,
    parse_query_report,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.node.gpu_settings import plan_settings
from conftest import FIXTURES, ROOT

WSL2 = FIXTURES / "wsl2"


def wsl2_readings(**change):
    readings = {
        "kernel_release": (WSL2 / "uname-r.txt").read_text(),
        "dxg": True,
        "wsl_lib": True,
        "docker_info": json.loads((WSL2 / "docker-info.json").read_text()),
    }
    readings.update(change)
    return readings


LINUX = {"kernel_release": "6.8.0-90-generic\n", "dxg": False, "wsl_lib": False, "docker_info": None}


def test_the_field_node_is_wsl2_with_docker_desktop():
    fact = kind.decide("wsl-node", wsl2_readings())
    assert fact["kind"] == "wsl2"
    assert fact["single_node_only"] is True
    assert fact["driver_dir"] == "/usr/lib/wsl/lib"
    assert fact["docker_engine"] == {
        "server_version": "29.6.2",
        "operating_system": "Docker Desktop",
        "kernel_version": "6.6.87.2-microsoft-standard-WSL2",
        "docker_desktop": True,
        "wsl2_kernel": True,
    }
    assert len(fact["evidence"]) == 4 and fact["warnings"] == [] and fact["problems"] == []
    assert "Docker Desktop 29.6.2" in fact["reason"]


def test_a_linux_node_is_linux():
    fact = kind.decide("node-a", LINUX)
    assert fact["kind"] == "linux"
    assert fact["evidence"] == [] and fact["driver_dir"] is None and fact["single_node_only"] is False
    assert "6.8.0-90-generic" in fact["reason"]


@pytest.mark.parametrize(
    "change, expected, warning",
    [
        ({"dxg": False, "wsl_lib": False, "docker_info": None}, "wsl2", "/dev/dxg is missing"),
        ({"wsl_lib": False}, "wsl2", "/usr/lib/wsl/lib is missing"),
        ({"kernel_release": "6.6.87.2-microsoft-custom"}, "wsl2", None),
        ({"kernel_release": "6.6.87.2-microsoft-standard-WSL2+"}, "wsl2", None),
        ({"kernel_release": "6.8.0-90-generic", "dxg": False}, "linux", "Docker Desktop's engine answers"),
    ],
)
def test_each_reading_counts(change, expected, warning):
    fact = kind.decide("n", wsl2_readings(**change))
    assert fact["kind"] == expected
    if warning:
        assert any(warning in line for line in fact["warnings"]), fact["warnings"]
    else:
        assert fact["warnings"] == []


def test_an_engine_off_the_wsl2_kernel_is_said():
    info = dict(wsl2_readings()["docker_info"], OperatingSystem="Ubuntu 24.04 LTS", KernelVersion="6.8.0-90-generic")
    fact = kind.decide("n", wsl2_readings(docker_info=info))
    assert fact["kind"] == "wsl2"
    assert "not Docker Desktop's WSL 2 engine" in fact["warnings"][0]


def test_a_declared_kind_the_node_does_not_show_is_a_problem():
    assert kind.decide("n", wsl2_readings(), declared="wsl2")["problems"] == []
    problem = kind.decide("n", LINUX, declared="wsl2")["problems"][0]
    assert problem.startswith("host n: seatwright_node_kind declares wsl2, but the node shows linux")
    assert "fix the inventory" in problem


@pytest.mark.parametrize(
    "readings, field",
    [
        ("wsl2", "node readings"),
        ({"kernel_release": None, "dxg": True, "wsl_lib": True}, "kernel_release"),
        ({"kernel_release": "x", "dxg": "yes", "wsl_lib": True}, "dxg"),
        ({"kernel_release": "x", "dxg": True, "wsl_lib": True, "docker_info": "Docker Desktop"}, "docker_info"),
        ({"kernel_release": "x", "dxg": True, "wsl_lib": True, "uname": "x"}, "node readings"),
    ],
)
def test_bad_readings_are_refused_by_name(readings, field):
    with pytest.raises(NodeContractError, match="host n: %s (is|are) " % field):
        kind.decide("n", readings)


def test_the_wsl2_gpu_outputs_parse():
    rows = parse_query_csv((WSL2 / "nvidia-smi-query.csv").read_text())
    devices = devices_from_smi_rows(rows)
    assert [d["compute_capability"] for d in devices] == ["12.0", "12.0"]
    assert [d["memory_total_mib"] for d in devices] == [97887, 97887]
    assert [d["power_limit_w"] for d in devices] == [300.0, 300.0]
    assert devices[0]["power_max_w"] is None and devices[0]["persistence_mode"] is True
    assert driver_version_from_smi_rows(rows) == "610.88"
    report = parse_query_report((WSL2 / "nvidia-smi-q.txt").read_text())
    assert report["driver_version"] == "610.88"
    gpu = report["gpus"]["00000000:21:00.0"]
    assert gpu["Driver Model/Current"] == "WDDM"
    assert gpu["Power Readings/Max Power Limit"] == "N/A"
    assert "Driver Version: 610.88" in (WSL2 / "nvidia-smi.txt").read_text()


def wsl2_devices():
    return devices_from_smi_rows(parse_query_csv((WSL2 / "nvidia-smi-query.csv").read_text()))


def test_power_on_wsl2_is_not_settable_when_the_trial_is_refused():
    # The check-mode trial's plan: WSL 2 reports the limit but not its range, so gpu_settings refuses.
    with pytest.raises(GpuInputError, match="does not report its power limits") as refused:
        plan_settings("wsl-node", wsl2_devices(), {"power_limit_w": 250}, None)
    outcome = kind.power_outcome("wsl-node", "wsl2", {"failed": True, "msg": str(refused.value)})
    assert outcome["apply"] is False and outcome["status"] == "not-settable"
    assert "not settable on this node kind (wsl2)" in outcome["messages"][0]
    assert "does not report its power limits" in outcome["messages"][0]
    assert "fail" not in outcome["messages"][0]


def test_power_on_wsl2_names_each_setting_it_would_change():
    trial = {
        "changed": True,
        "limits": [{"index": 0, "before_w": 300.0, "after_w": 250.0, "changed": True}],
        "persistence": [{"index": 0, "before": True, "after": True, "changed": False}],
        "clocks": {"before": None, "after": {"min_mhz": 1500, "max_mhz": 2400}, "changed": True},
    }
    outcome = kind.power_outcome("wsl-node", "wsl2", trial)
    assert outcome["apply"] is False
    message = outcome["messages"][0]
    assert "GPU 0 power limit 300.0 W -> 250.0 W" in message and "clock lock None ->" in message
    assert "not settable on this node kind" in message and "nvidia-smi.exe" in message


def test_power_on_wsl2_that_already_holds_sets_nothing():
    trial = {"changed": False, "limits": [{"index": 0, "changed": False}], "persistence": [], "clocks": {}}
    outcome = kind.power_outcome("wsl-node", "wsl2", trial)
    assert (outcome["apply"], outcome["status"]) == (False, "holds")


def test_power_on_linux_is_applied():
    assert kind.power_outcome("node-a", "linux", None) == {"apply": True, "status": "applied", "messages": []}


def test_the_driver_role_reads_the_windows_driver_and_installs_nothing():
    summary = {"count": 2, "driver_version": "610.88"}
    report = kind.driver_report("wsl-node", "wsl2", summary)
    assert report.startswith("host wsl-node: Windows driver 610.88 answers for 2 GPUs; served by the Windows driver")
    assert "no driver package, kernel module" in report
    assert "no driver version read (nvidia-smi did not answer)" in kind.driver_report("w", "wsl2", {})
    assert kind.driver_report("node-a", "linux", summary) is None


def test_each_role_skip_is_a_reason():
    assert kind.role_skip("linux", "nvidia_driver") is None
    assert kind.role_skip("wsl2", "nvidia_driver").startswith("served by the Windows driver")
    assert kind.role_skip("wsl2", "rdma_fabric").startswith("skipped (wsl2): a WSL2 node is a single-node seat host")
    assert kind.role_skip("wsl2", "gpu_power_boot").startswith("no boot unit installed (wsl2)")
    assert kind.role_skip("wsl2", "nccl_env") is None


def test_a_multi_node_seat_on_a_wsl2_node_is_refused():
    nodes = [{"host": "wsl-node", "kind": "wsl2"}, {"host": "node-b", "kind": "linux"}]
    refusal = kind.multi_node_refusal(nodes, True)
    assert refusal["id"] == "wsl2-single-node"
    assert refusal["detail"].startswith("wsl-node is a WSL2 node")
    assert "single-node seat host" in refusal["reason"] and refusal["remedy"]
    assert kind.multi_node_refusal(nodes[:1], False) is None
    assert kind.multi_node_refusal([{"host": "a", "kind": "linux"}, {"host": "b"}], True) is None


def test_the_wsl2_nccl_contract_cites_a_source_for_every_setting():
    entries = kind.wsl2_nccl_entries()
    assert [e["name"] for e in entries] == [
        "NCCL_P2P_DISABLE",
        "NCCL_SHM_DISABLE",
        "NCCL_CUMEM_ENABLE",
        "NCCL_IB_DISABLE",
    ]
    assert all(e["sources"] and e["reason"] for e in entries)
    assert any("CUDA on WSL User Guide" in s for e in entries for s in e["sources"])
    assert kind.wsl2_nccl_env() == {
        "NCCL_P2P_DISABLE": "1",
        "NCCL_SHM_DISABLE": "0",
        "NCCL_CUMEM_ENABLE": "0",
        "NCCL_IB_DISABLE": "1",
    }


@pytest.mark.parametrize(
    "node_kind, expected",
    [
        ("linux", {}),
        # The NCCL contract, and the kind the sglang-sm120 patch wsl2-logits-symm-mem reads.
        ("wsl2", dict(kind.wsl2_nccl_env(), SEATWRIGHT_NODE_KIND="wsl2")),
    ],
)
def test_the_engine_env_of_a_node_kind(node_kind, expected):
    assert kind.engine_env(node_kind) == expected


def test_the_engine_env_of_an_unknown_kind_is_refused_by_name():
    with pytest.raises(NodeContractError, match="node kind 'wsl' is not one of linux, wsl2"):
        kind.engine_env("wsl")


def test_the_patch_reads_the_variable_and_value_the_engine_env_sets():
    # The patch is a diff and cannot import node/kind.py: it spells both out, and they must agree.
    patch = (ROOT / "roles" / "engine_image" / "files" / "patches" / "wsl2-logits-symm-mem.patch").read_text()
    assert '+SEATWRIGHT_NODE_KIND_ENV = "%s"' % kind.NODE_KIND_ENV in patch
    assert '+    if enabled and os.environ.get(SEATWRIGHT_NODE_KIND_ENV) == "wsl2":' in patch


@pytest.mark.parametrize(
    "fact, declared, expected",
    [
        ({"kind": "wsl2"}, None, ("wsl2", "facts")),
        ({"kind": "wsl2"}, "linux", ("wsl2", "facts")),
        (None, "wsl2", ("wsl2", "inventory")),
        (None, None, ("linux", "default")),
        ({"kind": "bsd"}, None, ("linux", "default")),
    ],
)
def test_the_kind_a_plan_uses(fact, declared, expected):
    assert kind.kind_of(fact, declared) == expected


def test_cited_spells_out_the_sources_once():
    text = kind.cited(kind.DRIVER_SERVED)
    assert text.count("docs.nvidia.com/cuda/wsl-user-guide") == 1 and "docs.docker.com" in text
    assert kind.cited("no source") == "no source"


def run(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            node_kind.main()
    return json.loads(capsys.readouterr().out)


def test_the_module_takes_the_labelled_test_input_only_in_the_lab(capsys, tmp_path):
    marker = tmp_path / "gpu-profile.json"
    marker.write_text("{}")
    readings = wsl2_readings()
    result = run(capsys, {"host": "node-b", "test_input": readings, "fleet_name": "lab", "lab_marker": str(marker)})
    fact = result["ansible_facts"]["seatwright_host_kind"]
    assert (result["changed"], fact["kind"], fact["source"]) == (False, "wsl2", "test-input")

    refused = run(
        capsys, {"host": "node-b", "test_input": readings, "fleet_name": "example", "lab_marker": str(marker)}
    )
    assert refused["failed"] and "lab test equipment" in refused["msg"]
    refused = run(
        capsys, {"host": "node-b", "test_input": readings, "fleet_name": "lab", "lab_marker": str(tmp_path / "no")}
    )
    assert refused["failed"] and "honoured only on a lab node" in refused["msg"]


def test_the_module_reads_this_host_and_fails_on_a_declared_mismatch(capsys, tmp_path):
    result = run(capsys, {"host": "here", "docker_socket": str(tmp_path / "docker.sock")})
    fact = result["ansible_facts"]["seatwright_host_kind"]
    assert fact["source"] == "node" and fact["docker_unanswered"].startswith("no Docker engine socket")
    other = "linux" if fact["kind"] == "wsl2" else "wsl2"
    failed = run(capsys, {"host": "here", "declared": other, "docker_socket": str(tmp_path / "docker.sock")})
    assert failed["failed"] and "seatwright_node_kind declares %s" % other in failed["msg"]


def test_each_role_step_through_the_filter():
    from ansible.errors import AnsibleFilterError
    from ansible_collections.seatwright.fleet.plugins.filter.node_kind_step import node_kind_step

    driver = node_kind_step("wsl2", "driver", "wsl-node", {"count": 2, "driver_version": "610.88"})
    assert driver["act"] is False and "served by the Windows driver" in driver["messages"][0]
    power = node_kind_step("wsl2", "power", "wsl-node", {"failed": True, "msg": "power management is not supported"})
    assert power["act"] is False and "not settable on this node kind" in power["messages"][0]
    assert node_kind_step("wsl2", "rdma", "wsl-node")["messages"][0].startswith("host wsl-node: skipped (wsl2)")
    assert node_kind_step("wsl2", "power_boot", "wsl-node")["act"] is False
    for step in ("driver", "power", "power_boot", "rdma"):
        assert node_kind_step("linux", step, "node-a")["act"] is True
    with pytest.raises(AnsibleFilterError, match="step 'fabric' is not one of"):
        node_kind_step("wsl2", "fabric", "wsl-node")
    with pytest.raises(AnsibleFilterError, match="node kind 'macos' is not one of"):
        node_kind_step("macos", "driver", "n")


def test_the_nccl_env_role_writes_the_wsl2_contract():
    from ansible_collections.seatwright.fleet.plugins.module_utils.errors import NcclError
    from ansible_collections.seatwright.fleet.plugins.module_utils.fabric.nccl import node_env_files

    files = node_env_files("wsl-node", {}, "eth0", node_kind="wsl2")
    assert files["variables"] == dict(kind.wsl2_nccl_env(), NCCL_SOCKET_IFNAME="=eth0", GLOO_SOCKET_IFNAME="eth0")
    p2p = next(e for e in files["env"] if e["name"] == "NCCL_P2P_DISABLE")
    assert "(sources: NVIDIA, CUDA on WSL User Guide" in p2p["reason"]
    assert "NCCL_P2P_DISABLE=1" in files["nccl_conf"] and "GLOO_SOCKET_IFNAME" not in files["nccl_conf"]
    assert files["defaults"][0].startswith("WSL2 node: no RDMA")
    with pytest.raises(NcclError, match="node kind 'bsd'"):
        node_env_files("n", {}, "eth0", node_kind="bsd")


def test_the_labs_wsl2_test_input_is_decided_like_the_node_and_stays_out_of_molecule():
    import yaml
    from conftest import ROOT

    text = (ROOT / "lab" / "node_kind" / "wsl2.yml").read_text()
    assert "TEST EQUIPMENT" in text
    readings = yaml.safe_load(text)["node_base_kind_test_input"]
    fact = kind.decide("node-b", readings, source="test-input")
    assert (fact["kind"], fact["source"], fact["warnings"]) == ("wsl2", "test-input", [])
    assert fact["docker_engine"]["docker_desktop"] is True
    scenario = (ROOT / "molecule" / "default" / "molecule.yml").read_text()
    assert "node_kind" not in scenario
