"""What a node's processor computes natively, read from /proc/cpuinfo, and the compute dtype a CPU
engine takes on it (the lab's engines: GPU seats compute on their GPUs).

Pure: the node_kind module reads /proc/cpuinfo on the node; the plan decides a CPU seat's dtype here
(docs/lab.md, "The lab engine's dtype").
"""

# oneDNN runs BF16 matrix multiplies natively only with AVX-512 BF16 (Intel Cooper Lake, AMD Zen 4
# and later) or AMX (Intel Sapphire Rapids and later).
BF16_FLAGS = ("avx512_bf16", "amx_bf16")
# The vector and matrix extensions CPU engines pick kernels by: the fact keeps these, not all ~100.
KEPT_FLAGS = ("avx2", "avx512f", "avx512_bf16", "avx512_vnni", "amx_bf16", "amx_int8", "amx_tile")
# Checkpoint formats a CPU engine may compute in either float type: quantized ones keep their own.
FLOAT_CHECKPOINTS = ("bf16", "fp16", "fp32")
MEASURED = (
    "without native BF16, vLLM 0.32.0's CPU build logs 'Failed to create oneDNN linear, fallback to torch "
    "linear' and computes BF16 in torch: on a two-core AMD Zen 3 lab host its prefill took 4 to 6.6 times "
    "as long as in float32 (3,567- and 382-token prompts) and it decoded at about the same rate "
    "(bench/results/lab-cpu-dtype/)"
)


def parse_cpuinfo(text):
    """{model, logical_cpus, flags, bf16_native} of /proc/cpuinfo's text; None when it names no processor.

    flags: the KEPT_FLAGS every logical CPU has (a hybrid or misreported CPU counts as its weakest).
    """
    cpus = []
    current = {}
    for line in (text or "").splitlines() + [""]:
        if not line.strip():
            if "processor" in current:
                cpus.append(current)
            current = {}
            continue
        key, _, value = line.partition(":")
        current[key.strip()] = value.strip()
    if not cpus:
        return None
    common = set(cpus[0].get("flags", "").split())
    for cpu in cpus[1:]:
        common &= set(cpu.get("flags", "").split())
    flags = [flag for flag in KEPT_FLAGS if flag in common]
    return {
        "model": cpus[0].get("model name") or cpus[0].get("cpu model") or None,
        "logical_cpus": len(cpus),
        "flags": flags,
        "bf16_native": any(flag in flags for flag in BF16_FLAGS),
    }


def engine_dtype(checkpoint_quantization, serving_quantization, nodes):
    """The dtype a CPU seat's engine computes in: {"value": "bfloat16" | "float32" | None, "reason"}.

    nodes: [(host, its cached CPU fact or None)], the seat's nodes. None leaves the engine its default
    (the checkpoint's own dtype), with the reason why nothing was chosen.
    """
    if serving_quantization or checkpoint_quantization not in FLOAT_CHECKPOINTS:
        return {
            "value": None,
            "reason": "the engine's default: a %s checkpoint keeps its own compute type"
            % (serving_quantization or checkpoint_quantization or "quantized"),
        }
    if checkpoint_quantization == "fp32":
        return {"value": "float32", "reason": "float32: the checkpoint is fp32, computed as it was saved"}
    unknown = [host for host, fact in nodes if not isinstance(fact, dict) or "bf16_native" not in fact]
    if unknown:
        return {
            "value": None,
            "reason": "the engine's default: no cached CPU facts for %s (node_base reads them: run site.yml "
            "or playbooks/nodes.yml first)" % ", ".join(unknown),
        }
    lacking = [host for host, fact in nodes if not fact["bf16_native"]]
    if lacking:
        return {
            "value": "float32",
            "reason": "float32: no native BF16 matrix multiply on %s (neither %s); %s"
            % (", ".join(lacking), " nor ".join(BF16_FLAGS), MEASURED),
        }
    return {
        "value": "bfloat16",
        "reason": "bfloat16: every node's CPU multiplies BF16 natively (%s)"
        % "; ".join("%s: %s" % (host, ", ".join(f for f in fact["flags"] if f in BF16_FLAGS)) for host, fact in nodes),
    }
