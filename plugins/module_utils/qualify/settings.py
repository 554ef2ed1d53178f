"""The qualification settings of a seat: the recipe's `qualification` block with every default filled.

One home for the defaults; the schema (schemas/seat.schema.json) describes the same fields.
"""

import copy

from ansible_collections.seatwright.fleet.plugins.module_utils.qualify.detectors import DEFAULT_THRESHOLDS

GATES = (
    "smoke",
    "json",
    "tool-calls",
    "streaming-tool-calls",
    "tool-result-continuation",
    "needle",
    "nan-logits",
    "degenerate-output",
    "responses-api",
    "reasoning-variants",
)
REASONING_MODES = ("none", "low", "medium", "high", "model-default")

DEFAULTS = {
    "reasoning": "none",
    # visible answer tokens, and the extra room a reasoning mode gets on top (field: 512 + 4,096)
    "budget": {"visible_tokens": 512, "reasoning_tokens": 4096},
    # request fields per reasoning mode; a mode not listed gets reasoning_effort=<mode> (low, medium,
    # high) or nothing (none, model-default)
    "reasoning_request": {},
    "reasoning_variants": [],
    "temperature": 0.0,
    "tool_choice": "auto",
    "runs": {"tool-calls": 20, "streaming-tool-calls": 5},
    "needle": {"fraction": 0.9, "depth": 0.5},
    "degenerate": dict(DEFAULT_THRESHOLDS),
    "request_timeout_s": 600,
    "quality": {
        "runs": 3,
        "temperature": 0.6,
        "min_pass_fraction": 1.0,
        "categories": ["arithmetic", "extraction", "session", "tools"],
    },
    "soak": {"duration_s": 5400, "concurrency": 4, "stall_s": 30, "max_tokens": 384, "max_errors": 0, "max_stalls": 0},
}


def _merge(base, extra):
    merged = copy.deepcopy(base)
    for key, value in (extra or {}).items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = copy.deepcopy(value)
    return merged


def qualification_settings(qualification, served_context=None, max_num_seqs=None):
    """The settings the gates run with: the recipe's block over DEFAULTS.

    `served_context` is the served context length in tokens when known (recipe's
    serving.max_model_len or what the endpoint reports); the needle gate needs it.
    `max_num_seqs` (serving.max_num_seqs) caps the default soak concurrency, so a seat that serves
    one sequence is soaked with one stream, not measured through its queue.
    """
    block = dict(qualification or {})
    settings = _merge(DEFAULTS, {k: v for k, v in block.items() if k in DEFAULTS})
    if max_num_seqs and "concurrency" not in (block.get("soak") or {}):
        settings["soak"]["concurrency"] = min(settings["soak"]["concurrency"], max_num_seqs)
    settings["gates"] = list(block.get("gates") or [])
    settings["expect_fail"] = list(block.get("expect_fail") or [])
    if not settings["reasoning_variants"]:
        settings["reasoning_variants"] = [settings["reasoning"]]
    settings["served_context"] = served_context
    return settings


def reasoning_fields(settings, mode=None):
    """Request fields that ask the engine for reasoning mode `mode` (default: the seat's mode)."""
    mode = mode or settings["reasoning"]
    declared = settings["reasoning_request"].get(mode)
    if declared is not None:
        return copy.deepcopy(declared)
    if mode in ("low", "medium", "high"):
        return {"reasoning_effort": mode}
    return {}


def token_budget(settings, mode=None, visible=None):
    """max_tokens for one request: the visible budget plus reasoning headroom unless mode is none."""
    mode = mode or settings["reasoning"]
    visible = settings["budget"]["visible_tokens"] if visible is None else visible
    return visible + (0 if mode == "none" else settings["budget"]["reasoning_tokens"])
