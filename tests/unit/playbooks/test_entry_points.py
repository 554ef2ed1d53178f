"""The playbooks an operator runs: one seat playbook for every seat (plus the named glm53 one), a
teardown that cannot read as a seat, the seat always given as `-e seat=<name>`, and every
playbook the project names exists."""

import re

import pytest
import yaml
from conftest import ROOT

PLAYBOOKS = ROOT / "playbooks"
# Where playbooks are named for people or run by code. bench/results/ is left out: it records the
# commands that produced each result as they were run.
NAMING = [
    "README.md",
    "Makefile",
    "docs",
    "playbooks",
    "roles",
    "plugins",
    "tests",
    "bench",
    "lab",
    "molecule",
    "tools",
]
PLAYBOOK_NAME = re.compile(r"playbooks/([\w.-]+\.yml)")
# Entry points that act on one seat.
SEAT_ENTRY_POINTS = ["plan.yml", "bringup.yml", "seat.yml", "qualify.yml", "bench.yml", "teardown.yml"]


def test_only_the_seat_playbook_and_the_named_glm53_one_are_seat_playbooks():
    seats = sorted(p.name for p in PLAYBOOKS.glob("seat*.yml"))
    assert seats == ["seat-glm53.yml", "seat.yml"], (
        "run a seat with playbooks/seat.yml -e seat=<name>, found %s" % seats
    )


def test_the_named_glm53_playbook_is_seat_yml_with_the_seat_set():
    (play,) = yaml.safe_load((PLAYBOOKS / "seat-glm53.yml").read_text())
    assert play["ansible.builtin.import_playbook"] == "seat.yml" and play["vars"] == {"seat": "glm53"}


def test_no_playbook_name_reads_as_a_seat_that_does_not_exist():
    recipes = {p.stem for p in (ROOT / "seats").glob("*.yml")}
    for path in PLAYBOOKS.glob("seat-*.yml"):
        assert path.stem[len("seat-") :] in recipes, "%s names no seat in seats/" % path.name


@pytest.mark.parametrize("name", SEAT_ENTRY_POINTS)
def test_every_seat_entry_point_takes_the_seat_as_seat(name):
    text = (PLAYBOOKS / name).read_text()
    usage = "\n".join(line for line in text.splitlines() if line.startswith("#"))
    assert "-e seat=" in usage, "playbooks/%s should say how to name the seat: -e seat=<name>" % name
    assert "{{ seat }}" in text or "seat is defined" in text or "~ seat ~" in text


def named_playbooks():
    found = []
    for entry in NAMING:
        base = ROOT / entry
        files = [base] if base.is_file() else [p for p in base.rglob("*") if p.is_file()]
        for path in files:
            relative = path.relative_to(ROOT)
            if relative.parts[:2] == ("bench", "results") or {"fixtures", "__pycache__"} & set(relative.parts):
                continue
            try:
                text = path.read_text()
            except UnicodeDecodeError:
                continue
            for name in PLAYBOOK_NAME.findall(text):
                found.append((str(path.relative_to(ROOT)), name))
    return found


def test_some_playbook_names_are_found():
    assert ("Makefile", "seat.yml") in named_playbooks()


def test_every_playbook_the_project_names_exists():
    missing = sorted({"%s: playbooks/%s" % pair for pair in named_playbooks() if not (PLAYBOOKS / pair[1]).is_file()})
    assert not missing, "these name a playbook that does not exist:\n" + "\n".join(missing)
