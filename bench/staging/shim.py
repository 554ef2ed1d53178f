"""Where a checkout keeps its module_utils, and where a shim folder must hold it to import it.

The staging benchmarks run the project's staging code on hosts without Ansible: they copy or link
a checkout's module_utils under a plain folder and put that folder on sys.path. A checkout made
since the collection layout keeps it at plugins/module_utils, imported as
ansible_collections.seatwright.fleet.plugins.module_utils; an older baseline checkout keeps it at
module_utils/seatwright, imported as ansible.module_utils.seatwright. Both are handled so a
baseline from before the move can still be timed beside the current tree.
"""

from pathlib import Path

COLLECTION = "ansible_collections/seatwright/fleet/plugins"
LEGACY = "ansible/module_utils"


def layout(tree):
    """(module_utils folder in `tree`, its parent inside a shim, package folders that need an __init__.py)."""
    tree = Path(tree)
    if (tree / "plugins" / "module_utils").is_dir():
        # Namespace packages: ansible_collections/, seatwright/, fleet/ and plugins/ need no __init__.py.
        return tree / "plugins" / "module_utils", COLLECTION, []
    return tree / "module_utils" / "seatwright", LEGACY, ["ansible", LEGACY]


def staging_auth_path(tree):
    """The checkout's staging_auth.py, the one home of the wire format and chunk size."""
    source, _parent, _packages = layout(tree)
    return source / "weights" / "staging_auth.py"


def link_shim(folder, tree):
    """A local shim folder importing `tree`'s module_utils through a symlink; returns the folder."""
    folder = Path(folder)
    source, parent, packages = layout(tree)
    (folder / parent).mkdir(parents=True, exist_ok=True)
    for package in packages:
        (folder / package / "__init__.py").touch()
    target = folder / parent / source.name
    if not target.exists():
        target.symlink_to(source)
    return folder


def shim_commands(shim, tree):
    """(shell that prepares `shim` on a node, (local folder to copy, destination folder on the node))."""
    source, parent, packages = layout(tree)
    prepare = "mkdir -p %s/%s" % (shim, parent)
    if packages:
        prepare += " && touch " + " ".join("%s/%s/__init__.py" % (shim, package) for package in packages)
    return prepare, (source, "%s/%s/" % (shim, parent))
