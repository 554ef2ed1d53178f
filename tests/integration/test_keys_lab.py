"""Issue 23 and issue 50, must show: the lab seat's qualification and benchmark, run with -vvv under
tools/seatwright-keywatch, show none of the lab's keys (the seat's API key, the router's admin key, the
clients' router key) on any process's command line (/proc/*/cmdline, the lab containers' processes
included, sampled every half second), in the -vvv output or in any file of the run's evidence
folder. Then qualification at -vvv against an endpoint that echoes the key in its errors
(tests/hostile_server.py echo-key) leaves none of them there either.

Needs the lab up and prepared with its checkpoints staged (make lab); run by the lead under the lab
lock:  flock -o /tmp/seatwright-lab.lock make lab-keywatch
The key is the lab's own (inventory/lab/group_vars/all/seat_key.yml, .cache/lab/seat-api-key).
"""

import os
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
KEY_FILE = ROOT / ".cache" / "lab" / "seat-api-key"
# The router's keys (inventory/lab/group_vars/all/router.yml makes them on first use).
ROUTER_KEY_FILES = [ROOT / ".cache" / "lab" / "router-admin-key", ROOT / ".cache" / "lab" / "router-api-key"]
DOCKER = "/usr/bin/docker"
sys.path.insert(0, str(ROOT / "tests"))
import hostile_server  # noqa: E402  pylint: disable=wrong-import-position


def key_args():
    """--key-file for each of the lab's keys: the seat's and the router's two."""
    argv = []
    for path in [KEY_FILE] + ROUTER_KEY_FILES:
        assert path.is_file() and oct(path.stat().st_mode & 0o777) == "0o600", path
        argv += ["--key-file", str(path)]
    return argv


def _lab_running():
    if not os.path.exists(DOCKER):
        return False
    done = subprocess.run(
        [DOCKER, "inspect", "-f", "{{.State.Running}}", "node-a"], capture_output=True, text=True, check=False
    )
    return done.returncode == 0 and done.stdout.strip() == "true"


# A whole seat flow with -vvv takes minutes and needs the staged lab: asked for by name
# (make lab-keywatch sets SEATWRIGHT_KEYWATCH=1), never by a stopped lab left from another run.
pytestmark = pytest.mark.skipif(
    os.environ.get("SEATWRIGHT_KEYWATCH") != "1" or not _lab_running(),
    reason="run by make lab-keywatch after make lab (needs the lab up with its checkpoints staged)",
)


def test_the_lab_seat_key_is_on_no_command_line_log_or_evidence_file(tmp_path):
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    log = tmp_path / "seat-lab-vvv.log"
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_LOG_PATH=str(log),
        PATH="%s:/usr/bin:%s" % (ROOT / ".venv" / "bin", os.environ.get("PATH", "")),
    )
    # The whole seat flow (bring-up keeps the running seat), with a short soak: qualification and
    # the benchmark are what is watched.
    playbook = [
        str(ROOT / ".venv" / "bin" / "ansible-playbook"),
        "-vvv",
        "-i",
        "inventory/lab",
        "playbooks/seat.yml",
        "-e",
        "seat=lab",
        "-e",
        "qualify_soak_duration_s=60",
        # A short sweep: what is watched is how the key travels, not the figures.
        "-e",
        '{"seat_bench_concurrency": [1, 4], "seat_bench_passes": 1}',
    ]
    # The playbook makes the key file on first use; make sure it exists before the watcher reads it.
    subprocess.run(
        [
            str(ROOT / ".venv" / "bin" / "ansible"),
            "-i",
            "inventory/lab",
            "localhost",
            "-m",
            "debug",
            "-a",
            '{"msg": "{{ seat_api_key | length }}, {{ router_admin_key | length }}, {{ router_api_key | length }}"}',
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        check=True,
        timeout=120,
    )
    watch = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "seatwright-keywatch")]
        + key_args()
        + ["--interval", "0.5"]
        + ["--samples-log", str(tmp_path / "cmdline-samples.log"), "--"]
        + playbook,
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=5400,
        check=False,
    )
    out = watch.stdout
    # The playbook's own output went to stdout too (the watcher passes it through): keep it for the search.
    (tmp_path / "seat-lab-vvv.stdout").write_text(out + watch.stderr)
    evidence = sorted(p for p in (ROOT / "evidence" / "lab").iterdir() if p.is_dir() and p.name >= stamp)
    assert evidence, "no evidence folder of this run under evidence/lab/:\n%s" % out[-3000:]
    assert (evidence[-1] / "qualification.json").is_file() and (evidence[-1] / "benchmark.json").is_file()
    check = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "seatwright-keywatch")]
        + key_args()
        + ["--log", str(log), "--log", str(tmp_path / "seat-lab-vvv.stdout"), "--evidence", str(evidence[-1])],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    report = [line for line in (out + check.stdout).splitlines() if line.startswith("keywatch:")]
    print("\n".join(report))
    samples = re.search(r"cmdline: (\d+) samples", out)
    assert samples and int(samples.group(1)) > 60, "\n".join(report)  # a real run, sampled throughout
    assert out.count(" 0 with the key") == 3 and watch.returncode in (0, 3), "\n".join(report)
    assert check.returncode == 0, "\n".join(report)


def test_an_endpoint_echoing_the_key_in_its_errors_leaves_no_key_in_the_vvv_play(tmp_path):
    # The seat's own key, sent to a hostile endpoint that repeats it whole, unicode-escaped and where
    # the client's copies are cut; the key reaches the play in a 0600 vars file, as from a vault.
    recipe = yaml.safe_load((ROOT / "seats" / "lab.yml").read_text())
    recipe["name"] = "lab-echo"
    recipe["qualification"]["gates"] = ["smoke", "json"]
    recipe["qualification"]["expect_fail"] = []
    (tmp_path / "seat.yml").write_text(yaml.safe_dump(recipe))
    evidence = tmp_path / "evidence"
    extra = tmp_path / "vars.yml"
    server = hostile_server.serve("echo-key", deadline_s=600)
    extra.write_text(
        yaml.safe_dump(
            {
                "seat": "lab-echo",
                "base_url": server.url,
                "model": hostile_server.MODEL,
                "recipe": str(tmp_path / "seat.yml"),
                "evidence_dir": str(evidence),
                "parts": ["gates"],
                "qualify_api_key": KEY_FILE.read_text().strip(),
                "qualify_fail_when_not_qualified": False,
            }
        )
    )
    extra.chmod(0o600)
    log = tmp_path / "qualify-echo-vvv.log"
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_LOG_PATH=str(log))
    play = [str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-vvv", "-i", "localhost,", "-e", "@%s" % extra]
    try:
        watch = subprocess.run(
            [sys.executable, str(ROOT / "tools" / "seatwright-keywatch")]
            + key_args()
            + ["--log", str(log), "--evidence", str(evidence), "--"]
            + play
            + [str(ROOT / "playbooks" / "qualify.yml")],
            cwd=ROOT,
            env=env,
            capture_output=True,
            text=True,
            timeout=900,
            check=False,
        )
    finally:
        server.stop()
    (tmp_path / "qualify-echo-vvv.stdout").write_text(watch.stdout + watch.stderr)
    check = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "seatwright-keywatch")]
        + key_args()
        + ["--log", str(tmp_path / "qualify-echo-vvv.stdout")],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    report = [line for line in (watch.stdout + check.stdout).splitlines() if line.startswith("keywatch:")]
    print("\n".join(report))
    assert (evidence / "qualification.json").is_file(), watch.stdout[-3000:]
    assert watch.returncode == 0 and check.returncode == 0, "\n".join(report)
