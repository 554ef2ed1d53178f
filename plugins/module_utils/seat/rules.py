"""Compatibility rules for SM120 and multi-node seats, as data, and their pure evaluation.

Each rule has an id, a condition (named, over the recipe, the seat's GPUs and its topology), the
conditions it was seen under (`seen`: engine, image family, topology, capability, each with its
sources: field reports as in docs/field.md, or upstream items), the effects it has on the launch,
and a reason. Inside a `seen` scope the rule is a requirement; outside it is a warning only. A
recipe that sets a value a required rule forbids is an error unless `overrides` names the rule
with a reason. Conditions answer True, False or None (None: a field they read is unknown).
"""

import copy

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError
from ansible_collections.seatwright.fleet.plugins.module_utils.images.checks import NOPE_MLA_PATCH, NOPE_MLA_SM120
from ansible_collections.seatwright.fleet.plugins.module_utils.node.hardware import is_sm120
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.cotenants import engine_share
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.engines import flag_text
from ansible_collections.seatwright.fleet.plugins.module_utils.versions import fix_carried, version_at_least


def _and(*answers):
    if any(answer is False for answer in answers):
        return False
    return None if any(answer is None for answer in answers) else True


def _or(*answers):
    if any(answer is True for answer in answers):
        return True
    return None if any(answer is None for answer in answers) else False


def _sm12x(ctx):
    return any(is_sm120(gpu["compute_capability"]) for gpu in ctx["gpus"])


def _multi_node(ctx):
    return ctx["recipe"]["topology"]["nodes"] > 1


def _engine_is(ctx, name):
    engine = ctx["recipe"]["engine"]["name"]
    return None if engine == "unknown" else engine == name


def _attention_is(ctx, kind):
    attention = ctx["recipe"]["model"]["architecture"]["attention"]
    return None if attention == "unknown" else attention == kind


def _speculates_concurrently(ctx):
    serving = ctx["recipe"]["serving"]
    # Unset max_num_seqs means the engine's default, which admits many sequences at once.
    return serving["speculation"] is not None and (serving["max_num_seqs"] or 2) > 1


def _speculation_detail(recipe):
    serving = recipe["serving"]
    return "serving.speculation is %s with %d draft tokens, serving.max_num_seqs is %s, topology.nodes is %d" % (
        serving["speculation"]["method"],
        serving["speculation"]["num_speculative_tokens"],
        serving["max_num_seqs"] or "unset (the engine admits many)",
        recipe["topology"]["nodes"],
    )


# Why a refusal fired, in the recipe's own fields.
REFUSAL_DETAILS = {"no-cross-node-speculation": _speculation_detail}


def _image_has_sm120_kernels(ctx):
    """True/False from engine.image.sm120_kernels; None when the recipe does not say."""
    return ctx["recipe"]["engine"]["image"].get("sm120_kernels")


def _not(answer):
    return None if answer is None else not answer


