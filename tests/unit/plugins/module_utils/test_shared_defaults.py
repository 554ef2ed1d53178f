"""seatwright's shared values have one home (issue 20): module_utils/defaults.py and bench/workload.py.

Code reads the constants, roles read them through the lookup seatwright.fleet.defaults, and the
documented copies are written by tools/render_defaults.py; these tests hold each of those to it.
"""

import ast
import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.errors import AnsibleLookupError
from ansible_collections.seatwright.fleet.plugins.lookup.defaults import LookupModule, shared_values
from ansible_collections.seatwright.fleet.plugins.module_utils import defaults
from ansible_collections.seatwright.fleet.plugins.module_utils.bench.workload import (
    DEFAULT_PROFILE,
    DEFAULTS,
    SWEEP_DEFAULTS,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.node.contract import FLEET_VARIABLES, check_variables
from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))

import render_defaults  # noqa: E402

# Where the folders may still be spelled: their one assignment, and the documented copies the
# generator writes (module DOCUMENTATION/EXAMPLES, role argument specs' default lines).
DOC_STRINGS = ("DOCUMENTATION", "EXAMPLES", "RETURN")


def _doc_lines(path):
    """Line numbers of a module's DOCUMENTATION, EXAMPLES and RETURN strings."""
    lines = set()
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and getattr(node.targets[0], "id", None) in DOC_STRINGS:
            lines.update(range(node.lineno, node.end_lineno + 1))
    return lines


def _spellings(folder):
    """(path, line number, line) of every place under plugins, roles and playbooks that spells `folder`."""
    found = []
    for top in ("plugins", "roles", "playbooks"):
        for path in sorted((ROOT / top).rglob("*")):
            if path.suffix not in (".py", ".yml", ".yaml", ".j2", ".json") or not path.is_file():
                continue
            for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
                if re.search(re.escape(folder) + r"(?![\w-])", line):
                    found.append((path, number, line))
    return found


@pytest.mark.parametrize("name", ["STATE_DIR", "CONFIG_DIR"])
def test_a_folder_is_assigned_once_and_otherwise_only_documented(name):
    folder = getattr(defaults, name)
    assigned, undocumented = [], []
    for path, number, line in _spellings(folder):
        where = "%s:%d: %s" % (path.relative_to(ROOT), number, line.strip())
        if path.suffix == ".py" and number in _doc_lines(path):
            continue
        if path.name == "argument_specs.yml" and line.strip().startswith("default:"):
            continue
        (assigned if re.match(r"^%s = " % name, line) else undocumented).append(where)
    assert assigned == ['plugins/module_utils/defaults.py:%d: %s = "%s"' % (_line_of(name), name, folder)]
    assert undocumented == []


def _line_of(name):
    text = (ROOT / "plugins" / "module_utils" / "defaults.py").read_text().splitlines()
    return next(number for number, line in enumerate(text, 1) if line.startswith(name + " = "))


def test_documented_defaults_are_current():
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "render_defaults.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_a_stale_module_documentation_default_is_rewritten_from_the_argument_spec(tmp_path):
    original = (ROOT / "plugins" / "modules" / "gpu_facts.py").read_text()
    documented = "    default: %s\n" % defaults.GPU_FACTS_CACHE
    assert original.count(documented) == 1
    stale = tmp_path / "gpu_facts.py"
    stale.write_text(original.replace(documented, "    default: /var/lib/elsewhere/gpu_facts.json\n"))
    wanted, problems = render_defaults.render_module(stale)
    assert (wanted, problems) == (original, [])


def test_a_stale_role_argument_spec_default_is_rewritten_from_the_role_defaults(tmp_path):
    original = (ROOT / "roles" / "weights" / "meta" / "argument_specs.yml").read_text()
    stale = tmp_path / "weights" / "meta" / "argument_specs.yml"
    stale.parent.mkdir(parents=True)
    stale.write_text(original.replace("default: %s" % defaults.STAGING_DIR, 'default: "{{ seatwright_state_dir }}/x"'))
    assert stale.read_text() != original
    shared, rebased = render_defaults._shared()
    env = render_defaults._environment(shared, rebased)
    wanted, problems = render_defaults.render_role(stale, env, render_defaults.common_defaults(env))
    assert (wanted, problems) == (original, [])


