"""Every module in library/ documents what its argument_spec accepts, the same way.

DOCUMENTATION, merged with the fragments it extends (plugins/doc_fragments/) as Ansible merges them,
matches argument_spec (names, types, defaults, choices, required), EXAMPLES and RETURN parse, and the
attributes fragments say how check mode and diff are supported. No module writes `attributes:` or a
shared option (the docker and router fragments') itself, and ansible-doc reads every module.
"""

import ast
import importlib
import json
import os
import subprocess
import sys

import pytest
import yaml
from ansible.utils.plugin_docs import add_fragments
from conftest import ROOT

MODULES = sorted((ROOT / "library").glob("*.py"))
FRAGMENTS = sorted(p.stem for p in (ROOT / "plugins" / "doc_fragments").glob("*.py") if p.stem != "__init__")
# How a module states its check and diff support: exactly one of these beside seatwright.fleet.attributes.
SUPPORT_FRAGMENTS = (
    "seatwright.fleet.attributes.check_full",
    "seatwright.fleet.attributes.check_full_diff",
    "seatwright.fleet.attributes.check_partial",
)


class _Fragments:
    """Ansible's fragment loader, for seatwright.fleet's own fragments, from the collection path."""

    def get(self, name, *args, **kwargs):
        collection, _sep, stem = name.rpartition(".")
        if collection != "seatwright.fleet":
            return None
        try:
            found = importlib.import_module("ansible_collections.seatwright.fleet.plugins.doc_fragments." + stem)
        except ImportError:
            return None
        return type("Fragment", (found.ModuleDocFragment,), {"ansible_name": name})


def _raw_doc(path):
    return yaml.safe_load(_constants(ast.parse(path.read_text()))["DOCUMENTATION"])


def _merged_doc(path):
    """DOCUMENTATION with its fragments merged in (ansible.utils.plugin_docs.add_fragments)."""
    doc = _raw_doc(path)
    add_fragments(doc, str(path), _Fragments(), is_module=True)
    return doc


def _fragment_options(name):
    module = importlib.import_module("ansible_collections.seatwright.fleet.plugins.doc_fragments." + name)
    return sorted((yaml.safe_load(module.ModuleDocFragment.DOCUMENTATION).get("options") or {}))


def _constants(tree):
    values = {}
    for node in tree.body:
        if isinstance(node, ast.Assign) and len(node.targets) == 1 and isinstance(node.targets[0], ast.Name):
            try:
                values[node.targets[0].id] = ast.literal_eval(node.value)
            except ValueError:
                continue
    return values


def _spec(path):
    """argument_spec as written in main(): a dict literal of dict literals or dict(...) calls."""
    tree = ast.parse(path.read_text())
    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "argument_spec":
            if isinstance(node.value, ast.Name):  # argument_spec=ARGUMENT_SPEC, a module-level literal
                for assign in tree.body:
                    if isinstance(assign, ast.Assign) and getattr(assign.targets[0], "id", None) == node.value.id:
                        return _literal(assign.value)
            return _literal(node.value)
    raise AssertionError("%s has no argument_spec" % path.name)


