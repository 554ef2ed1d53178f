"""docs/rules.md's rules table is generated from the rules' data (tools/render_rules_table.py)."""

import subprocess
import sys

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.rules import RULE_IDS, table_markdown
from conftest import load_script
from seat_cases import ROOT

TOOL = ROOT / "tools" / "render_rules_table.py"
render_rules_table = load_script("tools/render_rules_table.py")


def test_table_has_a_row_per_rule_with_its_reason():
    table = table_markdown()
    assert table.splitlines()[0] == (
        "| id | applies when | required where seen (conditions, sources) | effect | reason | sources |"
    )
    assert len(table.splitlines()) == 2 + len(RULE_IDS)
    for rule_id in RULE_IDS:
        assert "| `%s` |" % rule_id in table


def test_with_table_replaces_only_between_the_markers():
    text = "intro\n<!-- rules:begin -->\nold table\n<!-- rules:end -->\noutro\n"
    result = render_rules_table.with_table(text, "| new |\n")
    assert result == "intro\n<!-- rules:begin -->\n| new |\n<!-- rules:end -->\noutro\n"
    assert render_rules_table.with_table(result, "| new |\n") == result


@pytest.mark.parametrize("text", ["no markers", "<!-- rules:end -->\n<!-- rules:begin -->\n"])
def test_with_table_needs_both_markers_in_order(text):
    with pytest.raises(render_rules_table.MarkersMissing, match="docs/rules.md needs the lines"):
        render_rules_table.with_table(text, "| t |\n")


def test_check_mode_fails_on_a_stale_table_and_passes_once_rendered(tmp_path):
    page = tmp_path / "rules.md"
    page.write_text("# x\n<!-- rules:begin -->\nstale\n<!-- rules:end -->\n")
    assert render_rules_table.main(["--check", "--doc", str(page)]) == 1
    assert render_rules_table.main(["--doc", str(page)]) == 0
    assert render_rules_table.main(["--check", "--doc", str(page)]) == 0
    assert "| `custom-allreduce-off` |" in page.read_text()


def test_links_are_made_relative_to_the_page():
    """The rules cite docs/field.md from the repository root; docs/rules.md sits beside it."""
    table = table_markdown()
    assert "](docs/field.md#report-000)" in table
    in_docs = render_rules_table.relative_links(table, ROOT / "docs" / "rules.md")
    assert "](docs/" not in in_docs and "](field.md#report-000)" in in_docs
    assert "](docs/field.md#report-000)" in render_rules_table.relative_links(table, ROOT / "README.md")
    assert "https://github.com/vllm-project/vllm/pull/47751" in in_docs


def test_missing_markers_print_the_table_and_fail(tmp_path, capsys):
    page = tmp_path / "rules.md"
    page.write_text("# no markers here\n")
    assert render_rules_table.main(["--doc", str(page)]) == 2
    assert "custom-allreduce-off" in capsys.readouterr().out
    assert page.read_text() == "# no markers here\n"


def test_rules_page_table_is_current():
    result = subprocess.run(
        [sys.executable, str(TOOL), "--check"], cwd=ROOT, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr + "run: .venv/bin/python tools/render_rules_table.py"
