"""The gpu_facts and gpu_settings modules, run through patch_module_args against the lab emulator.

The emulator is installed as `nvidia-smi` on a temporary PATH, exactly as the lab installs it, so the
modules' nvidia-smi reader, their parsing and their setters run for real.
"""

import json
import os
import subprocess
import sys

import gpu_facts
import gpu_settings
import gpu_telemetry
import pytest
from ansible.module_utils.testing import patch_module_args
from conftest import ROOT

PROFILES = ROOT / "lab" / "gpu_profiles"


@pytest.fixture
def node(tmp_path, monkeypatch):
    """A node whose only nvidia-smi is the emulator, with its own profile and state."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "nvidia-smi").symlink_to(ROOT / "lab" / "nvidia_smi_emu.py")
    profile = json.loads((PROFILES / "rtx-pro-6000-maxq-x2.json").read_text())
    profile_path = tmp_path / "profile.json"
    profile_path.write_text(json.dumps(profile))
    monkeypatch.setenv("PATH", "%s:/usr/bin:/bin" % bin_dir)
    monkeypatch.setenv("SEATWRIGHT_EMU_PROFILE", str(profile_path))
    monkeypatch.setenv("SEATWRIGHT_EMU_STATE", str(tmp_path / "state.json"))

    class Node:
        state = tmp_path / "state.json"
        cache = tmp_path / "cache" / "gpu_facts.json"

        @staticmethod
        def edit_profile(change):
            change(profile)
            profile_path.write_text(json.dumps(profile))

        @staticmethod
        def remove_driver():
            profile_path.unlink()

        @staticmethod
        def limits():
            saved = json.loads((tmp_path / "state.json").read_text())["gpus"]
            return [saved[gpu["uuid"]]["power_limit_w"] for gpu in profile["gpus"]]

    return Node


def run(capsys, module, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            module.main()
    return json.loads(capsys.readouterr().out)


def test_facts_from_nvidia_smi_and_cached_with_time(capsys, node):
    result = run(capsys, gpu_facts, {"backend": "nvidia-smi", "cache_path": str(node.cache), "host": "node-a"})
    facts = result["ansible_facts"]
    summary = facts["seatwright_gpu_summary"]
    assert result["changed"] is False
    assert (summary["count"], summary["is_sm120"], summary["total_vram_mib"]) == (2, True, 2 * 97887)
    assert (summary["driver_version"], summary["cuda_version"], summary["source"]) == (
        "580.159.04",
        "13.0",
        "nvidia-smi",
    )
    assert [link["link"] for link in summary["links"]] == ["PXB"]
    assert [g["sm"] for g in facts["seatwright_gpus"]] == ["sm_120", "sm_120"]
    cached = json.loads(node.cache.read_text())
    assert cached["read_at"] == summary["read_at"] and cached["seatwright_gpus"] == facts["seatwright_gpus"]


def test_facts_auto_backend_falls_back_to_nvidia_smi(capsys, node):
    summary = run(capsys, gpu_facts, {"cache_path": ""})["ansible_facts"]["seatwright_gpu_summary"]
    assert (summary["source"], summary["count"]) == ("nvidia-smi", 2)


def test_facts_check_mode_writes_no_cache(capsys, node):
    result = run(capsys, gpu_facts, {"cache_path": str(node.cache), "_ansible_check_mode": True})
    assert result["cache_path"] is None and not node.cache.exists()


def test_no_driver_gives_count_zero_with_the_reason(capsys, node):
    node.remove_driver()
    result = run(capsys, gpu_facts, {"backend": "nvidia-smi", "cache_path": ""})
    summary = result["ansible_facts"]["seatwright_gpu_summary"]
    assert "failed" not in result
    assert summary["count"] == 0
    assert "couldn't communicate with the NVIDIA driver" in summary["reason"]


def test_no_driver_fails_only_when_gpus_are_required(capsys, node):
    node.remove_driver()
    result = run(capsys, gpu_facts, {"backend": "nvidia-smi", "cache_path": "", "require_gpus": True, "host": "node-a"})
    assert result["failed"] is True
    assert result["msg"].startswith("host node-a: no NVIDIA GPU found (`nvidia-smi --query-gpu=")
    assert "This play requires GPUs" in result["msg"]


def test_power_limit_check_mode_predicts_change_with_diff_and_sets_nothing(capsys, node):
    result = run(capsys, gpu_settings, {"power_limit_w": 250, "_ansible_check_mode": True, "_ansible_diff": True})
    assert result["changed"] is True
    assert "power limit 300.00 W" in result["diff"]["before"]
    assert "power limit 250.00 W" in result["diff"]["after"]
    assert not node.state.exists()


def test_power_limit_converges_then_reports_no_change(capsys, node):
    first = run(capsys, gpu_settings, {"power_limit_w": 250, "power_overrides": {"1": 225}, "host": "node-a"})
    assert first["changed"] is True and first["backend"] == "nvidia-smi"
    assert node.limits() == [250.0, 225.0]
    second = run(capsys, gpu_settings, {"power_limit_w": 250, "power_overrides": {"1": 225}, "host": "node-a"})
    assert second["changed"] is False
    restored = run(capsys, gpu_settings, {"power_state": "default"})
    assert restored["changed"] is True and node.limits() == [300.0, 300.0]


def test_power_limit_out_of_range_fails_naming_host_gpu_and_range(capsys, node):
    result = run(capsys, gpu_settings, {"power_limit_w": 700, "host": "node-a"})
    assert result["failed"] is True
    assert (
        "host node-a: GPU 0 (NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition) cannot take a power "
        "limit of 700 W: this card accepts 150 W to 300 W" in result["msg"]
    )
    assert not node.state.exists()


def test_power_limit_fails_when_the_card_does_not_take_it(capsys, node):
    node.edit_profile(lambda p: p["gpus"][1]["power"].update(ignores_writes=True))
    result = run(capsys, gpu_settings, {"power_limit_w": 250, "host": "node-a"})
    assert result["failed"] is True
    assert result["msg"] == (
        "host node-a: GPU 1 was asked for a power limit of 250.00 W but reads back 300.00 W; the driver did not "
        "take it (NVML's set call can report success without applying). Check `nvidia-smi -q -d POWER -i 1` and "
        "the driver log."
    )


def test_power_limit_without_gpus_fails_with_the_reason(capsys, node):
    node.remove_driver()
    result = run(capsys, gpu_settings, {"power_limit_w": 250, "host": "node-a", "backend": "nvidia-smi"})
    assert result["failed"] is True
    assert result["msg"].startswith("host node-a: cannot read the GPUs: `nvidia-smi")


def emulator(node):
    return list(json.loads(node.state.read_text())["gpus"].values())


def files(tmp_path):
    return {
        "record_path": str(tmp_path / "state" / "clock.json"),
        "settings_file": str(tmp_path / "etc" / "gpu-settings.json"),
        "boot_bundle": str(tmp_path / "lib" / "gpu-settings.pyz"),
    }


def test_persistence_and_clock_lock_predicted_applied_then_still(capsys, node, tmp_path):
    args = dict(
        files(tmp_path),
        power_limit_w=250,
        persistence=True,
        clock_lock={"min_mhz": 1500, "max_mhz": 2400},
        host="node-a",
    )
    predicted = run(capsys, gpu_settings, dict(args, _ansible_check_mode=True, _ansible_diff=True))
    assert predicted["changed"] is True and not node.state.exists()
    assert [p["changed"] for p in predicted["persistence"]] == [True, True]
    assert predicted["clocks"] == {"before": None, "after": {"min_mhz": 1500, "max_mhz": 2400}, "changed": True}
    assert (
        "clock lock: none" in predicted["diff"]["before"] and "clock lock: 1500-2400 MHz" in predicted["diff"]["after"]
    )
    assert sorted(predicted["files"]) == sorted(files(tmp_path).values())
    assert not (tmp_path / "etc").exists() and not (tmp_path / "lib").exists()

    applied = run(capsys, gpu_settings, args)
    assert applied["changed"] is True
    assert [(g["persistence_mode"], g["clock_lock"]) for g in emulator(node)] == [
        (True, {"min_mhz": 1500, "max_mhz": 2400})
    ] * 2
    settings = json.loads((tmp_path / "etc" / "gpu-settings.json").read_text())
    assert settings == {
        "format": "seatwright-gpu-settings/1",
        "power_limits_w": {"0": 250.0, "1": 250.0},
        "persistence": True,
        "clock_lock": {"min_mhz": 1500, "max_mhz": 2400},
    }

    again = run(capsys, gpu_settings, args)
    assert again["changed"] is False and again["files"] == []

    released = run(capsys, gpu_settings, dict(args, clock_lock=None))
    assert released["changed"] is True and [g["clock_lock"] for g in emulator(node)] == [None, None]


UNIT = "[Unit]\nDescription=seatwright GPU power\n"


@pytest.mark.parametrize("drift", [None, "[Unit]\nDescription=changed by hand\n"])
def test_boot_unit_written_with_the_settings_and_drift_repaired(capsys, node, tmp_path, drift):
    """Issue 25: the boot unit comes with gpu_settings' run (no node_files task of its own per node)."""
    unit = tmp_path / "systemd" / "seatwright-gpu-power.service"
    args = dict(files(tmp_path), power_limit_w=250, host="node-a", boot_unit={"path": str(unit), "content": UNIT})
    run(capsys, gpu_settings, args)
    assert unit.read_text() == UNIT and os.stat(unit).st_mode & 0o7777 == 0o644
    if drift:
        unit.write_text(drift)
    repaired = run(capsys, gpu_settings, args)
    assert repaired["changed"] is bool(drift) and repaired["files"] == ([str(unit)] if drift else [])
    assert unit.read_text() == UNIT