def test_an_option_repeated_in_a_second_entry_point_is_rewritten_there(tmp_path):
    original = (ROOT / "roles" / "seat" / "meta" / "argument_specs.yml").read_text()
    documented = "        default: %s\n" % defaults.SEAT_DIR
    main, down = original.split("\n  down:\n")
    assert documented in main and documented in down
    stale = tmp_path / "seat" / "meta" / "argument_specs.yml"
    stale.parent.mkdir(parents=True)
    stale.write_text(main + "\n  down:\n" + down.replace(documented, "        default: /var/lib/old/seat\n"))
    shared, rebased = render_defaults._shared()
    env = render_defaults._environment(shared, rebased)
    assert render_defaults.render_role(stale, env, render_defaults.common_defaults(env)) == (original, [])


def test_a_block_style_default_is_reported_not_broken(tmp_path):
    stale = tmp_path / "weights" / "meta" / "argument_specs.yml"
    stale.parent.mkdir(parents=True)
    original = (ROOT / "roles" / "weights" / "meta" / "argument_specs.yml").read_text()
    stale.write_text(original.replace("default: %s" % defaults.STAGING_DIR, "default:\n          /x", 1))
    shared, rebased = render_defaults._shared()
    env = render_defaults._environment(shared, rebased)
    wanted, problems = render_defaults.render_role(stale, env, render_defaults.common_defaults(env))
    assert wanted == stale.read_text()
    assert problems == [
        "%s: weights_source_state_dir needs its default on one line (default: VALUE) to be written" % stale
    ]


def test_the_schema_takes_the_seat_name_pattern(tmp_path):
    original = (ROOT / "schemas" / "seat.schema.json").read_text()
    stale = tmp_path / "seat.schema.json"
    stale.write_text(original.replace(json.dumps(defaults.SEAT_NAME_PATTERN), json.dumps("^[a-z0-9][a-z0-9-]*$"), 1))
    assert stale.read_text() != original
    assert render_defaults.render_schema(stale, defaults.SEAT_NAME_PATTERN) == (original, [])


def test_a_module_whose_argument_spec_cannot_be_read_is_named_not_traced():
    spec, why = render_defaults.argument_spec("no_such_module")
    assert spec is None and why.startswith("does not import (ModuleNotFoundError")


@pytest.mark.parametrize(
    "value,folders,expected",
    [
        (defaults.STAGING_DIR, {"state_dir": "/srv/sw/"}, "/srv/sw/staging"),
        (defaults.STATE_DIR, {"state_dir": "/srv/sw"}, "/srv/sw"),
        (defaults.NCCL_ENV_FILE, {"state_dir": "/srv/sw"}, defaults.NCCL_ENV_FILE),
        (defaults.NCCL_ENV_FILE, {"config_dir": "/opt/sw/etc"}, "/opt/sw/etc/nccl.env"),
        # A sibling folder that only shares the prefix is not under the state folder.
        (defaults.STATE_DIR + "-lab/x", {"state_dir": "/srv/sw"}, defaults.STATE_DIR + "-lab/x"),
        (defaults.PROBE_THRESHOLD, {"state_dir": "/srv/sw"}, defaults.PROBE_THRESHOLD),
        (defaults.MODELS_DIR, {}, defaults.MODELS_DIR),
    ],
)
def test_rebased_moves_only_paths_under_a_moved_folder(value, folders, expected):
    assert defaults.rebased(value, **folders) == expected


def test_the_lookup_serves_the_definitions_and_names_what_it_knows():
    lookup = LookupModule()
    assert lookup.run(["state_dir", "bench_passes", "seat_name_pattern"], {}) == [
        defaults.STATE_DIR,
        SWEEP_DEFAULTS["passes"],
        defaults.SEAT_NAME_PATTERN,
    ]
    assert lookup.run(["seat_dir"], {}, state_dir="/srv/sw") == ["/srv/sw/seat"]
    assert shared_values()["bench_input_tokens"] == DEFAULTS["input_tokens"]
    with pytest.raises(AnsibleLookupError, match=r"has no value named stat_dir; known: .*state_dir"):
        lookup.run(["stat_dir"], {})
    with pytest.raises(AnsibleLookupError, match=r"takes config_dir and state_dir, not state_folder"):
        lookup.run(["seat_dir"], {}, state_folder="/srv/sw")


