"""GPU parsing, facts assembly, IOMMU/ACS reading and power-limit planning (plugins/module_utils/node/gpu.py).

Real outputs recorded on a 2xH200 node (tests/fixtures/h200x2/) and outputs of the lab's emulator for
RTX PRO 6000 pairs are the inputs.
"""

import ast
import json
import subprocess
import sys

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import GpuInputError
from ansible_collections.seatwright.fleet.plugins.module_utils.node.gpu import (
    SMI_QUERY_FIELDS,
    assemble_facts,
    cuda_version_from_nvml,
    devices_from_nvml,
    devices_from_smi_rows,
    links_from_nvml,
    no_gpu_facts,
    p2p_assessment,
    parse_query_csv,
    parse_query_report,
    parse_topo_matrix,
    parse_value,
    plan_diff,
    plan_power_limits,
    readback_failures,
    reading_from_nvml,
    sysfs_pci_address,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.node.platform import (
    acs_from_config_spaces,
    interpret_acs,
    interpret_iommu,
)
from conftest import FIXTURES, ROOT

H200 = FIXTURES / "h200x2"
EMULATOR = ROOT / "lab" / "nvidia_smi_emu.py"
PROFILES = ROOT / "lab" / "gpu_profiles"
# Field order of the recorded no-header query (tests/fixtures/h200x2/nvidia-smi-query-nounits.csv).
RECORDED_NOUNITS_FIELDS = (
    "index",
    "name",
    "uuid",
    "compute_cap",
    "memory.total",
    "driver_version",
    "power.limit",
    "power.min_limit",
    "power.max_limit",
    "power.default_limit",
    "persistence_mode",
    "pci.bus_id",
)
IOMMU_OFF = interpret_iommu(0, "BOOT_IMAGE=/vmlinuz ro")
ACS_ABSENT = {"state": "not_present", "redirecting": [], "bridges_with_acs": 0, "reason": "none"}


def emulator(profile, tmp_path, *args, profile_data=None):
    path = PROFILES / ("%s.json" % profile)
    if profile_data is not None:
        tmp_path.mkdir(parents=True, exist_ok=True)
        path = tmp_path / "profile.json"
        path.write_text(json.dumps(profile_data))
    env = {"SEATWRIGHT_EMU_PROFILE": str(path), "SEATWRIGHT_EMU_STATE": str(tmp_path / "state.json")}
    done = subprocess.run([sys.executable, str(EMULATOR), *args], env=env, capture_output=True, text=True, check=True)
    return done.stdout


def recorded_query_header_fields():
    header = (H200 / "nvidia-smi-query.csv").read_text().splitlines()[0]
    return tuple(cell.split(" [")[0].strip() for cell in header.split(","))


def h200_devices():
    return {
        "units": devices_from_smi_rows(
            parse_query_csv((H200 / "nvidia-smi-query.csv").read_text(), recorded_query_header_fields())
        ),
        "nounits": devices_from_smi_rows(
            parse_query_csv((H200 / "nvidia-smi-query-nounits.csv").read_text(), RECORDED_NOUNITS_FIELDS)
        ),
    }


def h200_nvml_devices():
    """The recorded NVML readings, with index, UUID and bus id taken from the same node's CSV."""
    lines = [line for line in (H200 / "nvml-and-timing.txt").read_text().splitlines() if line.startswith("{")]
    rows = parse_query_csv((H200 / "nvidia-smi-query-nounits.csv").read_text(), RECORDED_NOUNITS_FIELDS)
    raw = []
    for index, (line, row) in enumerate(zip(lines, rows)):
        reading = ast.literal_eval(line)
        reading.update(index=index, uuid=row["uuid"], pci_bus_id=row["pci.bus_id"])
        raw.append(reading)
    return devices_from_nvml(raw)


# ---------------------------------------------------------------- nvidia-smi text


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("700.00 W", 700.0),
        ("143771 MiB", 143771.0),
        ("1980 MHz", 1980.0),
        ("0 %", 0.0),
        ("37", 37.0),
        ("[N/A]", None),
        ("[Not Supported]", None),
        ("N/A", None),
        ("", None),
        ("Enabled", "Enabled"),
        ("  116.03 W ", 116.03),
    ],
)
def test_parse_value(raw, expected):
    assert parse_value(raw) == expected


