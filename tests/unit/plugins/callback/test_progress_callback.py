"""Waits read as progress: the seatwright.fleet.progress stdout callback and the payload it prints.

The default callback prints "FAILED - RETRYING: [node-a]: ... (205 retries left)" on every retry of
an `until` loop, which reads as a fault for the minutes a bring-up takes. These tests run a real
playbook against localhost through the project's ansible.cfg and read its screen and log output.
"""

import ast
import configparser
import json
import os
import subprocess
import textwrap
import time

import pytest
import seat_engine_probe
import yaml
from ansible.module_utils.testing import patch_module_args
from ansible_collections.seatwright.fleet.plugins.callback.progress import progress_line
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.seat import engine as seat_io
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.readiness import (
    PROGRESS_LOG_CHARS,
    progress_log_line,
    wait_progress,
)
from conftest import ROOT

PLAYBOOK = str(ROOT / ".venv" / "bin" / "ansible-playbook")
PYTHON = str(ROOT / ".venv" / "bin" / "python")
CALLBACK = ROOT / "plugins" / "callback" / "progress.py"

RUNNING = {"host": "node-a", "name": "seatwright-lab-rank0", "running": True, "exit_code": None}

# ------------------------------------------------------------------ the payload (seat/readiness.py)


@pytest.mark.parametrize(
    "probe,detail",
    [
        ({"health_status": None, "error": "health: [Errno 111] Connection refused"}, "no answer from /health yet"),
        ({"health_status": 503}, "/health answers 503"),
        (
            {"health_status": 200, "error": "models: timed out"},
            "/health answers 200; /v1/models does not answer yet (models: timed out)",
        ),
    ],
)
def test_engine_wait_progress_says_what_the_endpoint_answered(probe, detail):
    probe = dict(probe, containers=[dict(RUNNING, log_tail=["INFO loading", "INFO Loading weights took 3.1 s"])])
    progress = wait_progress("engine", probe, {"state": "waiting"}, 45.04, 360)
    assert progress == {
        "waiting_for": "the engine to answer",
        "elapsed_s": 45.0,
        "timeout_s": 360,
        "detail": detail,
        "last_log": "INFO Loading weights took 3.1 s",
    }


def test_ray_wait_progress_names_the_nodes_still_missing():
    verdict = {"missing": ["node-b (172.30.99.12) is not alive in the Ray cluster"]}
    progress = wait_progress("ray", {"containers": [dict(RUNNING, log_tail=[])]}, verdict, 12, 120)
    assert progress["waiting_for"] == "every node to join the Ray cluster"
    assert progress["detail"] == "node-b (172.30.99.12) is not alive in the Ray cluster"
    assert progress["last_log"] is None


def test_an_unknown_wait_is_refused():
    with pytest.raises(SeatError, match="engine, ray"):
        wait_progress("image", {}, {}, 1, 10)


def test_the_log_line_is_one_clean_line_of_bounded_length():
    # vLLM's colour codes and tqdm's redraws do not reach the screen; a long line is cut.
    coloured = "\x1b[32mINFO\x1b[0m 12-01 14:02:11 \t Loading   safetensors\x07"
    assert progress_log_line([{"log_tail": [coloured]}]) == "INFO 12-01 14:02:11 Loading safetensors"
    long_line = progress_log_line([{"log_tail": ["x" * 1000]}])
    assert len(long_line) == PROGRESS_LOG_CHARS and long_line.endswith("...")
    # The first container with a tail speaks; none at all gives None.
    assert progress_log_line([{"log_tail": []}, {"log_tail": ["b"]}]) == "b"
    assert progress_log_line([{}]) is None and progress_log_line(None) is None


def _probe_module(capsys, monkeypatch, args, health_status=None, ray=None):
    def fake_probe(names, *rest):
        container = dict(RUNNING, name=names[0], log_tail=["INFO (EngineCore) Loading weights took 3.1 s"])
        return {"containers": [container], "health_status": health_status, "models": None, "error": None}

    # The module's one call (io/seat/engine.probe_result) reads the containers through these two.
    monkeypatch.setattr(seat_io, "probe", fake_probe)
    monkeypatch.setattr(seat_io, "ray_nodes", lambda name: (ray, None))
    with patch_module_args(dict({"names": ["seatwright-lab-rank0"], "host": "node-a"}, **args)):
        with pytest.raises(SystemExit):
            seat_engine_probe.main()
    return json.loads(capsys.readouterr().out)


