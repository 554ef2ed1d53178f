"""The interpreter a seatwright tool runs in: the project's .venv, where the collection resolves.

Each tool calls in_project_venv() before it imports the collection. Started by another Python
(`tools/seatwright-qualify` finds /usr/bin/python3 first on PATH), the tool runs itself again under
.venv/bin/python; with no venv yet it says how to make one, instead of an ImportError.
"""

import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
VENV_PYTHON = ROOT / ".venv" / "bin" / "python"
# Set on the second start, so a venv that cannot import the collection stops instead of looping.
REEXEC_MARK = "SEATWRIGHT_TOOL_REEXEC"


def collection_importable():
    try:
        import ansible_collections.seatwright.fleet.plugins.module_utils.errors  # noqa: F401  pylint: disable=unused-import,import-outside-toplevel
    except ImportError:
        return False
    return True


def in_project_venv():
    """Return when the collection imports; else start this tool again in .venv, or exit 2 saying why."""
    if collection_importable():
        return
    tool = os.path.basename(sys.argv[0])
    if VENV_PYTHON.exists() and not os.environ.get(REEXEC_MARK):
        os.environ[REEXEC_MARK] = "1"
        os.execv(str(VENV_PYTHON), [str(VENV_PYTHON), os.path.abspath(sys.argv[0])] + sys.argv[1:])
    sys.stderr.write(
        "%s: the seatwright collection does not import in %s. Run `bash scripts/bootstrap` in %s (it builds "
        ".venv and links the collection), then run the tool again.\n" % (tool, sys.executable, ROOT)
    )
    sys.exit(2)