@pytest.mark.parametrize("variant", ["units", "nounits"])
def test_recorded_h200_csv_reads_as_two_hopper_gpus(variant):
    devices = h200_devices()[variant]
    assert [d["index"] for d in devices] == [0, 1]
    for device, bus in zip(devices, ["00000000:00:06.0", "00000000:00:07.0"]):
        assert device["name"] == "NVIDIA H200"
        assert device["compute_capability"] == "9.0"
        assert device["memory_total_mib"] == 143771
        assert (device["power_min_w"], device["power_max_w"], device["power_default_w"]) == (200.0, 700.0, 700.0)
        assert device["power_limit_w"] == 700.0
        assert device["power_enforced_w"] is None  # not in the recorded query
        assert device["persistence_mode"] is True
        assert device["pci_bus_id"] == bus


def test_header_naming_other_fields_is_read_as_data_and_rejected():
    with pytest.raises(ValueError, match="15 values for 13 fields"):
        parse_query_csv((H200 / "nvidia-smi-query.csv").read_text())


@pytest.mark.parametrize("fmt", ["csv", "csv,noheader", "csv,nounits", "csv,noheader,nounits"])
@pytest.mark.parametrize(
    "profile, name, max_w",
    [
        ("rtx-pro-6000-maxq-x2", "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition", 300.0),
        ("rtx-pro-6000-ws-x2", "NVIDIA RTX PRO 6000 Blackwell Workstation Edition", 600.0),
    ],
)
def test_emulator_query_in_every_format_reads_as_rtx_pro_6000(tmp_path, fmt, profile, name, max_w):
    out = emulator(profile, tmp_path, "--query-gpu=" + ",".join(SMI_QUERY_FIELDS), "--format=" + fmt)
    devices = devices_from_smi_rows(parse_query_csv(out))
    assert [(d["index"], d["name"], d["compute_capability"], d["memory_total_mib"]) for d in devices] == [
        (0, name, "12.0", 97887),
        (1, name, "12.0", 97887),
    ]
    assert all(d["power_max_w"] == d["power_limit_w"] == d["power_enforced_w"] == max_w for d in devices)
    assert all(d["persistence_mode"] is False for d in devices)


def test_recorded_h200_topology_is_nvlink():
    topo = parse_topo_matrix((H200 / "nvidia-smi-topo.txt").read_text())
    assert topo["links"] == [{"gpus": [0, 1], "link": "NV18", "nvlink_count": 18, "pcie_path": None, "kind": "nvlink"}]
    assert topo["affinity"] == [
        {"gpu": 0, "cpu_affinity": "0-31", "numa_affinity": "0"},
        {"gpu": 1, "cpu_affinity": "0-31", "numa_affinity": "0"},
    ]
    assert topo["nic_paths"] == []


def test_emulated_workstation_pair_is_pxb_and_nic_paths_are_read(tmp_path):
    profile = json.loads((PROFILES / "rtx-pro-6000-ws-x2.json").read_text())
    profile["topology"]["nics"] = [{"name": "mlx5_0", "links": ["PXB", "PHB"]}]
    topo = parse_topo_matrix(emulator(None, tmp_path, "topo", "-m", profile_data=profile))
    assert topo["links"] == [{"gpus": [0, 1], "link": "PXB", "nvlink_count": 0, "pcie_path": "PXB", "kind": "pcie"}]
    assert topo["nic_paths"] == [{"gpu": 0, "nic": "mlx5_0", "link": "PXB"}, {"gpu": 1, "nic": "mlx5_0", "link": "PHB"}]


def test_topology_without_gpu_columns_is_an_error():
    with pytest.raises(ValueError, match="no GPU0 column"):
        parse_topo_matrix("No devices were found\n")


