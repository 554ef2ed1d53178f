"""Parsers are part of the seat (issue 21 item 4).

A seat whose qualification asks for tool calls or reasoning needs the engine's parser for them:
without it vLLM and SGLang hand tool calls and reasoning back as plain text, and the gates fail for
the launch, not the model. A recipe names the parser with where the engine documents it, or says
it is unknown (null with a status), which refuses bring-up like any other unknown.
"""

import copy

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.plan import make_plan
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.recipe import validate_recipe
from seat_cases import SCHEMA, SEAT_NAMES, example_nodes, seat_data

TOOL_GATES = {"tool-calls", "streaming-tool-calls", "tool-result-continuation"}
# What each engine puts on the server's command line for a declared parser.
FLAGS = {
    ("vllm", "tool_call_parser"): ["--enable-auto-tool-choice", "--tool-call-parser"],
    ("sglang", "tool_call_parser"): ["--tool-call-parser"],
    ("vllm", "reasoning_parser"): ["--reasoning-parser"],
    ("sglang", "reasoning_parser"): ["--reasoning-parser"],
}
# The seed seats' parsers as the parser registries and detection rules of vLLM 0.33.0 and SGLang 0.5.23
# name them for the model family (None: the recipe declares the parser unknown, with its reason, or its
# qualification asks for none). Checked against the sources the recipes cite (issue 48 part 5).
SEEDS = {
    "glm53": ("glm45", "glm47"),
    "glm53-vendor": ("glm45", "glm47"),
    "glm53-community": ("glm45", "glm47"),
    "glm53-fp8": ("glm45", "glm47"),
    "nemotron3-ultra": ("nemotron_v3", "qwen3_coder"),
    "nemotron3-super": (None, "qwen3_coder"),
    # Qwen3.5's tool-call parser follows its checkpoint's chat template, which no seed records.
    "qwen35-122b": (None, None),
    "laguna-s21": (None, "poolside_v1"),
    "deepseek-v4-flash": ("deepseek-v4", "deepseekv4"),
    "inkling-small": ("inkling", "inkling"),
    # The engine is unknown, and parser names are per engine.
    "qwen38-flash-next": (None, None),
}
# Each pinned engine's registered parser names, as read from its source (vLLM 0.33.0
# vllm/reasoning/__init__.py and vllm/tool_parsers/__init__.py; SGLang 0.5.23
# sglang/srt/parser/reasoning_parser_names.py and sglang/srt/function_call/parser_names.py), for the seeds'.
REGISTERED = {
    ("vllm", "reasoning_parser"): {"glm45", "nemotron_v3", "qwen3", "poolside_v1", "inkling", "deepseek_v4"},
    ("vllm", "tool_call_parser"): {"glm45", "glm47", "qwen3_coder", "qwen3_xml", "poolside_v1", "inkling"},
    ("sglang", "reasoning_parser"): {"glm45", "nemotron_3", "qwen3", "poolside_v1", "inkling", "deepseek-v4"},
    ("sglang", "tool_call_parser"): {"glm45", "glm47", "qwen3_coder", "poolside_v1", "inkling", "deepseekv4"},
}


def asks_for(data):
    """(reasoning, tools): whether the recipe's own qualification asks for each, read from its text."""
    qualification = data["qualification"]
    modes = [qualification.get("reasoning", "none")] + list(qualification.get("reasoning_variants") or [])
    categories = (qualification.get("quality") or {}).get(
        "categories", ["arithmetic", "extraction", "session", "tools"]
    )
    tools = bool(TOOL_GATES & set(qualification["gates"])) or "tools" in categories
    return any(mode != "none" for mode in modes), tools


def plan(data, name):
    return make_plan(data, SCHEMA, name, example_nodes(), "seats/%s.yml" % name)


def server_argv(result):
    return [arg for rank in result["ranks"] if rank["argv"] and "ray" != rank["argv"][0] for arg in rank["argv"]]


def validate(data, source="seats/test.yml"):
    return validate_recipe(data, SCHEMA, source)


@pytest.mark.parametrize("name", SEAT_NAMES)
def test_a_seat_whose_qualification_asks_for_parsers_renders_them_or_lists_them_unknown(name):
    data = seat_data(name)
    result = plan(data, name)
    argv = server_argv(result)
    engine = data["engine"]["name"]
    for field, asked in zip(("reasoning_parser", "tool_call_parser"), asks_for(data)):
        if not asked:
            continue
        declared = (data["serving"] or {}).get(field)
        if declared and result["ranks"]:
            flags = FLAGS[(engine, field)]
            at = argv.index(flags[-1])
            assert argv[at - len(flags) + 1 : at + 2] == flags + [declared], argv
        elif not declared:
            unknown = [item for item in result["unknowns"] if item.startswith("serving.%s:" % field)]
            assert unknown and result["ready"] is False, (
                "%s asks for a %s but its plan neither renders one nor lists it unknown: %s"
                % (name, field, result["unknowns"])
            )


