"""Checks run inside an engine image by its probe, and how their results are read.

A check is a Python program the probe hands to the image's own interpreter (no GPU needed). It
prints one line, CHECK_MARK + JSON: the check's name, one entry per step ({ok, value} or {ok,
error}), and what it cannot show on a host with no GPU. Pure: the programs are data here, the
probe (io/images/probe.py) runs them, and a rule reads the parsed result from the image's facts.
"""

import json

from ansible_collections.seatwright.fleet.plugins.module_utils.node.kind import NODE_KIND_ENV, engine_env

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

# The sglang-sm120 image's checks, one per fix of field report [003] (images/sglang-sm120.yml).
WSL2_LOGITS = "wsl2-logits-symm-mem"
SM120_GROUPED_GEMM = "sm120-grouped-gemm-two-stages"
MODELOPT_REVISION = "modelopt-revision-lookups"
ACCELERATE = "accelerate"

# Each check's steps share this start: the stand-in driver's lazy binding, and step().
_PRELUDE = r"""
import json, os, sys
MARK, NAME, ARG = sys.argv[1], sys.argv[2], json.loads(sys.argv[3])
DRIVER = os.environ.get("SEATWRIGHT_DRIVER", "real")
if DRIVER == "stand-in":
    sys.setdlopenflags(os.RTLD_LAZY | os.RTLD_GLOBAL)
out = {"check": NAME, "driver": DRIVER, "steps": {}}

def step(name, action):
    try:
        out["steps"][name] = {"ok": True, "value": action()}
    except BaseException as exc:
        out["steps"][name] = {"ok": False, "error": "%s: %s" % (type(exc).__name__, str(exc)[:400])}
"""

# The guard as a seat starts it: for each node kind, the env node/kind.py engine_env gives the seat's
# ranks (ARG), then SGLang's own gatherer made through the patched factory. A stand-in TP group of two
# ranks on one node stands where torch.distributed would be; nothing is gathered over symmetric memory.
_WSL2_LOGITS_SCRIPT = (
    _PRELUDE
    + r"""
import inspect
import torch
from sglang.srt.distributed import parallel_state
from sglang.srt.distributed.device_communicators import triton_symm_mem_ag
from sglang.srt.layers import logits_processor
from types import SimpleNamespace
parallel_state.get_tp_group = lambda: SimpleNamespace(world_size=2, cpu_group=None, rank_in_group=0)
triton_symm_mem_ag.get_parallel = lambda: SimpleNamespace(nnodes=1)

def made(kind_env):
    for name in set(os.environ) & set(ARG["names"]):
        del os.environ[name]
    os.environ.update(kind_env)
    gatherer = logits_processor.seatwright_logits_gatherer(True)
    return gatherer, gatherer._state is not None

def guard():
    return {kind: ("on" if made(env)[1] else "off") for kind, env in ARG["env"].items()}

def nccl_fallback():
    # The WSL2 gatherer's call goes to SGLang's NCCL all-gather, which records it here.
    import sglang.srt.distributed as distributed
    called = []
    def all_gather(x, dim=-1):
        called.append(dim)
        return x
    distributed.tensor_model_parallel_all_gather = all_gather
    gatherer, symm_mem = made(ARG["env"]["wsl2"])
    gatherer(torch.zeros((2, 8), dtype=torch.bfloat16))
    return {"symm_mem": symm_mem, "nccl_all_gather_dims": called}

def processor_uses_factory():
    source = inspect.getsource(logits_processor.LogitsProcessor.__init__)
    return {"factory_called": "seatwright_logits_gatherer(" in source,
            "direct_gatherer": "MultimemAllGatherer(" in source}

step("guard", guard)
step("nccl_fallback", nccl_fallback)
step("processor", processor_uses_factory)
print(MARK + json.dumps(out, default=str))
"""
)

# Inkling's grouped GEMM as SGLang launches it, at each capability given (no GPU): the Triton kernel
# is swapped for a recorder of its launch arguments, for the decode (16-row) and prefill (128-row) tiles.
_GROUPED_GEMM_SCRIPT = (
    _PRELUDE
    + r"""
import torch
from sglang.srt.utils import common
from sglang.kernels.ops.moe import inkling_moe as moe

def stages(capability):
    torch.cuda.is_available = lambda: True
    torch.cuda.get_device_capability = lambda device=None: tuple(capability)
    for cached in (common.is_cuda, common.is_sm120, common.is_sm121):
        cached.cache_clear()
    asked = {}

    class Recorder:
        def __getitem__(self, grid):
            def launch(**kwargs):
                asked[kwargs["BLOCK_SIZE_M"]] = kwargs["num_stages"]
            return launch

    real, moe._grouped_gemm_kernel = moe._grouped_gemm_kernel, Recorder()
    try:
        E, N, K = 2, 256, 128
        for block_m in (moe.SMALL_M_BLOCK_SIZE_M, moe.BLOCK_SIZE_M):
            moe.grouped_gemm_triton(torch.zeros((4, K), dtype=torch.bfloat16),
                                    torch.zeros((E, N, K), dtype=torch.bfloat16), E,
                                    torch.zeros(E, dtype=torch.int32), torch.zeros(E + 1, dtype=torch.int32),
                                    torch.zeros(E + 1, dtype=torch.int32), torch.zeros(1, dtype=torch.int32),
                                    block_size_m=block_m)
    finally:
        moe._grouped_gemm_kernel = real
    return {"block_m_%d" % block: count for block, count in sorted(asked.items())}

for capability in ARG["capabilities"]:
    step("%d.%d" % tuple(capability), lambda: stages(capability))
print(MARK + json.dumps(out, default=str))
"""
)