# Condition name -> (function, recipe fields it reads that may be 'unknown').
CONDITIONS = {
    "sm12x-or-multi-node": (lambda ctx: _or(_sm12x(ctx), _multi_node(ctx)), ()),
    "sm12x": (_sm12x, ()),
    "multi-node-concurrent-speculation": (lambda ctx: _and(_multi_node(ctx), _speculates_concurrently(ctx)), ()),
    "multi-node": (_multi_node, ()),
    "multi-node-sm12x": (lambda ctx: _and(_multi_node(ctx), _sm12x(ctx)), ()),
    "single-node-sm12x-vllm": (
        lambda ctx: _and(not _multi_node(ctx), _sm12x(ctx), _engine_is(ctx, "vllm")),
        ("engine.name",),
    ),
    "multi-node-sm12x-vllm": (
        lambda ctx: _and(_multi_node(ctx), _sm12x(ctx), _engine_is(ctx, "vllm")),
        ("engine.name",),
    ),
    # The one cross-node seat [000] gives the one-hour timeout for: Nemotron 3 Ultra, a hybrid Mamba
    # model, on vLLM's multiprocessing executor across two nodes of SM12x cards (section 2).
    "multi-node-sm12x-vllm-mp-hybrid-mamba": (
        lambda ctx: _and(
            _multi_node(ctx),
            _sm12x(ctx),
            _engine_is(ctx, "vllm"),
            ctx["recipe"]["topology"]["executor"] == "mp",
            _attention_is(ctx, "hybrid-mamba"),
        ),
        ("engine.name", "model.architecture.attention"),
    ),
    "multi-node-vllm-sm120-image": (
        lambda ctx: _and(_multi_node(ctx), _engine_is(ctx, "vllm"), _image_has_sm120_kernels(ctx)),
        ("engine.name",),
    ),
    "cotenants-resident": (lambda ctx: bool(ctx["gpus"]) and not ctx["recipe"]["topology"]["exclusive"], ()),
    "cotenants-resident-vllm": (
        lambda ctx: _and(bool(ctx["gpus"]) and not ctx["recipe"]["topology"]["exclusive"], _engine_is(ctx, "vllm")),
        ("engine.name",),
    ),
    "nope-mla-on-sm12x": (
        lambda ctx: _and(_sm12x(ctx), _attention_is(ctx, "mla-nope")),
        ("model.architecture.attention",),
    ),
    # An unknown image counts as the stock path: nothing shows it carries its own SM120 kernels.
    "vllm-stock-image": (
        lambda ctx: _and(_engine_is(ctx, "vllm"), _image_has_sm120_kernels(ctx) is not True),
        ("engine.name",),
    ),
}

# Where a rule's facts come from, one label each (docs/field.md says how each was checked):
# - report: a field report, by its key (docs/field.md#sources); the figures are the report's;
# - upstream: an upstream issue, pull request or page the project read itself (the link);
# - project: seatwright's own choice, with its reason in the rule.
SOURCE_KINDS = {
    "report": "field report",
    "upstream": "upstream, read",
    "project": "project choice",
}
SOURCES = {
    "000": {"kind": "report", "link": "docs/field.md#report-000"},
    "001": {"kind": "report", "link": "docs/field.md#report-001"},
    "002": {"kind": "report", "link": "docs/field.md#report-002"},
    "003": {"kind": "report", "link": "docs/field.md#report-003"},
    "004": {"kind": "report", "link": "docs/field.md#report-004"},
    # Open when read: auto-disables custom all-reduce on sm_12x after an abort at CUDA-graph capture
    # with two PCIe GPUs; no field report names it.
    "vLLM PR #47751": {"kind": "upstream", "link": "https://github.com/vllm-project/vllm/pull/47751"},
    # Read in vLLM 0.33.0's wheel: FlashInfer's sparse NoPE MLA backend, capability 9 and FA3 only as shipped.
    "vLLM flashinfer_mla_sparse_sm90.py": {
        "kind": "upstream",
        "link": "https://github.com/vllm-project/vllm/blob/v0.33.0/vllm/v1/attention/backends/mla/flashinfer_mla_sparse_sm90.py",
    },
}
SOURCE_LINKS = {key: source["link"] for key, source in SOURCES.items()}


def source_kind(source):
    """'report', 'upstream' or 'project' for a source a rule cites; SeatError for one not in SOURCES."""
    if source not in SOURCES:
        raise SeatError(
            "rule source %r is not in seat/rules.py SOURCES; add it with its kind (%s)"
            % (source, ", ".join(SOURCE_KINDS))
        )
    return SOURCES[source]["kind"]


_NOPE_WHEN = "the model's attention is MLA with no rotary part (NoPE) and any GPU of the seat is SM12x"
_NOPE_SEEN = (
    {
        "condition": "vllm-stock-image",
        "text": "vLLM on SM12x with an image that does not carry its own SM120 kernels (the five-fix "
        "GLM-5.3-Flash NVFP4 path, [000] section 4)",
        "sources": ("000",),
    },
)

