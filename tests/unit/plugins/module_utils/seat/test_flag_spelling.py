"""Issue 21 item 6: a flag cannot slip past the plan by being spelled another way.

Every flag is read the way its engine reads it (seat/engines.py canonical_flag), through the engine
table and the image's own --help: an extra argument that sets a flag the plan renders is refused
whatever its spelling, a flag the image does not take is refused, and a plan without the image's
facts is not ready. Bring-up checks each rank against the image it is about to run.
"""

import json

import engine_image_facts
import pytest
import yaml
from ansible.module_utils.testing import patch_module_args
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.plan import make_plan
from seat_cases import ROOT, SCHEMA, example_nodes, lab_image_facts, lab_node, mutated, seat_data
from test_images import _FakeEngine, _probe_line

LAB_NODE = lab_node()


def plan_with_extra(name, extra, nodes=None):
    data = mutated(seat_data(name), ("serving", "extra_args"), extra)
    return make_plan(data, SCHEMA, name, nodes or example_nodes(), "seats/%s.yml" % name)


def lab_plan(extra, facts="fresh"):
    node = dict(LAB_NODE)
    if facts:
        image = lab_image_facts()
        if facts == "old":
            image = {key: value for key, value in image.items() if key != "aliases"}
        node["seatwright_engine_images"] = {"lab-vllm-cpu": image}
    return plan_with_extra("lab", extra, [node])


@pytest.mark.parametrize(
    "seat, extra, spelled, field",
    [
        # vLLM's parser reads '_' as '-' in a flag's name, -tp as --tensor-parallel-size, --no-<flag>
        # as the flag turned off, and a dotted key as part of the JSON flag it names.
        ("glm53", ["--tensor_parallel_size", "8"], "--tensor_parallel_size sets --tensor-parallel-size", "topology"),
        ("glm53", ["-tp", "2"], "-tp sets --tensor-parallel-size", "topology.tensor_parallel"),
        ("glm53", ["--max_model_len", "999999"], "--max_model_len sets --max-model-len", "serving.max_model_len"),
        ("glm53", ["--max_model_len=999999"], "--max_model_len sets --max-model-len", "serving.max_model_len"),
        (
            "glm53",
            ["--no-disable-custom-all-reduce"],
            "--no-disable-custom-all-reduce sets --disable-custom-all-reduce",
            "serving.custom_all_reduce",
        ),
        (
            "glm53",
            ["-cc.pass_config.fuse_allreduce_rms=true"],
            "-cc.pass_config.fuse_allreduce_rms sets --compilation-config",
            "serving.allreduce_fusion",
        ),
        # SGLang: --tensor-parallel-size, --tp-size and the rendered --tp are one option.
        ("deepseek-v4-flash", ["--tensor-parallel-size", "8"], "--tensor-parallel-size sets --tp", "topology"),
        ("deepseek-v4-flash", ["--context_length", "999999"], "--context_length sets --context-length", "serving"),
    ],
)
def test_an_extra_argument_spelled_otherwise_is_refused_naming_both_spellings_and_the_field(
    seat, extra, spelled, field
):
    with pytest.raises(SeatError) as caught:
        plan_with_extra(seat, extra)
    message = str(caught.value)
    assert "serving.extra_args[0]: " + spelled in message
    assert "which the plan renders from %s" % field in message and "in the recipe instead" in message


def test_an_options_file_in_extra_args_is_refused():
    with pytest.raises(SeatError, match=r"serving.extra_args\[0\]: --config: its YAML file can set any option"):
        plan_with_extra("glm53", ["--config", "/etc/vllm.yaml"])


@pytest.mark.parametrize(
    "extra, spelled, field",
    [
        # Spellings only the image knows: argparse reads an unambiguous prefix as the whole flag.
        (["--max-model", "999999"], "--max-model sets --max-model-len", "serving.max_model_len"),
        (["--tensor-parallel", "2"], "--tensor-parallel sets --tensor-parallel-size", "topology.tensor_parallel"),
    ],
)
def test_a_spelling_only_the_images_help_shows_is_refused_by_the_plan(extra, spelled, field):
    result = lab_plan(extra)
    assert not result["launchable"] and not result["ready"]
    refused = [item for item in result["refusals"] if item["id"] == "extra-args"]
    assert refused, result["refusals"]
    assert spelled in refused[0]["detail"] and field in refused[0]["detail"]


