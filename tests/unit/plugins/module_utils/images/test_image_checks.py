"""In-image checks (plugins/module_utils/images/checks.py): how their output is judged, and the probe's use."""

import copy
import json

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.images.checks import (
    ACCELERATE,
    CHECK_MARK,
    ENGINE_CHECKS,
    MODELOPT_REVISION,
    NOPE_MLA_SM120,
    SM120_GROUPED_GEMM,
    WSL2_LOGITS,
    parse_check,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.io.images.probe import PROBE_SCRIPT
from ansible_collections.seatwright.fleet.plugins.module_utils.node.kind import NODE_KIND_ENV, engine_env
from conftest import ROOT

# What the probe recorded from the built vllm-sm120 image (make images): the check's own output.
RECORDED = json.loads((ROOT / "images" / "facts" / "vllm-sm120.json").read_text())["checks"][NOPE_MLA_SM120]


def output(steps):
    return "vLLM log noise\n" + CHECK_MARK + json.dumps({"check": NOPE_MLA_SM120, "steps": steps}) + "\n"


def test_the_built_image_passed_the_nope_mla_check_with_its_own_selection():
    assert RECORDED["passed"] is True and RECORDED["problems"] == []
    selector = RECORDED["steps"]["selector"]["value"]
    assert selector["chosen"].endswith("flashinfer_mla_sparse_sm90.FlashInferMLASparseSM90Backend")
    # The SM120 kernel needs an fp8_ds_mla cache and the dense backend is not sparse: both were refused.
    assert set(selector["refused"]) >= {"TRITON_MLA", "FLASHINFER_MLA_SPARSE_SM120"}
    assert RECORDED["steps"]["wrapper"]["value"]["backend"] == "fa2"
    assert RECORDED["steps"]["wrapper"]["value"]["hopper_backend"] == "fa3"
    assert RECORDED["steps"]["backend_supports"]["value"] == {"12.0": True, "9.0": True}
    assert "need an SM120 GPU" in RECORDED["unshown"]


def test_the_recorded_steps_judge_as_passed_again():
    assert parse_check(NOPE_MLA_SM120, output(RECORDED["steps"]), 0)["passed"] is True


def _changed(path, value):
    steps = copy.deepcopy(RECORDED["steps"])
    node = steps
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return steps


@pytest.mark.parametrize(
    "steps,problem",
    [
        (
            _changed(("selector", "value", "chosen"), "vllm.v1.attention.backends.mla.triton_mla.TritonMLABackend"),
            "the selector chose vllm.v1.attention.backends.mla.triton_mla.TritonMLABackend, not "
            "FLASHINFER_MLA_SPARSE_SM90",
        ),
        (_changed(("wrapper", "value", "backend"), "fa3"), "the wrapper was made with backend 'fa3', not 'fa2'"),
        (_changed(("wrapper", "value", "hopper_backend"), "fa2"), "capability 9 would get 'fa2', not 'fa3'"),
        (
            _changed(("backend_supports",), {"ok": False, "error": "AssertionError: supports_compute_capability"}),
            "backend_supports failed: AssertionError: supports_compute_capability",
        ),
        (
            _changed(("selector",), {"ok": False, "error": "ValueError: No valid attention backend found"}),
            "selector failed: ValueError: No valid attention backend found",
        ),
    ],
    ids=["other-backend", "fa3-wrapper", "hopper-changed", "unsupported", "no-backend"],
)
def test_a_failed_step_fails_the_check_naming_it(steps, problem):
    result = parse_check(NOPE_MLA_SM120, output(steps), 0)
    assert result["passed"] is False and problem in result["problems"]


@pytest.mark.parametrize(
    "text,code,problem",
    [
        ("ImportError: libcuda.so.1\n", 1, "the check printed no result (exit 1): ImportError: libcuda.so.1"),
        (CHECK_MARK + "{cut\n", 0, "the check printed no result (exit 0)"),
        ("", None, "the check printed no result (exit None): no output"),
    ],
)
def test_a_check_that_printed_no_result_fails_with_its_last_lines(text, code, problem):
    result = parse_check(NOPE_MLA_SM120, text, code)
    assert result["passed"] is False and result["problems"][0].startswith(problem)


def test_an_unknown_check_is_not_a_pass():
    assert parse_check("made-up", output({}), 0)["problems"] == ["seatwright has no judge for check 'made-up'"]


def test_the_probe_carries_every_engine_check_and_compiles():
    compile(PROBE_SCRIPT, "probe", "exec")
    for checks in ENGINE_CHECKS.values():
        for name, script, _ in checks:
            compile(script, name, "exec")
            assert repr(script) in PROBE_SCRIPT


# What the probe recorded from the built sglang-sm120 image (make images): one check per [003] fix.
SGLANG_FACTS = json.loads((ROOT / "images" / "facts" / "sglang-sm120.json").read_text())
SGLANG = SGLANG_FACTS["checks"]
SGLANG_CHECKS = [WSL2_LOGITS, SM120_GROUPED_GEMM, MODELOPT_REVISION, ACCELERATE]


def sglang_output(name, steps):
    return "SGLang log noise\n" + CHECK_MARK + json.dumps({"check": name, "steps": steps}) + "\n"


def test_the_built_sglang_image_carries_the_patches_and_passed_every_check():
    assert SGLANG_FACTS["patches"] == [WSL2_LOGITS, SM120_GROUPED_GEMM, MODELOPT_REVISION]
    for name in SGLANG_CHECKS:
        assert SGLANG[name]["passed"] is True and SGLANG[name]["problems"] == [], name
        assert parse_check(name, sglang_output(name, SGLANG[name]["steps"]), 0)["passed"] is True


def test_the_guard_is_off_on_a_wsl2_node_only_and_the_nccl_gather_serves():
    steps = SGLANG[WSL2_LOGITS]["steps"]
    assert steps["guard"]["value"] == {"unset": "on", "linux": "on", "wsl2": "off"}
    assert steps["nccl_fallback"]["value"] == {"symm_mem": False, "nccl_all_gather_dims": [-1]}


def test_the_grouped_gemm_asks_two_stages_on_capability_12_only():
    steps = SGLANG[SM120_GROUPED_GEMM]["steps"]
    assert steps["12.0"]["value"] == {"block_m_16": 2, "block_m_128": 2}
    assert steps["9.0"]["value"] == {"block_m_16": 4, "block_m_128": 3}


def _sglang_changed(name, path, value):
    steps = copy.deepcopy(SGLANG[name]["steps"])
    node = steps
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return steps


# Each case is what SGLang 0.5.23 without the fix gives, or a step that did not run.
@pytest.mark.parametrize(
    "name,path,value,problem",
    [
        (
            WSL2_LOGITS,
            ("guard", "value"),
            {"unset": "on", "linux": "on", "wsl2": "on"},
            "the logits gatherer's symmetric memory was",
        ),
        (
            WSL2_LOGITS,
            ("nccl_fallback", "value"),
            {"symm_mem": True, "nccl_all_gather_dims": []},
            "on wsl2 the logits were not gathered by SGLang's NCCL all-gather",
        ),
        (
            WSL2_LOGITS,
            ("processor", "value"),
            {"factory_called": False, "direct_gatherer": True},
            "LogitsProcessor makes its gatherer without the guard",
        ),
        (WSL2_LOGITS, ("guard",), {"ok": False, "error": "ImportError: x"}, "guard failed: ImportError: x"),
        (
            SM120_GROUPED_GEMM,
            ("12.0", "value"),
            {"block_m_16": 4, "block_m_128": 3},
            "capability 12.0 asked stages",
        ),
        (
            SM120_GROUPED_GEMM,
            ("12.1", "value"),
            {"block_m_16": 2, "block_m_128": 2},
            "capability 12.1 asked stages",
        ),
        (
            MODELOPT_REVISION,
            ("is_already_quantized", "value"),
            {"pinned": False, "unpinned": False},
            "_is_already_quantized read",
        ),
        (
            MODELOPT_REVISION,
            ("inkling_quant_config", "value"),
            {"pinned": None, "unpinned": None},
            "Inkling's quantization config at the pinned revision was None",
        ),
        (
            ACCELERATE,
            ("import",),
            {"ok": False, "error": "ModuleNotFoundError: No module named 'accelerate'"},
            "import failed: ModuleNotFoundError",
        ),
    ],
    ids=[
        "guard-on-wsl2",
        "no-nccl",
        "unguarded",
        "guard-not-run",
        "three-stages",
        "sm121-changed",
        "revision-blind",
        "inkling-revision-blind",
        "no-accelerate",
    ],
)
def test_the_unfixed_behaviour_fails_the_sglang_check_naming_it(name, path, value, problem):
    result = parse_check(name, sglang_output(name, _sglang_changed(name, path, value)), 0)
    assert result["passed"] is False
    assert any(problem in text for text in result["problems"]), result["problems"]


def test_the_guard_check_starts_sglang_with_the_env_each_node_kind_gets():
    (args,) = [args for name, _, args in ENGINE_CHECKS["sglang"] if name == WSL2_LOGITS]
    given = json.loads(args[1])
    assert given["env"] == {"unset": {}, "linux": engine_env("linux"), "wsl2": engine_env("wsl2")}
    assert NODE_KIND_ENV in given["names"]
