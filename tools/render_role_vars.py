#!/usr/bin/env python3
"""Render the tables of variables in docs/variables.md: the node and fleet contract, and each role's inputs.

The contract comes from plugins/module_utils/node/contract.py, the role tables from each role's
meta/argument_specs.yml (internal roles, with no main entry point, are left out). Rewrites
docs/variables.md between `<!-- contract:begin -->`/`<!-- contract:end -->` and
`<!-- rolevars:begin -->`/`<!-- rolevars:end -->` and nothing else.
  tools/render_role_vars.py           rewrite the tables in place
  tools/render_role_vars.py --check   exit 1 when the page's tables are stale (make lint, CI)
"""

import argparse
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DOC = ROOT / "docs" / "variables.md"
BEGIN, END = "<!-- rolevars:begin -->", "<!-- rolevars:end -->"
CONTRACT_BEGIN, CONTRACT_END = "<!-- contract:begin -->", "<!-- contract:end -->"


def _contract():
    """plugins/module_utils/node/contract.py, imported the way Ansible resolves it."""
    from ansible_collections.seatwright.fleet.plugins.module_utils.node import contract

    return contract


def _cell(value):
    text = " ".join(str(value).split()) if value is not None else ""
    return text.replace("|", "\\|")


def _description(option):
    text = option.get("description", "")
    if isinstance(text, list):
        text = " ".join(text)
    return _cell(text)


def role_table(roles_dir):
    """Markdown: one section per role, one row per variable of its main entry point."""
    lines = []
    for spec_file in sorted(roles_dir.glob("*/meta/argument_specs.yml")):
        role = spec_file.parent.parent.name
        if "main" not in ((yaml.safe_load(spec_file.read_text()) or {}).get("argument_specs") or {}):
            continue  # an internal role (common): no entry point of its own
        main = (yaml.safe_load(spec_file.read_text()) or {}).get("argument_specs", {}).get("main", {})
        lines.append("**%s** — %s" % (role, _cell(main.get("short_description", ""))))
        lines.append("")
        lines.append("| variable | type | default | what it is |")
        lines.append("|---|---|---|---|")
        for name, option in sorted((main.get("options") or {}).items()):
            default = option.get("default", "(required)" if option.get("required") else "")
            if default is None or isinstance(default, (bool, dict, list)):
                # YAML spelling, as the user would write it in group_vars.
                default = yaml.safe_dump(default, default_flow_style=True).replace("\n...", "").strip()
            lines.append(
                "| `%s` | %s | %s | %s |"
                % (
                    name,
                    _cell(option.get("type", "str")),
                    "`%s`" % _cell(default) if default != "" else "",
                    _description(option),
                )
            )
        lines.append("")
    return "\n".join(lines)


def _yaml_text(value):
    return yaml.safe_dump(value, default_flow_style=True).replace("\n...", "").strip()


def contract_table():
    """Markdown: one row per variable of the node and fleet contract."""
    lines = ["| variable | set | required | default | what it is |", "|---|---|---|---|---|"]
    for variable in _contract().VARIABLES:
        scope = "per host" if variable.scope == "host" else "group `gpu_nodes`"
        default = "" if variable.required or variable.default is None else "`%s`" % _cell(_yaml_text(variable.default))
        lines.append(
            "| `%s` | %s | %s | %s | %s; expected %s |"
            % (
                variable.name,
                scope,
                "yes" if variable.required else "no",
                default,
                _cell(variable.meaning),
                _cell(variable.expected),
            )
        )
    return "\n".join(lines) + "\n"


def _replace(text, begin, end, body):
    start, stop = text.find(begin), text.find(end)
    if start < 0 or stop < start:
        return None
    return text[: start + len(begin)] + "\n" + body + text[stop:]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when the page's tables are stale")
    parser.add_argument("--doc", type=Path, default=DEFAULT_DOC, help="the page to write (default docs/variables.md)")
    args = parser.parse_args(argv)
    current = args.doc.read_text(encoding="utf-8")
    wanted = _replace(current, BEGIN, END, role_table(ROOT / "roles"))
    wanted = wanted and _replace(wanted, CONTRACT_BEGIN, CONTRACT_END, contract_table())
    if wanted is None:
        sys.stderr.write(
            "render_role_vars: %s needs the lines %s, %s, %s and %s\n"
            % (args.doc, CONTRACT_BEGIN, CONTRACT_END, BEGIN, END)
        )
        return 2
    if wanted == current:
        return 0
    if args.check:
        sys.stderr.write("render_role_vars: %s's variable tables are stale; run tools/render_role_vars.py\n" % args.doc)
        return 1
    args.doc.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
