"""The plan on the controller: read the recipe and schema, make the plan, write it when it changed."""

import json
import os

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.files import atomic_write_bytes
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.pins import pin_model
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.plan import make_plan, plan_lines
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.recipe import recipe_from_text


def _read(path, what):
    try:
        with open(path, "rb") as handle:
            return handle.read().decode("utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise SeatError("cannot read the %s %s: %s" % (what, path, exc))


def _missing_recipe_message(seat, recipe_path):
    folder = os.path.dirname(recipe_path)
    try:
        known = sorted(name[:-4] for name in os.listdir(folder) if name.endswith(".yml"))
    except OSError:
        known = []
    return "seat %r: no recipe at %s; known seats: %s" % (seat, recipe_path, ", ".join(known) or "none")


def recorded_image_facts(data, facts_dir):
    """{build: facts} from facts_dir/<build>.json for the recipe's engine.image.build; {} when none."""
    build = (((data or {}).get("engine") or {}).get("image") or {}).get("build") if isinstance(data, dict) else None
    if not isinstance(build, str) or not build or "/" in build:
        return {}
    path = os.path.join(facts_dir, build + ".json")
    if not os.path.isfile(path):
        return {}
    try:
        facts = json.loads(_read(path, "recorded image facts"))
    except ValueError as exc:
        raise SeatError(
            "the recorded image facts %s are not valid JSON: %s; record them again "
            "(scripts/images-record %s)" % (path, exc, build)
        )
    if not isinstance(facts, dict) or not isinstance(facts.get("engine"), dict):
        raise SeatError(
            "the recorded image facts %s have no engine; record them again (scripts/images-record %s)" % (path, build)
        )
    return {build: dict(facts, recorded_in=os.path.relpath(path))}


def plan_seat(seat, recipe_path, schema_path, nodes, image_facts_dir=None, served_aliases=(), pins=None):
    """The plan of `seat` from its recipe file and the candidate hosts; SeatError names what is wrong.

    `pins` ({repo, revision}) are the operator's checkpoint pins given at run time (seat/pins.py).
    """
    if not os.path.isfile(recipe_path):
        raise SeatError(_missing_recipe_message(seat, recipe_path))
    try:
        schema = json.loads(_read(schema_path, "recipe schema"))
    except ValueError as exc:
        raise SeatError("the recipe schema %s is not valid JSON: %s" % (schema_path, exc))
    source = os.path.relpath(recipe_path)
    data = recipe_from_text(_read(recipe_path, "recipe"), source)
    data, _ = pin_model(data, schema, (pins or {}).get("repo"), (pins or {}).get("revision"))
    recorded = recorded_image_facts(data, image_facts_dir) if image_facts_dir else {}
    return make_plan(data, schema, seat, nodes, source, recorded_images=recorded, served_aliases=served_aliases)


def plan_result(params, check_mode=False, diff=False):
    """The seat_plan module's result: the plan, its lines, and the plan file written when it changed."""
    plan = plan_seat(
        params["seat"],
        params["recipe_path"],
        params["schema_path"],
        params["nodes"],
        params.get("image_facts_dir"),
        params.get("served_aliases") or (),
        params.get("model_pins"),
    )
    result = {"changed": False, "plan": plan, "summary": plan_lines(plan)}
    out = params.get("plan_out")
    if not out:
        return result
    payload = (json.dumps(plan, indent=2, sort_keys=True) + "\n").encode("utf-8")
    try:
        with open(out, "rb") as handle:
            before = handle.read()
    except OSError:
        before = None
    result["plan_out"] = out
    result["changed"] = before != payload
    if diff:
        result["diff"] = {
            "before": (before or b"").decode("utf-8", "replace"),
            "after": payload.decode("utf-8"),
            "before_header": out,
            "after_header": out,
        }
    if result["changed"] and not check_mode:
        try:
            atomic_write_bytes(out, payload)
        except OSError as exc:
            raise SeatError("seat %s: cannot write the plan to %s: %s" % (plan["seat"], out, exc))
    return result
