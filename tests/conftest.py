"""Test wiring: make the project's module_utils and library importable the way Ansible does."""

import sys
from pathlib import Path

import pytest
from ansible.module_utils.common import warnings as ansible_warnings

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"

sys.path.insert(0, str(ROOT / "library"))


@pytest.fixture(autouse=True)
def _fresh_module_warnings():
    """Each module main() run in-process starts with no warnings, as in its own process on a node: a
    warning one test's module raised (router_cotenants' say) otherwise rides into a later module's
    result, and passing that result back as module arguments fails to decode."""
    yield
    ansible_warnings._global_warnings.clear()
    ansible_warnings._global_deprecations.clear()
