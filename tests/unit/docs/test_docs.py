"""The project's docs stand alone: every citation of a docs/ page and anchor resolves, and every field
report a recipe or rule cites is described in docs/field.md."""

import re
from pathlib import Path

import pytest
import yaml
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.rules import RULES
from conftest import ROOT

DOCS = ROOT / "docs"
SKIP_DIRS = {".git", ".venv", ".cache", ".hypothesis", ".pytest_cache", "__pycache__", "evidence", "fixtures"}
TEXT_SUFFIXES = {".py", ".md", ".yml", ".yaml", ".json", ".j2", ".cfg", ".sh", ".txt", ""}
CITATION = re.compile(r"docs/([a-z_-]+\.md)#([A-Za-z0-9_-]+)")
MD_LINK = re.compile(r"\]\(([^)\s]+)\)")
HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*$", re.MULTILINE)
EXPLICIT_ANCHOR = re.compile(r"""<a\s+id=["']([^"']+)["']""")


def slug(heading):
    """A heading's anchor as GitHub makes it: lower case, punctuation dropped, spaces to hyphens."""
    text = re.sub(r"[^\w\- ]", "", heading.lower())
    return text.replace(" ", "-")


def anchors(path):
    text = path.read_text()
    return {slug(h) for h in HEADING.findall(text)} | set(EXPLICIT_ANCHOR.findall(text))


def project_files():
    for path in sorted(ROOT.rglob("*")):
        parts = set(path.relative_to(ROOT).parts)
        if path.is_file() and not parts & SKIP_DIRS and path.suffix in TEXT_SUFFIXES:
            yield path


def citations():
    found = []
    for path in project_files():
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            for page, anchor in CITATION.findall(line):
                found.append(pytest.param(page, anchor, id="%s:%d" % (path.relative_to(ROOT), number)))
    return found


def markdown_links():
    found = []
    for path in [ROOT / "README.md"] + sorted(DOCS.glob("*.md")):
        for target in MD_LINK.findall(path.read_text()):
            if re.match(r"^[a-z]+:", target):
                continue
            found.append(pytest.param(path, target, id="%s->%s" % (path.relative_to(ROOT), target)))
    return found


def test_slug_matches_github_anchors():
    assert slug("SM120 rules") == "sm120-rules"
    assert slug("NCCL all-reduce measurements") == "nccl-all-reduce-measurements"
    assert slug("custom-allreduce-off") == "custom-allreduce-off"
    assert slug("The `seat` role (issue 13)") == "the-seat-role-issue-13"


def test_some_citations_are_found():
    assert len(citations()) > 0


@pytest.mark.parametrize(("page", "anchor"), citations())
def test_citation_resolves(page, anchor):
    target = DOCS / page
    assert target.is_file(), "docs/%s does not exist" % page
    assert anchor in anchors(target), "docs/%s has no section #%s" % (page, anchor)


@pytest.mark.parametrize(("source", "target"), markdown_links())
def test_markdown_link_resolves(source, target):
    path_part, _, anchor = target.partition("#")
    resolved = (source.parent / path_part).resolve() if path_part else source
    assert resolved.exists(), "%s links to %s, which does not exist" % (source.name, path_part)
    if anchor and resolved.suffix == ".md":
        assert anchor in anchors(resolved), "%s links to #%s, missing in %s" % (source.name, anchor, resolved.name)


def cited_report_keys():
    keys = set()
    for recipe in sorted((ROOT / "seats").glob("*.yml")):
        keys.update(str(s) for s in yaml.safe_load(recipe.read_text()).get("sources", []) if str(s).isdigit())
    for rule in RULES:
        keys.update(s for s in rule["sources"] if s.isdigit())
    return sorted(keys)


@pytest.mark.parametrize("key", cited_report_keys())
def test_cited_field_report_is_described(key):
    assert "report-%s" % key in anchors(DOCS / "field.md"), (
        "field report [%s] is cited but docs/field.md#sources does not describe it" % key
    )


def layout_block(path, heading):
    """The first fenced block after `heading` in a markdown file."""
    text = path.read_text()
    after = text[text.index(heading) :]
    return after.split("```")[1]


def picture_tree(block):
    """{parent: set of children} from a layout picture: unindented `name/` lines are top-level
    folders (parent ''), indented ones belong to the last top-level folder above them."""
    tree, parent = {"": set()}, ""
    for line in block.splitlines():
        match = re.match(r"^(\s*)([\w.-]+/(?:[\w.-]+/)*)", line)
        if not match:
            continue
        if not match.group(1):
            parent = match.group(2)
            tree[""].add(parent)
            tree.setdefault(parent, set())
        else:
            tree.setdefault(parent, set()).add(match.group(2))
    return tree


