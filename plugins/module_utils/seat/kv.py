"""KV cache size per token and the model's own context, from the values of its config.json.

Pure: the values come from checkpoint facts (io/checkpoint_scan.py read_model_config). Per rank
and per token, for one layer:
- multi-head latent attention (MLA, config has kv_lora_rank): the compressed latent plus the
  rotary key part, (kv_lora_rank + qk_rope_head_dim) x bytes; every tensor-parallel rank keeps the
  whole latent (it is not split by heads);
- grouped/multi-head attention: keys and values of the KV heads this rank holds,
  2 x ceil(kv_heads / TP) x head_dim x bytes.
Layers without attention (Mamba layers of a hybrid) hold no KV cache.
"""

# Bytes per element of each KV cache type; None: the model's own dtype.
_KV_BYTES = {"fp8": 1, "fp8_e4m3": 1, "fp8_e5m2": 1, "bf16": 2, "auto": None, None: None}
_DTYPE_BYTES = {"bfloat16": 2, "float16": 2, "float32": 4, "bf16": 2, "fp16": 2}


def _int(config, key):
    value = config.get(key)
    return value if isinstance(value, int) and not isinstance(value, bool) and value >= 0 else None


def attention_layers(config):
    """(layers that hold KV, how that was read) or (None, why not)."""
    layers = _int(config, "num_hidden_layers")
    pattern = config.get("hybrid_override_pattern")
    if isinstance(pattern, str) and pattern:
        return pattern.count("*"), "attention layers of hybrid_override_pattern ('*')"
    kinds = config.get("layer_types")
    if isinstance(kinds, list) and kinds:
        # Linear-attention layers keep a fixed-size state, not a KV cache per token.
        attention = [kind for kind in kinds if isinstance(kind, str) and "attention" in kind and "linear" not in kind]
        return len(attention), "attention entries of layer_types (sliding-window layers counted whole)"
    if layers is None:
        return None, "num_hidden_layers is missing"
    return layers, "num_hidden_layers"


