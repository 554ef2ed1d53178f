"""What each seed seat still needs (issue 48 part 5): plugins/module_utils/seat/needs.py labels every
unknown and refusal of a plan as an operator pin or an engineering gap; tools/render_seats.py writes
docs/seats.md from the plans of the seed seats on inventory/example."""

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.defaults import (
    COLLECT_PATTERN as LABELLED_PATTERN,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.node.contract import COLLECT_PATTERN
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.needs import (
    ENGINEERING_GAP,
    OPERATOR_PIN,
    classify,
    classify_refusal,
    failed_plan,
    is_seed,
    plan_candidate,
    seat_needs,
    seats_markdown,
)
from conftest import load_script
from seat_cases import ROOT, SEAT_NAMES, example_nodes, seat_data

render_seats = load_script("tools/render_seats.py")

PIN, GAP = OPERATOR_PIN, ENGINEERING_GAP


@pytest.mark.parametrize(
    "text,kind,subject",
    [
        (
            "model.revision: not given by the field; pin the full 40-hex commit before bring-up",
            PIN,
            "checkpoint revision",
        ),
        ("model.repo: the field does not name the checkpoint's repository", PIN, "checkpoint repository"),
        ("engine.image: no reference or digest from the field; pin the image before bring-up", PIN, "image digest"),
        (
            "engine.image.reference: the repository is not named; the digest alone cannot be pulled",
            PIN,
            "image repository",
        ),
        ("engine.name: the field does not say which engine served it; no launch is rendered", PIN, "engine"),
        ("model.checkpoint.bytes: unknown; declare it or gather checkpoint facts", PIN, "checkpoint size"),
        (
            "fit: whether 3.4 GB (3.14 GiB) of headroom holds one sequence is unknown: KV bytes per token: "
            "fit.kv_bytes_per_token is unset and it cannot be computed (no config.json values)",
            PIN,
            "checkpoint config",
        ),
        (
            "image flags not checked: no facts of image sha256:0aa5324c4f38 are cached; read them "
            "(playbooks/images.yml reads a built image) and plan again",
            PIN,
            "image facts",
        ),
        (
            "serving.tool_call_parser: unknown while qualification.gates has tool-calls (no source names one); "
            "declare it before bring-up",
            GAP,
            "tool-call parser",
        ),
        (
            "serving.reasoning_parser: unknown while qualification asks for reasoning low (x); declare it before "
            "bring-up",
            GAP,
            "reasoning parser",
        ),
        (
            "rules nope-mla-backend-gate, nope-mla-block-size: undecided: model.architecture.attention unknown; "
            "declare it",
            GAP,
            "rule nope-mla-backend-gate, nope-mla-block-size",
        ),
        (
            "rule custom-allreduce-off: undecided: engine.name unknown, so it cannot be told whether the seat is "
            "where the rule was seen; declare it",
            PIN,
            "rule custom-allreduce-off",
        ),
        (
            "rule custom-allreduce-off: undecided: engine.name and model.architecture.attention unknown; declare them",
            GAP,
            "rule custom-allreduce-off",
        ),
        (
            "engine.image must carry an attention backend that runs sparse MLA with no rotary part on capability 12 "
            "(rule nope-mla-backend-gate)",
            GAP,
            "rule nope-mla-backend-gate",
        ),
        (
            "engine.flashinfer_version is unknown; the rule needs 0.6.18 or newer (rule nope-mla-flashinfer)",
            GAP,
            "rule nope-mla-flashinfer",
        ),
        ("something the plan has never said before", GAP, "unclassified"),
        ("engine.image_spec: a field no pin table names", GAP, "unclassified"),
    ],
)
def test_each_unknown_is_an_operator_pin_or_an_engineering_gap(text, kind, subject):
    need = classify(text)
    assert (need["kind"], need["subject"], need["text"]) == (kind, subject, text)
    assert need["why"]


@pytest.mark.parametrize("image_local,kind", [(False, PIN), (True, GAP)])
def test_unread_image_facts_are_the_projects_only_for_an_image_it_builds(image_local, kind):
    text = "image flags not checked: no facts of image vllm-sm120 are cached; read them and plan again"
    assert classify(text, image_local)["kind"] == kind


@pytest.mark.parametrize(
    "rule,kind",
    [
        ("transport-declared", PIN),
        ("one-gpu-kind", PIN),
        ("nope-mla-backend-gate", GAP),
        ("image-flags", GAP),
        ("context-within-model", GAP),
        ("image-kernel-archs", GAP),
        ("a-rule-not-yet-written", GAP),
    ],
)
def test_refusals_are_the_operators_only_where_the_inventory_answers_them(rule, kind):
    need = classify_refusal({"id": rule, "detail": "what was seen", "remedy": "what to do"})
    assert (need["kind"], need["subject"]) == (kind, "refused by %s" % rule)
    assert need["text"] == "what was seen; what to do"


@pytest.mark.parametrize(
    "sources,seed",
    [
        (["000"], True),
        (["002", "000"], True),
        (["https://huggingface.co/HuggingFaceTB/SmolLM2-135M-Instruct"], False),
        (["https://docs.vllm.ai/x", "003"], True),
        (["0003"], False),
        ([], False),
        (None, False),
    ],
)
def test_a_seed_seat_cites_a_field_report(sources, seed):
    assert is_seed({"sources": sources}) is seed


@pytest.mark.parametrize("name", SEAT_NAMES)
def test_every_recipe_but_the_labs_is_a_seed(name):
    assert is_seed(seat_data(name)) is not name.startswith("lab")


@pytest.mark.parametrize(
    "message,text",
    [
        (
            "seats/x.yml: rule r: seen. Change the recipe. Rule reason: why [000].",
            "seats/x.yml: rule r: seen. Change the recipe. (the rule's reason: docs/rules.md)",
        ),
        ("seats/x.yml: model.name: missing", "seats/x.yml: model.name: missing"),
    ],
)
def test_a_stopped_plan_keeps_what_was_seen_and_what_to_do(message, text):
    assert seat_needs(failed_plan("x", {}, message))[0]["text"] == text


def test_a_plan_that_does_not_fit_needs_its_fit_first_then_refusals_then_unknowns():
    plan = {
        "verdict": "does-not-fit",
        "blockers": ["loads 328 GB against 410 GB", "no KV cache room", "refused by rule x: y; z. w"],
        "refusals": [{"id": "x", "detail": "y", "remedy": "z"}],
        "unknowns": ["model.revision: not given", "serving.tool_call_parser: unknown (why); declare it"],
        "engine": {"image": {"status": "unknown"}},
    }
    needs = seat_needs(plan)
    assert [(need["kind"], need["subject"]) for need in needs] == [
        (GAP, "fit"),
        (GAP, "refused by x"),
        (PIN, "checkpoint revision"),
        (GAP, "tool-call parser"),
    ]
    assert needs[0]["text"] == "loads 328 GB against 410 GB; no KV cache room"


def test_a_plan_the_planner_stopped_on_is_one_engineering_gap():
    plan = failed_plan("glm53", {"title": "GLM", "sources": ["000"]}, "seats/glm53.yml: rule r: conflict")
    assert seat_needs(plan) == [
        {
            "kind": GAP,
            "subject": "plan stops",
            "text": "seats/glm53.yml: rule r: conflict",
            "why": "the recipe conflicts with a rule or the schema",
        }
    ]
    page = seats_markdown([("glm53", "seats/glm53.yml", plan)], "inventory/example", "tools/render_seats.py")
    assert "no plan (the planner stops on the recipe)" in page and "No host was placed." in page


def test_the_candidate_nodes_are_what_plan_yml_collects_from_the_inventory():
    variables = {
        "seatwright_node_gpu_profile": "rtx-pro-6000-ws",
        "seatwright_fleet_name": "example",
        "gpu_power_limit_w": 325,
        "nvidia_driver_branch": "610",
        "ansible_host": "192.168.10.12",
        "nccl_env_ib_dscp": 26,
    }
    node = plan_candidate("node-b", variables, COLLECT_PATTERN, LABELLED_PATTERN)
    assert node["host"] == "node-b" and node["in_inventory"] is True
    assert "ansible_host" not in node
    assert node["nvidia_driver_branch"] == "610" and node["nccl_env_ib_dscp"] == 26
    assert node["seatwright_node_cotenants"] == [] and node["seat_models_root"] is None


def test_the_tool_reads_the_example_inventory_as_the_unit_tests_declare_it():
    nodes = render_seats.inventory_nodes(ROOT / "inventory" / "example")
    for node, declared in zip(nodes, example_nodes()):
        assert {key: node[key] for key in declared} == declared


def test_the_page_has_a_row_and_a_section_per_seed_seat_with_every_need_labelled():
    planned = render_seats.planned_seats()
    names = [name for name, _source, _plan in planned]
    assert names == sorted(name for name in SEAT_NAMES if not name.startswith("lab"))
    page = seats_markdown(planned, "inventory/example", "tools/render_seats.py")
    for name, _source, plan in planned:
        assert "| [%s](#%s) |" % (name, name) in page
        assert "\n## %s\n" % name in page
        for need in seat_needs(plan):
            assert need["kind"] in (PIN, GAP)
            row = "| %s | %s |" % (need["kind"], need["subject"].replace("|", "\\|"))
            assert row in page


def test_the_page_is_the_same_every_time_and_from_any_folder(tmp_path, monkeypatch):
    first, second = tmp_path / "a.md", tmp_path / "b.md"
    assert render_seats.main(["--doc", str(first)]) == 0
    monkeypatch.chdir(tmp_path)
    assert render_seats.main(["--doc", "b.md"]) == 0
    assert first.read_text() == second.read_text()


def test_check_mode_fails_on_a_stale_page_and_passes_once_rendered(tmp_path):
    page = tmp_path / "seats.md"
    page.write_text("# stale\n")
    assert render_seats.main(["--check", "--doc", str(page)]) == 1
    assert page.read_text() == "# stale\n"
    assert render_seats.main(["--doc", str(page)]) == 0
    assert render_seats.main(["--check", "--doc", str(page)]) == 0
    assert page.read_text().startswith("# What each seed seat still needs\n")


def test_pipes_in_the_plans_words_do_not_break_the_table():
    plan = {
        "seat": "s",
        "title": "t",
        "sources": ["000"],
        "verdict": "unknown",
        "launchable": False,
        "bringup": {"serve": False},
        "unknowns": ["serving.tool_call_parser: unknown (a | b); declare it"],
        "refusals": [],
        "blockers": [],
        "hosts": [{"host": "node-a"}],
    }
    page = seats_markdown([("s", "seats/s.yml", plan)], "inventory/example", "tools/render_seats.py")
    assert "unknown (a \\| b); declare it |" in page


@pytest.mark.parametrize(
    "verdict,launchable,serve,words",
    [
        ("fits", True, True, "fits, launchable; bring-up would serve"),
        ("fits", True, False, "fits, launchable; bring-up would refuse it"),
        ("does-not-fit", False, False, "does not fit, not launchable; bring-up would refuse it"),
        ("unknown", False, False, "fit unknown, not launchable; bring-up would refuse it"),
        ("not-applicable", True, True, "fit not applicable (no GPU), launchable; bring-up would serve"),
    ],
)
def test_the_verdict_says_the_fit_whether_it_launches_and_what_bring_up_decides(verdict, launchable, serve, words):
    plan = {
        "title": "t",
        "sources": ["000"],
        "verdict": verdict,
        "launchable": launchable,
        "bringup": {"serve": serve},
        "unknowns": [],
        "refusals": [],
        "blockers": [],
        "hosts": [],
    }
    page = seats_markdown([("s", "seats/s.yml", plan)], "inventory/example", "tools/render_seats.py")
    assert "| [s](#s) | 000 | %s |" % words in page
    assert "Verdict: **%s**." % words in page


# Parsers and attention kinds no seed and neither pinned engine's source (vLLM 0.33.0, SGLang 0.5.23)
# answers: Qwen3.5's tool-call parser follows its checkpoint's chat template; Qwen3.8 is in neither
# engine and its engine is not recorded. Every other seed seat's are declared.
OPEN_PARSERS = {("qwen35-122b", "tool-call parser"), ("qwen38-flash-next", "reasoning parser")}
OPEN_PARSERS |= {("qwen38-flash-next", "tool-call parser")}
OPEN_ATTENTION = {"qwen38-flash-next"}


def test_no_seed_seat_keeps_a_parser_or_attention_gap_the_sources_answer():
    for name, _source, plan in render_seats.planned_seats():
        for need in seat_needs(plan):
            if need["subject"].endswith("parser"):
                assert (name, need["subject"]) in OPEN_PARSERS, (name, need["text"])
            if "model.architecture.attention unknown" in need["text"]:
                assert name in OPEN_ATTENTION, (name, need["text"])
