"""The collection as a user gets it: `ansible-galaxy collection build` makes a small tarball, it
installs into an empty collections path, and its modules plan a seat there with nothing of this
checkout in reach (no ansible.cfg, no library path, no seatwright.pth entry).

About a minute: one build, one install, two playbook runs on the controller; no node is reached.
"""

import json
import os
import re
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
GALAXY = yaml.safe_load((ROOT / "galaxy.yml").read_text())
NAME = "%s.%s" % (GALAXY["namespace"], GALAXY["name"])
# What a build must leave out: local state, caches, run output, measured results.
NEVER_PACKED = (".venv/", ".cache/", ".git/", "evidence/", "bench/results/", "lab/.build/", "library")
MAX_TARBALL_BYTES = 2 * 1024 * 1024

# Runs ansible-playbook with every sys.path entry under this checkout but outside the venv removed
# first: the venv's seatwright.pth puts the checkout's collection link on sys.path, and the test is
# about the copy that ansible-galaxy installed.
LAUNCHER = """
import sys
root = sys.argv.pop(1) + "/"
ours = [p for p in sys.path if (p + "/").startswith(root) and not (p + "/").startswith(sys.prefix + "/")]
assert ours, "expected the venv's seatwright.pth entry on sys.path"
sys.path[:] = [p for p in sys.path if p not in ours]
from ansible.cli.playbook import main
sys.argv[0] = "ansible-playbook"
sys.exit(main())
"""


def clean_env(tmp):
    """The environment with no Ansible setting of this project left in it (make exports ANSIBLE_CONFIG)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANSIBLE_", "PYTHON"))}
    config = tmp / "ansible.cfg"
    config.write_text("[defaults]\nretry_files_enabled = false\n")
    env.update(
        ANSIBLE_CONFIG=str(config),
        ANSIBLE_COLLECTIONS_PATH=str(tmp / "collections"),
        ANSIBLE_COLLECTIONS_SCAN_SYS_PATH="false",
        ANSIBLE_HOME=str(tmp / "ansible-home"),
        ANSIBLE_LOCAL_TEMP=str(tmp / "ansible-tmp"),
        ANSIBLE_NOCOLOR="1",
        PATH="%s:%s" % (VENV_BIN, os.environ.get("PATH", "/usr/bin")),
    )
    return env


def run(argv, tmp, **kwargs):
    return subprocess.run(
        argv, cwd=tmp, env=clean_env(tmp), capture_output=True, text=True, check=False, timeout=300, **kwargs
    )


def playbook(tmp, *args):
    return run([sys.executable, "-c", LAUNCHER, str(ROOT), *args], tmp)


@pytest.fixture(scope="module")
def installed(tmp_path_factory):
    """Build the collection from this checkout and install the tarball into an empty path."""
    tmp = tmp_path_factory.mktemp("collection")
    build = run(
        [str(VENV_BIN / "ansible-galaxy"), "collection", "build", str(ROOT), "--output-path", str(tmp / "dist")],
        tmp,
    )
    assert build.returncode == 0, build.stdout + build.stderr
    (tarball,) = (tmp / "dist").glob("*.tar.gz")
    install = run(
        [
            str(VENV_BIN / "ansible-galaxy"),
            "collection",
            "install",
            str(tarball),
            "-p",
            str(tmp / "collections"),
            # Its dependencies (community.docker, ...) are not needed to plan, and no index is reached.
            "--no-deps",
        ],
        tmp,
    )
    assert install.returncode == 0, install.stdout + install.stderr
    collection = tmp / "collections" / "ansible_collections" / GALAXY["namespace"] / GALAXY["name"]
    assert collection.is_dir() and not collection.is_symlink()
    return tmp, tarball, collection


def test_the_tarball_is_small_and_holds_no_local_state(installed):
    _, tarball, _ = installed
    assert tarball.name == "%s-%s-%s.tar.gz" % (GALAXY["namespace"], GALAXY["name"], GALAXY["version"])
    assert tarball.stat().st_size < MAX_TARBALL_BYTES, "%s is %d bytes" % (tarball, tarball.stat().st_size)
    with tarfile.open(tarball) as archive:
        names = archive.getnames()
    leaked = [n for n in names if n.startswith(NEVER_PACKED) or n.endswith((".pyc", ".tar.gz"))]
    assert not leaked, "galaxy.yml build_ignore lets these in: %s" % leaked[:10]
    # What the modules and playbooks read at run time travels with them.
    for needed in (
        "plugins/modules/seat_plan.py",
        "plugins/module_utils/seat/plan.py",
        "playbooks/plan.yml",
        "schemas/seat.schema.json",
        "schemas/record.schema.json",
        "seats/glm53.yml",
        "meta/runtime.yml",
        "CHANGELOG.md",
    ):
        assert needed in names, "%s is missing from the built collection" % needed


def assert_installed_module_ran(result, collection):
    """Ansible names the module file it packed (-vvv): it must be the installed copy's."""
    used = re.findall(r"Using module file (\S+seat_plan\.py)", result.stdout)
    assert used, result.stdout[-3000:]
    for path in used:
        assert Path(path).resolve().is_relative_to(collection.resolve()), path
        assert not Path(path).resolve().is_relative_to(ROOT), path


def test_a_playbook_outside_the_checkout_plans_a_seat_with_the_installed_module(installed):
    tmp, _, collection = installed
    plan_file = tmp / "glm53-plan.json"
    (tmp / "plan-glm53.yml").write_text(
        """---
- name: Plan glm53 on the example fleet with the installed collection
  hosts: localhost
  connection: local
  gather_facts: false
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
  tasks:
    - name: Collect each host's declared hardware
      ansible.builtin.set_fact:
        nodes: >-
          {{ nodes | default([]) + [hostvars[item] | dict2items
             | selectattr('key', 'match', '^seatwright_node_') | items2dict
             | combine({'host': item, 'in_inventory': true})] }}
      loop: "{{ groups['gpu_nodes'] }}"

    - name: Plan the seat
      seatwright.fleet.seat_plan:
        seat: glm53
        recipe_path: "%(collection)s/seats/glm53.yml"
        schema_path: "%(collection)s/schemas/seat.schema.json"
        nodes: "{{ nodes }}"
        plan_out: "%(plan)s"
"""
        % {"collection": collection, "plan": plan_file}
    )
    result = playbook(tmp, "-vvv", "-i", str(collection / "inventory" / "example"), "plan-glm53.yml")
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert_installed_module_ran(result, collection)
    plan = json.loads(plan_file.read_text())
    assert plan["seat"] == "glm53"
    assert plan["fits"] is True and plan["verdict"] == "fits", plan["reasons"]
    assert [r["host"] for r in plan["ranks"]] == ["node-a", "node-b"]
    assert all(r["argv"] for r in plan["ranks"])
    assert not plan["refusals"]


def test_the_installed_plan_playbook_runs_by_its_fqcn(installed):
    """`ansible-playbook seatwright.fleet.plan` finds its recipes and schemas inside the collection."""
    tmp, _, collection = installed
    plan_file = tmp / "glm53-fqcn-plan.json"
    result = playbook(
        tmp,
        "-vvv",
        "-i",
        str(collection / "inventory" / "example"),
        "%s.plan" % NAME,
        "-e",
        "seat=glm53",
        "-e",
        "plan_out=%s" % plan_file,
    )
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-2000:]
    assert_installed_module_ran(result, collection)
    plan = json.loads(plan_file.read_text())
    assert plan["seat"] == "glm53" and plan["fits"] is True, plan["reasons"]
    assert [r["host"] for r in plan["ranks"]] == ["node-a", "node-b"]
