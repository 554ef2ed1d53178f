"""playbooks/promote.yml end to end on 127.0.0.1 (issue 26 item 2), no lab needed: two fake seats
behind the fake router (tests/fake_router.py), roles/router stood in for by a stub that speaks the
role's contract (apply_targets, read_targets, deregister) to the fake router's admin calls, and
clients calling the alias throughout. Shows: a promotion moves the alias with 0 failed requests;
a forced gate failure rolls back with its time recorded; a refused candidate and --check change
nothing; the router's admin key is in no output and no evidence."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from promote_setup import GATES, KEY, Clients, Fleet, assert_judged_against_the_incumbent, evidence_folder  # noqa: E402

STUB = {
    "read_targets.yml": [
        {
            "name": "Stub | read the alias's targets",
            "ansible.builtin.uri": {
                "url": "http://127.0.0.1:{{ router.port }}/admin/targets/{{ router_alias }}",
                "headers": {"Authorization": "Bearer {{ router_admin_key }}"},
            },
            "check_mode": False,
            "no_log": True,
            "register": "__stub",
        },
        {"name": "Stub | set them", "ansible.builtin.set_fact": {"router_current_targets": "{{ __stub.json }}"}},
    ],
    "apply_targets.yml": [
        {
            "name": "Stub | apply targets",
            "ansible.builtin.uri": {
                "url": "http://127.0.0.1:{{ router.port }}/admin/targets",
                "method": "POST",
                "body_format": "json",
                "body": {"alias": "{{ router_alias }}", "targets": "{{ router_targets }}"},
                "headers": {"Authorization": "Bearer {{ router_admin_key }}"},
            },
            "no_log": True,
        },
        {
            "name": "Stub | say so",
            "ansible.builtin.set_fact": {
                "router_applied": {"alias": "{{ router_alias }}", "targets": "{{ router_targets }}", "seconds": 0.01}
            },
        },
    ],
    "deregister.yml": [
        {
            "name": "Stub | drain and deregister",
            "ansible.builtin.uri": {
                "url": "http://127.0.0.1:{{ router.port }}/admin/deregister",
                "method": "POST",
                "body_format": "json",
                "body": {"seat": "{{ router_seat }}"},
                "headers": {"Authorization": "Bearer {{ router_admin_key }}"},
            },
            "no_log": True,
        }
    ],
}


@pytest.fixture(scope="module")
def collection(tmp_path_factory):
    """seatwright.fleet as this checkout, with roles/router replaced by the stub."""
    top = tmp_path_factory.mktemp("collections")
    tree = top / "ansible_collections" / "seatwright" / "fleet"
    tree.mkdir(parents=True)
    for entry in ROOT.iterdir():
        if entry.name not in ("roles", ".git", ".venv", ".cache"):
            (tree / entry.name).symlink_to(entry)
    (tree / "roles").mkdir()
    for role in (ROOT / "roles").iterdir():
        if role.name != "router":
            (tree / "roles" / role.name).symlink_to(role)
    tasks = tree / "roles" / "router" / "tasks"
    tasks.mkdir(parents=True)
    for name, content in STUB.items():
        (tasks / name).write_text("---\n" + yaml.safe_dump(content, sort_keys=False))
    return top


@pytest.fixture
def fleet():
    fleet = Fleet()
    yield fleet
    fleet.close()


def promote(collection, fleet, tmp_path, *extra):
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {"localhost": {"ansible_connection": "local", "ansible_host": "127.0.0.1"}},
                    "children": {"gpu_nodes": {"hosts": {}}},
                    "vars": {
                        "router": {
                            "kind": "litellm",
                            "node": "localhost",
                            "port": fleet.router.port,
                            "aliases": {"production": "lab"},
                        },
                        "router_admin_key": KEY,
                    },
                }
            }
        )
    )
    env = dict(os.environ, ANSIBLE_COLLECTIONS_PATH=str(collection), ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    argv = [
        str(Path(sys.executable).parent / "ansible-playbook"),
        "-i",
        str(inventory),
        str(ROOT / "playbooks" / "promote.yml"),
    ]
    argv += ["-e", "seat=lab-fast", "-e", "alias=production", "-e", "evidence_root=%s" % (tmp_path / "evidence")]
    argv += [
        "-e",
        "candidate_api_base=%s" % fleet.bases["lab-fast"],
        "-e",
        "promote_shares=50",
        "-e",
        "promote_hold_s=3",
    ]
    argv += ["-e", json.dumps({"promote_gates": GATES})] + list(extra)
    done = subprocess.run(argv, cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=300)
    return done, done.stdout + done.stderr


def evidence_text(folder):
    return "".join(p.read_text(errors="replace") for p in Path(folder).rglob("*") if p.is_file())


def test_a_promotion_moves_the_alias_with_no_failed_request(collection, fleet, tmp_path):
    folder = evidence_folder(tmp_path)
    with Clients(fleet.router.url) as clients:
        done, out = promote(collection, fleet, tmp_path)
    assert done.returncode == 0, out[-4000:]
    assert fleet.router.targets["production"] == {"lab-fast": {"api_base": fleet.bases["lab-fast"], "weight": 100}}
    assert clients.answers and clients.failed() == []
    after = [Clients(fleet.router.url).ask() for _ in range(6)]
    assert {a["seat"] for a in after} == {"lab-fast"} and all(a["ok"] for a in after)
    document = json.loads((Path(folder) / "promotion-rollout.json").read_text())
    assert document["outcome"] == "moved" and document["rollback_s"] is None
    steps = ["register", "baseline", "canary 50%", "all", "drain", "deregister"]
    assert [s["step"] for s in document["steps"]] == steps
    assert_judged_against_the_incumbent(document, named=True)
    assert [s["verdict"]["verdict"] for s in document["steps"] if s.get("verdict")] == ["pass"] * 3
    assert "## Rollout" in (Path(folder) / "report.md").read_text()
    assert KEY not in out and KEY not in evidence_text(folder)


def test_a_forced_gate_failure_rolls_back_and_times_it(collection, fleet, tmp_path):
    folder = evidence_folder(tmp_path)
    with Clients(fleet.router.url) as clients:
        done, out = promote(collection, fleet, tmp_path, "-e", "force_gate_failure=true")
    assert done.returncode != 0 and "rolled back" in out and "Traceback" not in out
    assert fleet.router.targets["production"] == {"lab": {"api_base": fleet.bases["lab"], "weight": 100}}
    assert clients.answers and clients.failed() == []
    document = json.loads((Path(folder) / "promotion-rollout.json").read_text())
    assert document["outcome"] == "rolled back"
    assert 0 < document["rollback_s"] < 30
    assert document["steps"][-1]["step"] == "rollback" and document["steps"][-1]["failed_step"] == "canary 50%"
    assert "Rolled back in" in (Path(folder) / "report.md").read_text()
    assert KEY not in out and KEY not in evidence_text(folder)


def test_a_refused_candidate_changes_nothing(collection, fleet, tmp_path):
    folder = evidence_folder(tmp_path, decision="do not promote")
    before = json.dumps(fleet.router.targets, sort_keys=True)
    done, out = promote(collection, fleet, tmp_path)
    assert done.returncode != 0 and "refused" in out and "says 'do not promote'" in out and "Traceback" not in out
    assert json.dumps(fleet.router.targets, sort_keys=True) == before
    assert [c for c in fleet.router.admin_calls if c[0] == "POST"] == []
    assert not (Path(folder) / "promotion-rollout.json").exists()


def test_check_mode_shows_each_step_and_touches_nothing(collection, fleet, tmp_path):
    folder = evidence_folder(tmp_path)
    before = json.dumps(fleet.router.targets, sort_keys=True)
    done, out = promote(collection, fleet, tmp_path, "--check")
    assert done.returncode == 0, out[-4000:]
    for line in (
        "1. register: register lab-fast; production -> lab weight 100",
        "2. baseline: measure lab carrying production alone for 3 s, the visible tok/s every later hold",
        "3. canary 50%: set_alias; production -> lab weight 50, lab-fast weight 50; hold 3 s",
        "4. all: set_alias; production -> lab-fast weight 100; hold 3 s",
        "5. drain: drain lab",
        "a gate that fails puts production back on lab weight 100",
    ):
        # The YAML callback folds long lines: compare with the whitespace made single spaces.
        assert line in " ".join(out.split()), out[-3000:]
    assert json.dumps(fleet.router.targets, sort_keys=True) == before
    assert [c for c in fleet.router.admin_calls if c[0] == "POST"] == []
    assert not (Path(folder) / "promotion-rollout.json").exists() and KEY not in out