def _literal(node):
    if isinstance(node, ast.Dict):
        return {_literal(k): _literal(v) for k, v in zip(node.keys, node.values)}
    if isinstance(node, ast.Call) and getattr(node.func, "id", None) == "dict":
        return {kw.arg: _literal(kw.value) for kw in node.keywords}
    try:
        return ast.literal_eval(node)
    except ValueError:
        return (
            "<expr>"  # a constant from module_utils/defaults.py: tools/render_defaults.py writes its documented value
        )


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_documentation_matches_argument_spec(path):
    constants = _constants(ast.parse(path.read_text()))
    doc = _merged_doc(path)
    yaml.safe_load(constants["EXAMPLES"])
    yaml.safe_load(constants["RETURN"])
    spec = _spec(path)
    options = doc.get("options") or {}
    assert sorted(options) == sorted(spec), "options differ from argument_spec"
    for name, rule in spec.items():
        documented = options[name]
        assert documented.get("type", "str") == rule.get("type", "str"), name
        assert bool(documented.get("required")) == bool(rule.get("required")), name
        if rule.get("default") not in (None, "<expr>"):
            assert documented.get("default") == rule["default"], name
        if rule.get("choices") not in (None, "<expr>"):
            assert documented.get("choices") == rule["choices"], name
        if "elements" in rule:
            assert documented.get("elements") == rule["elements"], name
        assert documented.get("description"), name


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_attributes_state_check_and_diff_support(path):
    attributes = _merged_doc(path).get("attributes") or {}
    for attribute in ("check_mode", "diff_mode"):
        assert attributes.get(attribute, {}).get("support") in ("full", "partial", "none"), attribute
        assert attributes[attribute].get("description"), attribute


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_attributes_come_from_the_fragments_only(path):
    doc = _raw_doc(path)
    assert "attributes" not in doc, "write no attributes: extend seatwright.fleet.attributes and one of %s" % (
        ", ".join(SUPPORT_FRAGMENTS)
    )
    extended = doc.get("extends_documentation_fragment") or []
    assert "seatwright.fleet.attributes" in extended
    assert len([name for name in extended if name in SUPPORT_FRAGMENTS]) == 1, extended


@pytest.mark.parametrize("fragment", [f for f in FRAGMENTS if f != "attributes"])
@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_shared_options_come_from_their_fragment(path, fragment):
    """A module taking a fragment's options extends the fragment and documents none of them itself."""
    doc, spec = _raw_doc(path), _spec(path)
    shared = _fragment_options(fragment)
    extends = "seatwright.fleet.%s" % fragment in (doc.get("extends_documentation_fragment") or [])
    if set(shared) <= set(spec):
        assert extends, "takes %s's options (%s): extend seatwright.fleet.%s" % (fragment, shared, fragment)
    if extends:
        inline = sorted(set(shared) & set(doc.get("options") or {}))
        assert not inline, "documents %s's options itself: %s" % (fragment, inline)
        assert set(shared) <= set(spec), "extends seatwright.fleet.%s without taking all its options" % fragment


def test_a_module_writing_attributes_itself_is_found(tmp_path):
    module = tmp_path / "handwritten.py"
    module.write_text('DOCUMENTATION = r"""\nmodule: handwritten\nattributes:\n  check_mode:\n    support: full\n"""\n')
    with pytest.raises(AssertionError):
        test_attributes_come_from_the_fragments_only(module)


def test_ansible_doc_reads_every_module():
    """ansible-doc merges the fragments and parses every module's docs (it prints an error and goes on
    for one it cannot read, so each must be in its answer)."""
    names = ["seatwright.fleet." + path.stem for path in MODULES]
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    done = subprocess.run(
        [os.path.join(os.path.dirname(sys.executable), "ansible-doc"), "-t", "module", "--json"] + names,
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout)
    assert sorted(found) == sorted(names), [line for line in done.stderr.splitlines() if "ERROR" in line]
    for name, entry in found.items():
        assert entry["doc"]["attributes"]["check_mode"]["support"] in ("full", "partial", "none"), name


PLUGINS = sorted(
    p for p in (ROOT / "plugins").glob("*/*.py") if p.parent.name != "module_utils" and p.name != "__init__.py"
)


@pytest.mark.parametrize("path", PLUGINS, ids=lambda p: "%s/%s" % (p.parent.name, p.name))
def test_plugin_documentation_parses(path):
    # ansible-doc and ansible-lint only print an error for a plugin whose docs are not YAML, and pass.
    constants = _constants(ast.parse(path.read_text()))
    for name in ("DOCUMENTATION", "EXAMPLES", "RETURN"):
        if name in constants:
            yaml.safe_load(constants[name])