# The words a dynamic at_most value reads as in the rules table and the launch text.
COTENANT_HEADROOM = (
    "the co-tenants' headroom (1 - their memory / the GPU's, rounded down; where the inventory does not declare "
    "their memory, the recipe's topology.resident_fraction, else the seat is refused)"
)


def cotenant_headroom(ctx):
    """{'value', 'how', 'refusal'}: the largest engine fraction the seat's GPUs leave beside resident co-tenants.

    Decided in seat/cotenants.py engine_share, from each GPU's co-tenants and the recipe's recorded fraction.
    """
    topology = ctx["recipe"]["topology"]
    recorded = None
    if topology.get("resident_fraction") is not None:
        recorded = {"value": topology["resident_fraction"], "source": topology.get("resident_fraction_source")}
    return engine_share(ctx["gpus"], recorded)


DYNAMIC_VALUES = {"cotenant-headroom": cotenant_headroom}

RULES = (
    {
        "id": "custom-allreduce-off",
        "when": "any GPU of the seat is SM12x, or the seat spans more than one node",
        "condition": "sm12x-or-multi-node",
        "seen": (
            {
                "condition": "multi-node-sm12x",
                "text": "across nodes on SM12x: every rank hung in the prober, on vLLM (a development build with "
                "the multiprocessing executor) and again on the community SM120 image [000]",
                "sources": ("000",),
            },
            {
                "condition": "single-node-sm12x-vllm",
                "text": "one node, SM12x, vLLM: an upstream pull request only (vLLM PR #47751, open when read: the "
                "custom all-reduce kernel aborts at CUDA-graph capture with two PCIe GPUs on sm_12x); no field "
                "report saw it, and the field's single-node image used its PCIe all-reduce and worked, so a "
                "recipe may keep it on through overrides with its reason",
                "sources": ("vLLM PR #47751",),
            },
        ),
        "effects": ({"kind": "set", "field": "serving.custom_all_reduce", "value": False},),
        "reason": "Across nodes (field report): the custom all-reduce prober enters a symmetric-memory "
        "rendezvous that SM120 cannot complete; every rank hung silently until the flag was passed, and the "
        "engine's own multi-node switch did not stop the prober [000]. On one node (upstream, not the field): "
        "vLLM PR #47751 reports the kernel aborting at CUDA-graph capture at TP=2 on sm_12x.",
        "sources": ("000", "vLLM PR #47751"),
    },
    {
        "id": "allreduce-fusion-off",
        "when": "any GPU of the seat is SM12x",
        "condition": "sm12x",
        "seen": (
            {
                "condition": "sm12x",
                "text": "SM12x: FlashInfer builds its fused all-reduce kernels for SM90/SM100 only; forced "
                "open under SGLang on eight RTX PRO 6000 [001], the revert in [004]",
                "sources": ("001", "004"),
            },
        ),
        "effects": ({"kind": "set", "field": "serving.allreduce_fusion", "value": False},),
        "reason": "GLM-5-NVFP4 on eight RTX PRO 6000 served 3,740 tok/s at 1,024 concurrency without the "
        "fusion; with its gates forced open on SM120 the kernels compiled and ran but throughput "
        "fell to 236 tok/s [001]. [004] describes the same revert against a 1,867 tok/s point of "
        "that session.",
        "sources": ("001", "004"),
    },
    {
        "id": "no-cross-node-speculation",
        "when": "the seat spans more than one node, speculation is configured, and more than one "
        "sequence may run at once (serving.max_num_seqs unset or above 1)",
        "condition": "multi-node-concurrent-speculation",
        "seen": (
            {
                "condition": "multi-node",
                "text": "across two nodes over RoCE, on every engine tried (SGLang's next-token head, the "
                "community vLLM image) [000]",
                "sources": ("000",),
            },
        ),
        "effects": ({"kind": "refuse"},),
        "remedy": "drop serving.speculation, or set serving.max_num_seqs to 1",
        "reason": "Accepted draft lengths differ from request to request, so ranks issue different "
        "numbers of collectives and the sampling collective stalls until an RPC timeout "
        "kills the server; this failed on every engine tried across the fabric, while "
        "single-stream speculation worked [000].",
        "sources": ("000",),
    },
    {
        "id": "distributed-timeout",
        "when": "the seat spans more than one node",
        "condition": "multi-node",
        "seen": (
            {
                "condition": "multi-node-sm12x-vllm-mp-hybrid-mamba",
                "text": "the Nemotron 3 Ultra seat only: a hybrid Mamba model on vLLM's multiprocessing executor "
                "across two nodes of RTX PRO 6000 [000] section 2; the report gives no timeout for its other "
                "cross-node seats",
                "sources": ("000",),
            },
        ),
        "effects": ({"kind": "set", "field": "serving.distributed_timeout_s", "value": 3600},),
        "reason": "The Nemotron 3 Ultra seat was launched with a one-hour distributed timeout together with the "
        "custom all-reduce fix [000] section 2. The report does not say the timeout was needed, nor that "
        "any other seat used it; elsewhere a recipe sets serving.distributed_timeout_s itself.",
        "sources": ("000",),
    },
    {
        "id": "cudagraph-capture-cap",
        "when": "the seat spans more than one node",
        "condition": "multi-node",
        "seen": (
            {
                "condition": "multi-node-vllm-sm120-image",
                "text": "vLLM across two nodes on the community SM120 image (engine.image.sm120_kernels) "
                "[000] section 6",
                "sources": ("000",),
            },
        ),
        "effects": ({"kind": "at_most", "field": "serving.max_cudagraph_capture_size", "value": 256},),
        "reason": "Capping CUDA-graph capture at 256 was one of the deviations needed to run the "
        "qualified SM120 image across two nodes [000].",
        "sources": ("000",),
    },
    {
        "id": "gpu-memory-cotenants",
        "when": "the seat uses GPUs and other GPU services stay resident on its nodes (topology.exclusive: false)",
        "condition": "cotenants-resident",
        "seen": (
            {
                "condition": "cotenants-resident-vllm",
                "text": "vLLM with the fleet's co-tenant services resident on a node [000] section 6",
                "sources": ("000",),
            },
        ),
        "effects": (
            {
                "kind": "at_most",
                "field": "serving.gpu_memory_utilization",
                "value": COTENANT_HEADROOM,
                "value_from": "cotenant-headroom",
            },
        ),
        "reason": "With co-tenant services resident the engine can only take what they leave free: 0.78 "
        "aborted at start-up (73.98 GiB free against 74.11 GiB requested) and 0.75 ran [000]. The cap "
        "is the co-tenants' declared memory taken off each GPU, rounded down to the hundredth, not a constant. "
        "A resident seat must not plan on memory its co-tenants hold: where the inventory does not declare it, "
        "the share the recipe records from the field (topology.resident_fraction) stands, else the seat is "
        "refused; co-tenants declaring a card's memory or more are refused too.",
        "sources": ("000",),
    },
    {
        "id": "nope-mla-backend-gate",
        "when": _NOPE_WHEN,
        "condition": "nope-mla-on-sm12x",
        "seen": _NOPE_SEEN,
        "effects": (
            {
                "kind": "image_check",
                "field": "engine.image_checks",
                "value": NOPE_MLA_SM120,
                "patch": NOPE_MLA_PATCH,
            },
        ),
        "reason": "On capability 12 the pinned vLLM offers sparse MLA only through FLASHINFER_MLA_SPARSE_SM120, "
        "which needs an fp8_ds_mla cache and a 64-dimension rotary part, so a NoPE seat with a BF16 cache has no "
        "backend; the FP8 MLA cache refused the geometry in the field too [000]. The field's second fix gated "
        "FlashInfer's sparse NoPE MLA backend (FLASHINFER_MLA_SPARSE_SM90, FA2 and FA3 paths) to capability 12 and "
        "the seat then served correctly [000]; off Hopper it must build FlashInfer's wrapper on FA2, since FA3's "
        "kernels are Hopper's (vLLM's flashinfer_mla_sparse_sm90.py). The image must carry patch %s and its "
        "in-image check must show, with the capability given, the backend's support, the selector's choice for "
        "GLM-5.3's shape and an FA2 wrapper. The community SM120 image carried its own kernels and needed "
        "none [000]." % NOPE_MLA_PATCH,
        "sources": ("000", "vLLM flashinfer_mla_sparse_sm90.py"),
    },
    {
        "id": "nope-mla-block-size",
        "when": _NOPE_WHEN,
        "condition": "nope-mla-on-sm12x",
        "seen": _NOPE_SEEN,
        "effects": ({"kind": "multiple_of", "field": "serving.block_size", "value": 256, "default": 2304},),
        "reason": "The engine derived a block size of 1152 for Mamba page alignment and the indexer "
        "kernel asserted, since it needs a multiple of 256; 2304 worked [000].",
        "sources": ("000",),
    },
    {
        "id": "nope-mla-flashinfer",
        "when": _NOPE_WHEN,
        "condition": "nope-mla-on-sm12x",
        "seen": _NOPE_SEEN,
        "effects": (
            {
                "kind": "version_at_least",
                "field": "engine.flashinfer_version",
                "value": "0.6.18",
                # The field's build: a 0.6.18 nightly, run on 28 August 2026 (attempt 8) [000].
                "nightly_from": "2026-08-28",
            },
        ),
        "reason": "With FlashInfer 0.6.17 the logits were NaN from prefill (400 repeats of 'lock', "
        "HTTP 400 on prompt logprobs); a 0.6.18 nightly, which carries the FA2 MLA NaN fix for SM12x, "
        "gave correct output on 28 August [000]. FlashInfer names its nightlies 0.6.18.devYYYYMMDD, which "
        "PEP 440 orders below 0.6.18, so a nightly counts by its date: from the day the field ran it.",
        "sources": ("000",),
    },
    {
        "id": "nope-mla-marlin-moe",
        "when": _NOPE_WHEN,
        "condition": "nope-mla-on-sm12x",
        "seen": _NOPE_SEEN,
        "effects": ({"kind": "set", "field": "serving.moe_backend", "value": "marlin"},),
        "reason": "The Marlin MoE backend is one of the five fixes that together made GLM-5.3-Flash "
        "NVFP4 serve correctly on SM120 [000].",
        "sources": ("000",),
    },
)

