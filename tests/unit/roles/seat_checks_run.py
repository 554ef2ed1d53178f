"""Runs roles/seat/tasks/checks.yml's image check as Ansible does: its node reads, then its assert.

Run as a script (test_seat_checks.py does, one process per case): the collection loader must be in
place before anything imports ansible_collections, which pytest's process has done already.
Reads {variables} as JSON on stdin, answers {passed, message, images_dir}.
"""

import base64
import json
import sys
from pathlib import Path

import yaml
from ansible.parsing.dataloader import DataLoader
from ansible.plugins.loader import init_plugin_loader
from ansible.template import Templar, trust_as_template

ROOT = Path(__file__).resolve().parents[3]  # run as a script, without tests/ on sys.path
SEAT = ROOT / "roles" / "seat"


def _trusted(value):
    """Role files are trusted templates, as Ansible loads them."""
    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, dict):
        return {key: _trusted(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_trusted(item) for item in value]
    return value


def _load(path):
    return yaml.safe_load(path.read_text())


def _templar(variables):
    return Templar(loader=DataLoader(), variables=variables)


def node_variables(state_dir, image_ref, digest, inspected):
    """The variables checks.yml sees on a one-node seat whose image inspects as `inspected`."""
    inspect = {"rc": 0, "stdout": json.dumps([inspected])} if inspected else {"rc": 1, "stdout": ""}
    variables = dict(_trusted(_load(SEAT / "vars" / "main.yml")))
    variables.update(
        {
            "__seat_plan": {"engine": {"image": {"digest": digest}}, "ranks": [{"rank": 0, "host": "lab-node1"}]},
            "__seat_rank": {
                "rank": 0,
                "container_spec": {"image": image_ref, "name": "seat-r0", "mounts": [{"source": "/models/m"}]},
                "setup_container_spec": None,
            },
            "__seat_image_inspect": inspect,
            "hostvars": {"lab-node1": {"__seat_image_inspect": inspect}},
            "inventory_hostname": "lab-node1",
            "seatwright_state_dir": state_dir,
            "seat_api_key": "unused",
        }
    )
    return variables


def images_dir(state_dir):
    """Where the engine_image role keeps its state, records included, for the same state folder."""
    defaults = _trusted(_load(ROOT / "roles" / "engine_image" / "defaults" / "main.yml"))
    variables = {"seatwright_state_dir": state_dir}
    return _templar(variables).template(defaults["engine_image_state_dir"])


def _slurp(path):
    """ansible.builtin.slurp's answer, as the check registers it (failed_when: false)."""
    if not Path(path).is_file():
        return {"failed": True, "msg": "file not found: %s" % path}
    return {"content": base64.b64encode(Path(path).read_bytes()).decode(), "encoding": "base64", "source": path}


def run_image_check(variables):
    """(passed, message) of checks.yml's image assert after the node-side reads before it."""
    tasks = _load(SEAT / "tasks" / "checks.yml")
    for task in tasks:
        if "ansible.builtin.assert" in task:
            templar = _templar(dict(variables, **_trusted(task.get("vars") or {})))
            check = task["ansible.builtin.assert"]
            passed = all(templar.evaluate_conditional(trust_as_template(that)) for that in check["that"])
            return passed, None if passed else templar.template(trust_as_template(check["fail_msg"]))
        if "ansible.builtin.slurp" in task:
            templar = _templar(variables)
            when = task.get("when", True)
            if when is True or templar.evaluate_conditional(trust_as_template(when)):
                variables[task["register"]] = _slurp(templar.template(_trusted(task["ansible.builtin.slurp"]["src"])))
            else:
                variables[task["register"]] = {"skipped": True}
    raise AssertionError("checks.yml has no image assert")


def main():
    init_plugin_loader([str(ROOT / ".cache" / "collections")])
    case = json.load(sys.stdin)
    passed, message = run_image_check(
        node_variables(case["state_dir"], case["image_ref"], case["digest"], case["inspected"])
    )
    json.dump({"passed": passed, "message": message, "images_dir": images_dir(case["state_dir"])}, sys.stdout)


if __name__ == "__main__":
    main()
