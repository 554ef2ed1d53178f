"""Issue 23: where the seat's API key travels (items 2, 6), the telemetry stop file (item 7), wildcard
binds and env-file lines (low), and the key watcher the lab check runs under (must show).

Each test is named after what it attacks.
"""

import json
import os
import stat
import subprocess
import sys
import time
import urllib.parse

import gpu_telemetry
import pytest
import seat_engine
import yaml
from ansible_collections.seatwright.fleet.plugins.module_utils.node.contract import is_fabric_address
from ansible_collections.seatwright.fleet.plugins.module_utils.weights.staging import check_bind_address
from conftest import ROOT
from test_container import KEY, h200_plan, lab_plan
from test_gpu_modules import node  # noqa: F401  (fixture)
from test_gpu_modules import run as run_module
from test_qualify_client import FakeEngine, engine, load_cli, write_recipe  # noqa: F401  (engine: fixture)
from test_seat_engine_modules import FakeDocker, fake, lab_spec, started  # noqa: F401  (fixtures)

SECRET_WORDS = ("api_key", "token", "secret", "password")


def tasks_of(path):
    """Every task dict of a tasks file or playbook, blocks and their rescue/always included."""

    def walk(items):
        for item in items or []:
            if not isinstance(item, dict):
                continue
            yield item
            for key in ("block", "rescue", "always", "tasks", "pre_tasks", "post_tasks", "handlers"):
                yield from walk(item.get(key))

    return list(walk(yaml.safe_load(path.read_text()) or []))


ANSIBLE_YAML = sorted(ROOT.glob("roles/*/tasks/*.yml")) + sorted(ROOT.glob("playbooks/*.yml"))


# ---------------------------------------------------------------- item 2: the key on command lines


def test_no_task_hands_a_secret_to_ansible_environment_where_ps_and_vvv_show_it():
    # Ansible writes `environment:` into the `/bin/sh -c` line it runs: visible in ps and -vvv.
    leaks = [
        "%s: %s" % (path.relative_to(ROOT), task.get("name"))
        for path in ANSIBLE_YAML
        for task in tasks_of(path)
        if "environment" in task and any(word in json.dumps(task["environment"]).lower() for word in SECRET_WORDS)
    ]
    assert leaks == []


@pytest.mark.parametrize(
    "tasks_file, key_var",
    [("roles/qualify/tasks/main.yml", "qualify_api_key"), ("roles/seat_bench/tasks/run.yml", "seat_bench_api_key")],
)
def test_the_role_hands_the_key_in_a_private_0600_file_that_is_removed(tasks_file, key_var):
    tasks = tasks_of(ROOT / tasks_file)
    writes = [t for t in tasks if key_var in json.dumps(t.get("ansible.builtin.copy", {}))]
    assert len(writes) == 1 and writes[0]["no_log"] is True and writes[0]["ansible.builtin.copy"]["mode"] == "0600"
    folders = [t for t in tasks if t.get("ansible.builtin.file", {}).get("state") == "directory"]
    assert len(folders) == 1 and folders[0]["ansible.builtin.file"]["mode"] == "0700"
    (command,) = [t for t in tasks if "ansible.builtin.command" in t]
    assert "--api-key-file" in command["ansible.builtin.command"]["argv"]
    assert "--api-key-env" not in command["ansible.builtin.command"]["argv"]
    (block,) = [t for t in tasks if "block" in t and command in t["block"]]
    assert any(t.get("ansible.builtin.file", {}).get("state") == "absent" for t in block["always"])


@pytest.mark.parametrize(
    "role, tasks_file, folder_var",
    [
        ("qualify", "roles/qualify/tasks/main.yml", "__qualify_private"),
        ("seat_bench", "roles/seat_bench/tasks/run.yml", "__seat_bench_private"),
    ],
)
def test_a_sigkilled_play_leaves_no_key_file_past_the_next_run(role, tasks_file, folder_var):
    # Issue 50 item 8: a play killed before its `always` left the 0600 api-key file in $TMPDIR for
    # good (a tempfile folder nobody names again). The key folder now has a fixed place in the
    # checkout's .cache/private, and the block removes it before it writes the key.
    tasks = tasks_of(ROOT / tasks_file)
    (block,) = [t for t in tasks if "block" in t and any("ansible.builtin.command" in x for x in t["block"])]
    first = block["block"][0].get("ansible.builtin.file", {})
    assert first.get("state") == "absent" and folder_var in str(first.get("path")), block["block"][0]
    assert not any("ansible.builtin.tempfile" in t for t in block["block"])
    (write,) = [t for t in block["block"] if "ansible.builtin.copy" in t]
    assert folder_var in write["ansible.builtin.copy"]["dest"]
    place = yaml.safe_load((ROOT / "roles" / role / "vars" / "main.yml").read_text())[folder_var]
    assert "/.cache/private/" in place and "TMPDIR" not in place