@pytest.mark.parametrize(
    "extra, shown",
    [
        (["-tpx", "2"], "passes -tpx,"),
        (["--num_scheduler_steps", "8"], "passes --num_scheduler_steps (read as --num-scheduler-steps),"),
    ],
)
def test_a_flag_the_image_does_not_take_is_refused_in_any_spelling(extra, shown):
    result = lab_plan(extra)
    details = [item["detail"] for item in result["refusals"] if item["id"] == "image-flags"]
    assert any(shown in detail for detail in details), details


@pytest.mark.parametrize("extra", [["-asc", "1"], ["--trust_remote_code"], ["--enable-prefix-caching"]])
def test_extra_arguments_the_plan_does_not_render_still_pass(extra):
    result = lab_plan(extra)
    assert result["refusals"] == [] and result["ready"], result["unknowns"]
    assert result["ranks"][0]["argv"][-len(extra) :] == extra


@pytest.mark.parametrize(
    "facts, words",
    [
        (None, "image flags not checked: no facts of image lab-vllm-cpu are cached"),
        ("old", "image flags not checked: the cached facts of image seatwright/vllm-cpu"),
    ],
)
def test_without_fresh_image_facts_the_plan_is_not_ready(facts, words):
    result = lab_plan([], facts=facts)
    assert result["launchable"] and not result["ready"]
    assert any(item.startswith(words) for item in result["unknowns"]), result["unknowns"]


def test_a_shipped_seat_without_image_facts_lists_the_unchecked_flags():
    result = make_plan(seat_data("glm53"), SCHEMA, "glm53", example_nodes(), "seats/glm53.yml")
    assert "unknown: image flags not checked: no facts of image vllm-sm120 are cached" in "\n".join(
        "unknown: " + item for item in result["unknowns"]
    )


def run_facts(capsys, tmp_path, **extra):
    socket_path = str(tmp_path / "docker.sock")
    engine = _FakeEngine(socket_path, _probe_line())
    args = {
        "name": "lab-vllm-cpu",
        "image": "seatwright/vllm-cpu:abc",
        "engine": "vllm",
        "cache_dir": str(tmp_path / "facts"),
        "docker_socket": socket_path,
    }
    args.update(extra)
    try:
        with patch_module_args(args):
            with pytest.raises(SystemExit):
                engine_image_facts.main()
    finally:
        engine.close()
    return json.loads(capsys.readouterr().out)


def lab_rank(extra):
    node = dict(LAB_NODE, seatwright_engine_images={"lab-vllm-cpu": lab_image_facts()})
    data = mutated(seat_data("lab"), ("serving", "extra_args"), extra)
    return make_plan(data, SCHEMA, "lab", [node], "seats/lab.yml")["ranks"][0]


@pytest.mark.parametrize(
    "rank_extra, extra_args, words",
    [
        # The rank carries a flag the image's engine does not take.
        (["-tpx", "2"], ["-tpx", "2"], "passes -tpx, which vllm 0.32.0+cpu"),
        # An extra argument that sets a rendered flag by a prefix only the image's --help resolves.
        (["--max-model", "9"], ["--max-model", "9"], "--max-model sets --max-model-len"),
    ],
)
def test_bring_up_checks_the_rank_against_the_image_it_is_about_to_run(capsys, tmp_path, rank_extra, extra_args, words):
    rank = lab_rank([])
    rank = dict(rank, argv=rank["argv"] + rank_extra)
    result = run_facts(capsys, tmp_path, check_rank=rank, check_extra_args=extra_args)
    assert result.get("failed") is True, result
    assert result["msg"].startswith("lab-vllm-cpu: node rank 0 is not started on image seatwright/vllm-cpu:abc")
    assert words in result["msg"]


def test_bring_up_starts_a_rank_whose_flags_the_image_takes(capsys, tmp_path):
    result = run_facts(capsys, tmp_path, check_rank=lab_rank(["--trust_remote_code"]), check_extra_args=[])
    assert result.get("failed") is not True, result
    assert result["launch_checked"] is True


def test_the_seat_role_checks_the_image_before_it_starts_a_rank():
    tasks = ROOT / "roles" / "seat" / "tasks"
    checks = yaml.safe_load((tasks / "checks.yml").read_text())
    check = [task for task in checks if "seatwright.fleet.engine_image_facts" in task]
    assert check and check[0]["seatwright.fleet.engine_image_facts"]["check_rank"] == "{{ __seat_rank }}"
    order = [task.get("ansible.builtin.include_tasks") for task in yaml.safe_load((tasks / "main.yml").read_text())]
    order += [
        inner.get("ansible.builtin.include_tasks")
        for task in yaml.safe_load((tasks / "main.yml").read_text())
        for inner in task.get("block", [])
    ]
    assert order.index("checks.yml") < order.index("launch.yml")
