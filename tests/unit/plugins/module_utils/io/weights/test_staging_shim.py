"""bench/staging/shim.py: the staging benchmarks import a checkout's module_utils on a bare Python.

The current tree keeps it at plugins/module_utils (the collection); a baseline from before the
move keeps it at module_utils/seatwright. Both must import from a shim folder with no Ansible.
"""

import subprocess
import sys

from conftest import ROOT, load_script

shim = load_script("bench/staging/shim.py", "staging_shim")


def test_the_current_tree_imports_through_a_shim_with_no_site_packages(tmp_path):
    folder = shim.link_shim(tmp_path / "shim", ROOT)
    code = (
        "import sys; sys.path.insert(0, %r)\n"
        "from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights import staging_pull\n"
        "print(staging_pull.__file__)\n" % str(folder)
    )
    # -I -S: no site-packages and no .pth, as on a lab node without Ansible.
    done = subprocess.run([sys.executable, "-I", "-S", "-c", code], capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip().startswith(str(folder))
    assert shim.staging_auth_path(ROOT) == ROOT / "plugins" / "module_utils" / "weights" / "staging_auth.py"


def test_a_baseline_from_before_the_collection_keeps_its_own_layout(tmp_path):
    old = tmp_path / "old"
    (old / "module_utils" / "seatwright" / "weights").mkdir(parents=True)
    (old / "module_utils" / "seatwright" / "__init__.py").write_text("")
    (old / "module_utils" / "seatwright" / "weights" / "__init__.py").write_text("")
    (old / "module_utils" / "seatwright" / "weights" / "staging_auth.py").write_text("CHUNK_BYTES = 1\n")
    folder = shim.link_shim(tmp_path / "shim", old)
    code = "import sys; sys.path.insert(0, %r)\nfrom ansible.module_utils.seatwright.weights import staging_auth\n"
    done = subprocess.run(
        [sys.executable, "-I", "-S", "-c", code % str(folder)], capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stderr
    prepare, (source, into) = shim.shim_commands("/opt/sw-baseline", old)
    assert prepare == (
        "mkdir -p /opt/sw-baseline/ansible/module_utils && touch /opt/sw-baseline/ansible/__init__.py "
        "/opt/sw-baseline/ansible/module_utils/__init__.py"
    )
    assert (source, into) == (old / "module_utils" / "seatwright", "/opt/sw-baseline/ansible/module_utils/")