RULE_IDS = tuple(rule["id"] for rule in RULES)


def _lookup(recipe, field):
    node = recipe
    for part in field.split("."):
        node = node[part]
    return node


def _store(recipe, field, value):
    parts = field.split(".")
    node = recipe
    for part in parts[:-1]:
        node = node[part]
    node[parts[-1]] = value


def _v(value):
    """A setting as recipes write it: true/false rather than Python's True/False."""
    return str(value).lower() if isinstance(value, bool) else str(value)


def describe_effect(effect):
    """Words for one effect, as the README table and the plan show it."""
    kind, field = effect["kind"], effect.get("field")
    shown = _v(effect.get("value"))
    if kind == "set":
        return "%s = %s" % (field, shown)
    if kind == "at_most":
        return "%s at most %s (set to %s when unset)" % (field, shown, shown)
    if kind == "multiple_of":
        return "%s a multiple of %s (set to %s when unset)" % (field, shown, effect["default"])
    if kind == "version_at_least":
        if effect.get("nightly_from"):
            return "%s at least %s, or a nightly of that line or later dated %s or after" % (
                field,
                shown,
                effect["nightly_from"],
            )
        return "%s at least %s" % (field, shown)
    if kind == "needs":
        return "%s must carry %s" % (field, shown)
    if kind == "image_check":
        return "the engine image carries patch %s and passes its in-image check %s" % (effect["patch"], shown)
    return "refuse the seat"


