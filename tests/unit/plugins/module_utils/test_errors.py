"""Every exception the project raises is declared in plugins/module_utils/errors.py."""

import ast
import inspect

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils import errors
from conftest import ROOT

SOURCES = sorted(
    p
    for folder in ("plugins/module_utils", "plugins/modules")
    for p in (ROOT / folder).rglob("*.py")
    if p.name != "errors.py"
)


def _exception_classes(path):
    tree = ast.parse(path.read_text(), str(path))
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef):
            bases = [getattr(base, "id", getattr(base, "attr", "")) for base in node.bases]
            if any(base.endswith(("Error", "Exception", "Unavailable", "Interrupted")) for base in bases):
                yield node.name


@pytest.mark.parametrize("path", SOURCES, ids=lambda p: str(p.relative_to(ROOT)))
def test_no_exception_class_outside_errors(path):
    assert list(_exception_classes(path)) == []


@pytest.mark.parametrize(
    "name, cls",
    [
        (n, c)
        for n, c in inspect.getmembers(errors, inspect.isclass)
        if c.__module__ == errors.__name__ and c is not errors.SeatwrightError
    ],
)
def test_every_error_is_a_seatwright_error(name, cls):
    assert issubclass(cls, errors.SeatwrightError), name
