#!/usr/bin/env python3
"""Render docs/seats.md: every seed seat planned on inventory/example, with what it still needs.

A seed seat is a recipe in seats/ that cites a field report ([000] .. [004]). Each is planned as
playbooks/plan.yml plans it, from the inventory's declared hardware only (no cached facts) and the
image facts recorded in images/facts/; plugins/module_utils/seat/needs.py labels every unknown and
refusal as an operator pin or an engineering gap and writes the page.
  tools/render_seats.py           rewrite docs/seats.md
  tools/render_seats.py --check   exit 1 when docs/seats.md is stale (make lint, CI)
"""

import argparse
import json
import os
import sys
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_DOC = ROOT / "docs" / "seats.md"
INVENTORY = "inventory/example"

from ansible_collections.seatwright.fleet.plugins.module_utils.defaults import (  # noqa: E402
    COLLECT_PATTERN as LABELLED_PATTERN,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError  # noqa: E402
from ansible_collections.seatwright.fleet.plugins.module_utils.io.seat.plan import (  # noqa: E402
    recorded_image_facts,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.node.contract import (  # noqa: E402
    COLLECT_PATTERN as CONTRACT_PATTERN,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.needs import (  # noqa: E402
    failed_plan,
    is_seed,
    plan_candidate,
    seats_markdown,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.plan import make_plan  # noqa: E402
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.recipe import recipe_from_text  # noqa: E402


def _yaml(path):
    return yaml.safe_load(path.read_text(encoding="utf-8")) or {}


def _folder_vars(folder, name):
    """group_vars/<name>.yml or every file of group_vars/<name>/, in name order."""
    merged = {}
    single = folder / ("%s.yml" % name)
    if single.is_file():
        merged.update(_yaml(single))
    if (folder / name).is_dir():
        for path in sorted((folder / name).glob("*.yml")):
            merged.update(_yaml(path))
    return merged


def inventory_nodes(inventory):
    """The gpu_nodes hosts in inventory order, each as plan.yml hands it to the planner."""
    hosts = _yaml(inventory / "hosts.yml")["all"]["children"]["gpu_nodes"]["hosts"]
    group = dict(_folder_vars(inventory / "group_vars", "all"), **_folder_vars(inventory / "group_vars", "gpu_nodes"))
    nodes = []
    for host in hosts:
        variables = dict(group, **(hosts[host] or {}), **_folder_vars(inventory / "host_vars", host))
        nodes.append(plan_candidate(host, variables, CONTRACT_PATTERN, LABELLED_PATTERN))
    return nodes


def planned_seats(root=ROOT, inventory=INVENTORY):
    """[(name, source, plan)] of every seed seat, by name. Paths a plan quotes (the recorded image
    facts') are relative to the repository root, wherever the tool is run from."""
    here = os.getcwd()
    os.chdir(root)
    try:
        return _planned_seats(root, inventory)
    finally:
        os.chdir(here)


def _planned_seats(root, inventory):
    schema = json.loads((root / "schemas" / "seat.schema.json").read_text(encoding="utf-8"))
    nodes = inventory_nodes(root / inventory)
    planned = []
    for path in sorted((root / "seats").glob("*.yml"), key=lambda path: path.stem):
        source = "seats/%s" % path.name
        data = recipe_from_text(path.read_text(encoding="utf-8"), source)
        if not is_seed(data):
            continue
        try:
            recorded = recorded_image_facts(data, str(root / "images" / "facts"))
            plan = make_plan(data, schema, path.stem, nodes, source, recorded_images=recorded)
        except SeatError as exc:
            plan = failed_plan(path.stem, data, str(exc))
        planned.append((path.stem, source, plan))
    return planned


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail when the page is stale")
    parser.add_argument("--doc", type=Path, default=DEFAULT_DOC, help="the page to write (default docs/seats.md)")
    args = parser.parse_args(argv)
    args.doc = args.doc.resolve()
    wanted = seats_markdown(planned_seats(), INVENTORY, "tools/render_seats.py")
    current = args.doc.read_text(encoding="utf-8") if args.doc.is_file() else None
    if wanted == current:
        return 0
    if args.check:
        sys.stderr.write("render_seats: %s is stale; run tools/render_seats.py (make docs)\n" % args.doc)
        return 1
    args.doc.write_text(wanted, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
