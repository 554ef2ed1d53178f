"""node/cpu.py: the node's processor from /proc/cpuinfo, and the dtype a CPU seat computes in."""

from pathlib import Path

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.io.node.kind_probe import read_cpu
from ansible_collections.seatwright.fleet.plugins.module_utils.node.cpu import engine_dtype, parse_cpuinfo

FIXTURES = Path(__file__).resolve().parents[4] / "fixtures" / "cpu"


def _cpuinfo(*flag_lists, model="Test CPU"):
    return "\n".join(
        "processor\t: %d\nmodel name\t: %s\nflags\t\t: fpu sse2 %s\n" % (index, model, flags)
        for index, flags in enumerate(flag_lists)
    )


def test_the_lab_hosts_zen3_has_no_native_bf16():
    # The two-core lab host of 2026-12-07 (recorded /proc/cpuinfo): AVX2, no AVX-512 of any kind.
    fact = parse_cpuinfo((FIXTURES / "epyc-zen3-2core.txt").read_text())
    assert fact == {"model": "AMD EPYC", "logical_cpus": 2, "flags": ["avx2"], "bf16_native": False}


def test_the_device_machines_xeon_multiplies_bf16_natively():
    # The 16-core device machine of 2026-12-07 (recorded /proc/cpuinfo): AVX-512 BF16 and AMX.
    fact = parse_cpuinfo((FIXTURES / "xeon-amx-16core.txt").read_text())
    assert fact["model"] == "Intel(R) Xeon(R) Processor" and fact["logical_cpus"] == 16
    assert fact["bf16_native"] is True
    assert {"avx512_bf16", "amx_bf16", "amx_tile"} <= set(fact["flags"])


@pytest.mark.parametrize(
    "flags, kept, native",
    [
        (["avx2"], ["avx2"], False),
        (["avx2 avx512f avx512_vnni"], ["avx2", "avx512f", "avx512_vnni"], False),
        # Zen 4 / Cooper Lake: AVX-512 BF16.
        (["avx2 avx512f avx512_bf16"], ["avx2", "avx512f", "avx512_bf16"], True),
        # Sapphire Rapids: AMX.
        (["avx2 avx512f amx_tile amx_bf16 amx_int8"], ["avx2", "avx512f", "amx_bf16", "amx_int8", "amx_tile"], True),
        # A flag only some logical CPUs report is not counted: the engine may run on any of them.
        (["avx2 avx512f avx512_bf16", "avx2 avx512f"], ["avx2", "avx512f"], False),
    ],
)
def test_flags_are_those_every_cpu_has(flags, kept, native):
    fact = parse_cpuinfo(_cpuinfo(*flags))
    assert fact["flags"] == kept
    assert fact["bf16_native"] is native
    assert fact["logical_cpus"] == len(flags)


@pytest.mark.parametrize("text", [None, "", "\n\n", "garbage without a processor line\n"])
def test_no_processor_is_none(text):
    assert parse_cpuinfo(text) is None


def test_read_cpu_reads_the_file_and_tolerates_its_absence(tmp_path):
    path = tmp_path / "cpuinfo"
    path.write_text(_cpuinfo("avx2 avx512f avx512_bf16"))
    assert read_cpu(str(path))["bf16_native"] is True
    assert read_cpu(str(tmp_path / "missing")) is None


ZEN3 = {"model": "AMD EPYC", "logical_cpus": 2, "flags": ["avx2"], "bf16_native": False}
ZEN4 = {"model": "AMD EPYC", "logical_cpus": 2, "flags": ["avx2", "avx512f", "avx512_bf16"], "bf16_native": True}


@pytest.mark.parametrize(
    "checkpoint, quantization, nodes, value, says",
    [
        ("bf16", None, [("node-a", ZEN3)], "float32", "on node-a (neither"),
        ("bf16", None, [("node-a", ZEN4)], "bfloat16", "node-a: avx512_bf16"),
        ("fp16", None, [("node-a", ZEN4)], "bfloat16", "every node"),
        # Across nodes every rank computes alike: one node without BF16 sets float32 for all.
        ("bf16", None, [("node-a", ZEN4), ("node-b", ZEN3)], "float32", "on node-b (neither"),
        ("fp32", None, [("node-a", ZEN4)], "float32", "checkpoint is fp32"),
        # Quantized checkpoints, or quantized as they load, keep their own compute type.
        ("fp8", None, [("node-a", ZEN3)], None, "fp8 checkpoint"),
        ("bf16", "fp8_per_channel", [("node-a", ZEN3)], None, "fp8_per_channel checkpoint"),
        # Without the node's facts nothing is guessed: the engine's default, and how to get them.
        ("bf16", None, [("node-a", None)], None, "no cached CPU facts for node-a"),
        ("bf16", None, [("node-a", ZEN4), ("node-b", {"model": "x"})], None, "for node-b"),
    ],
)
def test_engine_dtype(checkpoint, quantization, nodes, value, says):
    choice = engine_dtype(checkpoint, quantization, nodes)
    assert choice["value"] == value
    assert says in choice["reason"]


def test_float32_names_the_measurement_behind_it():
    reason = engine_dtype("bf16", None, [("node-a", ZEN3)])["reason"]
    assert "bench/results/lab-cpu-dtype/" in reason
    assert "avx512_bf16 nor amx_bf16" in reason
