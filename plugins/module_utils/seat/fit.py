"""Does a seat fit its GPUs? Checkpoint bytes against VRAM, per-rank weights, KV headroom.

Pure arithmetic over a normalised recipe (after the rules) and the seat's GPUs. Verdicts give
their reasons in bytes, decimal GB and GiB, since the field reports mix both.

How the estimate is made:
- loaded bytes = checkpoint bytes minus the multi-token-prediction (MTP) block, which engines skip
  at load unless speculation uses it [000];
- per-rank weights = (loaded - replicated) / TP + replicated; expert parallelism equal to TP moves
  whole experts instead of slicing them, which leaves the bytes per rank unchanged. A measured figure
  beats the prediction: when the field saw the seat loaded at the same TP (model.observed), that is
  the weight per rank the fit uses, labelled measured, and the prediction is shown beside it;
- each GPU gives the engine utilisation x its memory: exactly the setting the launch renders
  (--gpu-memory-utilization, --mem-fraction-static; when the recipe leaves it unset the plan renders
  the value the fit assumed, so the engine cannot pick another); weights and the non-weight runtime
  reserve come off it (for SGLang the runtime lives outside the fraction), and what is left holds
  the KV cache;
- the runtime reserve is a property of the engine and model family: a measured record of the seat
  (fit.runtime_reserve_bytes with its source), else what the seat's own measured run leaves for it
  (its engine setting x the GPU, less the weights and the KV cache the field saw allocated), else the
  family's field figure, or a labelled stand-in;
- where the field recorded the KV cache a run of the same shape allocated (same TP, KV type, engine
  memory setting and GPU size), the plan shows that figure, labelled measured, beside its prediction;
- a seat fits only when its KV headroom holds one sequence of the served context: the recipe's
  max_model_len, a context the field gives (fit.context_tokens), or the model's own from its
  config.json; KV bytes per token are declared (fit.kv_bytes_per_token) or computed from the
  config (seat/kv.py). Zero or negative headroom never fits; when the context or the KV size is
  unknown the verdict is 'unknown'.
A CPU seat has no VRAM to fit: its verdict is 'not-applicable' and says so.
"""

import copy
import math

