"""Test wiring: make the project's module_utils and library importable the way Ansible does."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

import pytest
from ansible.module_utils.common import warnings as ansible_warnings

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"
PLAYBOOK = str(ROOT / ".venv" / "bin" / "ansible-playbook")


def load_script(relative, name=None):
    """A script of the project (tools/, bench/) imported from its path, as a module under `name` or its stem."""
    path = ROOT / relative
    spec = importlib.util.spec_from_file_location(name or path.stem, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def run_playbook(tmp_path, inventory, *args):
    """ansible-playbook from the checkout with its ansible.cfg, facts cached under tmp_path; never raises."""
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_CACHE_PLUGIN_CONNECTION=str(tmp_path / "facts"),
    )
    return subprocess.run(
        [PLAYBOOK, "-i", str(inventory)] + list(args),
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


sys.path.insert(0, str(ROOT / "library"))
# tests/unit mirrors the collection (tests/unit/plugins/module_utils/<concern>/...); its modules keep
# importing each other's helpers by name (seat_cases, checkpoint_cases, unix_http, ...) from any folder,
# as pytest's prepend import mode reaches only the folder of a file it has already collected.
UNIT = ROOT / "tests" / "unit"
sys.path[1:1] = sorted({str(p.parent) for p in UNIT.rglob("*.py") if "__pycache__" not in p.parts})


@pytest.fixture(autouse=True)
def _fresh_module_warnings():
    """Each module main() run in-process starts with no warnings, as in its own process on a node: a
    warning one test's module raised (router_cotenants' say) otherwise rides into a later module's
    result, and passing that result back as module arguments fails to decode."""
    yield
    ansible_warnings._global_warnings.clear()
    ansible_warnings._global_deprecations.clear()