def test_a_seat_name_longer_than_a_dns_label_is_refused_as_an_incumbent():
    """The contract checks seat names with the schema's pattern (it once allowed any length)."""
    name = "a" * 63
    assert check_variables(None, {"seatwright_fleet_incumbents": [name]}, FLEET_VARIABLES) == []
    problems = check_variables(None, {"seatwright_fleet_incumbents": [name + "a"]}, FLEET_VARIABLES)
    assert len(problems) == 1 and problems[0].startswith("seatwright_fleet_incumbents is ['aaa")


def test_every_recipe_is_named_by_the_pattern():
    for recipe in sorted((ROOT / "seats").glob("*.yml")):
        assert re.match(defaults.SEAT_NAME_PATTERN, recipe.stem), recipe.name


ROLE_PLAY = """
- hosts: localhost
  connection: local
  gather_facts: false
  vars:
    ansible_python_interpreter: "{{ ansible_playbook_python }}"
  tasks:
    - {ansible.builtin.import_role: {name: seatwright.fleet.engine_image, tasks_from: plan.yml}, when: false}
    - {ansible.builtin.import_role: {name: seatwright.fleet.seat, tasks_from: plan.yml}, when: false}
    - {ansible.builtin.import_role: {name: seatwright.fleet.weights, tasks_from: validate.yml}, when: false}
    - {ansible.builtin.import_role: {name: seatwright.fleet.rdma_fabric, tasks_from: probe.yml}, when: false}
    - {ansible.builtin.import_role: {name: seatwright.fleet.nvidia_driver, tasks_from: plan.yml}, when: false}
    - {ansible.builtin.import_role: {name: seatwright.fleet.nccl_env, tasks_from: write.yml}, when: false}
    - {ansible.builtin.import_role: {name: seatwright.fleet.seat_bench, tasks_from: run.yml}, when: false}
    - name: Write what the roles' defaults came to
      ansible.builtin.copy:
        dest: "{{ out }}"
        content: "{{ values | to_json }}"
        mode: "0644"
      vars:
        values:
          engine_image_state_dir: "{{ engine_image_state_dir }}"
          seat_state_dir: "{{ seat_state_dir }}"
          seat_models_root: "{{ seat_models_root }}"
          seat_nccl_env_file: "{{ seat_nccl_env_file }}"
          nccl_env_file_path: "{{ nccl_env_file_path }}"
          weights_state_dir: "{{ weights_state_dir }}"
          rdma_fabric_state_dir: "{{ rdma_fabric_state_dir }}"
          rdma_fabric_probe_threshold: "{{ rdma_fabric_probe_threshold }}"
          nvidia_driver_branch: "{{ nvidia_driver_branch }}"
          seat_bench_concurrency: "{{ seat_bench_concurrency }}"
          seat_bench_passes: "{{ seat_bench_passes }}"
"""


def test_roles_derive_their_paths_from_the_folders_the_inventory_chose(tmp_path):
    """Real Ansible: with the state and config folders moved, every role's path moves with them,
    and the values keep their types (the branch a string, the threshold a float)."""
    play, out = tmp_path / "play.yml", tmp_path / "values.json"
    play.write_text(ROLE_PLAY)
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    result = subprocess.run(
        [
            str(Path(sys.executable).with_name("ansible-playbook")),
            "-i",
            "localhost,",
            str(play),
            "-e",
            json.dumps({"out": str(out), "seatwright_state_dir": "/srv/sw", "seatwright_config_dir": "/opt/sw"}),
        ],
        capture_output=True,
        text=True,
        check=False,
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    assert json.loads(out.read_text()) == {
        "engine_image_state_dir": "/srv/sw/images",
        "seat_state_dir": "/srv/sw/seat",
        "seat_models_root": "/srv/sw/models",
        "seat_nccl_env_file": "/opt/sw/nccl.env",
        "nccl_env_file_path": "/opt/sw/nccl.env",
        "weights_state_dir": "/srv/sw/staging",
        "rdma_fabric_state_dir": "/srv/sw",
        "rdma_fabric_probe_threshold": defaults.PROBE_THRESHOLD,
        "nvidia_driver_branch": defaults.DRIVER_BRANCH,
        # Empty: the workload profile's levels (tools/seatwright-bench takes them from bench/workload.py).
        "seat_bench_concurrency": [],
        "seat_bench_passes": SWEEP_DEFAULTS["passes"],
    }


def test_the_benchmark_tool_takes_its_defaults_from_the_workload():
    """tools/seatwright-bench --help shows the workload module's values (no literal of its own)."""
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "seatwright-bench"), "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    text = " ".join(result.stdout.split())
    assert "named workload (default %s)" % DEFAULT_PROFILE in text
    assert "levels, comma separated (default: the profile's)" in text
    assert "measured passes over every level (default %d)" % SWEEP_DEFAULTS["passes"] in text


