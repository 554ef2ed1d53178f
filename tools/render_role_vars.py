#!/usr/bin/env python3
"""Render the README's table of role variables from each role's meta/argument_specs.yml.

Rewrites README.md between `<!-- rolevars:begin -->` and `<!-- rolevars:end -->` and nothing else.
  tools/render_role_vars.py           rewrite the table in place
  tools/render_role_vars.py --check   exit 1 when the README's table is stale (for CI)
"""
import argparse
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- rolevars:begin -->", "<!-- rolevars:end -->"


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
            lines.append("| `%s` | %s | %s | %s |" % (
                name, _cell(option.get("type", "str")),
                "`%s`" % _cell(default) if default != "" else "", _description(option)))
        lines.append("")
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when the README's table is stale")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md")
    args = parser.parse_args(argv)
    current = args.readme.read_text(encoding="utf-8")
    start, end = current.find(BEGIN), current.find(END)
    if start < 0 or end < start:
        sys.stderr.write("render_role_vars: README.md needs the lines %s and %s\n" % (BEGIN, END))
        return 2
    wanted = current[:start + len(BEGIN)] + "\n" + role_table(ROOT / "roles") + current[end:]
    if wanted == current:
        return 0
    if args.check:
        sys.stderr.write("render_role_vars: README's role variable table is stale; run tools/render_role_vars.py\n")
        return 1
    args.readme.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
