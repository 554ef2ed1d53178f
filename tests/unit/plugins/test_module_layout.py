"""The shape of the collection's code: thin modules, each main() run by a test, imports in the open.

A module in plugins/modules is documentation, an argument spec, one call into module_utils and
exit_json/fail_json; the work lives in plugins/module_utils where it can be tested and shared.
"""

import ast
import functools
import re

import pytest
from conftest import ROOT

MODULES = sorted((ROOT / "plugins" / "modules").glob("*.py"))
MODULE_UTILS = ROOT / "plugins" / "module_utils"
TESTS = sorted((ROOT / "tests" / "unit").rglob("test_*.py"))

# Non-blank, non-comment lines a module may carry after its RETURN block: imports, the argument
# spec, one call, the exits.
MAX_CODE_LINES = 40

# Modules still being thinned elsewhere (the launch helper's). The test expects them to fail;
# once one is thin its xfail turns into a failure, and its name leaves this set.
PENDING_THIN = set()

# Modules whose main() no unit test runs yet (the launch and evidence helpers'); same rule.
PENDING_MAIN_TEST = set()

# Function-level imports kept on purpose, with the reason.
DEFERRED_IMPORTS = {
    "plugins/module_utils/io/evidence/writer.py": "jsonschema and matplotlib are optional controller packages",
    "plugins/module_utils/io/weights/staging_pull.py": "swarm.py builds on its transport: a cycle",
}


def code_lines_after_return(path):
    """Non-blank, non-comment lines after the RETURN string ends (all of them when there is none)."""
    source = path.read_text()
    end = 0
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and any(getattr(t, "id", None) == "RETURN" for t in node.targets):
            end = node.end_lineno
    tail = source.splitlines()[end:]
    return [line for line in tail if line.strip() and not line.strip().startswith("#")]


def _pending(names, path):
    marks = [pytest.mark.xfail(strict=True, reason="pending elsewhere")] if path.stem in names else []
    return pytest.param(path, marks=marks, id=path.stem)


def test_the_counter_reads_code_only(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('DOCUMENTATION = "x"\nRETURN = r"""\na: b\n"""\n\n# why\nimport os\n\n\ndef main():\n    pass\n')
    assert code_lines_after_return(module) == ["import os", "def main():", "    pass"]


@pytest.mark.parametrize("path", [_pending(PENDING_THIN, p) for p in MODULES])
def test_module_is_thin(path):
    lines = code_lines_after_return(path)
    assert len(lines) <= MAX_CODE_LINES, (
        "%s has %d lines of code after RETURN (at most %d): move the work to "
        % (
            path.name,
            len(lines),
            MAX_CODE_LINES,
        )
        + "plugins/module_utils and keep the spec, one call and the exits"
    )


def test_every_test_file_sits_in_the_folder_of_what_it_tests():
    """tests/unit mirrors the collection (plugins/module_utils/<concern>/, plugins/modules/, ...), as
    community.docker's does; its folders share one sys.path (tests/conftest.py), so names stay unique."""
    unit = ROOT / "tests" / "unit"
    assert sorted(p.name for p in unit.glob("*.py")) == [], "put it under the folder of what it tests"
    names = [p.name for p in unit.rglob("*.py") if "__pycache__" not in p.parts]
    assert sorted({n for n in names if names.count(n) > 1}) == []


@functools.cache
def _main_callers():
    called = {}
    for test in TESTS:
        text = test.read_text()
        for name in re.findall(r"^import (\w+)$", text, re.M):
            direct = re.search(r"\b%s\.main\(\)" % name, text)
            # A helper that runs `module.main()` counts for the modules the file hands to it.
            handed = re.search(r"\bmodule\.main\(\)", text) and re.search(r"[(,]\s*%s\s*[,)]" % name, text)
            if direct or handed:
                called.setdefault(name, []).append(test.name)
    return called


@pytest.mark.parametrize("path", [_pending(PENDING_MAIN_TEST, p) for p in MODULES])
def test_module_main_is_run_by_a_unit_test(path):
    """A test imports the module and calls its main() (directly, or through a helper given the module)."""
    assert path.stem in _main_callers(), "no unit test imports %s and runs its main()" % path.stem


def test_pending_sets_name_real_modules():
    names = {p.stem for p in MODULES}
    assert PENDING_THIN <= names and PENDING_MAIN_TEST <= names


def _function_imports(path):
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            found += [
                "%s:%d" % (path.name, inner.lineno)
                for inner in ast.walk(node)
                if isinstance(inner, (ast.Import, ast.ImportFrom))
            ]
    return found


@pytest.mark.parametrize(
    "path",
    [
        p
        for p in sorted(MODULE_UTILS.rglob("*.py")) + MODULES
        if str(p.relative_to(ROOT)) not in DEFERRED_IMPORTS and p.name != "allreduce_worker.py"
    ],
    ids=lambda p: str(p.relative_to(MODULE_UTILS.parent)),
)
def test_imports_are_at_the_top(path):
    """A hidden import hides a dependency from readers, from Ansible's packer and from the boot bundle."""
    assert _function_imports(path) == []


def _imports(path):
    tree = ast.parse(path.read_text())
    return {node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom) and node.module}


