"""The lab's nvidia-smi emulator, run as a subprocess against a temporary profile and state."""

import json
import re
import subprocess
import sys

import pytest
from conftest import FIXTURES, ROOT

EMULATOR = ROOT / "lab" / "nvidia_smi_emu.py"
PROFILES = ROOT / "lab" / "gpu_profiles"


def smi(env_paths, *args):
    profile, state = env_paths
    env = {"SEATWRIGHT_EMU_PROFILE": str(profile), "SEATWRIGHT_EMU_STATE": str(state), "PATH": "/usr/bin:/bin"}
    done = subprocess.run([sys.executable, str(EMULATOR), *args], env=env, capture_output=True, text=True, check=False)
    return done.returncode, done.stdout


@pytest.fixture(params=["rtx-pro-6000-maxq-x2", "rtx-pro-6000-ws-x2"])
def lab(request, tmp_path):
    return PROFILES / ("%s.json" % request.param), tmp_path / "state" / "nvidia-smi-state.json"


@pytest.fixture
def maxq(tmp_path):
    return PROFILES / "rtx-pro-6000-maxq-x2.json", tmp_path / "state.json"


def test_profiles_declare_the_published_cards_and_say_where_numbers_come_from():
    expected = {"rtx-pro-6000-maxq-x2": 300, "rtx-pro-6000-ws-x2": 600}
    for key, max_w in expected.items():
        profile = json.loads((PROFILES / ("%s.json" % key)).read_text())
        assert profile["fake"] is True and profile["profile"] == key
        assert {"power_min_w", "power_max_w", "memory_total_mib", "topology"} <= set(profile["source"])
        assert [gpu["index"] for gpu in profile["gpus"]] == [0, 1]
        for gpu in profile["gpus"]:
            assert gpu["memory_total_mib"] == 97887 and gpu["compute_cap"] == "12.0"
            assert gpu["power"]["max_w"] == max_w == gpu["power"]["default_w"]
            assert "fake" in gpu["uuid"] and gpu["serial"].startswith("FAKE")
        assert profile["topology"]["links"] == [["X", "PXB"], ["PXB", "X"]]


@pytest.mark.parametrize("args", [["--version"], ["-h"], ["--help"]])
def test_says_it_is_test_equipment(maxq, args):
    rc, out = smi(maxq, *args)
    assert rc == 0
    assert "test equipment, not NVIDIA software" in out


def test_list_gpus_matches_nvidia_smi_line_format(lab):
    rc, out = smi(lab, "-L")
    assert rc == 0
    assert re.fullmatch(r"(GPU \d: NVIDIA RTX PRO 6000 Blackwell [^\n]+ \(UUID: GPU-[0-9a-z-]+\)\n){2}", out)


def test_query_header_and_units_follow_the_recorded_h200_format(maxq):
    fields = (
        "index,name,uuid,compute_cap,memory.total,driver_version,power.limit,power.min_limit,"
        "power.max_limit,power.default_limit,power.draw,persistence_mode,pci.bus_id,clocks.max.sm,temperature.gpu"
    )
    rc, out = smi(maxq, "--query-gpu=" + fields, "--format=csv")
    assert rc == 0
    recorded_header = (FIXTURES / "h200x2" / "nvidia-smi-query.csv").read_text().splitlines()[0]
    assert out.splitlines()[0] == recorded_header
    row = out.splitlines()[1].split(", ")
    assert row[3:5] == ["12.0", "97887 MiB"] and row[6] == "300.00 W" and row[13] == "3090 MHz"


@pytest.mark.parametrize(
    "fmt, expected",
    [
        ("csv,noheader,nounits", ["0, 300.00, 97887", "1, 300.00, 97887"]),
        ("csv,noheader", ["0, 300.00 W, 97887 MiB", "1, 300.00 W, 97887 MiB"]),
        ("csv,nounits", ["index, power.limit, memory.total", "0, 300.00, 97887", "1, 300.00, 97887"]),
    ],
)
def test_query_formats(maxq, fmt, expected):
    rc, out = smi(maxq, "--query-gpu=index,power.limit,memory.total", "--format=" + fmt)
    assert (rc, out.splitlines()) == (0, expected)


@pytest.mark.parametrize("selector", ["1", "GPU-fakea001-0000-4000-8000-000000000000", "00000000:42:00.0"])
def test_id_selects_by_index_uuid_or_bus_id(maxq, selector):
    rc, out = smi(maxq, "--query-gpu=index", "--format=csv,noheader", "-i", selector)
    assert (rc, out) == (0, "1\n")