@pytest.mark.parametrize("name", ["../../etc", "Lab", "a" * 64])
def test_the_promotion_tool_refuses_an_incumbent_that_is_no_seat_name(tmp_path, name):
    result = subprocess.run(
        [
            sys.executable,
            str(ROOT / "tools" / "seatwright-promote"),
            "--evidence-dir",
            str(tmp_path / "lab" / "20261130T100000Z"),
            "--incumbent",
            name,
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 2
    assert result.stderr == (
        "seatwright-promote: incumbents must be seat names (seats/<name>.yml: lowercase letters, digits and "
        "'-', at most 63), got %r\n" % name
    )


def test_every_name_asked_of_the_lookup_exists():
    """A typo in a role's lookup would fail only when a play reaches it; find it here instead."""
    asked = re.compile(r"lookup\(\s*'seatwright\.fleet\.defaults',\s*'([^']+)'")
    known = shared_values()
    unknown, seen = [], set()
    for top in ("roles", "playbooks", "lab"):
        for path in sorted((ROOT / top).rglob("*.yml")):
            for name in asked.findall(path.read_text(encoding="utf-8")):
                seen.add(name)
                if name not in known:
                    unknown.append("%s: %s" % (path.relative_to(ROOT), name))
    assert unknown == []
    assert {"state_dir", "config_dir", "seat_name_pattern", "probe_threshold", "bench_passes"} <= seen


@pytest.mark.parametrize(
    "plan_dir, seat, expected",
    [
        ("/p/.cache/plans", "lab", "/p/.cache/plans/lab.json"),
        ("/p/.cache/plans/", "lab-allcores", "/p/.cache/plans/lab-allcores.json"),
        (".cache/plans", "glm53", ".cache/plans/glm53.json"),
    ],
)
def test_a_seats_plan_file_is_named_in_one_place(plan_dir, seat, expected):
    assert defaults.plan_file(plan_dir, seat) == expected


@pytest.mark.parametrize("seat", ["../lab", "lab/x", "Lab", "", None, "a" * 64])
def test_a_plan_file_for_a_name_that_is_not_a_dns_label_is_refused(seat):
    with pytest.raises(ValueError, match="not a DNS label"):
        defaults.plan_file("/p/.cache/plans", seat)


def test_the_filter_names_the_bad_seat_instead_of_a_traceback():
    from ansible.errors import AnsibleFilterError
    from ansible_collections.seatwright.fleet.plugins.filter.plan_file import FilterModule

    found = FilterModule().filters()["plan_file"]
    assert found("/p/plans", "lab") == "/p/plans/lab.json"
    with pytest.raises(AnsibleFilterError, match="'../x' is not a DNS label"):
        found("/p/plans", "../x")


def test_no_play_or_role_spells_a_plan_files_name_itself():
    spelled = re.compile(r"""\bseat(_name)?\s*~\s*'\.json'""")
    found = [
        str(path.relative_to(ROOT))
        for folder in ("playbooks", "roles")
        for path in (ROOT / folder).rglob("*.yml")
        if spelled.search(path.read_text())
    ]
    assert found == [], "spell <plan_dir>/<seat>.json with seatwright.fleet.plan_file: %s" % found