def test_the_engine_probe_returns_progress_while_it_waits(capsys, monkeypatch):
    started = time.time() - 45
    args = {"base_url": "http://127.0.0.1:9", "served_name": "lab", "started_epoch": started, "timeout_s": 360}
    result = _probe_module(capsys, monkeypatch, dict(args, log_tail=1))
    assert result["verdict"]["state"] == "waiting"
    progress = result["progress"]
    assert progress["waiting_for"] == "the engine to answer" and progress["timeout_s"] == 360
    assert 44 <= progress["elapsed_s"] < 60
    assert progress["last_log"] == "INFO (EngineCore) Loading weights took 3.1 s"
    # Without a clock there is no wait, and no progress.
    assert "progress" not in _probe_module(capsys, monkeypatch, {"base_url": "http://127.0.0.1:9"})


def test_the_ray_wait_returns_the_nodes_still_missing(capsys, monkeypatch):
    expected = [{"host": "node-b", "address": "172.30.99.12", "resources": {"GPU": 2}}]
    nodes = [{"NodeManagerAddress": "172.30.99.11", "Alive": True, "Resources": {"GPU": 2.0}}]
    args = {"started_epoch": time.time() - 5, "timeout_s": 120, "ray_expected": expected}
    result = _probe_module(capsys, monkeypatch, args, ray=nodes)
    assert result["progress"]["waiting_for"] == "every node to join the Ray cluster"
    assert result["progress"]["detail"] == "node-b (172.30.99.12) is not alive in the Ray cluster"


# ------------------------------------------------------------------ the line (plugins/callback/progress.py)


def test_a_probe_with_progress_prints_what_it_waits_for_and_its_clock():
    result = {
        "attempts": 3,
        "retries": 210,
        "progress": {
            "waiting_for": "the engine to answer",
            "elapsed_s": 45.4,
            "timeout_s": 360,
            "detail": "no answer from /health yet",
            "last_log": "INFO 12-01 Loading weights took 3.2 s",
        },
    }
    line = progress_line("node-a", "launch | Wait for readiness", result, elapsed_s=7)
    assert line == (
        '[node-a] waiting for the engine to answer: 45 s of 360 s; no answer from /health yet; '
        'last log: "INFO 12-01 Loading weights took 3.2 s"'
    )


def test_a_payload_without_clock_or_log_still_reads():
    line = progress_line("node-a", "t", {"progress": {"waiting_for": "the engine to answer"}})
    assert line == "[node-a] waiting for the engine to answer"
    line = progress_line("node-a", "t", {"progress": {"waiting_for": "x", "elapsed_s": 3}})
    assert line == "[node-a] waiting for x: 3 s"


def test_a_builtin_probe_prints_an_honest_generic_line():
    result = {"attempts": 2, "retries": 91, "msg": "Status code was -1 and not [200]:\n Request failed"}
    line = progress_line("node-a -> node-b", "stage | Wait for the source", result, elapsed_s=4.2)
    assert line == (
        "[node-a -> node-b] still waiting: stage | Wait for the source (attempt 2 of 91, 4 s elapsed); "
        "last try: Status code was -1 and not [200]: Request failed"
    )
    assert progress_line("h", "t", {}) == "[h] still waiting: t"
    assert progress_line("h", "t", {"msg": "y" * 500}).endswith("y...")


def test_the_callback_documents_the_default_options():
    constants = {
        node.targets[0].id: node.value.value
        for node in ast.parse(CALLBACK.read_text()).body
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant)
    }
    doc = yaml.safe_load(constants["DOCUMENTATION"])
    assert doc["name"] == "progress" and doc["type"] == "stdout"
    # These fragments carry callback_result_format and the default callback's display_* options.
    assert doc["extends_documentation_fragment"] == ["default_callback", "result_format_callback"]


def test_ansible_and_molecule_both_print_through_it():
    cfg = configparser.ConfigParser()
    cfg.read(ROOT / "ansible.cfg")
    assert cfg["defaults"]["stdout_callback"] == "seatwright.fleet.progress"
    assert cfg["defaults"]["callback_result_format"] == "yaml"
    env = yaml.safe_load((ROOT / "molecule" / "default" / "molecule.yml").read_text())["provisioner"]["env"]
    assert env["ANSIBLE_STDOUT_CALLBACK"] == "seatwright.fleet.progress"
    assert env["ANSIBLE_CALLBACK_RESULT_FORMAT"] == "yaml"


def _tasks(path):
    data = yaml.safe_load(path.read_text()) or []
    for item in data if isinstance(data, list) else []:
        if not isinstance(item, dict):
            continue
        yield item
        for key in ("tasks", "pre_tasks", "post_tasks", "block", "rescue", "always"):
            for sub in item.get(key) or []:
                if isinstance(sub, dict):
                    yield from _tasks_of(sub)


def _tasks_of(task):
    yield task
    for key in ("block", "rescue", "always"):
        for sub in task.get(key) or []:
            yield from _tasks_of(sub)


