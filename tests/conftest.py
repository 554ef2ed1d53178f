"""Test wiring: make the project's module_utils and library importable the way Ansible does."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"

sys.path.insert(0, str(ROOT / "library"))