@pytest.mark.parametrize(
    "args, rc, message",
    [
        (["--query-gpu=index,bogus", "--format=csv"], 2, 'Field "bogus" is not a valid field to query.'),
        (["--query-gpu=index"], 2, "Invalid combination of input arguments"),
        (["--frobnicate"], 2, "Invalid combination of input arguments"),
        # Real flags the emulator deliberately does not implement are refused the same way.
        (["-r"], 2, "Invalid combination of input arguments"),
        (["-mig", "1"], 2, "Invalid combination of input arguments"),
        (["topo", "-p2p", "r"], 2, "Invalid combination of input arguments"),
        (["-L", "-i", "7"], 6, "No devices were found"),
        (["-pm", "2"], 2, "Invalid combination of input arguments"),
    ],
)
def test_bad_arguments_fail_like_nvidia_smi(maxq, args, rc, message):
    got_rc, out = smi(maxq, *args)
    assert got_rc == rc
    assert message in out


def test_power_limit_is_range_checked_with_nvidia_smis_text_and_leaves_state_alone(maxq):
    rc, out = smi(maxq, "-pl", "700", "-i", "0")
    assert rc == 2
    assert out == (
        "Provided power limit 700.00 W is not a valid power limit which should be between 150.00 W and "
        "300.00 W for GPU 00000000:41:00.0\nTerminating early due to previous errors.\n"
    )
    assert not maxq[1].exists()


def test_power_limit_set_on_one_gpu_persists_and_reads_back(maxq):
    rc, out = smi(maxq, "-i", "1", "-pl", "250")
    assert rc == 0
    assert out == "Power limit for GPU 00000000:42:00.0 was set to 250.00 W from 300.00 W.\nAll done.\n"
    _, csv = smi(maxq, "--query-gpu=index,power.limit,enforced.power.limit", "--format=csv,noheader,nounits")
    assert csv == "0, 300.00, 300.00\n1, 250.00, 250.00\n"
    saved = json.loads(maxq[1].read_text())
    assert saved["gpus"]["GPU-fakea001-0000-4000-8000-000000000000"]["power_limit_w"] == 250.0


def test_persistence_and_clock_lock_round_trip(maxq):
    assert smi(maxq, "-pm", "1")[1].splitlines()[0] == "Enabled persistence mode for GPU 00000000:41:00.0."
    assert "already Enabled" in smi(maxq, "-pm", "1")[1]
    rc, out = smi(maxq, "-lgc", "1500,2400", "-i", "0")
    assert rc == 0 and '"(gpuClkMin 1500, gpuClkMax 2400)"' in out
    gpus = json.loads(maxq[1].read_text())["gpus"]
    assert gpus["GPU-fakea000-0000-4000-8000-000000000000"]["clock_lock"] == {"min_mhz": 1500, "max_mhz": 2400}
    assert smi(maxq, "-rgc") == (0, "All done.\n")
    gpus = json.loads(maxq[1].read_text())["gpus"]
    assert all(entry["clock_lock"] is None and entry["persistence_mode"] for entry in gpus.values())


def test_topology_matrix_keeps_nvidia_smis_layout(lab):
    rc, out = smi(lab, "topo", "-m")
    recorded = (FIXTURES / "h200x2" / "nvidia-smi-topo.txt").read_text()
    assert rc == 0
    assert out.replace("PXB\t", "NV18\t") == recorded


def test_query_report_power_section_has_requested_and_enforced_limits(maxq):
    smi(maxq, "-pl", "275")
    rc, out = smi(maxq, "-q", "-d", "POWER", "-i", "0")
    assert rc == 0 and out.count("\nGPU 0000") == 1
    recorded = (FIXTURES / "h200x2" / "nvidia-smi-q.txt").read_text()
    for key in ("Requested Power Limit", "Current Power Limit", "Min Power Limit"):
        assert re.search(r"^ {8}%s {%d}: " % (key, 47 - len(key)), recorded, re.M)
        assert re.search(r"^ {8}%s {%d}: " % (key, 47 - len(key)), out, re.M)
    assert "Requested Power Limit                          : 275.00 W" in out


def test_missing_profile_reads_as_a_host_without_a_driver(tmp_path):
    rc, out = smi((tmp_path / "absent.json", tmp_path / "state.json"), "-L")
    assert rc == 9
    assert "couldn't communicate with the NVIDIA driver" in out
