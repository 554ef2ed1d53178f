"""The engine tables (plugins/module_utils/seat/engines.py): argv, flags and texts come from them."""

import copy

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.engines import (
    ENGINES,
    argv_flags,
    canonical_flag,
    default_memory_utilization,
    default_port,
    engine,
    flag_text,
    kv_dtype_name,
    rendered_flags,
    server_argv,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.rules import RULES, launch_text, table_markdown
from seat_cases import SCHEMA, lab_image_facts

# Serving fields that are not engine flags: they shape the launch around the flags.
# Fields that are no engine flag: rope_scaling_reason only lets the plan accept a longer context;
# the parsers' status and source say where a value comes from, not a value the engine takes.
NOT_FLAGS = {"extra_args", "env", "rope_scaling_reason"} | {
    "%s_%s" % (parser, part) for parser in ("reasoning_parser", "tool_call_parser") for part in ("status", "source")
}


def _settings(name, **serving):
    base = {
        "engine": {"name": name, "device": "cuda", "python": "python3"},
        "model": {"served_name": "m"},
        "topology": {"nodes": 1, "tensor_parallel": 2, "expert_parallel": 1, "executor": None},
        "serving": {
            "port": 8000,
            "max_model_len": None,
            "dtype": None,
            "kv_cache_dtype": None,
            "gpu_memory_utilization": None,
            "max_num_seqs": None,
            "block_size": None,
            "enforce_eager": False,
            "max_cudagraph_capture_size": None,
            "custom_all_reduce": None,
            "allreduce_fusion": None,
            "distributed_timeout_s": None,
            "moe_backend": None,
            "attention_backend": None,
            "quantization": None,
            "speculation": None,
            "reasoning_parser": None,
            "tool_call_parser": None,
            "extra_args": [],
        },
    }
    base["serving"].update(serving)
    return base


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_every_serving_field_of_the_schema_has_a_row(name):
    fields = {row["field"] for row in engine(name)["rows"] if row["field"]}
    serving = set(SCHEMA["$defs"]["serving"]["properties"])
    assert {"serving.%s" % key for key in serving - NOT_FLAGS} <= fields


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_every_kv_cache_type_of_the_schema_has_an_engine_name(name):
    allowed = [v for v in SCHEMA["$defs"]["serving"]["properties"]["kv_cache_dtype"]["enum"] if v is not None]
    assert sorted(engine(name)["kv_dtypes"]) == sorted(allowed)


@pytest.mark.parametrize(
    "name,kv,expected",
    [("vllm", "bf16", "bfloat16"), ("sglang", "bf16", "bf16"), ("vllm", "fp8", "fp8"), ("sglang", "fp8", "fp8_e4m3")],
)
def test_kv_names_differ_by_engine(name, kv, expected):
    assert kv_dtype_name(name, kv) == expected


@pytest.mark.parametrize("name,port", [("vllm", 8000), ("sglang", 30000), ("unknown", 8000)])
def test_defaults_carry_their_source(name, port):
    assert default_port(name)["value"] == port and default_port(name)["source"]
    assert default_memory_utilization(name)["value"] == 0.9 and default_memory_utilization(name)["source"]


@pytest.mark.parametrize(
    "name,serving,expected",
    [
        (
            "vllm",
            {},
            [
                "python3",
                "-m",
                "vllm.entrypoints.openai.api_server",
                "--model",
                "/models/m",
                "--served-model-name",
                "m",
                "--host",
                "0.0.0.0",
                "--port",
                "8000",
                "--tensor-parallel-size",
                "2",
            ],
        ),
        (
            "vllm",
            {"custom_all_reduce": False, "allreduce_fusion": False, "tool_call_parser": "hermes"},
            [
                "--disable-custom-all-reduce",
                "--compilation-config",
                '{"pass_config":{"fuse_allreduce_rms":false}}',
                "--enable-auto-tool-choice",
                "--tool-call-parser",
                "hermes",
            ],
        ),
        (
            "sglang",
            {
                "custom_all_reduce": False,
                "allreduce_fusion": False,
                "speculation": {"method": "mtp", "num_speculative_tokens": 3},
            },
            [
                "--disable-custom-all-reduce",
                "--speculative-algorithm",
                "NEXTN",
                "--speculative-num-draft-tokens",
                "3",
                "--enable-metrics",
            ],
        ),
        # A CPU seat's compute dtype (the plan picks it by the node's processor, node/cpu.py).
        ("vllm", {"dtype": "float32"}, ["--dtype", "float32"]),
        ("sglang", {"dtype": "bfloat16"}, ["--dtype", "bfloat16", "--enable-metrics"]),
        (
            "sglang",
            {"custom_all_reduce": True, "enforce_eager": True, "gpu_memory_utilization": 0.75},
            # SGLang serves /metrics only when asked: every seat asks, for the monitoring role.
            ["--mem-fraction-static", "0.75", "--disable-cuda-graph", "--enable-metrics"],
        ),
    ],
)
def test_argv_is_generated_from_the_rows(name, serving, expected):
    argv = server_argv(_settings(name, **serving), "/models/m")
    if expected[0] == "python3":
        assert argv == expected
    else:
        tail = argv[argv.index("--tensor-parallel-size" if name == "vllm" else "--tp") + 2 :]
        assert tail == expected


def test_a_new_row_is_all_it_takes_to_render_a_field(monkeypatch):
    table = copy.deepcopy(ENGINES["vllm"])
    table["rows"] = table["rows"] + (
        {
            "field": "serving.moe_backend",
            "flag": "--all-to-all-backend",
            "transform": "text",
            "scope": "any",
            "also": (),
            "note": None,
        },
    )
    monkeypatch.setitem(ENGINES, "vllm", table)
    argv = server_argv(_settings("vllm", moe_backend="marlin"), "/models/m")
    assert argv[-2:] == ["--all-to-all-backend", "marlin"]
    assert rendered_flags("vllm")["--all-to-all-backend"] == "serving.moe_backend"


def test_argv_flags_lists_each_flag_once_in_order():
    argv = [
        "python3",
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--model",
        "/models/m",
        "--port",
        "8000",
        "--compilation-config",
        '{"pass_config":{}}',
        "--block-size=2304",
        "--port",
        "9",
        "-x",
        "--",
    ]
    assert argv_flags(argv) == ["--model", "--port", "--compilation-config", "--block-size"]


@pytest.mark.parametrize("name", sorted(ENGINES))
def test_every_flag_a_full_argv_uses_is_in_the_table(name):
    argv = server_argv(
        _settings(
            name,
            max_model_len=4096,
            kv_cache_dtype="fp8",
            gpu_memory_utilization=0.8,
            max_num_seqs=4,
            block_size=256,
            enforce_eager=True,
            max_cudagraph_capture_size=8,
            custom_all_reduce=False,
            allreduce_fusion=True,
            distributed_timeout_s=60,
            moe_backend="marlin",
            attention_backend="triton",
            quantization="fp8_per_block",
            reasoning_parser="r",
            tool_call_parser="t",
            speculation={"method": "eagle", "num_speculative_tokens": 2},
        ),
        "/models/m",
    )
    assert set(argv_flags(argv)) <= set(rendered_flags(name))


def test_unknown_engine_has_no_table():
    with pytest.raises(SeatError, match="engine 'tgi' has no table"):
        engine("tgi")


@pytest.mark.parametrize(
    "field,value,limit,expected",
    [
        (
            "serving.custom_all_reduce",
            False,
            None,
            "vLLM --disable-custom-all-reduce; SGLang --disable-custom-all-reduce",
        ),
        (
            "serving.distributed_timeout_s",
            3600,
            None,
            "vLLM --distributed-timeout-seconds 3600; SGLang --dist-timeout 3600",
        ),
        (
            "serving.allreduce_fusion",
            False,
            None,
            'vLLM --compilation-config {"pass_config":{"fuse_allreduce_rms":false}}; '
            "SGLang --enable-flashinfer-allreduce-fusion is not passed",
        ),
        (
            "serving.block_size",
            256,
            "multiple_of",
            "vLLM --block-size (a multiple of 256); SGLang --page-size (a multiple of 256)",
        ),
        ("engine.patches", "x", None, None),
    ],
)
def test_flag_text(field, value, limit, expected):
    assert flag_text(field, value, limit) == expected


@pytest.mark.parametrize("rule", RULES, ids=[rule["id"] for rule in RULES])
def test_each_rules_launch_text_names_the_table_flags_and_the_readme_shows_it(rule):
    text = launch_text(rule)
    for effect in rule["effects"]:
        field = effect.get("field")
        if field is None:
            continue
        for table in ENGINES.values():
            for row in table["rows"]:
                if row["field"] == field:
                    assert row["flag"] in text
    assert text in table_markdown()


@pytest.mark.parametrize(
    "name, word, flag, negated",
    [
        ("vllm", "--tensor_parallel_size", "--tensor-parallel-size", False),
        ("vllm", "-tp", "--tensor-parallel-size", False),
        ("vllm", "--max_model_len=999999", "--max-model-len", False),
        ("vllm", "--no-enforce-eager", "--enforce-eager", True),
        ("vllm", "-cc.mode=3", "--compilation-config", False),
        ("vllm", "-O3", "--optimization-level", False),
        ("vllm", "--port", "--port", False),
        ("sglang", "--tp-size", "--tp", False),
        ("sglang", "--model", "--model-path", False),
        ("sglang", "--context_length", "--context-length", False),
    ],
)
def test_canonical_flag_from_the_engine_table(name, word, flag, negated):
    read = canonical_flag(name, word)
    assert (read["flag"], read["negated"]) == (flag, negated)
    assert read["spelled"] == word.split("=", 1)[0]


@pytest.mark.parametrize("word", ["8", "-1", "-0.5", "--", "/models/m"])
def test_values_are_not_flags(word):
    assert canonical_flag("vllm", word) is None


@pytest.mark.parametrize(
    "word, flag",
    [
        # From the image's own --help: its aliases, negations and unambiguous prefixes.
        ("-tp", "--tensor-parallel-size"),
        ("-q", "--quantization"),
        ("-dpa", "--data-parallel-address"),
        ("--no-enable-log-requests", "--enable-log-requests"),
        ("--max-model", "--max-model-len"),
        ("--gpu-memory", "--gpu-memory-utilization"),
        ("-h", "--help"),
    ],
)
def test_canonical_flag_through_the_images_help(word, flag):
    assert canonical_flag("vllm", word, lab_image_facts())["flag"] == flag


@pytest.mark.parametrize("aliases, names", [((), ["m"]), (("production",), ["production", "m"])])
def test_vllm_serves_an_smg_alias_ahead_of_its_own_name(aliases, names):
    settings = dict(_settings("vllm"), _served_aliases=aliases)
    argv = server_argv(settings, "/models/m")
    at = argv.index("--served-model-name")
    assert argv[at + 1 : at + 1 + len(names)] == names and argv[at + 1 + len(names)] == "--host"


def test_sglang_serves_one_name_so_an_alias_is_refused_with_what_to_do():
    with pytest.raises(SeatError, match="sglang serves one model name.*alias production.*LiteLLM"):
        server_argv(dict(_settings("sglang"), _served_aliases=("production",)), "/models/m")


@pytest.mark.parametrize("name", sorted(ENGINES))
@pytest.mark.parametrize("value,expected", [("fp8_per_block", ["--quantization", "fp8_per_block"]), (None, [])])
def test_load_time_quantization_is_one_flag_or_none(name, value, expected):
    argv = server_argv(_settings(name, quantization=value), "/models/m")
    found = [argv[i : i + 2] for i, arg in enumerate(argv) if arg == "--quantization"]
    assert found == ([expected] if expected else [])