def launch_text(rule):
    """What a rule changes on the engines' command lines, generated from the engine tables."""
    parts = []
    for effect in rule["effects"]:
        kind, field = effect["kind"], effect.get("field")
        if kind == "refuse":
            parts.append("no launch is rendered; %s" % rule["remedy"])
        elif kind == "version_at_least":
            parts.append("no flag: %s is checked against the pinned image" % field)
        elif kind == "needs":
            parts.append("no flag: unverified until an override names what ran on the seat's GPUs")
        elif kind == "image_check":
            parts.append("no flag: read from the image's facts (patch applied, in-image check passed)")
        else:
            limit = kind if kind in ("at_most", "multiple_of") else None
            parts.append(flag_text(field, effect["value"], limit) or "no flag renders %s" % field)
    return "; ".join(parts)


def _apply(effect, recipe):
    """(outcome, detail) of one effect on the recipe, which it may change.

    outcome: 'ok' (already holds), 'set' (filled in), 'unverified' (an unknown blocks the check),
    'conflict' (the recipe says otherwise).
    """
    field, want = effect.get("field"), effect.get("value")
    kind = effect["kind"]
    if kind == "needs":
        # Nothing in a recipe or the image facts shows it; only a run on the seat's GPUs does.
        return "unverified", (
            "%s must carry %s; nothing in the recipe or the image facts shows one: name the backend and the run "
            "on these GPUs that showed it in overrides" % (field, want)
        )
    if kind == "image_check":
        return _image_check_outcome(effect, recipe)
    have = _lookup(recipe, field)
    if kind == "set":
        if have is None:
            _store(recipe, field, want)
            return "set", "%s: unset -> %s" % (field, _v(want))
        return (
            ("ok", "%s: %s as required" % (field, _v(have)))
            if have == want
            else ("conflict", "%s is %s; the rule needs %s" % (field, _v(have), _v(want)))
        )
    if kind == "at_most":
        if have is None:
            _store(recipe, field, want)
            return "set", "%s: unset -> %s" % (field, _v(want))
        return (
            ("ok", "%s: %s, within %s" % (field, _v(have), _v(want)))
            if have <= want
            else ("conflict", "%s is %s; the rule allows at most %s" % (field, _v(have), _v(want)))
        )
    if kind == "multiple_of":
        if have is None:
            _store(recipe, field, effect["default"])
            return "set", "%s: unset -> %s" % (field, effect["default"])
        return (
            ("ok", "%s: %s is a multiple of %s" % (field, have, want))
            if have % want == 0
            else ("conflict", "%s is %r; the rule needs a multiple of %r" % (field, have, want))
        )
    if kind == "version_at_least":
        if have is None:
            return "unverified", "%s is unknown; the rule needs %s or newer" % (field, want)
        if effect.get("nightly_from"):
            # PEP 440 puts a 0.6.18.devYYYYMMDD nightly below 0.6.18: the day decides (versions.fix_carried).
            carried, case, words = fix_carried(have, want, effect["nightly_from"])
            if carried:
                return "ok", "%s: %s (%s: %s)" % (field, have, case, words)
            return (
                "conflict",
                "%s is %r; the rule needs %s or newer, or a nightly of that line or later dated %s "
                "or after; seen: %s (%s)" % (field, have, want, effect["nightly_from"], case, words),
            )
        return (
            ("ok", "%s: %s >= %s" % (field, have, want))
            if version_at_least(have, want)
            else ("conflict", "%s is %r; the rule needs %s or newer" % (field, have, want))
        )
    raise SeatError("rule effect kind %r is not known to seatwright" % kind)


