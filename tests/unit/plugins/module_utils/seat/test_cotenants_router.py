"""Exclusive mode and the router (issue 26 item 3): an evicted co-tenant's router targets are
recorded, drained and taken out, and put back exactly on restore; a router stopped on purpose is
not a live admission plane (the field's restore that rolled back [003]), and one expected up that
does not answer is a warning, never a failed restore. Decisions, seat_cotenants' main() and
router_cotenants' main() against a fake smg and fake seats on 127.0.0.1."""

import json
import os
import socket
import subprocess
import sys

import pytest
import router_cotenants
import seat_cotenants
from ansible.module_utils.testing import patch_module_args
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError
from ansible_collections.seatwright.fleet.plugins.module_utils.router import deploy, lifecycle
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.cotenants import check_cotenants
from conftest import ROOT
from test_seat_cotenants import units  # noqa: F401 (the fake systemctl fixture)

KEY = "sk-router-cotenants-3c9e71a0d2"
SIDE = {"api_base": "http://127.0.0.1:18011/v1", "weight": 100}
LAB = {"api_base": "http://127.0.0.1:18012/v1", "weight": 100}


# ---------------------------------------------------------------- decisions


@pytest.mark.parametrize(
    "prior, current, removed, action, warned",
    [
        # The field's case: the router was exited on purpose after eviction; the restore carries on.
        ("running", "stopped", {"production": {"side": SIDE}}, "skip", False),
        ("stopped", "stopped", {}, "none", False),
        ("stopped", "running", {}, "none", False),
        ("running", "running", {"production": {"side": SIDE}}, "reregister", False),
        ("running", "down", {"production": {"side": SIDE}}, "warn", True),
        ("running", "unreachable", {"production": {"side": SIDE}}, "warn", True),
        (None, None, {}, "none", False),
    ],
)
def test_restore_never_blocks_on_the_router(prior, current, removed, action, warned):
    decided = lifecycle.restore_action(prior, current, removed)
    assert decided["action"] == action
    assert bool(decided.get("warning")) is warned
    if action == "skip":
        assert decided["note"] == lifecycle.STOPPED_NOTE


@pytest.mark.parametrize(
    "state, removals, action",
    [
        ("running", {"production": {"side": SIDE}}, "remove"),
        ("running", {}, "skip"),
        ("stopped", {"production": {"side": SIDE}}, "skip"),
        ("down", {"production": {"side": SIDE}}, "warn"),
        ("unreachable", {"production": {"side": SIDE}}, "warn"),
    ],
)
def test_eviction_takes_targets_out_only_of_a_running_router(state, removals, action):
    assert lifecycle.eviction_action(state, removals)["action"] == action


@pytest.mark.parametrize(
    "word, state",
    [("active", "running"), ("inactive", "stopped"), ("failed", "down"), ("activating", "down"), ("", "down")],
)
def test_systemd_words(word, state):
    assert lifecycle.unit_state(word) == state


def test_only_the_evicted_running_seats_come_out_and_go_back_exactly():
    listing = {"production": {"side": SIDE, "lab": LAB}, "batch": {"side": dict(SIDE, weight=5)}}
    taken = lifecycle.removals([{"name": "a", "router_seat": "side"}, {"name": "b"}], listing)
    assert taken == {"production": {"side": SIDE}, "batch": {"side": dict(SIDE, weight=5)}}
    assert lifecycle.restored_targets({"lab": LAB}, taken["production"]) == {"lab": LAB, "side": SIDE}


@pytest.mark.parametrize(
    "router_seat, fragment",
    [(["side"], "router_seat is \\['side'\\]"), ("a b", "router_seat is 'a b'"), ("", "router_seat is ''")],
)
def test_a_bad_router_seat_is_named(router_seat, fragment):
    with pytest.raises(SeatError, match=fragment):
        check_cotenants("node-a", [{"name": "side", "kind": "systemd", "gpus": [0], "router_seat": router_seat}])


# ---------------------------------------------------------------- seat_cotenants main()


