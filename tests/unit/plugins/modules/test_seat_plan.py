"""The seat_plan module (library/seat_plan.py), driven through patch_module_args."""

import json

import pytest
import seat_plan
import yaml
from ansible.module_utils.testing import patch_module_args
from seat_cases import FIXTURE_SEATS, ROOT, SEATS, example_node, example_nodes

SCHEMA_PATH = str(ROOT / "schemas" / "seat.schema.json")


def run(capsys, seat, nodes=None, recipe_path=None, **extra):
    args = {
        "seat": seat,
        "recipe_path": recipe_path or str(SEATS / ("%s.yml" % seat)),
        "schema_path": SCHEMA_PATH,
        "nodes": example_nodes() if nodes is None else nodes,
    }
    args.update(extra)
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            seat_plan.main()
    return json.loads(capsys.readouterr().out)


def test_plans_and_writes_the_plan_once(capsys, tmp_path):
    out = tmp_path / "plans" / "glm53.json"
    first = run(capsys, "glm53", plan_out=str(out))
    assert first["changed"] is True and first.get("failed") is not True
    written = json.loads(out.read_text())
    assert written == first["plan"]
    assert written["seat"] == "glm53" and written["fits"] is True
    second = run(capsys, "glm53", plan_out=str(out))
    assert second["changed"] is False


def test_check_mode_predicts_the_change_and_writes_nothing(capsys, tmp_path):
    out = tmp_path / "glm53.json"
    result = run(capsys, "glm53", plan_out=str(out), _ansible_check_mode=True, _ansible_diff=True)
    assert result["changed"] is True
    assert not out.exists()
    assert json.loads(result["diff"]["after"])["seat"] == "glm53"
    assert result["diff"]["before"] == ""


def test_summary_ends_with_every_rank_launch(capsys):
    result = run(capsys, "glm53-vendor")
    summary = result["summary"]
    assert summary[0].startswith("seat glm53-vendor: ")
    assert "launch node rank 0 on node-a (ray-head+server, TP ranks 0,1, GPUs 0,1):" in summary
    assert any(line.startswith("  run: ray start --block --address=10.77.0.11:6379") for line in summary)
    assert "changed" in result and result["changed"] is False


def test_a_bad_recipe_fails_with_the_field_and_no_traceback(capsys, tmp_path):
    broken = tmp_path / "glm53.yml"
    broken.write_text((SEATS / "glm53.yml").read_text().replace("tensor_parallel: 4", "tensor_parallel: four"))
    result = run(capsys, "glm53", recipe_path=str(broken))
    assert result["failed"] is True
    assert "topology.tensor_parallel: 'four' is not valid" in result["msg"]
    assert "Traceback" not in result["msg"]


def test_an_unknown_seat_lists_the_known_ones(capsys):
    result = run(capsys, "glm99")
    assert result["failed"] is True
    assert "seat 'glm99': no recipe at" in result["msg"] and "glm53-vendor" in result["msg"]


def test_a_bad_host_fails_naming_it(capsys):
    result = run(
        capsys, "glm53", nodes=[example_node("node-a"), dict(example_node("node-b"), seatwright_node_fabric_iface="")]
    )
    assert result["failed"] is True
    assert "host node-b: seatwright_node_fabric_iface is not set" in result["msg"]


def test_a_refusal_is_a_plan_not_a_failure(capsys):
    result = run(capsys, "glm53-b12x-mtp", recipe_path=str(FIXTURE_SEATS / "glm53-b12x-mtp.yml"))
    assert result.get("failed") is not True
    assert result["plan"]["refusals"][0]["id"] == "no-cross-node-speculation"


def test_an_unwritable_plan_out_fails_cleanly(capsys, tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    result = run(capsys, "glm53", plan_out=str(blocker / "plan.json"))
    assert result["failed"] is True
    assert "cannot write the plan to" in result["msg"]


def test_documentation_matches_the_argument_spec():
    documented = yaml.safe_load(seat_plan.DOCUMENTATION)["options"]
    assert set(documented) == set(seat_plan.ARGUMENT_SPEC)
    for name, spec in seat_plan.ARGUMENT_SPEC.items():
        for key in ("type", "required", "default", "elements"):
            assert documented[name].get(key) == spec.get(key), (name, key)
    yaml.safe_load(seat_plan.EXAMPLES)
    assert "summary" in yaml.safe_load(seat_plan.RETURN)