def _image_check_outcome(effect, recipe):
    """(outcome, detail) of an image_check effect: the patch among the image's and its check passed.

    Unverified while no image facts were read (the recipe alone cannot show it); a conflict when
    the facts lack the patch or the check, or the check failed.
    """
    engine = recipe["engine"]
    reference = engine["image"].get("reference") or "the seat's image"
    build = engine["image"].get("build")
    rebuild = (
        "; build images/%s.yml again and read its facts (make images)" % build
        if build
        else "; pin an image built from a definition that lists the patch (images/vllm-sm120.yml)"
    )
    checks = engine.get("image_checks")
    patch, name = effect["patch"], effect["value"]
    if checks is None:
        return "unverified", (
            "no facts of %s were read, so patch %s and in-image check %s cannot be seen; build it and read "
            "its facts (make images, or playbooks/images.yml with engine_image_read_facts)" % (reference, patch, name)
        )
    if patch not in (engine.get("patches") or []):
        return "conflict", "image %s holds patches [%s], not %s%s" % (
            reference,
            ", ".join(engine.get("patches") or []) or "none",
            patch,
            rebuild,
        )
    check = checks.get(name)
    if not check:
        return "conflict", "image %s's facts hold no in-image check %s%s" % (reference, name, rebuild)
    if not check.get("passed"):
        return "conflict", "image %s's in-image check %s failed: %s%s" % (
            reference,
            name,
            "; ".join(check.get("problems") or ["no reason recorded"]),
            rebuild,
        )
    chosen = ((check.get("steps") or {}).get("selector") or {}).get("value") or {}
    return "ok", "image %s: patch %s applied; check %s passed (selected %s; not shown here: %s)" % (
        reference,
        patch,
        name,
        (chosen.get("chosen") or "").rsplit(".", 1)[-1],
        check.get("unshown"),
    )


