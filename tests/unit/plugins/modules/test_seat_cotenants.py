"""seat_cotenants through its main(): evict, restore, check mode, and a restore that fails.

systemctl is a stand-in on PATH that keeps each unit's state as a file, so the module's own
calls (is-active, stop, start) are what move the state. A bare unit name is declared as
`<name>.service`.
"""

import json

import pytest
import seat_cotenants
from ansible.module_utils.testing import patch_module_args

FAKE_SYSTEMCTL = """#!/bin/sh
units=%s
case "$1" in
  is-active) if [ -e "$units/$2" ]; then echo active; exit 0; fi; echo inactive; exit 3;;
  stop) rm -f "$units/$2"; exit 0;;
  start) if [ -e "$units/$2.broken" ]; then echo "unit $2 failed" >&2; exit 1; fi; touch "$units/$2"; exit 0;;
esac
exit 2
"""


# docker ps for the seats running on the node: one "seat" per line of the file, in PS_FORMAT.
FAKE_DOCKER = """#!/bin/sh
[ "$1" = ps ] || exit 2
[ -e %s ] || exit 0
while read -r seat; do
  printf 'seatwright-%%s-rank0\\tseatwright/vllm-cpu:x\\trunning\\t%%s\\t0\\n' "$seat" "$seat"
done <%s
"""


@pytest.fixture
def units(tmp_path, monkeypatch):
    folder = tmp_path / "units"
    folder.mkdir()
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "systemctl").write_text(FAKE_SYSTEMCTL % folder)
    (bin_dir / "systemctl").chmod(0o755)
    seats = tmp_path / "seats-running"
    (bin_dir / "docker").write_text(FAKE_DOCKER % (seats, seats))
    (bin_dir / "docker").chmod(0o755)
    monkeypatch.setenv("PATH", "%s:%s" % (bin_dir, "/usr/bin:/bin"))
    return folder


def run(capsys, args, check_mode=False):
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            seat_cotenants.main()
    return json.loads(capsys.readouterr().out)


def base(tmp_path, state):
    return {
        "state": state,
        "seat": "lab",
        "host_name": "node-a",
        "cotenants": [
            {"name": "embedder", "kind": "systemd", "gpus": [1]},
            {"name": "idle", "kind": "systemd", "gpus": [0]},
            {"name": "other-gpu", "kind": "systemd", "gpus": [3]},
        ],
        "seat_gpus": [0, 1],
        "record_path": str(tmp_path / "cotenants.json"),
    }


def test_evict_then_restore_puts_back_only_what_was_running(capsys, tmp_path, units):
    (units / "embedder.service").touch()
    (units / "other-gpu.service").touch()
    evicted = run(capsys, base(tmp_path, "evicted"))
    assert evicted["changed"] is True
    assert [(s["name"], s["how"]) for s in evicted["stopped"]] == [("embedder.service", "stopped")]
    assert not (units / "embedder.service").exists() and (units / "other-gpu.service").exists()
    assert json.loads((tmp_path / "cotenants.json").read_text())["seat"] == "lab"
    again = run(capsys, base(tmp_path, "evicted"))
    assert again["changed"] is False
    restored = run(capsys, base(tmp_path, "restored"))
    assert restored["changed"] is True and restored["started"] == ["embedder.service"]
    assert (units / "embedder.service").exists() and not (units / "idle.service").exists()
    assert not (tmp_path / "cotenants.json").exists()
    assert run(capsys, base(tmp_path, "restored"))["changed"] is False


def test_check_mode_stops_and_records_nothing(capsys, tmp_path, units):
    (units / "embedder.service").touch()
    result = run(capsys, base(tmp_path, "evicted"), check_mode=True)
    assert result["changed"] is True and result["stopped"][0]["how"] == "would stop"
    assert (units / "embedder.service").exists() and not (tmp_path / "cotenants.json").exists()


def test_a_failed_restore_keeps_the_record_and_says_so(capsys, tmp_path, units):
    (units / "embedder.service").touch()
    run(capsys, base(tmp_path, "evicted"))
    (units / "embedder.service.broken").touch()
    result = run(capsys, base(tmp_path, "restored"))
    assert result["failed"] is True
    assert result["msg"].startswith("host node-a: co-tenants not restored: could not start systemd embedder.service")
    assert "teardown.yml retries" in result["msg"] and result["started"] == []
    assert (tmp_path / "cotenants.json").exists()


def test_a_bad_declaration_is_named_not_a_traceback(capsys, tmp_path, units):
    result = run(capsys, dict(base(tmp_path, "evicted"), cotenants=[{"name": "x; rm -rf /", "kind": "systemd"}]))
    assert result["failed"] is True
    assert result["msg"].startswith("host node-a: ")
    assert "Traceback" not in result["msg"]


def test_two_seats_on_a_node_restore_the_cotenants_only_when_the_last_goes(capsys, tmp_path, units):
    (units / "embedder.service").touch()
    first, second = base(tmp_path, "evicted"), dict(base(tmp_path, "evicted"), seat="lab-allcores")
    run(capsys, first)
    run(capsys, second)
    assert json.loads((tmp_path / "cotenants.json").read_text())["holders"] == ["lab", "lab-allcores"]
    (tmp_path / "seats-running").write_text("lab-allcores\n")
    held = run(capsys, base(tmp_path, "restored"))
    assert held["started"] == [] and held["held_by"] == ["lab-allcores"] and held["changed"] is True
    assert not (units / "embedder.service").exists()
    assert json.loads((tmp_path / "cotenants.json").read_text())["holders"] == ["lab-allcores"]
    (tmp_path / "seats-running").write_text("")
    restored = run(capsys, dict(base(tmp_path, "restored"), seat="lab-allcores"))
    assert restored["started"] == ["embedder.service"] and restored["held_by"] == []
    assert (units / "embedder.service").exists() and not (tmp_path / "cotenants.json").exists()


def test_a_cotenant_started_by_hand_under_a_seat_comes_back_after_it(capsys, tmp_path, units):
    run(capsys, base(tmp_path, "evicted"))  # embedder not running: recorded as stopped
    (units / "embedder.service").touch()  # started by hand while the seat runs
    again = run(capsys, base(tmp_path, "evicted"))
    assert [s["name"] for s in again["stopped"]] == ["embedder.service"]
    restored = run(capsys, base(tmp_path, "restored"))
    assert restored["started"] == ["embedder.service"] and (units / "embedder.service").exists()
