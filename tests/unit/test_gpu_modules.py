"""The gpu_facts and gpu_power_limit modules, run through patch_module_args against the lab emulator.

The emulator is installed as `nvidia-smi` on a temporary PATH, exactly as the lab installs it, so the
modules' nvidia-smi reader, their parsing and their setters run for real.
"""
import json

import pytest
from ansible.module_utils.testing import patch_module_args

import gpu_facts
import gpu_power_limit
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
    assert (summary["driver_version"], summary["cuda_version"], summary["source"]) == ("580.159.04", "13.0",
                                                                                       "nvidia-smi")
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
    result = run(capsys, gpu_facts, {"backend": "nvidia-smi", "cache_path": "", "require_gpus": True,
                                     "host": "node-a"})
    assert result["failed"] is True
    assert result["msg"].startswith("host node-a: no NVIDIA GPU found (`nvidia-smi --query-gpu=")
    assert "This play requires GPUs" in result["msg"]


def test_power_limit_check_mode_predicts_change_with_diff_and_sets_nothing(capsys, node):
    result = run(capsys, gpu_power_limit, {"limit_w": 250, "_ansible_check_mode": True, "_ansible_diff": True})
    assert result["changed"] is True
    assert "power limit 300.00 W" in result["diff"]["before"]
    assert "power limit 250.00 W" in result["diff"]["after"]
    assert not node.state.exists()


def test_power_limit_converges_then_reports_no_change(capsys, node):
    first = run(capsys, gpu_power_limit, {"limit_w": 250, "overrides": {"1": 225}, "host": "node-a"})
    assert first["changed"] is True and first["backend"] == "nvidia-smi"
    assert node.limits() == [250.0, 225.0]
    second = run(capsys, gpu_power_limit, {"limit_w": 250, "overrides": {"1": 225}, "host": "node-a"})
    assert second["changed"] is False
    restored = run(capsys, gpu_power_limit, {"state": "default"})
    assert restored["changed"] is True and node.limits() == [300.0, 300.0]


def test_power_limit_out_of_range_fails_naming_host_gpu_and_range(capsys, node):
    result = run(capsys, gpu_power_limit, {"limit_w": 700, "host": "node-a"})
    assert result["failed"] is True
    assert "host node-a: GPU 0 (NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition) cannot take a power " \
           "limit of 700 W: this card accepts 150 W to 300 W" in result["msg"]
    assert not node.state.exists()


def test_power_limit_fails_when_the_card_does_not_take_it(capsys, node):
    node.edit_profile(lambda p: p["gpus"][1]["power"].update(ignores_writes=True))
    result = run(capsys, gpu_power_limit, {"limit_w": 250, "host": "node-a"})
    assert result["failed"] is True
    assert result["msg"] == (
        "host node-a: GPU 1 was asked for a power limit of 250.00 W but reads back 300.00 W; the driver did not "
        "take it (NVML's set call can report success without applying). Check `nvidia-smi -q -d POWER -i 1` and "
        "the driver log.")


def test_power_limit_without_gpus_fails_with_the_reason(capsys, node):
    node.remove_driver()
    result = run(capsys, gpu_power_limit, {"limit_w": 250, "host": "node-a", "backend": "nvidia-smi"})
    assert result["failed"] is True
    assert result["msg"].startswith("host node-a: cannot read GPU power limits: `nvidia-smi")


def test_telemetry_samples_until_the_stop_file_and_says_emulated(capsys, node, tmp_path):
    import gpu_telemetry
    stop = tmp_path / "stop"
    stop.write_text("")  # already there: one sample, then stop
    result = run(capsys, gpu_telemetry, {"backend": "nvidia-smi", "interval_s": 0.1, "duration_s": 30,
                                         "stop_file": str(stop)})
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
