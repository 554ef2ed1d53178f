"""In-image checks (plugins/module_utils/images/checks.py): how their output is judged, and the probe's use."""

import copy
import json
from pathlib import Path

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.images.checks import (
    CHECK_MARK,
    ENGINE_CHECKS,
    NOPE_MLA_SM120,
    parse_check,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.io.images.probe import PROBE_SCRIPT

ROOT = Path(__file__).parents[2]
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