def test_recorded_h200_report_gives_versions_and_requested_limits():
    report = parse_query_report((H200 / "nvidia-smi-q.txt").read_text())
    assert (report["driver_version"], report["cuda_version"]) == ("580.159.04", "13.0")
    assert sorted(report["gpus"]) == ["00000000:00:06.0", "00000000:00:07.0"]
    first = report["gpus"]["00000000:00:06.0"]
    assert first["Product Name"] == "NVIDIA H200"
    assert first["PCI/GPU Link Info/PCIe Generation/Max"] == "5"
    assert first["FB Memory Usage/Total"] == "143771 MiB"
    power = report["gpus"]["00000000:00:07.0"]
    assert parse_value(power["GPU Power Readings/Requested Power Limit"]) == 700.0
    assert parse_value(power["GPU Power Readings/Current Power Limit"]) == 700.0


def test_emulator_report_separates_requested_from_enforced(tmp_path):
    profile = json.loads((PROFILES / "rtx-pro-6000-maxq-x2.json").read_text())
    profile["gpus"][1]["power"]["external_cap_w"] = 200
    emulator(None, tmp_path, "-pl", "250", profile_data=profile)
    report = parse_query_report(emulator(None, tmp_path, "-q", "-d", "POWER", profile_data=profile))
    readings = [
        (
            parse_value(gpu["GPU Power Readings/Requested Power Limit"]),
            parse_value(gpu["GPU Power Readings/Current Power Limit"]),
        )
        for _, gpu in sorted(report["gpus"].items())
    ]
    assert readings == [(250.0, 250.0), (250.0, 200.0)]


# ---------------------------------------------------------------- NVML values


def test_recorded_nvml_readings_agree_with_the_recorded_csv():
    nvml = h200_nvml_devices()
    smi = h200_devices()["nounits"]
    for from_nvml, from_smi in zip(nvml, smi):
        for key in (
            "index",
            "name",
            "uuid",
            "pci_bus_id",
            "compute_capability",
            "memory_total_mib",
            "power_limit_w",
            "power_min_w",
            "power_max_w",
            "power_default_w",
            "persistence_mode",
        ):
            assert from_nvml[key] == from_smi[key], key


@pytest.mark.parametrize(
    "value, expected", [(13000, "13.0"), (12080, "12.8"), (12020, "12.2"), (0, None), (None, None)]
)
def test_cuda_version_from_nvml(value, expected):
    assert cuda_version_from_nvml(value) == expected


def ports(*ends):
    """NVLink ports, each (remote type, remote bus id); None for a port that is down."""
    return [
        {"link": i, "active": end is not None, "remote_type": end and end[0], "remote_bus_id": end and end[1]}
        for i, end in enumerate(ends)
    ]


BUS_A, BUS_B, SWITCH = "00000000:00:06.0", "00000000:00:07.0", "00000000:C5:00.0"


@pytest.mark.parametrize(
    "ports_a, ports_b, pair, link, kind, pcie",
    [
        # HGX: every port of both GPUs goes into the NVSwitch fabric.
        (ports(*[(2, SWITCH)] * 18), ports(*[(2, SWITCH)] * 18), {"common_ancestor": 30}, "NV18", "nvlink", "PHB"),
        # A bridge pair: four ports straight to the peer, two down.
        (
            ports((0, BUS_B), (0, BUS_B), (0, BUS_B), (0, BUS_B), None, None),
            ports((0, BUS_A)),
            {"common_ancestor": 20},
            "NV4",
            "nvlink",
            "PXB",
        ),
        # A VM that hides the switch: far end unknown, still fabric.
        (ports(*[(None, None)] * 12), ports(*[(None, None)] * 18), {"common_ancestor": 30}, "NV12", "nvlink", "PHB"),
        (ports(None, None), ports(None, None), {"common_ancestor": 20}, "PXB", "pcie", "PXB"),
        ([], [], {"common_ancestor": 50}, "SYS", "pcie", "SYS"),
        ([], [], {"common_ancestor": 30, "p2p_nvlink": 0}, "NV", "nvlink", "PHB"),
        ([], [], {"common_ancestor": None}, "unknown", "unknown", None),
    ],
)
def test_links_from_nvml(ports_a, ports_b, pair, link, kind, pcie):
    devices = [
        {"index": 0, "pci_bus_id": BUS_A, "nvlinks": ports_a},
        {"index": 1, "pci_bus_id": BUS_B, "nvlinks": ports_b},
    ]
    (record,) = links_from_nvml(devices, [dict(pair, a=0, b=1)])
    assert (record["link"], record["kind"], record["pcie_path"]) == (link, kind, pcie)