def test_every_engine_wait_sends_progress_with_a_log_line():
    waits = []
    for path in sorted(list((ROOT / "roles").rglob("tasks/*.yml")) + list((ROOT / "playbooks").glob("*.yml"))):
        for task in _tasks(path):
            probe = task.get("seatwright.fleet.seat_engine_probe")
            if "until" in task and probe is not None:
                waits.append(task["name"])
                # started_epoch and timeout_s make the module return `progress`; log_tail its last log line.
                assert {"started_epoch", "timeout_s"} <= set(probe), task["name"]
                assert int(probe.get("log_tail", 40)) >= 1, task["name"]
    assert len(waits) >= 2, waits  # the engine's readiness wait and the Ray cluster's


# ------------------------------------------------------------------ a real run against localhost

PROBE_MODULE = '''
#!/usr/bin/python
import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.readiness import wait_progress

module = AnsibleModule(argument_spec=dict(counter=dict(type="str", required=True)))
path = module.params["counter"]
attempt = (int(open(path).read()) if os.path.exists(path) else 0) + 1
with open(path, "w") as handle:
    handle.write(str(attempt))
log = ["INFO starting", "INFO 12-01 Loading weights took %d.0 s" % attempt]
probe = {"containers": [{"running": True, "log_tail": log}], "health_status": None}
module.exit_json(
    changed=False,
    done=attempt >= 3,
    progress=wait_progress("engine", probe, {"state": "waiting"}, attempt * 15.0, 360),
)
'''

PLAY = """
- name: Waits
  hosts: localhost
  gather_facts: false
  tasks:
    - name: Wait with a builtin probe
      ansible.builtin.shell: n=$(cat {dir}/c1 2>/dev/null || echo 0); n=$((n+1)); echo $n > {dir}/c1; test $n -ge 3
      register: builtin_wait
      until: builtin_wait.rc == 0
      retries: 4
      delay: 0
    - name: Wait with a progress probe
      fake_engine_probe:
        counter: "{dir}/c2"
      register: engine_wait
      until: engine_wait.done
      retries: 4
      delay: 0
    # Polled each second, it runs for 4: a loaded host still polls it at least once before it ends.
    - name: Run a polled async job
      ansible.builtin.command: sleep 4
      async: 30
      poll: 1
    - name: Wait that runs out
      ansible.builtin.fail:
        msg: the source never came up
      register: lost_wait
      until: lost_wait is not failed
      retries: 2
      delay: 0
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    if not os.path.exists(PLAYBOOK):
        pytest.skip("needs the project venv (scripts/bootstrap)")
    tmp = tmp_path_factory.mktemp("progress")
    (tmp / "library").mkdir()
    (tmp / "library" / "fake_engine_probe.py").write_text(PROBE_MODULE.lstrip())
    (tmp / "play.yml").write_text(textwrap.dedent(PLAY).format(dir=tmp))
    env = dict(
        os.environ,
        # The project's ansible.cfg picks the callback; nothing here names it.
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_LIBRARY=str(tmp / "library"),
        ANSIBLE_LOG_PATH=str(tmp / "ansible.log"),
        ANSIBLE_CACHE_PLUGIN="memory",
        ANSIBLE_NOCOLOR="1",
    )
    env.pop("ANSIBLE_STDOUT_CALLBACK", None)
    result = subprocess.run(
        [
            PLAYBOOK,
            "-i",
            "localhost,",
            "-c",
            "local",
            "-e",
            "ansible_python_interpreter=" + PYTHON,
            str(tmp / "play.yml"),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return result, (tmp / "ansible.log").read_text()


def test_no_retry_reads_as_a_fault(run):
    result, log = run
    assert "FAILED - RETRYING" not in result.stdout + result.stderr
    assert "FAILED - RETRYING" not in log
    assert "ASYNC POLL" not in result.stdout


def test_each_retry_prints_a_progress_line(run):
    result, log = run
    for text in (result.stdout, log):
        assert "[localhost] still waiting: Wait with a builtin probe (attempt 1 of 5, " in text
        assert "[localhost] still waiting: Wait with a builtin probe (attempt 2 of 5, " in text
        assert (
            '[localhost] waiting for the engine to answer: 15 s of 360 s; no answer from /health yet; '
            'last log: "INFO 12-01 Loading weights took 1.0 s"'
        ) in text
        assert "waiting for the engine to answer: 30 s of 360 s" in text
        assert "[localhost] still running: Run a polled async job (" in text


def test_a_wait_that_runs_out_still_fails_with_its_message(run):
    result, log = run
    assert result.returncode == 2, result.stdout + result.stderr
    for text in (result.stdout, log):
        assert "[localhost] still waiting: Wait that runs out (attempt 2 of 3, " in text
        assert "fatal: [localhost]: FAILED! =>" in text
        # callback_result_format yaml still shapes the failed result.
        assert "    msg: the source never came up" in text
    assert "failed=1" in result.stdout
