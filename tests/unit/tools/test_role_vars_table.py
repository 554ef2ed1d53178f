"""docs/variables.md's tables are generated from the node contract and the roles' argument specs and kept current."""

import subprocess
import sys

from conftest import ROOT

sys.path.insert(0, str(ROOT / "tools"))

import render_role_vars  # noqa: E402


def test_every_role_and_variable_is_in_the_table():
    table = render_role_vars.role_table(ROOT / "roles")
    for spec in (ROOT / "roles").glob("*/meta/argument_specs.yml"):
        if spec.parent.parent.name != "common":
            assert "**%s**" % spec.parent.parent.name in table
    assert "**common**" not in table
    assert "| `gpu_power_limit_w` | int | `null` |" in table


def test_variables_page_tables_are_current():
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "render_role_vars.py"), "--check"],
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr


def test_contract_table_has_every_variable():
    table = render_role_vars.contract_table()
    for name in (
        "seatwright_node_cotenants",
        "seatwright_fleet_incumbents",
        "seatwright_fleet_promotion_margin",
        "seatwright_state_dir",
        "gpu_power_limit_w",
    ):
        assert "| `%s` |" % name in table


def test_check_mode_fails_on_a_stale_page_and_passes_once_rendered(tmp_path):
    page = tmp_path / "variables.md"
    page.write_text(
        "# v\n<!-- contract:begin -->\nold\n<!-- contract:end -->\n"
        "<!-- rolevars:begin -->\nold\n<!-- rolevars:end -->\n"
    )
    assert render_role_vars.main(["--check", "--doc", str(page)]) == 1
    assert render_role_vars.main(["--doc", str(page)]) == 0
    assert render_role_vars.main(["--check", "--doc", str(page)]) == 0
    text = page.read_text()
    assert "| `seatwright_node_gpu_profile` |" in text and "**seat_bench**" in text


def test_a_page_without_markers_is_left_alone(tmp_path):
    page = tmp_path / "variables.md"
    page.write_text("# no markers\n")
    assert render_role_vars.main(["--doc", str(page)]) == 2
    assert page.read_text() == "# no markers\n"
