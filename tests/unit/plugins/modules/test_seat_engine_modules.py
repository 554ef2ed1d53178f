"""seat_engine and seat_engine_probe through patch_module_args, against a stand-in Docker."""

import json
import os
import stat

import pytest
import seat_engine
import seat_engine_probe
from ansible.module_utils.testing import patch_module_args
from ansible_collections.seatwright.fleet.plugins.module_utils.io.seat import engine as io_engine
from test_container import IMAGE_ENV, IMAGE_ID, KEY, h200_plan, inspect_of, lab_plan


class FakeDocker:
    """The few docker calls bring-up makes, answered from what this stand-in 'started'."""

    def __init__(self, spec, secrets):
        self.spec, self.secrets = spec, secrets
        self.containers = {}
        self.calls = []

    def docker(self, *args, **kwargs):
        self.calls.append(list(args))
        if args[:2] == ("container", "inspect"):
            found = self.containers.get(args[2])
            return (0, json.dumps([found]), "") if found else (1, "", "Error: No such container: %s" % args[2])
        if args[:2] == ("image", "inspect"):
            return 0, (json.dumps(IMAGE_ENV) if "{{json .Config.Env}}" in args else IMAGE_ID + "\n"), ""
        if args[0] == "run":
            inspect = inspect_of(self.spec, self.secrets)
            label = next(a for a in args if a.startswith("io.seatwright.spec="))
            inspect["Config"]["Labels"]["io.seatwright.spec"] = label.split("=", 1)[1]
            inspect["Id"] = "c0ffee" * 10
            self.containers[self.spec["name"]] = inspect
            return 0, inspect["Id"] + "\n", ""
        raise AssertionError("unexpected docker call %s" % (args,))

    def state(self, name):
        found = self.containers.get(name)
        return {
            "exists": bool(found),
            "running": bool(found),
            "id": found and found["Id"],
            "labels": found["Config"]["Labels"] if found else {},
        }

    def remove(self, name, timeout):
        return self.containers.pop(name, None) is not None


@pytest.fixture
def lab_spec():
    return lab_plan("lab")["ranks"][0]["container_spec"]


@pytest.fixture
def fake(monkeypatch, lab_spec):
    docker = FakeDocker(lab_spec, {"seat_api_key": KEY})
    monkeypatch.setattr(io_engine, "docker", docker.docker)
    monkeypatch.setattr(io_engine, "container_state", docker.state)
    monkeypatch.setattr(io_engine, "remove_container", docker.remove)
    monkeypatch.setattr(io_engine, "containers_labelled", lambda label, value: list(docker.containers))
    return docker


