"""Test wiring: make the project's module_utils and library importable the way Ansible does."""
import sys
from pathlib import Path

import ansible.module_utils

ROOT = Path(__file__).resolve().parent.parent
FIXTURES = ROOT / "tests" / "fixtures"

# Modules import `ansible.module_utils.seatwright.*`; Ansible resolves that from module_utils/.
if str(ROOT / "module_utils") not in ansible.module_utils.__path__:
    ansible.module_utils.__path__.append(str(ROOT / "module_utils"))
sys.path.insert(0, str(ROOT / "library"))