def kv_bytes_per_token(config, kv_cache_dtype, tensor_parallel):
    """{'bytes', 'how'} of KV cache per token on each rank, or {'bytes': None, 'how': why not}."""
    if not isinstance(config, dict) or not config:
        return {"bytes": None, "how": "no config.json values"}
    element = _KV_BYTES.get(kv_cache_dtype)
    if element is None:
        element = _DTYPE_BYTES.get(str(config.get("torch_dtype") or config.get("dtype") or "").lower())
    if element is None:
        return {"bytes": None, "how": "KV dtype unknown (serving.kv_cache_dtype unset, no torch_dtype)"}
    layers, layers_how = attention_layers(config)
    if layers is None:
        return {"bytes": None, "how": layers_how}
    latent = _int(config, "kv_lora_rank")
    if latent:
        rope = _int(config, "qk_rope_head_dim") or 0
        per_layer = (latent + rope) * element
        how = "MLA: (kv_lora_rank %d + qk_rope_head_dim %d) x %d B x %d layers (%s), whole on every rank" % (
            latent,
            rope,
            element,
            layers,
            layers_how,
        )
    else:
        heads = _int(config, "num_attention_heads")
        kv_heads = _int(config, "num_key_value_heads") or heads
        head_dim = _int(config, "head_dim") or (
            _int(config, "hidden_size") // heads if heads and _int(config, "hidden_size") else None
        )
        if not kv_heads or not head_dim:
            return {"bytes": None, "how": "num_key_value_heads or head_dim missing"}
        per_rank_heads = -(-kv_heads // tensor_parallel)
        per_layer = 2 * per_rank_heads * head_dim * element
        how = "2 x %d of %d KV heads x head_dim %d x %d B x %d layers (%s)" % (
            per_rank_heads,
            kv_heads,
            head_dim,
            element,
            layers,
            layers_how,
        )
    return {"bytes": per_layer * layers, "how": how}


def model_context(config):
    """The model's own context length from its config.json values, or None."""
    if not isinstance(config, dict):
        return None
    for key in ("max_position_embeddings", "max_sequence_length", "seq_length"):
        value = _int(config, key)
        if value:
            return value
    return None


# The context an engine derives from config.json and refuses to exceed, as the pinned engines write it.
# vLLM 0.33.0: vllm/transformers_utils/model_arch_config_convertor.py derive_max_model_len_and_key takes the
# smallest of these keys (model_max_length, when present, wins), and vllm/config/model.py
# _get_and_verify_max_len multiplies it by the rope scaling factor except for the rope types below, whose
# max_position_embeddings already counts the scaling (and never for Gemma 3); a longer max_model_len raises
# "User-specified max_model_len (...) is greater than the derived max_model_len" unless
# VLLM_ALLOW_LONG_MAX_MODEL_LEN=1.
VLLM_LENGTH_KEYS = (
    "max_position_embeddings",
    "n_positions",
    "max_seq_len",
    "seq_length",
    "model_max_length",
    "max_target_positions",
    "max_sequence_length",
    "max_seq_length",
    "seq_len",
)
VLLM_COUNTED_ROPE = ("su", "longrope", "llama3", "yarn", "deepseek_yarn", "deepseek_llama_scaling")
# SGLang 0.5.23: sglang/srt/utils/hf_transformers/common.py get_context_length takes the first of these keys
# and multiplies it by rope_scaling's factor, except where rope_scaling gives original_max_position_embeddings
# or its rope_type is llama3; sglang/srt/configs/model_config.py _derive_context_length raises "User-specified
# context_length (...) is greater than the derived context_length" unless
# SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1.
SGLANG_LENGTH_KEYS = ("max_sequence_length", "seq_length", "max_seq_len", "model_max_length", "max_position_embeddings")
ENGINE_CONTEXT_SOURCES = {
    "vllm": "vLLM 0.33.0 vllm/config/model.py _get_and_verify_max_len",
    "sglang": "SGLang 0.5.23 sglang/srt/utils/hf_transformers/common.py get_context_length",
}
LONGER_CONTEXT_SWITCHES = {
    "vllm": "VLLM_ALLOW_LONG_MAX_MODEL_LEN=1",
    "sglang": "SGLANG_ALLOW_OVERWRITE_LONGER_CONTEXT_LEN=1",
}


def _rope_entries(config):
    """The rope parameter sets of a config: rope_parameters (one, or one per layer type), else rope_scaling."""
    for key in ("rope_parameters", "rope_scaling"):
        params = config.get(key)
        if isinstance(params, dict) and params:
            if all(isinstance(value, dict) for value in params.values()):
                return [value for value in params.values() if value]
            return [params]
    return []


def _rope_type(params):
    return str(params.get("rope_type") or params.get("type") or "default")


def _vllm_context(config):
    found = [(config[key], key) for key in VLLM_LENGTH_KEYS if _int(config, key)]
    if not found:
        return None
    length, key = min(found)
    if _int(config, "model_max_length"):
        length, key = config["model_max_length"], "model_max_length"
    how = "%s %s" % (key, "{:,}".format(length))
    factor, counted = 1.0, []
    if "gemma3" not in str(config.get("model_type") or ""):
        for params in _rope_entries(config):
            if _rope_type(params) in VLLM_COUNTED_ROPE:
                counted.append(_rope_type(params))
            else:
                factor = params.get("factor", factor)
        factor = 1.0 if not isinstance(factor, (int, float)) or isinstance(factor, bool) else factor
    if factor != 1.0:
        how += " x its rope scaling factor %g" % factor
    for rope_type in sorted(set(counted)):
        how += "; %s rope scaling is already counted in it, so its factor is not applied" % rope_type
    return int(length * factor), how


def _sglang_context(config):
    scaling = config.get("rope_scaling") or config.get("rope_parameters")
    factor, note = 1, ""
    if isinstance(scaling, dict) and scaling:
        factor = scaling.get("factor", 1)
        if "original_max_position_embeddings" in scaling:
            factor, note = 1, "; rope_scaling gives original_max_position_embeddings, so its factor is not applied"
        elif scaling.get("rope_type") == "llama3":
            factor, note = 1, "; llama3 rope scaling is already counted in it, so its factor is not applied"
        if not isinstance(factor, (int, float)) or isinstance(factor, bool):
            factor = 1
    for key in SGLANG_LENGTH_KEYS:
        value = config.get(key)
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            how = "%s %s" % (key, "{:,}".format(int(value)))
            if factor != 1:
                how += " x rope_scaling's factor %g" % factor
            return int(factor * value), how + note
    return None


def engine_context(config, engine_name):
    """{'tokens', 'engine', 'how', 'source'}: the longest context the engine accepts for config.json, or None.

    vLLM and SGLang each derive it their own way (see the constants above); for any other engine the
    smaller of the two stands, since nothing shows it stretches further. None when the config has none
    of the length keys.
    """
    if not isinstance(config, dict) or not config:
        return None
    derived = {"vllm": _vllm_context(config), "sglang": _sglang_context(config)}
    names = [engine_name] if engine_name in derived else sorted(derived)
    answers = [(derived[name][0], name) for name in names if derived[name]]
    if not answers:
        return None
    tokens, name = min(answers)
    return {
        "tokens": tokens,
        "engine": name,
        "how": derived[name][1],
        "source": ENGINE_CONTEXT_SOURCES[name]
        + ("" if engine_name in derived else " (the stricter of vLLM's and SGLang's for %s)" % engine_name),
        "switch": LONGER_CONTEXT_SWITCHES[name],
    }