def run(capsys, module, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            module.main()
    return json.loads(capsys.readouterr().out)


def started(spec, tmp_path, **more):
    args = dict(
        state="started",
        spec=spec,
        secrets={"seat_api_key": KEY},
        image_id=IMAGE_ID,
        env_dir=str(tmp_path),
        host_name="node-a",
    )
    args.update(more)
    return args


def test_starts_the_spec_then_keeps_it(capsys, tmp_path, fake, lab_spec):
    first = run(capsys, seat_engine, started(lab_spec, tmp_path))
    assert (first["changed"], first["action"], first["drift"]) == (True, "started", [])
    (run_call,) = [call for call in fake.calls if call[0] == "run"]
    assert (
        run_call[run_call.index("--entrypoint") + 1 :]
        == [lab_spec["entrypoint"], lab_spec["image"]] + lab_spec["command"]
    )
    assert KEY not in json.dumps(run_call) and KEY not in json.dumps(first)
    env_file = tmp_path / (lab_spec["name"] + ".env")
    assert stat.S_IMODE(os.stat(env_file).st_mode) == 0o600
    assert "VLLM_API_KEY=%s\n" % KEY in env_file.read_text()
    again = run(capsys, seat_engine, started(lab_spec, tmp_path))
    assert (again["changed"], again["action"], again["spec_hash"]) == (False, "kept", first["spec_hash"])


def test_a_container_changed_behind_its_back_is_replaced_and_named(capsys, tmp_path, fake, lab_spec):
    run(capsys, seat_engine, started(lab_spec, tmp_path))
    fake.containers[lab_spec["name"]]["HostConfig"]["ShmSize"] = 64 * 1024**2
    result = run(capsys, seat_engine, started(lab_spec, tmp_path))
    assert (result["changed"], result["action"]) == (True, "replaced")
    assert result["drift"] == [
        "seatwright-lab-rank0: shm_size_bytes: 67108864, the plan says 2147483648",
    ]


def test_check_mode_starts_nothing(capsys, tmp_path, fake, lab_spec):
    result = run(capsys, seat_engine, dict(started(lab_spec, tmp_path), _ansible_check_mode=True))
    assert (result["changed"], result["action"]) == (True, "started")
    assert not [call for call in fake.calls if call[0] == "run"]


def test_another_image_id_fails_before_anything_starts(capsys, tmp_path, fake, lab_spec):
    result = run(capsys, seat_engine, started(lab_spec, tmp_path, image_id="sha256:" + "99" * 32))
    assert result["failed"] and "every node must run the same image" in result["msg"]
    assert "Traceback" not in result["msg"]


def test_a_spec_from_an_older_plan_is_refused(capsys, tmp_path, fake, lab_spec):
    spec = {k: v for k, v in lab_spec.items() if k != "secrets"}
    result = run(capsys, seat_engine, started(spec, tmp_path))
    assert result["failed"] and "lacks secrets; plan the seat again" in result["msg"]


def test_absent_removes_the_seat_and_its_env_files(capsys, tmp_path, fake, lab_spec):
    run(capsys, seat_engine, started(lab_spec, tmp_path))
    result = run(capsys, seat_engine, dict(state="absent", seat="lab", env_dir=str(tmp_path)))
    assert (result["changed"], result["removed"]) == (True, [lab_spec["name"]])
    assert not (tmp_path / (lab_spec["name"] + ".env")).exists()


def test_the_probe_reads_every_field_back_and_names_a_difference(capsys, tmp_path, fake, lab_spec, monkeypatch):
    run(capsys, seat_engine, started(lab_spec, tmp_path))
    monkeypatch.setattr(
        io_engine,
        "probe",
        lambda names, *a: {
            "containers": [{"name": names[0], "running": True, "log": "no NCCL here\n"}],
            "evidence_files": {},
        },
    )
    args = dict(
        names=[lab_spec["name"]],
        host="node-a",
        log_tail=0,
        expected_specs=[lab_spec],
        secrets={"seat_api_key": KEY},
        image_id=IMAGE_ID,
        transports={"multi_node": False, "roce": False},
    )
    assert run(capsys, seat_engine_probe, args)["differences"] == []
    fake.containers[lab_spec["name"]]["Config"]["Env"].append("VLLM_API_KEY=other")
    result = run(capsys, seat_engine_probe, args)
    assert result["differences"] == [
        "node-a: seatwright-lab-rank0: env VLLM_API_KEY: differs from the secret seat_api_key (value not shown)"
    ]
    assert "log" not in result["containers"][0] and result["nccl"]["flag"] is None


def test_an_sglang_key_in_the_process_argv_is_compared_by_hash_and_never_returned(capsys, tmp_path, monkeypatch):
    # The recipe records no image reference yet; the test names one.
    spec = dict(h200_plan("inkling-small")["ranks"][0]["container_spec"], image="lmsysorg/sglang:test")
    secrets = {"seat_api_key": KEY}
    docker = FakeDocker(spec, secrets)
    monkeypatch.setattr(io_engine, "docker", docker.docker)
    monkeypatch.setattr(io_engine, "container_state", docker.state)
    assert run(capsys, seat_engine, started(spec, tmp_path))["action"] == "started"
    (run_call,) = [call for call in docker.calls if call[0] == "run"]
    assert (
        run_call[-2:] == ["--api-key", KEY] and "VLLM_API_KEY" not in (tmp_path / (spec["name"] + ".env")).read_text()
    )
    process_argv = [spec["entrypoint"]] + spec["command"] + ["--api-key", KEY]
    monkeypatch.setattr(
        io_engine,
        "probe",
        lambda names, *a: {
            "containers": [{"name": names[0], "running": True, "argv": list(process_argv), "env": {}}],
            "evidence_files": {},
        },
    )
    args = dict(
        names=[spec["name"]],
        read_process=True,
        expected_argv=[spec["entrypoint"]] + spec["command"],
        expected_env={},
        expected_specs=[spec],
        secrets=secrets,
        image_id=IMAGE_ID,
    )
    result = run(capsys, seat_engine_probe, args)
    assert result["differences"] == []
    assert result["containers"][0]["argv"][-2:] == ["--api-key", "<secret seat_api_key>"]
    assert KEY not in json.dumps(result)
    process_argv[-1] = "guessed"
    result = run(capsys, seat_engine_probe, args)
    assert result["differences"] == [
        "this node: the engine runs a different command line than the plan: argument %d is "
        "'<not the secret seat_api_key>', the plan says '<secret seat_api_key>'" % (len(process_argv) - 1)
    ]