def _seen_scope(rule, ctx, recipe):
    """(the first `seen` scope the seat is inside, fields that leave it undecided)."""
    undecided = []
    for scope in rule["seen"]:
        check, reads = CONDITIONS[scope["condition"]]
        answer = check(ctx)
        if answer:
            return scope, []
        if answer is None:
            undecided += [field for field in reads if _lookup(recipe, field) == "unknown" and field not in undecided]
    return None, undecided


def _warning(rule):
    seen = "; ".join(scope["text"] for scope in rule["seen"])
    sources = sorted({source for scope in rule["seen"] for source in scope["sources"]})
    effect = "; ".join(describe_effect(e) for e in rule["effects"])
    return {
        "id": rule["id"],
        "seen": seen,
        "sources": sources,
        "effect": effect,
        "reason": rule["reason"],
        "message": "rule %s: seen %s; untested here, so not applied (it would: %s)" % (rule["id"], seen, effect),
    }


def evaluate(recipe, gpus, source):
    """Apply every rule to a normalised recipe and the seat's GPUs (facts or declared).

    A rule whose condition holds is a requirement only where it was seen (one of its `seen`
    scopes holds); elsewhere it is a warning ("seen on X, untested here") and changes nothing.

    Returns {'settings': recipe with rule values filled in, 'applied', 'refusals', 'warnings',
    'undecided', 'unverified', 'unused_overrides'}; raises SeatError listing every unexcused conflict.
    """
    settings = copy.deepcopy(recipe)
    overrides = {item["rule"]: item["reason"] for item in recipe.get("overrides", [])}
    ctx = {"recipe": recipe, "gpus": gpus}
    result = {"applied": [], "refusals": [], "undecided": [], "unverified": [], "warnings": []}
    conflicts, used = [], set()
    for rule in RULES:
        check, reads = CONDITIONS[rule["condition"]]
        answer = check(ctx)
        if answer is None:
            unknown = [field for field in reads if _lookup(recipe, field) == "unknown"]
            result["undecided"].append(
                {
                    "id": rule["id"],
                    "reason": "undecided: %s unknown; declare %s"
                    % (" and ".join(unknown), "it" if len(unknown) == 1 else "them"),
                }
            )
            continue
        if not answer:
            continue
        scope, undecided_by = _seen_scope(rule, ctx, recipe)
        if undecided_by:
            result["undecided"].append(
                {
                    "id": rule["id"],
                    "reason": "undecided: %s unknown, so it cannot be told "
                    "whether the seat is where the rule was seen; declare %s"
                    % (" and ".join(undecided_by), "it" if len(undecided_by) == 1 else "them"),
                }
            )
            continue
        if scope is None:
            result["warnings"].append(_warning(rule))
            continue
        entry = {
            "id": rule["id"],
            "reason": rule["reason"],
            "sources": list(scope["sources"]),
            "seen": scope["text"],
            "effect": "; ".join(describe_effect(e) for e in rule["effects"]),
            "launch": launch_text(rule),
            "details": [],
            "overridden": None,
        }
        for effect in rule["effects"]:
            if effect["kind"] == "refuse":
                if rule["id"] in overrides:
                    raise SeatError(
                        "%s: overrides names %s, but a refusal cannot be overridden; %s"
                        % (source, rule["id"], rule["remedy"])
                    )
                detail = REFUSAL_DETAILS[rule["id"]](recipe)
                entry["details"].append(detail)
                result["refusals"].append(
                    {"id": rule["id"], "reason": rule["reason"], "detail": detail, "remedy": rule["remedy"]}
                )
                continue
            if effect.get("value_from"):
                decided = DYNAMIC_VALUES[effect["value_from"]](ctx)
                value, how = decided["value"], decided["how"]
                if decided["refusal"]:
                    # Nothing the recipe says can stand in for the inventory's facts: the seat is refused.
                    refusal = decided["refusal"]
                    entry["details"].append("%s cannot be capped: %s" % (effect["field"], refusal["detail"]))
                    result["refusals"].append(
                        {
                            "id": rule["id"],
                            "reason": rule["reason"],
                            "detail": refusal["detail"],
                            "remedy": refusal["remedy"],
                            "memory_unknown": True,
                        }
                    )
                    continue
                if value == "none":
                    entry["details"].append("%s: %s, so no cap" % (effect["field"], how))
                    continue
                outcome, detail = _apply(dict(effect, value=value), settings)
                detail = "%s (%s)" % (detail, how)
            else:
                outcome, detail = _apply(effect, settings)
            if outcome in ("conflict", "unverified") and rule["id"] in overrides:
                used.add(rule["id"])
                entry["overridden"] = overrides[rule["id"]]
                entry["details"].append("%s; overridden: %s" % (detail, overrides[rule["id"]]))
            elif outcome == "conflict":
                conflicts.append(
                    "%s: rule %s: %s. Change the recipe, or add to overrides: "
                    "{rule: %s, reason: <why it does not hold, with a source>}. "
                    "Rule reason: %s" % (source, rule["id"], detail, rule["id"], rule["reason"])
                )
            else:
                if outcome == "unverified":
                    result["unverified"].append("%s (rule %s)" % (detail, rule["id"]))
                entry["details"].append(detail)
        result["applied"].append(entry)
    if conflicts:
        raise SeatError("\n".join(conflicts))
    result["settings"] = settings
    result["unused_overrides"] = sorted(set(overrides) - used)
    return result