from ansible_collections.seatwright.fleet.plugins.module_utils.node.hardware import MIB
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.engines import (
    ENGINES,
    default_memory_utilization,
    engine,
    memory_fraction_covers,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.kv import engine_context, kv_bytes_per_token

GB = 10**9
GIB = 2**30


def reserve_from_run(setting, card_bytes, weight_bytes, kv_bytes):
    """The one derivation of an engine's non-weight runtime per GPU from a run the field measured.

    What the run's engine setting gave it of the card, less the weights and the KV cache it allocated:
    everything else (activations, CUDA graphs, communication buffers, the CUDA context).
    """
    return int(card_bytes * setting) - weight_bytes - kv_bytes


# The run the GLM-5.3 figure is derived from: [000] section 3, GLM-5.3-Flash FP8 on vLLM at TP4 on the
# fleet's 97,887 MiB cards (seats/glm53-fp8.yml model.observed): 75.74 GB of weights and 902,592 FP8 KV
# tokens per rank at 6,290 B each (half of attempt 5's 12,580 B BF16 figure), at vLLM's default 0.90
# since the run records no setting of its own. It gives 10.21 GiB; [000] section 4 quotes "roughly
# 10.2" of non-weight runtime "measured earlier", which is this figure in GiB (10.96 GB).
GLM53_RUN = {
    "setting": 0.9,
    "card_bytes": 97887 * MIB,
    "weight_bytes": 75740000000,
    "kv_bytes": 902592 * 6290,
}
FIELD_RUNTIME_RESERVE_BYTES = reserve_from_run(**GLM53_RUN)
FIELD_RUNTIME_RESERVE_SOURCE = (
    "derived from the field's GLM-5.3-Flash FP8 run on vLLM ([000] section 3): %.2f (vLLM's default; the run "
    "records none) x %.2f GiB, less %.2f GiB of weights and %.2f GiB of KV cache = %.2f GiB; [000] section 4 "
    "quotes it as roughly 10.2 of non-weight runtime"
    % (
        GLM53_RUN["setting"],
        GLM53_RUN["card_bytes"] / GIB,
        GLM53_RUN["weight_bytes"] / GIB,
        GLM53_RUN["kv_bytes"] / GIB,
        FIELD_RUNTIME_RESERVE_BYTES / GIB,
    )
)
# Non-weight runtime per GPU by engine and model family (matched on model.architecture.family).
RUNTIME_RESERVES = (
    {
        "engine": "vllm",
        "family": "GLM-5.3",
        "bytes": FIELD_RUNTIME_RESERVE_BYTES,
        "source": "GLM-5.3 on vLLM: " + FIELD_RUNTIME_RESERVE_SOURCE,
    },
)


def size_text(count):
    """204500000000 -> '204.5 GB (190.46 GiB)'."""
    return "%.1f GB (%.2f GiB)" % (count / GB, count / GIB)


def _skipped_mtp(settings):
    """Bytes of the MTP block left out at load: all of it unless speculation is MTP."""
    mtp = settings["model"]["checkpoint"]["mtp_bytes"] or 0
    speculation = settings["serving"]["speculation"]
    return 0 if speculation and speculation["method"] == "mtp" else mtp


def weight_estimate(settings):
    """{'loaded_bytes', 'per_rank_bytes', 'basis', 'notes'} for the recipe's TP; bytes None if unknown."""
    checkpoint = settings["model"]["checkpoint"]
    observed = settings["model"]["observed"]
    tp = settings["topology"]["tensor_parallel"]
    notes = []
    total = checkpoint["bytes"]
    if total is None and observed is None:
        return {
            "loaded_bytes": None,
            "per_rank_bytes": None,
            "basis": "unknown",
            "predicted_per_rank_bytes": None,
            "weights_basis": "unknown",
            "weights_source": None,
            "notes": [
                "checkpoint size unknown: declare model.checkpoint.bytes, or gather checkpoint "
                "facts on a node that holds the weights"
            ],
        }
    if total is None:
        loaded = observed["per_rank_weight_bytes"] * observed["tensor_parallel"]
        notes.append(
            "checkpoint size unknown: loaded bytes taken as the field's %s per rank x TP%d "
            "(%s); replicated tensors make this an upper bound"
            % (size_text(observed["per_rank_weight_bytes"]), observed["tensor_parallel"], observed["source"])
        )
        return {
            "loaded_bytes": loaded,
            "per_rank_bytes": -(-loaded // tp),
            "predicted_per_rank_bytes": None,
            "weights_basis": "measured" if observed["tensor_parallel"] == tp else "derived",
            "weights_source": observed["source"],
            "basis": "observed",
            "notes": notes,
        }
    skipped = _skipped_mtp(settings)
    if checkpoint["mtp_bytes"]:
        if skipped:
            notes.append(
                "MTP block of %s is skipped at load because speculation does not use it: "
                "not counted in the weights per rank" % size_text(skipped)
            )
        else:
            notes.append("MTP block of %s is loaded because speculation uses it" % size_text(checkpoint["mtp_bytes"]))
    loaded = total - skipped
    replicated = checkpoint["replicated_bytes"]
    if replicated is None:
        replicated = 0
        if tp > 1:
            notes.append(
                "bytes kept whole on every rank are unknown: all weights are treated as "
                "sharded, so the estimate is low by (TP-1)/TP of whatever is replicated"
            )
    per_rank = -(-(loaded - replicated) // tp) + replicated
    if settings["topology"]["expert_parallel"] > 1:
        notes.append(
            "expert parallel %d: experts go whole to ranks instead of being sliced; the "
            "bytes per rank are the same" % settings["topology"]["expert_parallel"]
        )
    result = {
        "loaded_bytes": loaded,
        "per_rank_bytes": per_rank,
        "predicted_per_rank_bytes": per_rank,
        "weights_basis": "predicted",
        "weights_source": "predicted from the checkpoint bytes (%s)" % checkpoint["bytes_status"],
        "basis": checkpoint["bytes_status"],
        "notes": notes,
    }
    if observed is not None and observed["tensor_parallel"] == tp:
        # A measured figure beats the prediction; the prediction stays beside it.
        seen = observed["per_rank_weight_bytes"]
        notes.append(
            "weights per rank: %.2f GiB measured at TP%d (%s) are used; the checkpoint predicts %.2f GiB (%+.1f%%)"
            % (seen / GIB, tp, observed["source"], per_rank / GIB, 100.0 * (per_rank - seen) / seen)
        )
        result.update(per_rank_bytes=seen, weights_basis="measured", weights_source=observed["source"])
    return result


def measured_run(settings):
    """The field's measured run of this seat (model.observed) when it ran at the recipe's TP, else None."""
    observed = settings["model"]["observed"]
    if observed is None or observed["tensor_parallel"] != settings["topology"]["tensor_parallel"]:
        return None
    return observed


def run_setting(settings, run):
    """(the engine memory setting the measured run used, where that comes from)."""
    if run["memory_utilization"] is not None:
        return run["memory_utilization"], run.get("memory_utilization_source") or run["source"]
    default = default_memory_utilization(settings["engine"]["name"])
    return default["value"], "not recorded for that run, so the engine's default: %s" % default["source"]


def _run_kv(settings, run, config):
    """(KV bytes per rank, KV tokens per rank) the measured run allocated; None where not recorded.

    Only a run with the seat's KV cache type counts; a figure it lacks is filled from the other
    with the seat's KV bytes per token.
    """
    if run is None or run["kv_cache_dtype"] != settings["serving"]["kv_cache_dtype"]:
        return None, None
    size, tokens = run["kv_cache_bytes"], run["kv_tokens"]
    if size and tokens:
        return size, tokens
    if not size and not tokens:
        return None, None
    per_token, _ = kv_per_token(settings, config, use_run=False)
    if not per_token:
        return size, tokens
    return (size, size // per_token) if size else (tokens * per_token, tokens)


def runtime_reserve(settings, gpu_total=None, config=None):
    """{'bytes', 'source', 'kind'}: the recipe's measured figure, the seat's measured run, the family's, or a stand-in.

    `gpu_total` (bytes of the seat's smallest GPU) lets a measured run of the seat give the reserve:
    what its engine setting gave it, less the weights and the KV cache it allocated.
    """
    fit = settings.get("fit", {})
    if fit.get("runtime_reserve_bytes") is not None:
        return {
            "bytes": fit["runtime_reserve_bytes"],
            "kind": "recipe",
            "source": fit.get("reserve_source")
            or "declared in the recipe (fit.runtime_reserve_bytes) without a source",
        }
    name = settings["engine"]["name"]
    run = measured_run(settings)
    size, _ = _run_kv(settings, run, config)
    if run and run["gpu_memory_mib"]:
        gpu_total = run["gpu_memory_mib"] * MIB  # the card the run had, whatever this seat is planned on
    # Only a run that recorded its engine setting gives its own reserve: at an assumed setting the
    # derivation returns whatever the assumption makes it (GLM-5.3 NVFP4 attempt 5 at an assumed 0.90
    # gave 17.17 GiB, against the family's 10.21).
    if gpu_total and size and memory_fraction_covers(name) == "all" and run["memory_utilization"] is not None:
        value, where = run_setting(settings, run)
        left = reserve_from_run(value, gpu_total, run["per_rank_weight_bytes"], size)
        if left > 0:
            return {
                "bytes": left,
                "kind": "measured-run",
                "source": "what the seat's measured run left for everything but weights and KV: %.2f x %.2f GiB "
                "less %.2f GiB of weights and %.2f GiB of KV cache (%s; engine setting %s)"
                % (value, gpu_total / GIB, run["per_rank_weight_bytes"] / GIB, size / GIB, run["source"], where),
            }
    family = settings["model"]["architecture"].get("family") or ""
    for known in RUNTIME_RESERVES:
        if known["engine"] == name and family.startswith(known["family"]):
            return {"bytes": known["bytes"], "kind": "family", "source": known["source"]}
    return {
        "bytes": FIELD_RUNTIME_RESERVE_BYTES,
        "kind": "stand-in",
        "source": "stand-in: %.2f GiB is vLLM's with GLM-5.3-Flash only (%s); untested for %s with %s; give a "
        "measured figure in fit.runtime_reserve_bytes"
        % (FIELD_RUNTIME_RESERVE_BYTES / GIB, FIELD_RUNTIME_RESERVE_SOURCE, name, family or "this model"),
    }


def memory_setting(settings):
    """{'value', 'chosen', 'source'}: the engine memory fraction the seat runs with.

    `chosen` is False when the recipe left it unset; the plan then renders this value itself
    (settings['_memory_default'] records that), so the engine takes exactly what the fit assumed.
    """
    value = settings["serving"]["gpu_memory_utilization"]
    default = settings.get("_memory_default")
    if value is not None and not (default and default["value"] == value):
        return {"value": value, "chosen": True, "source": "serving.gpu_memory_utilization"}
    if default is None:
        default = default_memory_utilization(settings["engine"]["name"])
    return {"value": default["value"], "chosen": False, "source": default["source"]}


def rendered_memory_setting(settings, argv):
    """The engine memory setting an argv renders (--gpu-memory-utilization / --mem-fraction-static), or None."""
    name = settings["engine"]["name"]
    if name not in ENGINES or not argv:
        return None
    flags = [row["flag"] for row in engine(name)["rows"] if row["field"] == "serving.gpu_memory_utilization"]
    found = None
    for position, arg in enumerate(argv):
        text = str(arg)
        for flag in flags:
            if text == flag and position + 1 < len(argv):
                found = argv[position + 1]
            elif text.startswith(flag + "="):
                found = text.split("=", 1)[1]
    try:
        return float(found) if found is not None else None
    except ValueError:
        return None


def _utilization(settings, argv=None):
    """(fraction of each GPU the engine takes, whether the recipe set it, where the number comes from).

    With the rendered argv, the value is the one on the engine's command line.
    """
    setting = memory_setting(settings)
    rendered = rendered_memory_setting(settings, argv)
    if rendered is None or rendered == setting["value"]:
        source = setting["source"]
        if rendered is not None and not setting["chosen"]:
            source += "; rendered on the launch line so the engine takes exactly this"
        return setting["value"], setting["chosen"], source
    return rendered, True, "the engine setting on the rendered launch line"


def served_context(settings, config):
    """(tokens, where from) of one sequence of the served context, or (None, why unknown).

    Unset, the engine serves the longest context it derives from config.json (kv.engine_context).
    """
    if settings["serving"]["max_model_len"]:
        return settings["serving"]["max_model_len"], "serving.max_model_len"
    fit = settings.get("fit", {})
    if fit.get("context_tokens"):
        return fit["context_tokens"], fit.get("context_source") or "fit.context_tokens"
    derived = engine_context(config, settings["engine"]["name"])
    if derived:
        return derived["tokens"], "the model's own context as %s derives it from config.json (%s)" % (
            ENGINE_NAMES[derived["engine"]],
            derived["how"],
        )
    return None, "serving.max_model_len is unset and the model's config.json is not in the checkpoint facts"


# How the plan names an engine in a sentence.
ENGINE_NAMES = {"vllm": "vLLM", "sglang": "SGLang"}


def context_refusal(settings, config):
    """A refusal when serving.max_model_len is above the context the engine derives for the model.

    With config.json in the checkpoint facts, the context is the engine's own derivation
    (kv.engine_context: vLLM 0.33.0's _get_and_verify_max_len, SGLang 0.5.23's get_context_length),
    which applies a rope_scaling factor only where max_position_embeddings does not already count it
    (llama3 and YaRN in vLLM; llama3, or original_max_position_embeddings given, in SGLang). Without it,
    model.architecture.max_position_embeddings from the recipe. serving.rope_scaling_reason names
    scaling the operator vouches for. Returns None when the context is within it or either is unknown.
    """
    wanted = settings["serving"]["max_model_len"]
    derived = engine_context(config, settings["engine"]["name"])
    if derived:
        own = derived["tokens"]
        engine_name = ENGINE_NAMES[derived["engine"]]
        where = "%s derives from config.json in the checkpoint facts: %s (%s)" % (
            engine_name,
            derived["how"],
            derived["source"],
        )
        refuses = (
            "; %s refuses it at start ('User-specified %s (%s) is greater than the derived %s') unless %s is set"
            % (
                engine_name,
                "max_model_len" if derived["engine"] == "vllm" else "context_length",
                wanted,
                "max_model_len" if derived["engine"] == "vllm" else "context_length",
                derived["switch"],
            )
        )
        switch = " and give the engine %s in serving.env" % derived["switch"]
    else:
        own = settings["model"]["architecture"].get("max_position_embeddings")
        where, refuses, switch = "model.architecture.max_position_embeddings", "", ""
    if not wanted or not own or settings["serving"].get("rope_scaling_reason"):
        return None
    if wanted <= own:
        return None
    return {
        "id": "context-within-model",
        "reason": "past the positions a model was trained for, attention degrades without rope scaling, "
        "and engines refuse or silently misbehave; a longer context needs a named reason",
        "detail": "serving.max_model_len {:,} is above the model's own {:,} tokens ({}){}".format(
            wanted, own, where, refuses
        ),
        "remedy": "serve at most {:,} tokens, or name the rope scaling that stretches the context in "
        "serving.rope_scaling_reason{}".format(own, switch),
    }


def kv_per_token(settings, config, use_run=True):
    """(KV bytes per token on each rank, where from) or (None, why unknown).

    A measured run of the seat that recorded both its KV bytes and tokens gives the figure first.
    """
    run = measured_run(settings) if use_run else None
    if (
        run
        and run["kv_cache_bytes"]
        and run["kv_tokens"]
        and run["kv_cache_dtype"] == settings["serving"]["kv_cache_dtype"]
    ):
        return (
            int(round(run["kv_cache_bytes"] / float(run["kv_tokens"]))),
            "measured: %.2f GiB held %s tokens per rank (%s)"
            % (run["kv_cache_bytes"] / GIB, "{:,}".format(run["kv_tokens"]), run["source"]),
        )
    fit = settings.get("fit", {})
    if fit.get("kv_bytes_per_token"):
        return fit["kv_bytes_per_token"], fit.get("kv_source") or "fit.kv_bytes_per_token"
    computed = kv_bytes_per_token(
        config, settings["serving"]["kv_cache_dtype"], settings["topology"]["tensor_parallel"]
    )
    if computed["bytes"]:
        return computed["bytes"], "computed from config.json: " + computed["how"]
    return None, "fit.kv_bytes_per_token is unset and it cannot be computed (%s)" % computed["how"]


def one_node(settings, node):
    """The field's first rule [002]: can the checkpoint live on one node at all?

    Even at 100% memory and no KV cache, each GPU needs its weight share plus the runtime reserve.
    """
    estimate = weight_estimate(settings)
    gpus = node["gpus"]
    raw = sum(gpu["memory_total_mib"] for gpu in gpus) * MIB
    head = "one node (%s, %d GPU%s)" % (node["host"], len(gpus), "" if len(gpus) == 1 else "s")
    if estimate["loaded_bytes"] is None:
        return {
            "host": node["host"],
            "fits": None,
            "raw_vram_bytes": raw,
            "reasons": ["%s: %s raw VRAM; checkpoint size unknown, so no comparison" % (head, size_text(raw))],
        }
    if not gpus:
        return {
            "host": node["host"],
            "fits": False,
            "raw_vram_bytes": 0,
            "reasons": ["%s: no GPUs to hold %s" % (head, size_text(estimate["loaded_bytes"]))],
        }
    loaded = estimate["loaded_bytes"]
    replicated = settings["model"]["checkpoint"]["replicated_bytes"] or 0
    per_gpu = -(-(loaded - replicated) // len(gpus)) + replicated
    smallest = min(gpu["memory_total_mib"] for gpu in gpus) * MIB
    found = runtime_reserve(settings, smallest)
    reserve = found["bytes"]
    left = smallest - per_gpu
    declared = settings["model"]["checkpoint"]["bytes"]
    what = (
        "checkpoint %s" % size_text(loaded)
        if declared in (None, loaded)
        else "checkpoint %s, %s of it loaded" % (size_text(declared), size_text(loaded))
    )
    comparison = "%s: %s against %s raw VRAM" % (head, what, size_text(raw))
    if loaded >= raw:
        return {
            "host": node["host"],
            "fits": False,
            "raw_vram_bytes": raw,
            "reasons": ["%s: larger than the node even at 100%% memory with no KV cache [002]" % comparison],
        }
    if left <= reserve:
        return {
            "host": node["host"],
            "fits": False,
            "raw_vram_bytes": raw,
            "reasons": [
                "%s: even at 100%% memory with no KV cache each GPU would hold %s of weights, leaving %s "
                "of its %.1f GB, below the %s non-weight runtime (%s); it needs more than one node"
                % (comparison, size_text(per_gpu), size_text(left), smallest / GB, size_text(reserve), found["source"])
            ],
        }
    return {
        "host": node["host"],
        "fits": True,
        "raw_vram_bytes": raw,
        "reasons": [
            "%s: at 100%% memory each GPU would hold %s of weights plus the %s runtime reserve (%s), "
            "leaving %s for KV cache"
            % (comparison, size_text(per_gpu), size_text(reserve), found["source"], size_text(left - reserve))
        ],
    }


CPU_FIT = {
    "fits": True,
    "verdict": "not-applicable",
    "per_rank_bytes": None,
    "per_rank": [],
    "estimate_notes": [],
    "loaded_bytes": None,
    "basis": None,
    "needed_utilization": None,
    "inputs": {},
    "reasons": [
        "CPU seat: no GPU memory to fit; the engine holds the weights in host "
        "memory and its KV cache in the space VLLM_CPU_KVCACHE_SPACE gives it"
    ],
}


def fit_seat(settings, seat_nodes, config=None, argv=None):
    """Verdict for the seat on its nodes: {'fits', 'verdict', 'reasons', 'per_rank', ...}.

    `seat_nodes` lists the seat's nodes in rank order, each with exactly the GPUs the seat uses;
    `config` holds the model's config.json values from checkpoint facts, or None; `argv` is the
    rendered launch line of node rank 0, whose engine memory setting the fit then uses.
    verdict: 'fits', 'does-not-fit', 'unknown' (weights, context or KV size unknown) or
    'not-applicable' (CPU).

    The steps: the weights per rank (weight_estimate); no verdict while they or the engine's share
    are unknown; what the memory budget is made of (_memory_inputs); each rank's budget and KV
    headroom (_rank_budgets), the tightest deciding; the budget read out (_budget_reasons); then
    whether the tightest rank's headroom holds one sequence of the served context (_kv_verdict).
    """
    if settings["engine"]["device"] == "cpu":
        return copy.deepcopy(CPU_FIT)
    estimate = weight_estimate(settings)
    base = _fit_base(estimate)
    undecided = _undecided(settings, estimate)
    if undecided:
        return dict(base, fits=False, verdict="unknown", reasons=[undecided])
    memory = _memory_inputs(settings, seat_nodes, config, argv, estimate["per_rank_bytes"])
    base["inputs"] = _inputs_record(memory)
    base["needed_utilization"] = round(memory["inside_bytes"] / float(memory["smallest"]), 4)
    reasons = _weight_reasons(settings, seat_nodes, estimate, memory)
    ranks = _rank_budgets(estimate, memory)
    tightest = min(ranks, key=lambda item: item["kv_headroom_bytes"])
    budget_reasons, reserve_outside = _budget_reasons(memory, ranks, tightest)
    reasons += budget_reasons
    if not reserve_outside:
        return dict(base, fits=False, verdict="does-not-fit", reasons=reasons, per_rank=ranks)
    return _kv_verdict(base, reasons, ranks, tightest, memory)


def _fit_base(estimate):
    """The fit's fields every verdict of a GPU seat carries: the weights and where they come from."""
    return {
        "per_rank_bytes": estimate["per_rank_bytes"],
        "per_rank": [],
        "needed_utilization": None,
        "estimate_notes": estimate["notes"],
        "loaded_bytes": estimate["loaded_bytes"],
        "basis": estimate["basis"],
        "weights": {
            "value": estimate["per_rank_bytes"],
            "basis": estimate["weights_basis"],
            "source": estimate["weights_source"],
            "predicted": estimate["predicted_per_rank_bytes"],
        },
        "inputs": {},
    }


def _undecided(settings, estimate):
    """Why nothing can be fitted yet (the weights or the engine's share unknown), else None."""
    observed = settings["model"]["observed"]
    tp = settings["topology"]["tensor_parallel"]
    if estimate["basis"] == "unknown" or (estimate["basis"] == "observed" and observed["tensor_parallel"] != tp):
        return "checkpoint size unknown: no verdict until model.checkpoint.bytes is declared or gathered"
    if settings.get("_memory_unknown"):
        # A resident seat whose co-tenants' memory is unknown: any fraction is a guess (rule gpu-memory-cotenants).
        return "the engine's share of each GPU is unknown, so nothing is fitted: %s" % settings["_memory_unknown"]
    return None


def _memory_inputs(settings, seat_nodes, config, argv, per_rank):
    """What each GPU's budget is made of: the seat's GPUs, the engine setting, the runtime reserve and
    what the setting covers, the served context, KV bytes per token, and the field's run of this seat."""
    gpus = [(node["host"], gpu) for node in seat_nodes for gpu in node["gpus"]]
    smallest = min(gpu["memory_total_mib"] for _, gpu in gpus) * MIB
    utilization, chosen, utilization_source = _utilization(settings, argv)
    reserve = runtime_reserve(settings, smallest, config)
    covers = memory_fraction_covers(settings["engine"]["name"])
    context, context_source = served_context(settings, config)
    kv_token, kv_source = kv_per_token(settings, config)
    run = measured_run(settings)
    run_kv_bytes, run_kv_tokens = _run_kv(settings, run, config)
    # The field's KV figure is this seat's when the run had its shape: same TP (measured_run), KV type
    # (_run_kv), engine memory setting and GPU size.
    kv_measured = (
        bool(run_kv_bytes)
        and round(run_setting(settings, run)[0], 4) == round(utilization, 4)
        and run["gpu_memory_mib"] in (None, smallest // MIB)
        and len({gpu["memory_total_mib"] for _, gpu in gpus}) == 1
    )
    one_sequence = kv_token * context if kv_token and context else None
    return {
        "gpus": gpus,
        "smallest": smallest,
        "raw": sum(gpu["memory_total_mib"] for _, gpu in gpus) * MIB,
        "per_rank": per_rank,
        "utilization": utilization,
        "chosen": chosen,
        "utilization_source": utilization_source,
        "reserve": reserve,
        "covers": covers,
        "context": context,
        "context_source": context_source,
        "kv_token": kv_token,
        "kv_source": kv_source,
        "run": run,
        "run_kv_bytes": run_kv_bytes,
        "run_kv_tokens": run_kv_tokens,
        "kv_measured": kv_measured,
        "one_sequence": one_sequence,
        # What must fit inside the engine setting's share of the smallest GPU.
        "inside_bytes": per_rank + (reserve["bytes"] if covers == "all" else 0) + (one_sequence or 0),
    }


def _inputs_record(memory):
    """The fit's `inputs`: each figure it used, with its source."""
    reserve = memory["reserve"]
    return {
        "utilization": {"value": memory["utilization"], "source": memory["utilization_source"]},
        "runtime_reserve": {"value": reserve["bytes"], "source": reserve["source"], "kind": reserve["kind"]},
        "memory_fraction_covers": memory["covers"],
        "context_tokens": {"value": memory["context"], "source": memory["context_source"]},
        "kv_bytes_per_token": {
            "value": memory["kv_token"],
            "source": memory["kv_source"],
            "kind": "measured" if memory["kv_source"].startswith("measured:") else "estimate",
        },
    }


def _weight_reasons(settings, seat_nodes, estimate, memory):
    """The first reasons: what the seat loads against its raw VRAM, measured weights, the reserve."""
    reasons = [
        "seat (%s, %d GPUs): loads %s against %s raw VRAM"
        % (
            " + ".join(node["host"] for node in seat_nodes),
            len(memory["gpus"]),
            size_text(estimate["loaded_bytes"]),
            size_text(memory["raw"]),
        )
    ]
    if estimate["weights_basis"] == "measured":
        reasons.append(
            "weights per rank %s: measured, as the field saw them loaded at TP%d (%s)%s"
            % (
                size_text(memory["per_rank"]),
                settings["topology"]["tensor_parallel"],
                settings["model"]["observed"]["source"],
                ""
                if estimate["predicted_per_rank_bytes"] is None
                else "; the checkpoint predicts %s" % size_text(estimate["predicted_per_rank_bytes"]),
            )
        )
    reasons.append(
        "runtime reserve %.2f GB per GPU: %s" % (memory["reserve"]["bytes"] / GB, memory["reserve"]["source"])
    )
    return reasons


def _rank_budgets(estimate, memory):
    """Each rank's budget (the engine setting x its GPU) and the KV headroom left in it: predicted,
    or the field's measured figure where its run had this seat's shape."""
    per_rank, reserve, covers, kv_token = memory["per_rank"], memory["reserve"], memory["covers"], memory["kv_token"]
    ranks = []
    for rank, (host, gpu) in enumerate(memory["gpus"]):
        total = gpu["memory_total_mib"] * MIB
        budget = int(total * memory["utilization"])
        if covers == "all":
            headroom = budget - per_rank - reserve["bytes"]
        else:
            headroom = budget - per_rank
        predicted_tokens = max(headroom, 0) // kv_token if kv_token else None
        entry = {
            "rank": rank,
            "host": host,
            "gpu_index": gpu["index"],
            "total_bytes": total,
            "budget_bytes": budget,
            "weight_bytes": per_rank,
            "weights_basis": estimate["weights_basis"],
            "reserve_bytes": reserve["bytes"],
            "kv_headroom_bytes": headroom,
            "kv_tokens": predicted_tokens,
            "kv_basis": "predicted",
            "kv_source": "the engine setting x the GPU, less weights%s"
            % (" and the runtime reserve" if covers == "all" else ""),
            "kv_predicted_bytes": headroom,
            "kv_predicted_tokens": predicted_tokens,
            "outside_budget_bytes": total - budget,
        }
        if memory["kv_measured"]:
            entry.update(
                kv_headroom_bytes=memory["run_kv_bytes"],
                kv_tokens=memory["run_kv_tokens"],
                kv_basis="measured",
                kv_source="%s, at the same TP, KV type and engine setting" % memory["run"]["source"],
            )
        ranks.append(entry)
    return ranks


def _budget_reasons(memory, ranks, tightest):
    """(reasons, whether the runtime reserve has its room): the measured KV against the prediction,
    and the tightest rank's budget; an engine whose fraction leaves the reserve outside must leave
    it room there on every rank."""
    reasons = []
    reserve_bytes, per_rank = memory["reserve"]["bytes"], memory["per_rank"]
    if memory["kv_measured"]:
        run_kv_bytes, run_kv_tokens = memory["run_kv_bytes"], memory["run_kv_tokens"]
        reasons.append(
            "KV cache per rank: {}{} measured ({}); the fit predicts {} ({:+.1f}%)".format(
                size_text(run_kv_bytes),
                "" if run_kv_tokens is None else " = {:,} tokens".format(run_kv_tokens),
                memory["run"]["source"],
                size_text(tightest["kv_predicted_bytes"]),
                100.0 * (tightest["kv_predicted_bytes"] - run_kv_bytes) / run_kv_bytes,
            )
        )
    utilization = memory["utilization"]
    used = "%.2f%s" % (utilization, "" if memory["chosen"] else " (engine default: %s)" % memory["utilization_source"])
    if round(utilization, 2) != utilization:
        used = "%g%s" % (utilization, used[4:])
    if memory["covers"] == "all":
        reasons.append(
            "per rank: %s of weights + %.1f GB runtime reserve within %s x %.1f GB = %s leaves %s "
            "for the KV cache on the tightest GPU (rank %d, %s)"
            % (
                size_text(per_rank),
                reserve_bytes / GB,
                used,
                tightest["total_bytes"] / GB,
                size_text(tightest["budget_bytes"]),
                size_text(tightest["kv_predicted_bytes"]),
                tightest["rank"],
                tightest["host"],
            )
        )
        return reasons, True
    reasons.append(
        "per rank: %s of weights within the static fraction %s x %.1f GB = %s leaves %s for the "
        "KV pool on the tightest GPU (rank %d, %s); the %.1f GB runtime reserve lives outside "
        "the fraction"
        % (
            size_text(per_rank),
            used,
            tightest["total_bytes"] / GB,
            size_text(tightest["budget_bytes"]),
            size_text(tightest["kv_predicted_bytes"]),
            tightest["rank"],
            tightest["host"],
            reserve_bytes / GB,
        )
    )
    short = [item for item in ranks if item["outside_budget_bytes"] < reserve_bytes]
    if short:
        reasons.append(
            "the %.1f GB runtime reserve does not fit in the %.1f GB outside the static fraction "
            "(rank %d, %s); lower the fraction"
            % (reserve_bytes / GB, short[0]["outside_budget_bytes"] / GB, short[0]["rank"], short[0]["host"])
        )
        return reasons, False
    return reasons, True


def _kv_verdict(base, reasons, ranks, tightest, memory):
    """The verdict on the tightest rank's KV headroom: none, unknown against the served context,
    less than one sequence of it, or a fit."""
    headroom = tightest["kv_headroom_bytes"]
    context, context_source = memory["context"], memory["context_source"]
    kv_token, kv_source = memory["kv_token"], memory["kv_source"]
    if headroom <= 0:
        reasons.append(
            "no KV cache room: zero or negative headroom is not a fit; %s"
            % needed_hint(base["needed_utilization"], memory["chosen"], memory["utilization"])
        )
        return dict(base, fits=False, verdict="does-not-fit", reasons=reasons, per_rank=ranks)
    if context is None or kv_token is None:
        missing = [
            text
            for value, text in (
                (context, "the served context: " + context_source),
                (kv_token, "KV bytes per token: " + kv_source),
            )
            if value is None
        ]
        reasons.append(
            "whether %s of headroom holds one sequence is unknown: %s" % (size_text(headroom), "; ".join(missing))
        )
        return dict(base, fits=False, verdict="unknown", reasons=reasons, per_rank=ranks)
    if headroom < memory["one_sequence"]:
        reasons.append(
            "KV headroom {} holds {:,} tokens per rank, less than one {:,}-token sequence of the served "
            "context ({}; {:,} B per token: {}): not a fit".format(
                size_text(headroom), tightest["kv_tokens"], context, context_source, kv_token, kv_source
            )
        )
        return dict(base, fits=False, verdict="does-not-fit", reasons=reasons, per_rank=ranks)
    reasons.append(
        "KV headroom holds {:,} tokens per rank: {:.1f} sequences of {:,} tokens ({}; {:,} B per token: {})".format(
            tightest["kv_tokens"], tightest["kv_tokens"] / float(context), context, context_source, kv_token, kv_source
        )
    )
    return dict(base, fits=True, verdict="fits", reasons=reasons, per_rank=ranks)


def needed_hint(needed, chosen, utilization=None):
    """Words for the utilisation a seat would need, when a higher one could help.

    The hint names a hundredth above both the need and the setting in effect: the need is rounded to four
    places, and at a setting equal to it the KV cache still has no room (it once said "at least 0.90" of a
    seat that ran at 0.90).
    """
    if needed > 1:
        return "the weights and reserve need %.3f of the smallest GPU: more than the whole GPU" % needed
    least = math.ceil(round(needed * 100, 6)) / 100.0
    if utilization is not None and least <= utilization:
        least = math.floor(round(utilization * 100, 6)) / 100.0 + 0.01
    if least > 1:
        return "the weights and reserve need %.4f of the smallest GPU: no setting leaves room for a KV cache" % needed
    return "it needs at least %.2f of each GPU%s" % (least, "" if chosen else "; set serving.gpu_memory_utilization")