@pytest.mark.parametrize("link_to, enabled", [(None, False), ("unit", True), ("/dev/null", False)])
def test_boot_unit_enabled_read_in_the_same_run(capsys, node, tmp_path, link_to, enabled):
    """The role asks `systemctl enable` only when this says the unit's .wants link is missing or masked."""
    unit = tmp_path / "seatwright-gpu-power.service"
    wants = tmp_path / "multi-user.target.wants" / unit.name
    wants.parent.mkdir()
    if link_to:
        os.symlink(str(unit) if link_to == "unit" else link_to, wants)
    boot_unit = {"path": str(unit), "content": UNIT, "enabled_link": str(wants)}
    result = run(capsys, gpu_settings, {"power_limit_w": 250, "host": "node-a", "boot_unit": boot_unit})
    assert result["boot_unit_enabled"] is enabled


@pytest.mark.parametrize(
    "unit",
    [
        {"path": "relative.service", "content": UNIT},
        {"path": "/etc/x.service"},
        {"path": "/etc/x.service", "content": UNIT, "enabled_link": "x.service"},
    ],
)
def test_malformed_boot_unit_is_refused_with_a_message(capsys, node, unit):
    result = run(capsys, gpu_settings, {"power_limit_w": 250, "host": "node-a", "boot_unit": unit})
    assert result["failed"] is True
    assert result["msg"].startswith("boot_unit: expected an absolute path") or result["msg"].startswith(
        "boot_unit: enabled_link must be an absolute path"
    )