def test_qualify_and_bench_keep_their_progress_off_the_task_result():
    # Issue 50 item 2: a command's stderr is in its task result, which -v prints.
    for tasks_file in ("roles/qualify/tasks/main.yml", "roles/seat_bench/tasks/run.yml"):
        (command,) = [t for t in tasks_of(ROOT / tasks_file) if "ansible.builtin.command" in t]
        assert command["environment"].get("SEATWRIGHT_PROGRESS_QUIET") == "1", tasks_file


def key_file(tmp_path, value=KEY, mode=0o600):
    path = tmp_path / "api-key"
    path.write_text(value + "\n")
    path.chmod(mode)
    return path


def test_qualify_takes_the_key_from_a_0600_file_and_sends_it_only_as_the_header(engine, tmp_path):  # noqa: F811
    FakeEngine.seen = []
    evidence = tmp_path / "evidence"
    args = ["--base-url", engine, "--model", "smol", "--recipe", str(write_recipe(tmp_path, ["smoke"]))]
    status = load_cli().main(
        args + ["--evidence-dir", str(evidence), "--api-key-file", str(key_file(tmp_path)), "--parts", "gates"]
    )
    assert status in (0, 3)
    assert FakeEngine.seen and {seen["auth"] for seen in FakeEngine.seen} == {"Bearer " + KEY}
    assert KEY not in (evidence / "qualification.json").read_text()


@pytest.mark.parametrize(
    "plant, message",
    [
        (lambda p: key_file(p, mode=0o644), "is readable by others (mode 0644); chmod 600 it"),
        (lambda p: (p / "link").symlink_to(key_file(p)) or p / "link", "cannot open it"),
        (lambda p: key_file(p, value=""), "the file must hold the key alone on one line"),
        (lambda p: p / "absent", "cannot open it: No such file or directory"),
    ],
    ids=["group-readable", "planted-link", "empty", "missing"],
)
def test_a_key_file_others_could_read_or_plant_is_refused(engine, tmp_path, capsys, plant, message):  # noqa: F811
    path = plant(tmp_path)
    recipe = write_recipe(tmp_path, ["smoke"])
    argv = ["--base-url", engine, "--recipe", str(recipe), "--evidence-dir", str(tmp_path / "e")]
    assert load_cli().main(argv + ["--api-key-file", str(path)]) == 2
    assert message in capsys.readouterr().err


FAKE_AIPERF = """#!{python}
import json, os, sys, time
time.sleep(1.5)
with open({out!r}, "w") as handle:
    json.dump({{"argv": sys.argv[1:], "env": os.environ.get({env!r})}}, handle)
"""


def test_aiperf_gets_the_key_inside_its_process_never_on_any_command_line(tmp_path):
    # AIPerf 0.13 expands no ${VAR} on its command line: it sent the literal placeholder as the key.
    from ansible_collections.seatwright.fleet.plugins.module_utils.io.bench.runner import AIPERF_KEY_ENV, keyed_launch
    from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.keywatch import CmdlineSampler

    fake_aiperf = tmp_path / "aiperf"
    out = tmp_path / "seen.json"
    fake_aiperf.write_text(FAKE_AIPERF.format(python=sys.executable, out=str(out), env=AIPERF_KEY_ENV))
    fake_aiperf.chmod(0o755)
    argv, env = keyed_launch([str(fake_aiperf), "profile", "--model", "tiny"], KEY)
    sampler = CmdlineSampler(0.1).start()
    try:
        assert subprocess.run(argv, env=env, check=False, timeout=60).returncode == 0
    finally:
        sampler.stop()
    seen = json.loads(out.read_text())
    assert seen == {"argv": ["profile", "--model", "tiny", "--api-key", KEY], "env": None}
    assert sampler.samples > 5 and any(str(fake_aiperf).encode() in line for _pid, line in sampler.seen)
    assert not [line for _pid, line in sampler.seen if KEY.encode() in line]


# ---------------------------------------------------------------- item 6: the key per engine


