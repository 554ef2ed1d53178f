"""Checks run inside an engine image by its probe, and how their results are read.

A check is a Python program the probe hands to the image's own interpreter (no GPU needed). It
prints one line, CHECK_MARK + JSON: the check's name, one entry per step ({ok, value} or {ok,
error}), and what it cannot show on a host with no GPU. Pure: the programs are data here, the
probe (io/images/probe.py) runs them, and a rule reads the parsed result from the image's facts.
"""

import json

CHECK_MARK = "SEATWRIGHT-IMAGE-CHECK "

# GLM-5.3-Flash's attention as vLLM's selector sees it: MLA with a 512-wide latent and no rotary
# part (head 512), sparse (DSA indexer), BF16 activations and a BF16 cache, at the block size rule
# nope-mla-block-size sets; 16 heads a rank at TP4. Capability 12.0 is given, not read from a GPU.
NOPE_MLA_SHAPE = {
    "capability": [12, 0],
    "head_size": 512,
    "qk_rope_head_dim": 0,
    "kv_lora_rank": 512,
    "kv_cache_dtype": "bfloat16",
    "block_size": 2304,
    "num_heads": 16,
}

NOPE_MLA_SM120 = "nope-mla-sm120"
NOPE_MLA_BACKEND = "FLASHINFER_MLA_SPARSE_SM90"
NOPE_MLA_PATCH = "sm120-nope-mla-fa2"

_NOPE_MLA_SCRIPT = r"""
import json, os, sys
MARK, SHAPE = sys.argv[1], json.loads(sys.argv[2])
# With the stand-in driver library (no symbols) the engine's compiled ops load only with lazy binding.
DRIVER = os.environ.get("SEATWRIGHT_DRIVER", "real")
if DRIVER == "stand-in":
    sys.setdlopenflags(os.RTLD_LAZY | os.RTLD_GLOBAL)
out = {"check": "nope-mla-sm120", "shape": SHAPE, "driver": DRIVER, "steps": {}}

def step(name, action):
    try:
        out["steps"][name] = {"ok": True, "value": action()}
    except BaseException as exc:
        out["steps"][name] = {"ok": False, "error": "%s: %s" % (type(exc).__name__, str(exc)[:400])}

import torch
from vllm.platforms.interface import DeviceCapability
CAP = DeviceCapability(*SHAPE["capability"])
from vllm.v1.attention.backends.mla import flashinfer_mla_sparse_sm90 as sm90

def backend_supports():
    if not sm90.FlashInferMLASparseSM90Backend.supports_compute_capability(CAP):
        raise AssertionError("supports_compute_capability(%s) is False" % (CAP,))
    hopper = sm90.FlashInferMLASparseSM90Backend.supports_compute_capability(DeviceCapability(9, 0))
    return {"12.0": True, "9.0": hopper}

def selector():
    # The CUDA platform as it is on an SM120 card: only the capability is given, the selection is vLLM's own.
    from vllm import platforms
    from vllm.platforms.cuda import CudaPlatform
    from vllm.v1.attention.selector import AttentionSelectorConfig

    class GivenCapability(CudaPlatform):
        @classmethod
        def get_device_capability(cls, device_id=0):
            return CAP

    platforms._current_platform = GivenCapability()
    config = AttentionSelectorConfig(head_size=SHAPE["head_size"], dtype=torch.bfloat16,
                                     kv_cache_dtype=SHAPE["kv_cache_dtype"], block_size=SHAPE["block_size"],
                                     use_mla=True, use_sparse=True)
    # Backends read the model's MLA dimensions from the current config: GLM-5.3's, the rest default.
    from types import SimpleNamespace
    from vllm.config import VllmConfig, set_current_vllm_config
    vllm_config = VllmConfig()
    model = SimpleNamespace(hf_text_config=SimpleNamespace(kv_lora_rank=SHAPE["kv_lora_rank"],
                                                           qk_rope_head_dim=SHAPE["qk_rope_head_dim"]))
    object.__setattr__(vllm_config, "model_config", model)
    with set_current_vllm_config(vllm_config):
        valid, invalid = GivenCapability.get_valid_backends(CAP, config, num_heads=SHAPE["num_heads"])
        found = {"valid": [c.backend.name for c in valid],
                 "refused": {b.name: reasons for b, (_, reasons) in invalid.items()}}
        if not valid:
            raise LookupError("no valid backend; refused: %s" % json.dumps(found["refused"]))
        found["chosen"] = GivenCapability.get_attn_backend_cls(None, config, num_heads=SHAPE["num_heads"])
    return found

def flashinfer_usable():
    # vLLM turns FlashInfer off without flashinfer-cubin unless nvcc (CUDA_HOME) and ninja are found.
    from vllm.utils import flashinfer as vllm_flashinfer
    usable = {"has_flashinfer": vllm_flashinfer.has_flashinfer(),
              "has_flashinfer_sm90_nope_mla": vllm_flashinfer.has_flashinfer_sm90_nope_mla(),
              "cuda_home": os.environ.get("CUDA_HOME")}
    if not usable["has_flashinfer_sm90_nope_mla"]:
        raise AssertionError("vLLM finds FlashInfer unusable for NoPE MLA: %s" % json.dumps(usable))
    return usable

def wrapper():
    # The wrapper is made as the builder makes it, on the CPU, with FlashInfer's class recorded.
    import flashinfer.mla
    made = {}

    class Recorded:
        def __init__(self, *args, **kwargs):
            made.update({k: v for k, v in kwargs.items() if isinstance(v, (str, bool, int))})

    real = flashinfer.mla.BatchMLAPagedAttentionWrapper
    flashinfer.mla.BatchMLAPagedAttentionWrapper = Recorded
    try:
        state = sm90._SM90State(torch.device("cpu"), SHAPE["num_heads"], torch.bfloat16, 8, 64,
                                kv_lora_rank=SHAPE["kv_lora_rank"], qk_rope_head_dim=SHAPE["qk_rope_head_dim"],
                                sm_scale=1.0, index_topk=64, index_kpool=1)
    finally:
        flashinfer.mla.BatchMLAPagedAttentionWrapper = real
    import inspect
    return {"backend": made.get("backend"), "state_backend": getattr(state, "backend", None),
            "hopper_backend": sm90.wrapper_backend(DeviceCapability(9, 0)),
            "flashinfer_takes_backend": "backend" in inspect.signature(real.__init__).parameters}

step("backend_supports", backend_supports)
step("flashinfer_usable", flashinfer_usable)
step("selector", selector)
step("wrapper", wrapper)
print(MARK + json.dumps(out, default=str))
"""