def test_images_never_import_seat():
    """seat/ plans against images/; an import the other way would make a cycle of concerns."""
    back = {
        str(p.relative_to(MODULE_UTILS)): sorted(m for m in _imports(p) if ".module_utils.seat" in m)
        for p in (MODULE_UTILS / "images").glob("*.py")
    }
    assert {k: v for k, v in back.items() if v} == {}


def test_parse_json_has_one_home():
    homes = [
        str(p.relative_to(MODULE_UTILS))
        for p in MODULE_UTILS.rglob("*.py")
        if re.search(r"^def parse_json\(", p.read_text(), re.M)
    ]
    assert homes == ["jsondoc.py"]


# Modules that run on the controller only (delegate_to: localhost, or a localhost play): they may
# use the controller venv's PyYAML and jsonschema. Every other module runs on the nodes, whose
# Python has the standard library only.
CONTROLLER_ONLY = {
    "seat_plan": "playbooks/plan.yml, a localhost play",
    "seat_evidence": "writes the evidence folder on the controller",
    "engine_image_plan": "roles/engine_image/tasks/plan.yml, delegated to localhost",
    "engine_image_context": "roles/engine_image/tasks/build.yml, the controller's build block",
}
NOT_ON_NODES = {"yaml", "jsonschema", "matplotlib"}
PACKAGE = "ansible_collections.seatwright.fleet.plugins.module_utils"


def _module_utils_file(dotted):
    base = ROOT / "plugins" / "module_utils" / dotted[len(PACKAGE) + 1 :].replace(".", "/")
    for path in (base.with_suffix(".py"), base / "__init__.py"):
        if path.is_file():
            return path
    return None


def _top_level_imports(path):
    """(project modules, outside packages) a file imports when it loads, try blocks included."""
    ours, outside = set(), set()
    for node in ast.parse(path.read_text()).body:
        for item in node.body if isinstance(node, ast.Try) else [node]:
            if isinstance(item, ast.ImportFrom) and item.module and item.module.startswith(PACKAGE):
                for alias in item.names:
                    sub = "%s.%s" % (item.module, alias.name)
                    ours.add(sub if _module_utils_file(sub) else item.module)
            elif isinstance(item, ast.ImportFrom) and item.module:
                outside.add(item.module.split(".")[0])
            elif isinstance(item, ast.Import):
                outside.update(alias.name.split(".")[0] for alias in item.names)
    return ours, outside


def _outside_packages_reached(module_path):
    ours, outside = _top_level_imports(module_path)
    seen, pending = set(), list(ours)
    while pending:
        dotted = pending.pop()
        path = None if dotted in seen else _module_utils_file(dotted)
        seen.add(dotted)
        if path is not None:
            more, packages = _top_level_imports(path)
            outside |= packages
            pending += list(more - seen)
    return outside


@pytest.mark.parametrize("path", [p for p in MODULES if p.stem not in CONTROLLER_ONLY], ids=lambda p: p.stem)
def test_a_node_module_needs_nothing_the_nodes_lack(path):
    # seat_cotenants once reached PyYAML through node/contract.py -> seat/recipe.py and failed on the lab nodes.
    assert _outside_packages_reached(path) & NOT_ON_NODES == set()


def test_the_controller_only_modules_exist():
    assert set(CONTROLLER_ONLY) <= {p.stem for p in MODULES}