# ---------------------------------------------------------------- facts


def test_h200_facts_match_the_contract():
    links = [{"gpus": [0, 1], "link": "NV18", "nvlink_count": 18, "pcie_path": "PHB", "kind": "nvlink"}]
    gpus, summary = assemble_facts(
        h200_nvml_devices(),
        "580.159.04",
        "13.0",
        links,
        "nvml",
        "2026-11-30T03:11:27Z",
        IOMMU_OFF,
        ACS_ABSENT,
        {"0000:00:06.0": "12"},
    )
    assert [g["sm"] for g in gpus] == ["sm_90", "sm_90"]
    assert [g["profile"] for g in gpus] == ["h200", "h200"]
    assert [g["iommu_group"] for g in gpus] == ["12", None]
    assert summary["count"] == 2 and summary["is_sm120"] is False
    assert summary["total_vram_mib"] == 2 * 143771
    assert summary["compute_capabilities"] == ["9.0"]
    assert summary["nvlink"] is True and summary["p2p"]["hang_risk"] is False


def test_rtx_pro_pair_facts_are_sm120(tmp_path):
    out = emulator("rtx-pro-6000-ws-x2", tmp_path, "--query-gpu=" + ",".join(SMI_QUERY_FIELDS), "--format=csv,noheader")
    links = parse_topo_matrix(emulator("rtx-pro-6000-ws-x2", tmp_path, "topo", "-m"))["links"]
    gpus, summary = assemble_facts(
        devices_from_smi_rows(parse_query_csv(out)),
        "580.159.04",
        "13.0",
        links,
        "nvidia-smi",
        "t",
        interpret_iommu(40, "intel_iommu=on"),
        ACS_ABSENT,
    )
    assert {g["sm"] for g in gpus} == {"sm_120"} and {g["profile"] for g in gpus} == {"rtx-pro-6000-ws"}
    assert summary["is_sm120"] is True and summary["nvlink"] is False
    assert summary["p2p"]["hang_risk"] is True and "IOMMU translation is on" in summary["p2p"]["reason"]


def test_host_without_driver_reports_zero_and_why():
    gpus, summary = no_gpu_facts("NVML could not start: Driver Not Loaded", "t", IOMMU_OFF, ACS_ABSENT)
    assert gpus == []
    assert (summary["count"], summary["is_sm120"], summary["source"]) == (0, False, "none")
    assert summary["reason"] == "NVML could not start: Driver Not Loaded"


# ---------------------------------------------------------------- IOMMU, ACS, peer-to-peer

LSPCI_REDIRECTING = (
    "00:01.1 PCI bridge: Advanced Micro Devices, Inc. [AMD] Starship/Matisse GPP Bridge\n"
    "\tCapabilities: [2a0 v1] Access Control Services\n"
    "\t\tACSCap:\tSrcValid+ TransBlk+ ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans+\n"
    "\t\tACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+ UpstreamFwd+ EgressCtrl- DirectTrans-\n"
    "\n"
    "41:00.0 VGA compatible controller: NVIDIA Corporation Device 2bb4\n"
    "\tKernel driver in use: nvidia\n"
)


