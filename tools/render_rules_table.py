#!/usr/bin/env python3
"""Render the README's table of compatibility rules from the rules' own data.

Rewrites README.md between `<!-- rules:begin -->` and `<!-- rules:end -->` and nothing else.
  tools/render_rules_table.py           rewrite the table in place
  tools/render_rules_table.py --check   exit 1 when the README's table is stale (for CI)
"""

import argparse
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BEGIN, END = "<!-- rules:begin -->", "<!-- rules:end -->"


from ansible_collections.seatwright.fleet.plugins.module_utils.seat.rules import table_markdown  # noqa: E402


class MarkersMissing(Exception):
    """README.md lacks the begin/end markers, so there is no place to put the table."""


def with_table(readme_text, table):
    """README text with the block between the markers replaced by `table`."""
    start, end = readme_text.find(BEGIN), readme_text.find(END)
    if start < 0 or end < 0 or end < start:
        raise MarkersMissing(
            "README.md needs the lines %s and %s, in that order, where the rules table goes" % (BEGIN, END)
        )
    return readme_text[: start + len(BEGIN)] + "\n" + table + readme_text[end:]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when the README's table is stale")
    parser.add_argument("--readme", type=Path, default=ROOT / "README.md")
    args = parser.parse_args(argv)
    table = table_markdown()
    current = args.readme.read_text(encoding="utf-8")
    try:
        wanted = with_table(current, table)
    except MarkersMissing as exc:
        sys.stdout.write(table)
        sys.stderr.write("render_rules_table: %s\n" % exc)
        return 2
    if wanted == current:
        return 0
    if args.check:
        sys.stderr.write(
            "render_rules_table: %s's rules table is stale; run tools/render_rules_table.py\n" % args.readme
        )
        return 1
    args.readme.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