def source_link(source):
    """Markdown for one source with its kind: a field report key or an upstream item, linked."""
    link = SOURCES[source]["link"]
    label = "[%s]" % source if source.isdigit() else source
    return "[%s](%s) (%s)" % (label, link, SOURCE_KINDS[source_kind(source)])


def table_rows():
    """One row per rule for the README: id, when, where it is required (seen), effect, reason, sources."""
    return [
        {
            "id": rule["id"],
            "when": rule["when"],
            "seen": "; ".join(
                "%s (%s)" % (scope["text"], ", ".join(source_link(x) for x in scope["sources"]))
                for scope in rule["seen"]
            )
            + ". Elsewhere: a warning, not applied",
            "effect": "; ".join(describe_effect(e) for e in rule["effects"]) + " — " + launch_text(rule),
            "reason": rule["reason"],
            "source": ", ".join(source_link(x) for x in rule["sources"]),
        }
        for rule in RULES
    ]


def table_markdown():
    """The README's rules table, rendered from RULES."""

    def cell(text):
        return text.replace("|", "\\|").replace("\n", " ")

    keys = ("id", "when", "seen", "effect", "reason", "source")
    lines = [
        "| id | applies when | required where seen (conditions, sources) | effect | reason | sources |",
        "|---|---|---|---|---|---|",
    ]
    for row in table_rows():
        lines.append("| `%s` | %s | %s | %s | %s | %s |" % tuple(cell(row[key]) for key in keys))
    return "\n".join(lines) + "\n"