# The two ModelOpt lookups against a Hugging Face cache made here: the pinned revision holds
# hf_quant_config.json, main points at a later commit without it. Offline, as a seat serves.
_MODELOPT_REVISION_SCRIPT = (
    _PRELUDE
    + r"""
import tempfile
CACHE = tempfile.mkdtemp(prefix="seatwright-hf-cache-")
os.environ.update(HF_HUB_CACHE=CACHE, HF_HUB_OFFLINE="1")
REPO, PINNED, MAIN = ARG["repo"], ARG["pinned"], ARG["main"]
repo_dir = os.path.join(CACHE, "models--" + REPO.replace("/", "--"))
for revision in (PINNED, MAIN):
    os.makedirs(os.path.join(repo_dir, "snapshots", revision))
    with open(os.path.join(repo_dir, "snapshots", revision, "config.json"), "w") as handle:
        json.dump({"model_type": "inkling"}, handle)
with open(os.path.join(repo_dir, "snapshots", PINNED, "hf_quant_config.json"), "w") as handle:
    json.dump(ARG["quant_config"], handle)
os.makedirs(os.path.join(repo_dir, "refs"))
with open(os.path.join(repo_dir, "refs", "main"), "w") as handle:
    handle.write(MAIN)
from types import SimpleNamespace

def model(revision):
    return SimpleNamespace(hf_config=SimpleNamespace(), model_path=REPO, revision=revision)

def already_quantized():
    from sglang.srt.configs.model_config import ModelConfig
    return {"pinned": ModelConfig._is_already_quantized(model(PINNED)),
            "unpinned": ModelConfig._is_already_quantized(model(None))}

def inkling_quant_config():
    from sglang.srt.models.inkling_common.quantization import config
    found = {}
    for name, revision in (("pinned", PINNED), ("unpinned", None)):
        try:
            found[name] = config._get_raw_quant_config(model(revision))
        except Exception as exc:
            found[name] = "%s: %s" % (type(exc).__name__, str(exc)[:200])
    return found

step("is_already_quantized", already_quantized)
step("inkling_quant_config", inkling_quant_config)
print(MARK + json.dumps(out, default=str))
"""
)

# accelerate as SGLang's ModelOpt loader imports it: optional there, refused without it.
_ACCELERATE_SCRIPT = (
    _PRELUDE
    + r"""
def imported():
    import accelerate
    from sglang.srt.model_loader import loader
    return {"version": accelerate.__version__, "loader_has_accelerate": loader.HAS_ACCELERATE}

step("import", imported)
print(MARK + json.dumps(out, default=str))
"""
)

# Kinds whose engine env the guard check starts SGLang with; capabilities the grouped GEMM is launched at.
WSL2_LOGITS_KINDS = ("linux", "wsl2")
GROUPED_GEMM_CAPABILITIES = ((12, 0), (12, 1), (9, 0), (10, 0))
# SGLang 0.5.23's own stages, and what the patch asks on SM120: {capability: {block_m_<rows>: stages}}.
GROUPED_GEMM_EXPECTED = {
    "12.0": {"block_m_16": 2, "block_m_128": 2},
    "12.1": {"block_m_16": 3, "block_m_128": 3},
    "9.0": {"block_m_16": 4, "block_m_128": 3},
    "10.0": {"block_m_16": 4, "block_m_128": 3},
}
# A made-up repository and commits: the check never reaches the hub.
MODELOPT_CACHE = {
    "repo": "seatwright-check/modelopt-revision",
    "pinned": "1" * 40,
    "main": "2" * 40,
    "quant_config": {"producer": {"name": "modelopt"}, "quantization": {"quant_algo": "NVFP4"}},
}


def _sglang_checks():
    """(name, program, argv) of the sglang-sm120 checks; the guard's env comes from node/kind.py."""
    kinds = {"unset": {}}
    kinds.update((kind, engine_env(kind)) for kind in WSL2_LOGITS_KINDS)
    names = sorted({NODE_KIND_ENV}.union(*kinds.values()))
    return [
        (WSL2_LOGITS, _WSL2_LOGITS_SCRIPT, [WSL2_LOGITS, json.dumps({"env": kinds, "names": names})]),
        (
            SM120_GROUPED_GEMM,
            _GROUPED_GEMM_SCRIPT,
            [SM120_GROUPED_GEMM, json.dumps({"capabilities": GROUPED_GEMM_CAPABILITIES})],
        ),
        (MODELOPT_REVISION, _MODELOPT_REVISION_SCRIPT, [MODELOPT_REVISION, json.dumps(MODELOPT_CACHE)]),
        (ACCELERATE, _ACCELERATE_SCRIPT, [ACCELERATE, "{}"]),
    ]


