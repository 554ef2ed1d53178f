"""Issue 24: the CUDA architectures of an image's kernels, read from its binaries, and the plan's refusal.

The fixture is the .nv_fatbin section of a real library: sm120-sm90-compute120.cu compiled by
nvcc 13.0 with -gencode arch=compute_120,code=sm_120 -gencode arch=compute_90,code=sm_90
-gencode arch=compute_120,code=compute_120 -shared -Xcompiler -fPIC.
"""

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.images.facts import kernel_refusal
from ansible_collections.seatwright.fleet.plugins.module_utils.images.kernels import (
    elf_section,
    fatbin_archs,
    list_elf_archs,
    runs_on,
)
from conftest import FIXTURES

FIXTURES = FIXTURES / "engine_images"
FATBIN = (FIXTURES / "sm120-sm90-compute120.nv_fatbin").read_bytes()


def test_the_fatbin_of_a_real_library_names_its_cubins_and_ptx():
    assert fatbin_archs(FATBIN) == ["compute_120", "sm_90", "sm_120"]


def test_cuobjdump_list_elf_output_is_read():
    text = (FIXTURES / "cuobjdump-list-elf-vllm-C.txt").read_text()
    assert list_elf_archs(text) == ["sm_90", "sm_100", "sm_120"]


def test_a_file_that_is_not_elf_has_no_section():
    assert elf_section(b"not an elf file at all" * 4, ".nv_fatbin") is None


@pytest.mark.parametrize(
    "archs, capability, runs",
    [
        (["sm_120"], "12.0", True),
        (["sm_90", "sm_100"], "12.0", False),
        (["sm_120"], "12.1", True),
        (["sm_121"], "12.0", False),
        (["compute_90"], "12.0", True),
        (["sm_120"], "9.0", False),
    ],
)
def test_which_kernels_run_on_which_capability(archs, capability, runs):
    assert runs_on(archs, capability) is runs


SM120 = [{"compute_capability": "12.0"}] * 2


def _image(archs):
    return {"reference": "seatwright/vllm-sm120:0123", "engine": {"name": "vllm"}, "kernel_archs": {"vllm": archs}}


def test_an_image_without_sm120_kernels_is_refused_on_an_sm120_fleet():
    refusal = kernel_refusal(_image(["sm_90", "sm_100"]), SM120)
    assert refusal["id"] == "image-kernel-archs"
    assert "built for sm_90, sm_100 (read from its libraries), none for sm_120 (capability 12.0)" in refusal["detail"]
    assert kernel_refusal(_image(fatbin_archs(FATBIN)), SM120) is None
    # Facts of an older probe say nothing about kernels: no refusal on a guess.
    assert kernel_refusal({"engine": {"name": "vllm"}}, SM120) is None


def test_sglangs_kernels_are_read_from_its_kernel_package():
    # SGLang's own package is Python; its CUDA kernels ship as sgl_kernel (sglang-kernel).
    image = {
        "reference": "seatwright/sglang-sm120:0123",
        "engine": {"name": "sglang"},
        "kernel_archs": {"sglang": [], "sgl_kernel": ["sm_90", "sm_120"], "torch": ["sm_120"]},
    }
    assert kernel_refusal(image, SM120) is None
    image["kernel_archs"]["sgl_kernel"] = ["sm_90", "sm_100"]
    assert "sglang kernels are built for sm_90, sm_100 " in kernel_refusal(image, SM120)["detail"]
