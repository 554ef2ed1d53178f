"""Every module in library/ documents what its argument_spec accepts, the same way.

DOCUMENTATION's options match argument_spec (names, types, defaults, choices, required), EXAMPLES
and RETURN parse, and `attributes:` says how check mode and diff are supported.
"""

import ast
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
MODULES = sorted((ROOT / "library").glob("*.py"))


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
    doc = yaml.safe_load(constants["DOCUMENTATION"])
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
        if "choices" in rule:
            assert documented.get("choices") == rule["choices"], name
        if "elements" in rule:
            assert documented.get("elements") == rule["elements"], name
        assert documented.get("description"), name


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.name)
def test_attributes_state_check_and_diff_support(path):
    doc = yaml.safe_load(_constants(ast.parse(path.read_text()))["DOCUMENTATION"])
    attributes = doc.get("attributes") or {}
    for attribute in ("check_mode", "diff_mode"):
        assert attributes.get(attribute, {}).get("support") in ("full", "partial", "none"), attribute


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