@pytest.mark.parametrize(
    "text, state, redirecting",
    [
        (
            LSPCI_REDIRECTING,
            "enabled",
            ["00:01.1 PCI bridge: Advanced Micro Devices, Inc. [AMD] Starship/Matisse GPP Bridge"],
        ),
        (
            LSPCI_REDIRECTING.replace(
                "ACSCtl:\tSrcValid+ TransBlk- ReqRedir+ CmpltRedir+",
                "ACSCtl:\tSrcValid- TransBlk- ReqRedir- CmpltRedir-",
            ),
            "disabled",
            [],
        ),
        ("00:01.1 PCI bridge: X\n\tCapabilities: <access denied>\n", "unknown", []),
        ("41:00.0 VGA compatible controller: NVIDIA Corporation Device 2bb4\n", "not_present", []),
    ],
)
def test_acs_from_lspci(text, state, redirecting):
    acs = interpret_acs(text)
    assert (acs["state"], acs["redirecting"]) == (state, redirecting)


def _config_space_with_acs(control):
    """4 KiB config space: an AER capability at 0x100 pointing to ACS at 0x140 with `control` bits."""
    blob = bytearray(4096)
    blob[0x100:0x104] = (0x0001 | 1 << 16 | 0x140 << 20).to_bytes(4, "little")
    blob[0x140:0x144] = (0x000D | 1 << 16).to_bytes(4, "little")
    blob[0x146:0x148] = control.to_bytes(2, "little")
    return bytes(blob)


@pytest.mark.parametrize(
    "spaces, state",
    [
        ({"0000:00:01.1": _config_space_with_acs(0b1101)}, "enabled"),
        ({"0000:00:01.1": _config_space_with_acs(0b0001)}, "disabled"),
        ({"0000:00:01.1": _config_space_with_acs(0b1101)[:256]}, "unknown"),
        ({"0000:00:01.1": bytes(4096)}, "not_present"),
        ({}, "not_present"),
    ],
)
def test_acs_from_config_space(spaces, state):
    assert interpret_acs(None, "lspci is not installed", spaces)["state"] == state


def test_acs_config_space_bits():
    (device,) = acs_from_config_spaces({"0000:00:01.1": _config_space_with_acs(0b1101)})
    assert device == {
        "device": "0000:00:01.1",
        "src_valid": True,
        "req_redir": True,
        "cmplt_redir": True,
        "egress_ctrl": False,
    }


@pytest.mark.parametrize(
    "groups, cmdline, state, passthrough",
    [
        (None, None, "unknown", False),
        (0, "ro quiet", "disabled", False),
        (57, "intel_iommu=on", "enabled", False),
        (57, "amd_iommu=on iommu=pt", "enabled", True),
    ],
)
def test_iommu(groups, cmdline, state, passthrough):
    iommu = interpret_iommu(groups, cmdline)
    assert (iommu["state"], iommu["passthrough"]) == (state, passthrough)


PCIE_PAIR = [{"gpus": [0, 1], "link": "PXB", "nvlink_count": 0, "pcie_path": "PXB", "kind": "pcie"}]


@pytest.mark.parametrize(
    "count, links, iommu, acs_state, risk",
    [
        (1, [], interpret_iommu(57, "intel_iommu=on"), "enabled", False),
        (2, [dict(PCIE_PAIR[0], kind="nvlink", link="NV4")], interpret_iommu(57, "intel_iommu=on"), "enabled", False),
        (2, PCIE_PAIR, interpret_iommu(57, "intel_iommu=on"), "not_present", True),
        (2, PCIE_PAIR, interpret_iommu(57, "iommu=pt"), "not_present", False),
        (2, PCIE_PAIR, IOMMU_OFF, "enabled", True),
        (2, PCIE_PAIR, IOMMU_OFF, "unknown", None),
        (2, PCIE_PAIR, IOMMU_OFF, "disabled", False),
    ],
)
def test_p2p_assessment(count, links, iommu, acs_state, risk):
    acs = {"state": acs_state, "reason": acs_state}
    assert p2p_assessment(count, links, iommu, acs)["hang_risk"] is risk


@pytest.mark.parametrize(
    "bus, sysfs", [("00000000:41:00.0", "0000:41:00.0"), ("00000000:00:06.0", "0000:00:06.0"), ("", None)]
)
def test_sysfs_pci_address(bus, sysfs):
    assert sysfs_pci_address(bus) == sysfs


# ---------------------------------------------------------------- power-limit plans