@pytest.mark.parametrize("name,expected", sorted(SEEDS.items()))
def test_seed_seats_declare_the_parsers_their_engines_document(name, expected):
    serving = seat_data(name)["serving"]
    assert (serving.get("reasoning_parser"), serving.get("tool_call_parser")) == expected
    for field, value in zip(("reasoning_parser", "tool_call_parser"), expected):
        if value is None and field in serving:
            assert serving[field + "_status"] == "unknown" and len(serving[field + "_source"]) > 20
        elif value is not None:
            # Where the engine names it: a documentation page or a source file of the engine.
            assert "vllm" in serving[field + "_source"].lower() or "sglang" in serving[field + "_source"].lower()
            engine = seat_data(name)["engine"]["name"]
            assert value in REGISTERED[(engine, field)], "%s: %s %r is not a name %s registers" % (
                name,
                field,
                value,
                engine,
            )
            # The source cites the pinned engine's own file for the name.
            assert "0.33.0" in serving[field + "_source"] or "0.5.23" in serving[field + "_source"]


def test_glm53_plan_renders_both_parsers_on_the_server_rank():
    argv = server_argv(plan(seat_data("glm53-vendor"), "glm53-vendor"))
    assert {"--reasoning-parser", "--enable-auto-tool-choice", "--tool-call-parser"} <= set(argv), argv
    assert argv[argv.index("--reasoning-parser") + 1] == "glm45"
    assert argv[argv.index("--tool-call-parser") - 1] == "--enable-auto-tool-choice"
    assert argv[argv.index("--tool-call-parser") + 1] == "glm47"


def lab_with(**serving):
    data = copy.deepcopy(seat_data("lab"))
    for key in ("tool_call_parser", "tool_call_parser_source", "tool_call_parser_status"):
        data["serving"].pop(key, None)
    data["serving"].update(serving)
    return data


@pytest.mark.parametrize(
    "serving,needle",
    [
        # Tool gates and no word on the parser: refused at validation, naming both ways out.
        ({}, "serving.tool_call_parser: missing while qualification.gates has tool-calls"),
        # A parser with no source: where does the engine name it?
        ({"tool_call_parser": "pythonic"}, "serving.tool_call_parser_source: missing"),
        # Unknown needs a reason.
        ({"tool_call_parser": None, "tool_call_parser_status": "unknown"}, "say why the parser is unknown"),
        # A named parser cannot be unknown, nor a null one declared.
        (
            {"tool_call_parser": "pythonic", "tool_call_parser_status": "unknown", "tool_call_parser_source": "x y z"},
            "is given but serving.tool_call_parser_status is unknown",
        ),
        (
            {"tool_call_parser": None, "tool_call_parser_status": "declared", "tool_call_parser_source": "x y z"},
            "null but serving.tool_call_parser_status says declared",
        ),
    ],
)
def test_parser_declarations_that_do_not_hold_are_refused(serving, needle):
    with pytest.raises(SeatError) as caught:
        validate(lab_with(**serving))
    assert needle in str(caught.value)


def test_reasoning_asked_without_a_reasoning_parser_is_refused():
    data = copy.deepcopy(seat_data("lab"))
    data["qualification"]["reasoning"] = "low"
    with pytest.raises(SeatError, match="serving.reasoning_parser: missing while qualification asks for reasoning low"):
        validate(data)


def test_an_unknown_parser_is_a_plan_unknown_so_bring_up_refuses_it():
    # No source names Qwen3.5's tool-call parser (it follows the checkpoint's chat template): the seed
    # says so, and its plan is not ready until one is declared.
    result = plan(seat_data("qwen35-122b"), "qwen35-122b")
    assert result["ready"] is False
    unknown = [u for u in result["unknowns"] if u.startswith("serving.tool_call_parser")]
    assert len(unknown) == 1, result["unknowns"]
    assert unknown[0].startswith(
        "serving.tool_call_parser: unknown while qualification.gates has tool-calls, streaming-tool-calls, "
        "tool-result-continuation and the quality protocol runs its tools category ("
    )
    assert unknown[0].endswith("); declare it before bring-up")
    assert "--tool-call-parser" not in server_argv(result)


def test_a_seat_that_asks_for_neither_needs_no_parser():
    data = lab_with()
    data["qualification"]["gates"] = ["smoke", "json"]
    data["qualification"]["quality"] = {"categories": ["arithmetic"]}
    data["qualification"].pop("tool_choice")
    assert validate(data)["serving"]["tool_call_parser"] is None