# Per engine: (check name, program, argv after the mark). The probe runs each in its own process.
ENGINE_CHECKS = {
    "vllm": [(NOPE_MLA_SM120, _NOPE_MLA_SCRIPT, [json.dumps(NOPE_MLA_SHAPE)])],
    "sglang": _sglang_checks(),
}

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


def _failed_steps(steps, names):
    return [
        "%s failed: %s" % (name, (steps.get(name) or {}).get("error") or "not run")
        for name in names
        if not (steps.get(name) or {}).get("ok")
    ]


def _value(steps, name):
    return (steps.get(name) or {}).get("value")


def _judge_wsl2_logits(steps):
    """(passed, problems): symmetric memory on with no kind and on linux, off on wsl2 with NCCL serving."""
    problems = _failed_steps(steps, ("guard", "nccl_fallback", "processor"))
    guard = _value(steps, "guard")
    expected = {"unset": "on", "linux": "on", "wsl2": "off"}
    if guard is not None and guard != expected:
        problems.append("the logits gatherer's symmetric memory was %s, not %s" % (guard, expected))
    fallback = _value(steps, "nccl_fallback")
    if fallback is not None and (fallback.get("symm_mem") or fallback.get("nccl_all_gather_dims") != [-1]):
        problems.append("on wsl2 the logits were not gathered by SGLang's NCCL all-gather: %s" % fallback)
    processor = _value(steps, "processor")
    if processor is not None and not (processor.get("factory_called") and not processor.get("direct_gatherer")):
        problems.append("LogitsProcessor makes its gatherer without the guard: %s" % processor)
    return not problems, problems


def _judge_grouped_gemm(steps):
    """(passed, problems): two stages on capability 12.0, SGLang's own stages elsewhere."""
    problems = _failed_steps(steps, sorted(GROUPED_GEMM_EXPECTED))
    for capability, expected in sorted(GROUPED_GEMM_EXPECTED.items()):
        asked = _value(steps, capability)
        if asked is not None and asked != expected:
            problems.append("capability %s asked stages %s, not %s" % (capability, asked, expected))
    return not problems, problems


def _judge_modelopt_revision(steps):
    """(passed, problems): both lookups find the pinned revision's hf_quant_config.json, not main's."""
    problems = _failed_steps(steps, ("is_already_quantized", "inkling_quant_config"))
    quantized = _value(steps, "is_already_quantized")
    if quantized is not None and quantized != {"pinned": True, "unpinned": False}:
        problems.append("_is_already_quantized read %s, not the pinned revision's config" % quantized)
    found = _value(steps, "inkling_quant_config")
    if found is not None and found.get("pinned") != MODELOPT_CACHE["quant_config"]:
        problems.append("Inkling's quantization config at the pinned revision was %r" % found.get("pinned"))
    return not problems, problems


def _judge_accelerate(steps):
    problems = _failed_steps(steps, ("import",))
    value = _value(steps, "import")
    if value is not None and not value.get("loader_has_accelerate"):
        problems.append("SGLang's loader found no accelerate (HAS_ACCELERATE false)")
    return not problems, problems


GPU_UNSHOWN = "on a node with no driver against a stand-in libcuda.so.1 that no step calls"
JUDGES = {
    NOPE_MLA_SM120: _judge_nope_mla,
    WSL2_LOGITS: _judge_wsl2_logits,
    SM120_GROUPED_GEMM: _judge_grouped_gemm,
    MODELOPT_REVISION: _judge_modelopt_revision,
    ACCELERATE: _judge_accelerate,
}
UNSHOWN = {
    NOPE_MLA_SM120: NOPE_MLA_UNSHOWN,
    WSL2_LOGITS: "that the symmetric-memory gather raises SIGFPE under WSL 2 and the NCCL gather does not needs "
    "a WSL 2 host with two GPUs [003]; the check shows SGLang's own gatherer made on and off by the env "
    "node/kind.py gives each node kind, with a stand-in TP group of two ranks, " + GPU_UNSHOWN,
    SM120_GROUPED_GEMM: "the kernel compiled for sm_120 within its 101,376-byte shared-memory limit needs an "
    "SM120 GPU; the check shows the stages SGLang's own launch asks at each capability given, " + GPU_UNSHOWN,
    MODELOPT_REVISION: "a real checkpoint served from the cache; the check shows both lookups against a "
    "made-up cache whose main lacks the pinned revision's hf_quant_config.json, offline",
    ACCELERATE: "accelerate's use in a ModelOpt load; the check shows SGLang's loader imports it",
}


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