def maxq_devices(tmp_path, requested=None, external_cap=None):
    profile = json.loads((PROFILES / "rtx-pro-6000-maxq-x2.json").read_text())
    if external_cap:
        profile["gpus"][0]["power"]["external_cap_w"] = external_cap
    if requested:
        emulator(None, tmp_path, "-pl", str(requested), profile_data=profile)
    out = emulator(None, tmp_path, "--query-gpu=" + ",".join(SMI_QUERY_FIELDS), "--format=csv", profile_data=profile)
    return devices_from_smi_rows(parse_query_csv(out))


@pytest.mark.parametrize(
    "kwargs, targets, changed",
    [
        ({"state": "present", "limit_w": 250}, [250.0, 250.0], [True, True]),
        ({"state": "present", "limit_w": 300}, [300.0, 300.0], [False, False]),
        ({"state": "present", "limit_w": 250, "overrides": {"1": 200}}, [250.0, 200.0], [True, True]),
        ({"state": "present", "overrides": {1: 200}}, [300.0, 200.0], [False, True]),
        ({"state": "present", "limit_w": 250, "selected": [1]}, [250.0], [True]),
        ({"state": "default", "limit_w": 250}, [300.0, 300.0], [False, False]),
    ],
)
def test_plan_targets(tmp_path, kwargs, targets, changed):
    state = kwargs.pop("state")
    plan = plan_power_limits("node-a", maxq_devices(tmp_path), state, **kwargs)
    assert [p["after_w"] for p in plan] == targets
    assert [p["changed"] for p in plan] == changed


def test_plan_compares_with_the_requested_limit_not_the_enforced_one(tmp_path):
    devices = maxq_devices(tmp_path, requested=250, external_cap=200)
    assert devices[0]["power_enforced_w"] == 200.0
    plan = plan_power_limits("node-a", devices, "present", 250)
    assert [p["changed"] for p in plan] == [False, False]


@pytest.mark.parametrize(
    "kwargs, fragments",
    [
        ({"limit_w": 700}, ["host node-a", "GPU 0", "700 W", "150 W to 300 W", "default 300 W"]),
        ({"limit_w": 250, "overrides": {"1": 100}}, ["host node-a", "GPU 1", "100 W", "150 W to 300 W"]),
        ({"limit_w": 250, "overrides": {"4": 200}}, ["host node-a", "override for GPU 4", "GPUs 0, 1"]),
        ({"limit_w": 250, "overrides": {"first": 200}}, ["host node-a", "'first' is not a GPU index"]),
        ({"limit_w": 250, "overrides": {"0": "lots"}}, ["host node-a", "GPU 0 is 'lots'"]),
        ({"limit_w": 250, "selected": [0, 3]}, ["host node-a", "GPU 3 requested", "GPUs 0, 1"]),
    ],
)
def test_plan_rejects_bad_input_naming_host_gpu_value_and_range(tmp_path, kwargs, fragments):
    with pytest.raises(GpuInputError) as problem:
        plan_power_limits("node-a", maxq_devices(tmp_path), "present", **kwargs)
    for fragment in fragments:
        assert fragment in str(problem.value)


def test_plan_on_a_host_without_gpus_or_without_power_management(tmp_path):
    with pytest.raises(GpuInputError, match="host node-c: no NVIDIA GPU answered"):
        plan_power_limits("node-c", [], "present", 250)
    devices = maxq_devices(tmp_path)
    devices[1]["power_min_w"] = None
    with pytest.raises(GpuInputError, match="GPU 1 .* does not report its power limits"):
        plan_power_limits("node-a", devices, "present", 250)


def test_diff_and_readback(tmp_path):
    plan = plan_power_limits("node-a", maxq_devices(tmp_path), "present", 250)
    diff = plan_diff(plan)
    assert "GPU 0 (NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition): power limit 300.00 W" in diff["before"]
    assert "GPU 1 (NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition): power limit 250.00 W" in diff["after"]
    assert readback_failures("node-a", plan, maxq_devices(tmp_path, requested=250)) == []
    (failure, _) = readback_failures("node-a", plan, maxq_devices(tmp_path / "fresh"))
    assert failure.startswith("host node-a: GPU 0 was asked for a power limit of 250.00 W but reads back 300.00 W")


