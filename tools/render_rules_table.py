#!/usr/bin/env python3
"""Render the table of compatibility rules in docs/rules.md from the rules' own data.

Rewrites docs/rules.md between `<!-- rules:begin -->` and `<!-- rules:end -->` and nothing else.
Links the rules give from the repository root (docs/field.md#report-000) are made relative to the
page they land in.
  tools/render_rules_table.py           rewrite the table in place
  tools/render_rules_table.py --check   exit 1 when the page's table is stale (make lint, CI)
"""

import argparse
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DOC = ROOT / "docs" / "rules.md"
BEGIN, END = "<!-- rules:begin -->", "<!-- rules:end -->"
ROOT_LINK = re.compile(r"\]\((docs/[^)#\s]+)")


from ansible_collections.seatwright.fleet.plugins.module_utils.seat.rules import table_markdown  # noqa: E402


class MarkersMissing(Exception):
    """The page lacks the begin/end markers, so there is no place to put the table."""


def relative_links(table, page):
    """`table` with each root-relative docs/ link rewritten relative to `page`'s folder."""
    folder = Path(os.path.abspath(page)).parent

    def fix(match):
        return "](%s" % os.path.relpath(ROOT / match.group(1), folder)

    return ROOT_LINK.sub(fix, table)


def with_table(text, table, name="docs/rules.md"):
    """The page's text with the block between the markers replaced by `table`."""
    start, end = text.find(BEGIN), text.find(END)
    if start < 0 or end < 0 or end < start:
        raise MarkersMissing(
            "%s needs the lines %s and %s, in that order, where the rules table goes" % (name, BEGIN, END)
        )
    return text[: start + len(BEGIN)] + "\n" + table + text[end:]


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when the page's table is stale")
    parser.add_argument("--doc", type=Path, default=DEFAULT_DOC, help="the page to write (default docs/rules.md)")
    args = parser.parse_args(argv)
    table = relative_links(table_markdown(), args.doc)
    current = args.doc.read_text(encoding="utf-8")
    try:
        wanted = with_table(current, table, args.doc.name)
    except MarkersMissing as exc:
        sys.stdout.write(table)
        sys.stderr.write("render_rules_table: %s\n" % exc)
        return 2
    if wanted == current:
        return 0
    if args.check:
        sys.stderr.write("render_rules_table: %s's rules table is stale; run tools/render_rules_table.py\n" % args.doc)
        return 1
    args.doc.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