@pytest.mark.parametrize(
    "lock",
    [
        {"min_mhz": 2400, "max_mhz": 1500},
        {"min_mhz": 0, "max_mhz": 10},
        {"min_mhz": "fast", "max_mhz": 10},
        {"max_mhz": 10},
    ],
)
def test_bad_clock_lock_is_refused_before_anything_changes(capsys, node, lock):
    result = run(capsys, gpu_settings, {"clock_lock": lock, "host": "node-a"})
    assert result["failed"] is True
    assert result["msg"].startswith("host node-a: clock lock is ")
    assert "0 < min_mhz <= max_mhz" in result["msg"]
    assert not node.state.exists()


def test_boot_bundle_reapplies_the_settings_after_the_driver_forgets_them(capsys, node, tmp_path):
    """The boot unit's command, run for real: the bundle the module wrote, with the settings it wrote."""
    args = dict(
        files(tmp_path),
        power_limit_w=250,
        power_overrides={"1": 225},
        persistence=True,
        clock_lock={"min_mhz": 1500, "max_mhz": 2400},
        host="node-a",
    )
    run(capsys, gpu_settings, args)
    applied = emulator(node)
    node.state.unlink()  # a reboot: the emulator reports card defaults again
    proc = subprocess.run(
        [sys.executable, args["boot_bundle"], args["settings_file"]],
        capture_output=True,
        text=True,
        check=False,
        env=dict(os.environ, PYTHONPATH=""),
    )
    assert proc.returncode == 0, proc.stderr
    assert emulator(node) == applied
    assert '"limits_w": {"0": 250.0, "1": 225.0}' in proc.stdout