# ---------------------------------------------------------------- recorded device run (2xH200, NVSwitch)

DEVICE = FIXTURES / "h200x2-device" / "run2"


def probe_section(title):
    text = (DEVICE / "probe.txt").read_text()
    return text.split("## %s\n" % title, 1)[1].split("\n## ", 1)[0]


def test_recorded_nvml_answers_read_as_the_topology_nvidia_smi_printed():
    raw = json.loads((DEVICE / "nvml_raw.json").read_text())["raw"]
    reading = reading_from_nvml(raw)
    topo = parse_topo_matrix(probe_section("nvidia-smi topo -m"))

    def shape(links):
        return [(link["gpus"], link["link"], link["nvlink_count"], link["kind"]) for link in links]

    assert shape(reading["links"]) == shape(topo["links"]) == [([0, 1], "NV18", 18, "nvlink")]
    # Behind the NVSwitch the far end of every port is the switch, whose bus id the VM hides.
    assert {p["remote_type"] for d in raw["devices"] for p in d["nvlinks"] if p["active"]} == {2}
    assert [sum(1 for p in d["nvlinks"] if p["active"]) for d in raw["devices"]] == [18, 18]
    assert (reading["driver_version"], reading["cuda_version"]) == ("580.159.04", "13.0")


def test_recorded_nvml_devices_agree_with_the_earlier_csv_of_the_same_node():
    reading = reading_from_nvml(json.loads((DEVICE / "nvml_raw.json").read_text())["raw"])
    for from_nvml, from_csv in zip(reading["devices"], h200_devices()["nounits"]):
        for key in (
            "index",
            "name",
            "pci_bus_id",
            "compute_capability",
            "memory_total_mib",
            "power_min_w",
            "power_max_w",
            "power_default_w",
            "power_limit_w",
            "persistence_mode",
        ):
            assert from_nvml[key] == from_csv[key], key


def test_recorded_device_run_reports_the_must_show_values_and_changed_nothing():
    results = json.loads((DEVICE / "results.json").read_text())
    summary = results["facts"]["seatwright_gpu_summary"]
    gpus = results["facts"]["seatwright_gpus"]
    assert (summary["count"], summary["is_sm120"], summary["source"]) == (2, False, "nvml")
    assert {(g["compute_capability"], g["memory_total_mib"], g["power_min_w"], g["power_max_w"]) for g in gpus} == {
        ("9.0", 143771, 200.0, 700.0)
    }
    assert summary["links"][0]["link"] == "NV18"
    prediction = results["cap_prediction"]
    assert prediction["changed"] is True and prediction["backend"] == "nvml"
    assert "power limit 600.00 W" in prediction["diff"]["after"]
    assert [g["power_limit_w"] for g in results["readback"]] == [g["power_limit_w"] for g in gpus] == [700.0, 700.0]
    before, after = (DEVICE / "limits_readback.txt").read_text().split("## limits after the run\n")
    assert before.split("\n", 1)[1] == after.rsplit("UNCHANGED", 1)[0]


def test_emulator_full_report_reads_like_the_recorded_one(tmp_path):
    report = parse_query_report(emulator("rtx-pro-6000-ws-x2", tmp_path, "-q"))
    recorded = parse_query_report((H200 / "nvidia-smi-q.txt").read_text())
    emulated = report["gpus"]["00000000:41:00.0"]
    assert emulated["Product Name"] == "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
    assert emulated["FB Memory Usage/Total"] == "97887 MiB"
    shared = {
        "Product Name",
        "Persistence Mode",
        "PCI/Bus Id",
        "FB Memory Usage/Total",
        "Max Clocks/SM",
        "GPU Power Readings/Requested Power Limit",
        "GPU Power Readings/Max Power Limit",
    }
    assert shared <= set(emulated) and shared <= set(recorded["gpus"]["00000000:00:06.0"])
