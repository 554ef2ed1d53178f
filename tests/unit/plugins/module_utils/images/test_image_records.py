"""Issue 24: the facts read from the real CUDA images that make images built (images/facts/*.json).

What each real image must show, from its own binaries and --help: the engine imports, its --help
lists every flag seatwright renders for that engine and every extra argument a shipped recipe
passes, its kernels run on SM120, and its FlashInfer packages agree. The GLM seat plans against the
vLLM image's record on the example fleet, whose hosts have not built it.
"""

import json

import pytest
import yaml
from ansible_collections.seatwright.fleet.plugins.module_utils.images.facts import engine_kernel_archs
from ansible_collections.seatwright.fleet.plugins.module_utils.images.kernels import runs_on
from ansible_collections.seatwright.fleet.plugins.module_utils.io.seat.plan import plan_seat, recorded_image_facts
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.imageflags import unlisted_flags
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.plan import make_plan, plan_lines
from conftest import ROOT
from seat_cases import example_nodes

FACTS = ROOT / "images" / "facts"
RECORDS = sorted(FACTS.glob("*.json"))
SEATS = sorted((ROOT / "seats").glob("*.yml"))


def _recipes(engine, device="cuda"):
    for path in SEATS:
        data = yaml.safe_load(path.read_text())
        if data["engine"]["name"] == engine and data["engine"].get("device", "cuda") == device:
            yield path.stem, data


def test_both_real_images_are_recorded():
    assert {path.stem for path in RECORDS} >= {"vllm-sm120", "sglang-sm120"}


@pytest.mark.parametrize("path", RECORDS, ids=lambda path: path.stem)
def test_a_recorded_image_imports_runs_on_sm120_and_lists_every_flag_its_recipes_render(path):
    facts = json.loads(path.read_text())
    definition = yaml.safe_load((ROOT / "images" / (path.stem + ".yml")).read_text())
    engine = facts["engine"]["name"]
    assert engine == definition["engine"]["name"] and facts["engine"]["version"] == definition["engine"]["version"]
    assert facts["engine_import"]["exit"] == 0, facts["engine_import"]
    archs = engine_kernel_archs(facts)
    assert archs and runs_on(archs, "12.0") and "sm_120" in archs, archs
    assert "sm_120" in facts["kernel_archs"]["torch"]
    assert len(set(facts["flashinfer_packages"].values())) == 1, facts["flashinfer_packages"]
    assert facts["flashinfer"] == definition["flashinfer"]["version"]
    assert facts["ray"] and facts["py_spy"] and facts["torch_cuda"]
    extra = [word for _, data in _recipes(engine) for word in (data.get("serving") or {}).get("extra_args") or []]
    assert unlisted_flags(engine, facts, extra) == {}


def test_the_glm_seat_plans_against_the_recorded_vllm_image_and_its_flags_are_checked(tmp_path):
    recipe = ROOT / "seats" / "glm53.yml"
    schema = ROOT / "schemas" / "seat.schema.json"
    plan = plan_seat("glm53", str(recipe), str(schema), example_nodes(), str(FACTS))
    assert not [item for item in plan["unknowns"] if item.startswith("image flags not checked")], plan["unknowns"]
    assert any("planned against those recorded from a real build in" in note for note in plan["notes"])
    checked = plan["engine"]["image_checked"]
    assert checked["help_flags"] == 411 and checked["launch_flags"] >= 10, checked
    assert any(
        line.startswith("image checked: seatwright/vllm-sm120:") and line.endswith("every one listed")
        for line in plan_lines(plan)
    )
    assert not [item for item in plan["refusals"] if item["id"] in ("image-flags", "image-kernel-archs")]
    # The same facts without one flag the GLM launch passes: the plan refuses it by name.
    facts = recorded_image_facts(yaml.safe_load(recipe.read_text()), str(FACTS))["vllm-sm120"]
    passed = [word for rank in plan["ranks"] for word in rank.get("argv") or [] if str(word).startswith("--")]
    dropped = "--tensor-parallel-size" if "--tensor-parallel-size" in passed else passed[0]
    facts["flags"] = [flag for flag in facts["flags"] if flag != dropped]
    facts["aliases"] = {word: flag for word, flag in facts["aliases"].items() if flag != dropped}
    (tmp_path / "vllm-sm120.json").write_text(json.dumps(facts))
    refused = plan_seat("glm53", str(recipe), str(schema), example_nodes(), str(tmp_path))
    assert any(item["id"] == "image-flags" and dropped in item["detail"] for item in refused["refusals"])


@pytest.mark.parametrize("recorded, flag", [(True, "--cuda-graph-max-bs-decode"), (False, "--cuda-graph-max-bs")])
def test_a_flag_renamed_upstream_is_rendered_as_the_images_help_spells_it(recorded, flag):
    # SGLang 0.5.23 lists --cuda-graph-max-bs-decode and no --cuda-graph-max-bs; older SGLang the reverse.
    data = yaml.safe_load((ROOT / "seats" / "deepseek-v4-flash.yml").read_text())
    built = {"reference": "seatwright/sglang-sm120", "digest": None, "status": "local", "build": "sglang-sm120"}
    data["engine"]["image"].update(built)
    data["serving"]["max_cudagraph_capture_size"] = 256
    schema = json.loads((ROOT / "schemas" / "seat.schema.json").read_text())
    images = recorded_image_facts(data, str(FACTS)) if recorded else {}
    plan = make_plan(data, schema, "deepseek-v4-flash", example_nodes(), "seats/deepseek-v4-flash.yml", images)
    argv = [word for rank in plan["ranks"] for word in rank.get("argv") or []]
    assert argv and flag in argv and argv[argv.index(flag) + 1] == "256"
    other = {"--cuda-graph-max-bs", "--cuda-graph-max-bs-decode"} - {flag}
    assert not other & set(argv)
    assert not [item for item in plan["refusals"] if item["id"] == "image-flags"], plan["refusals"]
