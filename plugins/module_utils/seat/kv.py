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
