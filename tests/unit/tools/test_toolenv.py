"""tools/toolenv.py: a tool started by a Python without the collection runs again in .venv, or says
how to make one (never an ImportError)."""

import os
import subprocess
import sys

import pytest
from conftest import ROOT

TOOLS = sorted(p for p in (ROOT / "tools").iterdir() if p.name.startswith("seatwright-") or p.name == "lab-alias")


@pytest.mark.parametrize("tool", TOOLS, ids=lambda p: p.name)
def test_a_tool_without_the_collection_runs_again_in_the_venv(tool):
    # -S: no site-packages, so no .pth linking the collection, as under a system python3.
    env = {k: v for k, v in os.environ.items() if k != "SEATWRIGHT_TOOL_REEXEC"}
    done = subprocess.run([sys.executable, "-S", str(tool), "--help"], capture_output=True, text=True, env=env)
    if tool.name == "lab-alias":  # takes no --help: it names what it needs
        assert "Traceback" not in done.stderr and done.returncode in (1, 2), done.stderr
    else:
        assert done.returncode == 0 and "usage:" in done.stdout, done.stderr


def test_a_venv_that_cannot_import_it_says_what_to_do():
    env = dict(os.environ, SEATWRIGHT_TOOL_REEXEC="1")
    done = subprocess.run(
        [sys.executable, "-S", str(ROOT / "tools" / "seatwright-qualify"), "--help"],
        capture_output=True,
        text=True,
        env=env,
    )
    assert done.returncode == 2
    assert "scripts/bootstrap" in done.stderr and "Traceback" not in done.stderr
