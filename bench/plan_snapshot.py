#!/usr/bin/env python3
"""Write the plan of every shipped seat (seats/*.yml) on inventory/example as canonical JSON.

Each seat is planned the way tools/render_seats.py plans the seed seats for docs/seats.md (and as
playbooks/plan.yml does without cached facts): the inventory's declared hardware, the image facts
recorded in images/facts/, make_plan. A seat the planner refuses is written as failed_plan's record
(its error text), so a changed refusal shows in the diff too. Plans hold no timestamps or other
volatile fields today; nothing is dropped. Keys are sorted and lists kept in order.
  bench/plan_snapshot.py OUT_DIR        one OUT_DIR/<seat>.json per seat in seats/
Run it from any checkout (a git worktree of an older commit included): it imports that checkout's
code, and stops when the collection resolves elsewhere.
"""

import hashlib
import json
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
INVENTORY = "inventory/example"


def _use_this_checkout():
    """Put this checkout first as ansible_collections.seatwright.fleet (a link under /tmp)."""
    link_root = Path("/tmp/plan-snapshot-%s" % hashlib.sha256(str(ROOT).encode()).hexdigest()[:12])
    fleet = link_root / "ansible_collections" / "seatwright" / "fleet"
    fleet.parent.mkdir(parents=True, exist_ok=True)
    if not fleet.is_symlink():
        fleet.symlink_to(ROOT)
    sys.path.insert(0, str(link_root))
    sys.path.insert(0, str(ROOT / "tools"))


def main(argv):
    if len(argv) != 1:
        sys.stderr.write("usage: bench/plan_snapshot.py OUT_DIR\n")
        return 2
    out = Path(argv[0]).resolve()
    _use_this_checkout()
    import render_seats  # noqa: PLC0415 (after the path is set)
    from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError  # noqa: PLC0415
    from ansible_collections.seatwright.fleet.plugins.module_utils.io.seat.plan import (  # noqa: PLC0415
        recorded_image_facts,
    )
    from ansible_collections.seatwright.fleet.plugins.module_utils.seat import plan as plan_module  # noqa: PLC0415
    from ansible_collections.seatwright.fleet.plugins.module_utils.seat.needs import failed_plan  # noqa: PLC0415
    from ansible_collections.seatwright.fleet.plugins.module_utils.seat.recipe import (  # noqa: PLC0415
        recipe_from_text,
    )

    planner = Path(plan_module.__file__).resolve()
    if ROOT not in planner.parents:
        sys.stderr.write("plan_snapshot: the planner is %s, not this checkout's (%s)\n" % (planner, ROOT))
        return 1
    os.chdir(ROOT)
    schema = json.loads((ROOT / "schemas" / "seat.schema.json").read_text(encoding="utf-8"))
    nodes = render_seats.inventory_nodes(ROOT / INVENTORY)
    out.mkdir(parents=True, exist_ok=True)
    for path in sorted((ROOT / "seats").glob("*.yml"), key=lambda path: path.stem):
        source = "seats/%s" % path.name
        data = recipe_from_text(path.read_text(encoding="utf-8"), source)
        try:
            recorded = recorded_image_facts(data, str(ROOT / "images" / "facts"))
            plan = plan_module.make_plan(data, schema, path.stem, nodes, source, recorded_images=recorded)
        except SeatError as exc:
            plan = failed_plan(path.stem, data, str(exc))
        text = json.dumps(plan, indent=2, sort_keys=True, ensure_ascii=False) + "\n"
        (out / ("%s.json" % path.stem)).write_text(text, encoding="utf-8")
        print("%s: %s" % (path.stem, "refused" if plan.get("error") else "planned"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