@pytest.mark.parametrize("engine_name", ["vllm", "sglang"])
def test_the_key_stays_out_of_the_plan_and_what_bring_up_returns_for_every_engine(
    capsys, tmp_path, monkeypatch, engine_name
):
    from ansible_collections.seatwright.fleet.plugins.module_utils.io.seat import engine as io_engine

    plan = lab_plan("lab") if engine_name == "vllm" else h200_plan("inkling-small")
    spec = dict(plan["ranks"][0]["container_spec"], image="seatwright/test:1")
    docker = FakeDocker(spec, {"seat_api_key": KEY})
    monkeypatch.setattr(io_engine, "docker", docker.docker)
    monkeypatch.setattr(io_engine, "container_state", docker.state)
    result = run_module(capsys, seat_engine, started(spec, tmp_path))
    assert result["action"] == "started" and KEY not in json.dumps(result) and KEY not in json.dumps(plan)
    env_file = tmp_path / (spec["name"] + ".env")
    assert stat.S_IMODE(env_file.stat().st_mode) == 0o600
    (run_call,) = [call for call in docker.calls if call[0] == "run"]
    # vLLM reads VLLM_API_KEY from the 0600 env file; SGLang only takes --api-key (documented note).
    assert (KEY in run_call) == (engine_name == "sglang")
    assert ("VLLM_API_KEY=" + KEY in env_file.read_text()) == (engine_name == "vllm")


# ---------------------------------------------------------------- item 7: the telemetry stop file


def test_a_stop_file_planted_in_a_shared_tmp_folder_is_refused_not_obeyed(capsys, node, tmp_path):  # noqa: F811
    shared = tmp_path / "tmp"
    shared.mkdir()
    shared.chmod(0o1777)
    (shared / "seatwright-telemetry-lab.stop").write_text("")  # planted by another user
    args = {"backend": "nvidia-smi", "interval_s": 0.1, "duration_s": 2}
    result = run_module(capsys, gpu_telemetry, dict(args, stop_file=str(shared / "seatwright-telemetry-lab.stop")))
    assert result.get("failed") is True
    assert "can be written by others (mode 1777)" in result["msg"] and "private per-run folder" in result["msg"]


def test_the_stop_file_is_not_a_predictable_tmp_name_a_planted_link_could_redirect():
    stop_file = yaml.safe_load((ROOT / "roles/seat_bench/vars/main.yml").read_text())["__seat_bench_stop_file"]
    assert not stop_file.startswith("/tmp")
    start = tasks_of(ROOT / "roles/seat_bench/tasks/telemetry_start.yml")
    (private,) = [t for t in start if t.get("ansible.builtin.tempfile", {}).get("state") == "directory"]
    assert private["register"] in stop_file


# ---------------------------------------------------------------- low: wildcard binds, env-file lines


@pytest.mark.parametrize("address", ["0.0.0.0", "::", "::ffff:0.0.0.0", " ::ffff:0:0 "])
def test_an_ipv4_mapped_wildcard_does_not_pass_the_bind_check(address):
    problem = check_bind_address(address)
    assert problem is not None and "would listen on every network" in problem
    assert is_fabric_address(address) is False


def test_an_ipv4_mapped_loopback_is_no_fabric_address():
    assert is_fabric_address("::ffff:127.0.0.1") is False and is_fabric_address("::ffff:10.77.0.11") is True


@pytest.mark.parametrize("host", ["0.0.0.0", "::", "::ffff:0.0.0.0"])
def test_a_seat_on_every_interface_without_a_key_is_refused(capsys, tmp_path, fake, lab_spec, host):  # noqa: F811
    command = list(lab_spec["command"])
    command[command.index("--host") + 1] = host
    spec = dict(lab_spec, command=command)
    result = run_module(capsys, seat_engine, started(spec, tmp_path, secrets={"seat_api_key": ""}))
    assert result.get("failed") is True
    assert "every interface (%s) with no API key" % host in result["msg"] and "seat_api_key" in result["msg"]
    assert not [call for call in fake.calls if call[0] == "run"]


def test_a_seat_on_every_interface_with_a_key_starts(capsys, tmp_path, fake, lab_spec):  # noqa: F811
    command = list(lab_spec["command"])
    command[command.index("--host") + 1] = "0.0.0.0"
    fake.spec = spec = dict(lab_spec, command=command)
    assert run_module(capsys, seat_engine, started(spec, tmp_path))["action"] == "started"


@pytest.mark.parametrize(
    "env, message",
    [
        ({"LAB_NOTE": "ok\nVLLM_API_KEY=stolen"}, "env LAB_NOTE: its value holds a line break"),
        ({"LAB_NOTE": "ok\rLD_PRELOAD=/tmp/x.so"}, "env LAB_NOTE: its value holds a line break"),
        ({"LAB\nLD_PRELOAD": "/tmp/x.so"}, "not a variable name"),
    ],
)
def test_an_env_value_with_a_line_break_cannot_add_lines_to_the_engine_env_file(
    capsys,
    tmp_path,
    fake,  # noqa: F811
    lab_spec,  # noqa: F811
    env,
    message,
):
    spec = dict(lab_spec, env=dict(lab_spec["env"], **env))
    result = run_module(capsys, seat_engine, started(spec, tmp_path))
    assert result.get("failed") is True and message in result["msg"]
    assert "stolen" not in result["msg"] and not (tmp_path / (spec["name"] + ".env")).exists()