def run(capsys, module, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            module.main()
    return json.loads(capsys.readouterr().out)


def cotenant_args(tmp_path, state, router=None):
    args = {
        "state": state,
        "seat": "big",
        "host_name": "node-a",
        "cotenants": [
            {"name": "side", "kind": "systemd", "gpus": [0], "router_seat": "side"},
            {"name": "idle", "kind": "systemd", "gpus": [0], "router_seat": "idle"},
        ],
        "seat_gpus": [0],
        "record_path": str(tmp_path / "cotenants.json"),
    }
    if router is not None:
        args["router"] = router
    return args


def test_eviction_records_the_router_targets_before_stopping_and_restore_hands_them_back(capsys, tmp_path, units):  # noqa: F811
    (units / "side.service").touch()
    view = {"state": "running", "aliases": {"production": {"side": SIDE, "idle": LAB, "lab": LAB}}}
    recorded = run(capsys, seat_cotenants, cotenant_args(tmp_path, "recorded", view))
    assert recorded.get("router_remove") == {"production": {"side": SIDE}}, recorded.get("msg")
    # Recorded on the node, nothing stopped yet: the router drains first.
    assert (units / "side.service").exists()
    on_disk = json.loads((tmp_path / "cotenants.json").read_text())
    assert on_disk["router"]["state"] == "running" and on_disk["router"]["removed"] == {"production": {"side": SIDE}}
    # The router no longer lists it when eviction stops it: the record keeps what was taken out.
    evicted = run(capsys, seat_cotenants, cotenant_args(tmp_path, "evicted"))
    assert [s["name"] for s in evicted["stopped"]] == ["side.service"]
    assert json.loads((tmp_path / "cotenants.json").read_text())["router"]["removed"] == {"production": {"side": SIDE}}
    restored = run(capsys, seat_cotenants, cotenant_args(tmp_path, "restored"))
    assert restored["started"] == ["side.service"]
    assert restored["router"]["removed"] == {"production": {"side": SIDE}} and restored["router"]["state"] == "running"


def test_a_router_stopped_at_eviction_has_nothing_taken_out(capsys, tmp_path, units):  # noqa: F811
    (units / "side.service").touch()
    view = {"state": "stopped", "aliases": {}}
    recorded = run(capsys, seat_cotenants, cotenant_args(tmp_path, "recorded", view))
    assert recorded.get("router_remove") == {}, recorded.get("msg")
    assert recorded["record"]["router"]["note"] == "router stopped on purpose; nothing taken out of it"


def test_a_view_without_a_state_is_refused_clearly(capsys, tmp_path, units):  # noqa: F811
    result = run(capsys, seat_cotenants, cotenant_args(tmp_path, "recorded", {"aliases": {}}))
    assert result.get("failed") and "router's view" in result["msg"] and "tasks_from=cotenants" in result["msg"]


# ---------------------------------------------------------------- router_cotenants main(), fake smg


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def smg(tmp_path):
    """A fake smg under the router's pid file, a fake seat behind it registered as `side`."""
    port = free_port()
    found = deploy.plan(
        {
            "kind": "smg",
            "port": port,
            "bind": "127.0.0.1",
            "version": None,
            "config_dir": str(tmp_path / "etc"),
            "state_dir": str(tmp_path / "var"),
            "user": "",
        }
    )
    lay, spec = found["layout"], found["specs"]["smg"]
    os.makedirs(lay["config_dir"])
    os.makedirs(os.path.join(lay["state_dir"], "run"))
    with open(lay["env_file"], "w") as handle:
        handle.write(deploy.env_file_text("smg", KEY))
    router = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "fake_smg.py"), "--port", str(port), "--model", "production"],
        stdout=subprocess.PIPE,
        env=dict(os.environ, FAKE_SMG_KEY=KEY),
        text=True,
    )
    router.stdout.readline()
    with open(os.path.join(lay["state_dir"], "run", spec["unit"] + ".pid"), "w") as handle:
        handle.write("%d\n" % router.pid)
    seat = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "router_backend.py"), "--name", "side", "--model", "production"]
        + ["--port", "0"],
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    seat_url = "http://127.0.0.1:%s" % seat.stdout.readline().split()[-1]
    args = {
        "kind": "smg",
        "port": port,
        "bind": "127.0.0.1",
        "config_dir": str(tmp_path / "etc"),
        "state_dir": str(tmp_path / "var"),
        "user": "",
        "service_manager": "process",
        "aliases": {"production": "production"},
        "timeout_s": 20,
    }
    yield {"args": args, "router": router, "seat": seat_url, "lay": lay}
    for proc in (router, seat):
        proc.terminate()
        proc.wait(timeout=10)


def test_the_router_drains_and_removes_then_puts_back_exactly(capsys, smg):
    target = {"api_base": smg["seat"] + "/v1", "weight": 1}
    put = run(
        capsys,
        router_cotenants,
        dict(smg["args"], state="restored", prior="running", removed={"production": {"side": target}}),
    )
    assert put["action"] == "reregister" and put["changed"] is True, put
    seen = run(capsys, router_cotenants, dict(smg["args"], state="observed"))
    assert seen["state"] == "running" and seen["aliases"]["production"] == {
        "side": {"api_base": smg["seat"], "weight": 1}
    }
    removed = run(
        capsys,
        router_cotenants,
        dict(smg["args"], state="removed", removed={"production": seen["aliases"]["production"]}),
    )
    assert removed["action"] == "remove" and removed["changed"] is True
    assert removed["removed"][0]["drained"]["running"] == 0
    assert run(capsys, router_cotenants, dict(smg["args"], state="observed"))["aliases"]["production"] == {}
    back = run(
        capsys,
        router_cotenants,
        dict(smg["args"], state="restored", prior="running", removed={"production": seen["aliases"]["production"]}),
    )
    assert back["action"] == "reregister"
    assert run(capsys, router_cotenants, dict(smg["args"], state="observed"))["aliases"]["production"] == {
        "side": {"api_base": smg["seat"], "weight": 1}
    }


def test_a_router_exited_on_purpose_does_not_fail_the_restore(capsys, smg):
    """The field's case: the router was stopped after the eviction; the healthy restore carries on."""
    smg["router"].terminate()
    smg["router"].wait(timeout=10)
    result = run(
        capsys,
        router_cotenants,
        dict(smg["args"], state="restored", prior="running", removed={"production": {"side": SIDE}}),
    )
    assert not result.get("failed"), result
    assert result["state"] == "stopped" and result["action"] == "skip"
    assert result["note"] == "router stopped on purpose; targets not re-registered"
    assert KEY not in json.dumps(result)


def test_a_router_up_but_not_answering_is_a_warning_not_a_failure(capsys, smg):
    # Its process lives, but its key file is gone: it cannot be asked for its listing.
    os.unlink(smg["lay"]["env_file"])
    result = run(
        capsys,
        router_cotenants,
        dict(smg["args"], state="restored", prior="running", removed={"production": {"side": SIDE}}),
    )
    assert not result.get("failed"), result
    assert result["state"] == "unreachable" and result["action"] == "warn"
    assert "router expected up but unreachable" in result["warning"] and "side" in result["warning"]
