"""Issue 21 item 8: a recipe or inventory nested far too deep fails naming the file, never with a RecursionError."""

import json

import pytest
import seat_plan
from ansible.module_utils.testing import patch_module_args
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.recipe import recipe_from_text, validate_recipe
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.rules import RULE_IDS
from seat_cases import ROOT, SCHEMA, SEATS, example_nodes, seat_data

SCHEMA_PATH = str(ROOT / "schemas" / "seat.schema.json")
# The deepest nesting a recipe or host's variables may have (jsondoc.MAX_NESTING).
MAX_NESTING = 64


def nested(depth, leaf="x"):
    value = leaf
    for _ in range(depth):
        value = [value]
    return value


def run(capsys, nodes, recipe_path):
    args = {"seat": "glm53", "recipe_path": str(recipe_path), "schema_path": SCHEMA_PATH, "nodes": nodes}
    try:
        with patch_module_args(args):
            with pytest.raises(SystemExit):
                seat_plan.main()
    except RecursionError as exc:
        raise AssertionError("seat_plan crashed instead of failing with a message: %r" % exc)
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    "text",
    [
        "notes: " + "[" * 5000 + "]" * 5000,
        "notes: " + "{a: " * 3000 + "1" + "}" * 3000,
        "notes:\n" + "".join("  " * level + "- \n" for level in range(1, 4000)),
        "notes: " + "[" * 200 + "]" * 200,
    ],
    ids=["flow-lists-5000", "flow-maps-3000", "block-lists-4000", "flow-lists-200"],
)
def test_the_recipe_loader_names_the_file(text):
    with pytest.raises(Exception) as caught:
        recipe_from_text(text, "seats/deep.yml")
    assert isinstance(caught.value, SeatError), type(caught.value).__name__
    message = str(caught.value)
    assert message.startswith("seats/deep.yml: nested ")
    assert "recursion" not in message


@pytest.mark.parametrize("depth", [200, 5000])
def test_a_deep_recipe_through_the_plan_module_names_the_file(capsys, tmp_path, depth):
    recipe = tmp_path / "glm53.yml"
    recipe.write_text((SEATS / "glm53.yml").read_text() + "extra: " + "[" * depth + "]" * depth + "\n")
    result = run(capsys, example_nodes(), recipe)
    assert result["failed"] is True
    assert "glm53.yml: nested " in result["msg"] and "recursion" not in result["msg"]
    assert "Traceback" not in json.dumps(result)


def test_validation_of_deep_data_names_the_source():
    data = seat_data("glm53")
    data["notes"] = nested(5000)
    with pytest.raises(Exception) as caught:
        validate_recipe(data, SCHEMA, "seats/glm53.yml", RULE_IDS)
    assert isinstance(caught.value, SeatError), type(caught.value).__name__
    assert str(caught.value).startswith("seats/glm53.yml: nested more than %d levels deep" % MAX_NESTING)


@pytest.mark.parametrize("depth", [100, 400])
def test_deep_inventory_variables_fail_the_plan_module_naming_the_host_file(capsys, depth):
    nodes = example_nodes()
    nodes[1]["seatwright_node_cotenants"] = [{"name": "ocr", "kind": "container", "gpus": nested(depth)}]
    result = run(capsys, nodes, SEATS / "glm53.yml")
    assert result["failed"] is True
    assert result["msg"].startswith("host node-b: its inventory variables (host_vars/node-b.yml")
    assert "nested more than %d levels deep" % MAX_NESTING in result["msg"]
    # The message is short: it names the place, it does not print the value back.
    assert len(result["msg"]) < 400


@pytest.mark.parametrize("depth,deep", [(MAX_NESTING, False), (MAX_NESTING + 1, True), (100000, True)])
def test_too_deep_walks_any_depth_without_recursing(depth, deep):
    from ansible_collections.seatwright.fleet.plugins.module_utils.jsondoc import too_deep

    assert (too_deep({"a": nested(depth - 1)}) is not None) is deep