# ---------------------------------------------------------------- must show: the key watcher


def keywatch(*argv, timeout=120):
    done = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "seatwright-keywatch")] + [str(a) for a in argv],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def test_the_watcher_catches_a_process_with_the_key_on_its_command_line(tmp_path):
    fake_key = "sk-fake-%d-keywatch" % os.getpid()
    path = key_file(tmp_path, fake_key)
    # A neighbour process that carries the key as an argument for a few samples.
    planted = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(3)", fake_key])
    try:
        rc, out = keywatch("--key-file", path, "--samples-log", tmp_path / "samples.log", "--", "sleep", "1.6")
    finally:
        planted.kill()
        planted.wait()
    assert rc == 1, out
    assert "pid %d, in " % planted.pid in out and "<the key>" in out and fake_key not in out
    assert stat.S_IMODE((tmp_path / "samples.log").stat().st_mode) == 0o600


def test_the_watcher_finds_the_key_in_a_log_and_an_evidence_file(tmp_path):
    fake_key = "sk-fake/key+%d" % os.getpid()
    evidence = tmp_path / "evidence" / "lab" / "20261130T150000Z"
    (evidence / "aiperf").mkdir(parents=True)
    (evidence / "record.json").write_text(json.dumps({"ok": True}))
    (evidence / "aiperf" / "run.log").write_text("url=https://x/?k=%s\n" % urllib.parse.quote(fake_key, safe=""))
    log = tmp_path / "site.log"
    log.write_text("Authorization: Bearer %s\n" % fake_key)
    rc, out = keywatch("--key-file", key_file(tmp_path, fake_key), "--log", log, "--evidence", evidence)
    assert rc == 1, out
    assert "log %s: 1 occurrences of the key" % log in out
    assert "files, 1 with the key" in out and "aiperf/run.log: 1 occurrences" in out and fake_key not in out


def test_the_watcher_says_clean_when_the_key_is_nowhere(tmp_path):
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    (evidence / "record.json").write_text("{}")
    started_at = time.monotonic()
    rc, out = keywatch("--key-file", key_file(tmp_path, "sk-nowhere-1"), "--evidence", evidence, "--", "sleep", "1")
    assert rc == 0, out
    assert "0 with the key" in out and "the key was found nowhere" in out
    assert time.monotonic() - started_at < 30
    assert keywatch("--key-file", key_file(tmp_path, "sk-x", mode=0o644))[0] == 2


def test_the_watcher_finds_a_piece_of_the_key_a_cut_copy_left(tmp_path):
    # Issue 50: copies cut at [:200] before redaction left 27 of 40 characters in evidence, and
    # the watcher, which looked for the whole key only, said clean.
    fake_key = "sk-Zq8Ww2LmR4tY7uPa9XcV1bN3mK5jH6gF-%d" % os.getpid()
    path = key_file(tmp_path, fake_key)
    evidence = tmp_path / "evidence"
    evidence.mkdir()
    (evidence / "qualification.json").write_text(json.dumps({"error": ("x" * 185 + fake_key)[:200]}))
    (evidence / "clean.md").write_text("nothing here but sk-Zq8W")
    rc, out = keywatch("--key-file", path, "--evidence", evidence)
    assert rc == 1, out
    assert "1 with a piece of it" in out and "qualification.json: 1 pieces" in out and fake_key[:15] not in out


def test_the_watcher_counts_each_of_several_keys_by_its_file(tmp_path):
    # Issue 50: the lab's keywatch looks for the seat key, the router's admin key and the clients' key at once.
    seat, admin, client = ("sk-%s-%d-keywatch" % (name, os.getpid()) for name in ("seat", "admin", "client"))
    folder = {name: tmp_path / name for name in ("seat", "admin", "client")}
    for path in folder.values():
        path.mkdir()
    files = [key_file(folder["seat"], seat), key_file(folder["admin"], admin), key_file(folder["client"], client)]
    log = tmp_path / "router.log"
    log.write_text("registered a worker with %s\n" % admin)
    argv = ["--log", log]
    for path in files:
        argv[:0] = ["--key-file", path]
    rc, out = keywatch(*argv)
    assert rc == 1, out
    counts = sorted(line for line in out.splitlines() if line.startswith("keywatch: log "))
    assert len(counts) == 3 and sum("1 occurrences of the key" in line for line in counts) == 1, out
    assert admin not in out and seat not in out
    log.write_text("nothing secret\n")
    rc, out = keywatch(*argv)
    assert rc == 0 and "no key was found anywhere" in out, out