# Per engine: (check name, program, argv after the mark). The probe runs each in its own process.
ENGINE_CHECKS = {"vllm": [(NOPE_MLA_SM120, _NOPE_MLA_SCRIPT, [json.dumps(NOPE_MLA_SHAPE)])]}

# What the checks cannot show without an SM120 card, said wherever their result is quoted.
NOPE_MLA_UNSHOWN = (
    "the FA2 MLA kernel compiled for sm_120 and run, and its logits free of NaN, need an SM120 GPU; "
    "the check shows vLLM's own gate, selection and wrapper arguments with capability 12.0 given, "
    "on a node with no driver against a stand-in libcuda.so.1 that no step calls"
)


def _judge_nope_mla(steps):
    """(passed, problems) of the nope-mla-sm120 steps."""
    problems = []
    for name in ("backend_supports", "flashinfer_usable", "selector", "wrapper"):
        entry = steps.get(name) or {}
        if not entry.get("ok"):
            problems.append("%s failed: %s" % (name, entry.get("error") or "not run"))
    selected = ((steps.get("selector") or {}).get("value") or {}).get("chosen") or ""
    if steps.get("selector", {}).get("ok") and not selected.endswith("FlashInferMLASparseSM90Backend"):
        problems.append("the selector chose %s, not %s" % (selected or "nothing", NOPE_MLA_BACKEND))
    made = (steps.get("wrapper") or {}).get("value") or {}
    if steps.get("wrapper", {}).get("ok") and made.get("backend") != "fa2":
        problems.append("the wrapper was made with backend %r, not 'fa2'" % made.get("backend"))
    if steps.get("wrapper", {}).get("ok") and made.get("hopper_backend") != "fa3":
        problems.append("capability 9 would get %r, not 'fa3'" % made.get("hopper_backend"))
    return not problems, problems


JUDGES = {NOPE_MLA_SM120: _judge_nope_mla}
UNSHOWN = {NOPE_MLA_SM120: NOPE_MLA_UNSHOWN}


def parse_check(name, output, exit_code):
    """{name, passed, problems, steps, driver, unshown, exit} of one check's output (its CHECK_MARK line).

    `driver` is 'real' where the node's libcuda.so.1 loaded, 'stand-in' where the probe gave one.
    """
    found = None
    for line in (output or "").splitlines():
        if line.startswith(CHECK_MARK):
            found = line[len(CHECK_MARK) :]
    result = {"name": name, "exit": exit_code, "unshown": UNSHOWN.get(name)}
    try:
        parsed = json.loads(found) if found is not None else None
    except ValueError:
        parsed = None
    if not isinstance(parsed, dict) or not isinstance(parsed.get("steps"), dict):
        tail = " | ".join((output or "").strip().splitlines()[-4:]) or "no output"
        return dict(
            result,
            passed=False,
            steps={},
            problems=["the check printed no result (exit %s): %s" % (exit_code, tail[-600:])],
        )
    if name not in JUDGES:
        return dict(
            result, passed=False, steps=parsed["steps"], problems=["seatwright has no judge for check %r" % name]
        )
    passed, problems = JUDGES[name](parsed["steps"])
    return dict(result, passed=passed, steps=parsed["steps"], problems=problems, driver=parsed.get("driver"))


def image_check(image_facts, name):
    """The named check's result in an image's facts, or None when the facts hold none."""
    return ((image_facts or {}).get("checks") or {}).get(name)