def existing_folders():
    folders = [
        ("", "%s/" % p.name)
        for p in ROOT.iterdir()
        if p.is_dir() and not p.name.startswith(".") and p.name not in SKIP_DIRS
    ]
    folders += [
        ("plugins/module_utils/", "%s/" % p.name)
        for p in (ROOT / "plugins" / "module_utils").iterdir()
        if p.is_dir() and p.name != "__pycache__"
    ]
    folders += [("roles/", "%s/" % p.name) for p in (ROOT / "roles").iterdir() if p.is_dir()]
    folders += [
        ("lab/", "%s/" % p.name)
        for p in (ROOT / "lab").iterdir()
        if p.is_dir() and not p.name.startswith(".") and p.name != "__pycache__"
    ]
    return [pytest.param(parent, name, id=parent + name) for parent, name in sorted(set(folders))]


def test_picture_tree_tells_top_level_from_nested():
    tree = picture_tree("roles/   x\n  seat/   y\nimages/  z\nplugins/module_utils/\n  images/  w\n")
    assert tree[""] == {"roles/", "images/", "plugins/module_utils/"}
    assert tree["roles/"] == {"seat/"} and tree["plugins/module_utils/"] == {"images/"}


@pytest.mark.parametrize(("parent", "folder"), existing_folders())
def test_architecture_layout_shows_every_folder(parent, folder):
    tree = picture_tree(layout_block(DOCS / "architecture.md", "## Layout"))
    shown = tree.get(parent, set())
    assert any(entry == folder or (not parent and entry.startswith(folder)) for entry in shown), (
        "docs/architecture.md#layout does not show %s%s; add it to the picture" % (parent, folder)
    )


BACKGROUND = ["FIELD" + ".md", "DESIGN" + ".md", "LAB" + ".md", "../" + "shared"]


def test_project_cites_only_its_own_docs():
    """Background notes outside the repository are not citable: a user has no way to read them."""
    found = []
    for path in project_files():
        if path == Path(__file__).resolve():
            continue
        try:
            text = path.read_text()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(text.splitlines(), 1):
            found += ["%s:%d: %s" % (path.relative_to(ROOT), number, name) for name in BACKGROUND if name in line]
    assert not found, "cite docs/field.md, docs/architecture.md or docs/lab.md instead:\n" + "\n".join(found)


# 200 until the benchmark section gained its table of traps (issue 22), which belongs in the README.
README_MAX_LINES = 220
GENERATED_MARKERS = ("<!-- rules:begin -->", "<!-- contract:begin -->", "<!-- rolevars:begin -->")


def test_readme_trap_table_names_tests_that_exist():
    """Every test the README's table of benchmark traps names is a test of the suite."""
    text = (ROOT / "README.md").read_text()
    rows = re.findall(r"^\| [^|]+ \| [^|]+ \| `(test_\w+\.py)(?:::(test_\w+))?` \|$", text, re.M)
    assert len(rows) >= 9, "the README's benchmark section lists the traps it catches, each with its test"
    for path, name in rows:
        found = sorted((ROOT / "tests" / "unit").rglob(path))  # the table names the file; its folder is the layout's
        assert len(found) == 1, "the README names %s, which is %d files under tests/unit" % (path, len(found))
        source = found[0].read_text()
        assert not name or re.search(r"^def %s\(" % name, source, re.M), "%s::%s is not a test" % (path, name)


def test_readme_fits_on_a_few_screens():
    lines = (ROOT / "README.md").read_text().splitlines()
    assert len(lines) < README_MAX_LINES, "README.md has %d lines; move reference material to docs/" % len(lines)


def test_developing_states_the_readme_limit_the_test_holds():
    # One number: DEVELOPING.md tells a contributor the limit this file checks.
    text = " ".join((DOCS / "DEVELOPING.md").read_text().split())
    assert "the README stays under %d lines" % README_MAX_LINES in text, (
        "docs/DEVELOPING.md must say 'the README stays under %d lines' (README_MAX_LINES)" % README_MAX_LINES
    )


def test_readme_holds_no_generated_table_and_links_the_pages_that_do():
    text = (ROOT / "README.md").read_text()
    for marker in GENERATED_MARKERS:
        assert marker not in text, "README.md still holds the generated block %s" % marker
    # A row of the rules table or of a variable table would start like this.
    assert not re.search(r"^\| `(custom-allreduce-off|seatwright_node_gpu_profile|seat_bench_seat)` \|", text, re.M)
    assert "(docs/variables.md)" in text and "(docs/rules.md)" in text
    for marker in GENERATED_MARKERS[1:]:
        assert marker in (DOCS / "variables.md").read_text()
    assert GENERATED_MARKERS[0] in (DOCS / "rules.md").read_text()


def test_readme_keeps_the_two_commands_the_flow_and_the_fleet_steps():
    text = (ROOT / "README.md").read_text()
    headings = HEADING.findall(text)
    for heading in ("The two commands", "How it flows", "Point it at your fleet", "Add a seat"):
        assert heading in headings, "README.md lost its section %r" % heading
    assert "make lab" in text and "make test" in text
    assert "playbooks/seat.yml -e seat=<name>" in text