def test_boot_bundle_fails_for_people_on_a_foreign_settings_file(capsys, node, tmp_path):
    args = dict(files(tmp_path), power_limit_w=250, host="node-a")
    run(capsys, gpu_settings, args)
    (tmp_path / "etc" / "gpu-settings.json").write_text("{}")
    proc = subprocess.run(
        [sys.executable, args["boot_bundle"], args["settings_file"]], capture_output=True, text=True, check=False
    )
    assert proc.returncode == 1
    assert "is not seatwright-gpu-settings/1; re-run the gpu_power role" in proc.stderr
    assert "Traceback" not in proc.stderr


def test_telemetry_samples_until_the_stop_file_and_says_emulated(capsys, node, tmp_path):
    import gpu_telemetry

    stop = tmp_path / "stop"
    stop.write_text("")  # already there: one sample, then stop
    result = run(
        capsys, gpu_telemetry, {"backend": "nvidia-smi", "interval_s": 0.1, "duration_s": 30, "stop_file": str(stop)}
    )
    telemetry = result["telemetry"]
    assert result["changed"] is False
    assert telemetry["source"] == "nvidia-smi" and telemetry["emulated"] is True
    assert len(telemetry["samples"]) == 1
    assert [g["index"] for g in telemetry["samples"][0]["gpus"]] == [0, 1]
    assert telemetry["samples"][0]["gpus"][0]["power_limit_w"] > 0


def test_telemetry_without_a_driver_returns_no_samples_and_the_reason(capsys, node):
    import gpu_telemetry

    node.remove_driver()
    result = run(capsys, gpu_telemetry, {"backend": "nvidia-smi", "duration_s": 1})
    assert result["telemetry"]["samples"] == []
    assert "nvidia-smi" in result["telemetry"]["reason"]


def test_telemetry_samples_the_emulated_gpus_until_the_stop_file(capsys, node, tmp_path):
    stop = tmp_path / "stop"
    stop.touch()
    result = run(
        capsys, gpu_telemetry, {"backend": "nvidia-smi", "duration_s": 30, "interval_s": 0.1, "stop_file": str(stop)}
    )
    telemetry = result["telemetry"]
    assert result["changed"] is False
    assert (telemetry["source"], telemetry["emulated"]) == ("nvidia-smi", True)
    assert len(telemetry["samples"]) == 1 and len(telemetry["samples"][0]["gpus"]) == 2


def test_telemetry_without_a_reader_returns_the_reason_not_a_failure(capsys, node):
    node.remove_driver()
    result = run(capsys, gpu_telemetry, {"backend": "nvidia-smi", "duration_s": 1})
    assert result.get("failed") is not True
    assert result["telemetry"]["samples"] == [] and result["telemetry"]["reason"]


def test_telemetry_refuses_an_empty_window(capsys, node):
    result = run(capsys, gpu_telemetry, {"duration_s": 0})
    assert result["failed"] is True and "duration_s must be 1 or more" in result["msg"]
