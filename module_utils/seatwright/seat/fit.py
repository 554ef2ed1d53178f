"""Does a seat fit its GPUs? Checkpoint bytes against VRAM, per-rank weights, KV headroom.

Pure arithmetic over a normalised recipe (after the rules) and the seat's GPUs. Verdicts give
their reasons in bytes, decimal GB and GiB, since the field reports mix both.

How the estimate is made:
- loaded bytes = checkpoint bytes minus the multi-token-prediction (MTP) block, which engines skip
  at load unless speculation uses it [000];
- per-rank weights = (loaded - replicated) / TP + replicated; expert parallelism equal to TP moves
  whole experts instead of slicing them, which leaves the bytes per rank unchanged;
- each GPU gives the engine utilisation x its memory; weights and a non-weight runtime reserve
  (10.2 GB per card measured in the field [000]) come off it, and what is left holds the KV cache.
A CPU seat has no VRAM to fit: its verdict is 'not-applicable' and says so.
"""
import math

from ansible.module_utils.seatwright.node.hardware import MIB
from ansible.module_utils.seatwright.seat.engines import default_memory_utilization

GB = 10 ** 9
GIB = 2 ** 30
FIELD_RUNTIME_RESERVE_BYTES = 10200000000


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
        return {"loaded_bytes": None, "per_rank_bytes": None, "basis": "unknown",
                "notes": ["checkpoint size unknown: declare model.checkpoint.bytes, or gather checkpoint "
                          "facts on a node that holds the weights"]}
    if total is None:
        loaded = observed["per_rank_weight_bytes"] * observed["tensor_parallel"]
        notes.append("checkpoint size unknown: loaded bytes taken as the field's %s per rank x TP%d "
                     "(%s); replicated tensors make this an upper bound"
                     % (size_text(observed["per_rank_weight_bytes"]), observed["tensor_parallel"],
                        observed["source"]))
        return {"loaded_bytes": loaded, "per_rank_bytes": -(-loaded // tp), "basis": "observed",
                "notes": notes}
    skipped = _skipped_mtp(settings)
    if checkpoint["mtp_bytes"]:
        if skipped:
            notes.append("MTP block of %s is skipped at load because speculation does not use it: "
                         "not counted in the weights per rank" % size_text(skipped))
        else:
            notes.append("MTP block of %s is loaded because speculation uses it"
                         % size_text(checkpoint["mtp_bytes"]))
    loaded = total - skipped
    replicated = checkpoint["replicated_bytes"]
    if replicated is None:
        replicated = 0
        if tp > 1:
            notes.append("bytes kept whole on every rank are unknown: all weights are treated as "
                         "sharded, so the estimate is low by (TP-1)/TP of whatever is replicated")
    per_rank = -(-(loaded - replicated) // tp) + replicated
    if settings["topology"]["expert_parallel"] > 1:
        notes.append("expert parallel %d: experts go whole to ranks instead of being sliced; the "
                     "bytes per rank are the same" % settings["topology"]["expert_parallel"])
    if observed is not None and observed["tensor_parallel"] == tp:
        seen = observed["per_rank_weight_bytes"]
        notes.append("estimate %.2f GiB per rank against %.2f GiB seen loaded at TP%d (%s): %+.1f%%"
                     % (per_rank / GIB, seen / GIB, tp, observed["source"], 100.0 * (per_rank - seen) / seen))
    return {"loaded_bytes": loaded, "per_rank_bytes": per_rank, "basis": checkpoint["bytes_status"],
            "notes": notes}


def _reserve(settings):
    reserve = settings.get("fit", {}).get("runtime_reserve_bytes")
    return FIELD_RUNTIME_RESERVE_BYTES if reserve is None else reserve


def _utilization(settings):
    """(fraction of each GPU the engine takes, whether the recipe set it)."""
    value = settings["serving"]["gpu_memory_utilization"]
    if value is not None:
        return value, True
    return default_memory_utilization(settings["engine"]["name"])["value"], False


def one_node(settings, node):
    """The field's first rule [002]: can the checkpoint live on one node at all?

    Even at 100% memory and no KV cache, each GPU needs its weight share plus the runtime reserve.
    """
    estimate = weight_estimate(settings)
    gpus = node["gpus"]
    raw = sum(gpu["memory_total_mib"] for gpu in gpus) * MIB
    head = "one node (%s, %d GPU%s)" % (node["host"], len(gpus), "" if len(gpus) == 1 else "s")
    if estimate["loaded_bytes"] is None:
        return {"host": node["host"], "fits": None, "raw_vram_bytes": raw,
                "reasons": ["%s: %s raw VRAM; checkpoint size unknown, so no comparison" % (head, size_text(raw))]}
    if not gpus:
        return {"host": node["host"], "fits": False, "raw_vram_bytes": 0,
                "reasons": ["%s: no GPUs to hold %s" % (head, size_text(estimate["loaded_bytes"]))]}
    loaded = estimate["loaded_bytes"]
    replicated = settings["model"]["checkpoint"]["replicated_bytes"] or 0
    per_gpu = -(-(loaded - replicated) // len(gpus)) + replicated
    smallest = min(gpu["memory_total_mib"] for gpu in gpus) * MIB
    reserve = _reserve(settings)
    left = smallest - per_gpu
    declared = settings["model"]["checkpoint"]["bytes"]
    what = ("checkpoint %s" % size_text(loaded) if declared in (None, loaded) else
            "checkpoint %s, %s of it loaded" % (size_text(declared), size_text(loaded)))
    comparison = "%s: %s against %s raw VRAM" % (head, what, size_text(raw))
    if loaded >= raw:
        return {"host": node["host"], "fits": False, "raw_vram_bytes": raw,
                "reasons": ["%s: larger than the node even at 100%% memory with no KV cache [002]"
                            % comparison]}
    if left <= reserve:
        return {"host": node["host"], "fits": False, "raw_vram_bytes": raw, "reasons": [
            "%s: even at 100%% memory with no KV cache each GPU would hold %s of weights, leaving %.2f GB "
            "of its %.1f GB, below the %.1f GB non-weight runtime [000][002]; it needs more than one node"
            % (comparison, size_text(per_gpu), left / GB, smallest / GB, reserve / GB)]}
    return {"host": node["host"], "fits": True, "raw_vram_bytes": raw, "reasons": [
        "%s: at 100%% memory each GPU would hold %s of weights plus the %.1f GB runtime reserve, "
        "leaving %s for KV cache" % (comparison, size_text(per_gpu), reserve / GB,
                                      size_text(left - reserve))]}


def fit_seat(settings, seat_nodes):
    """Verdict for the seat on its nodes: {'fits', 'verdict', 'reasons', 'per_rank', ...}.

    `seat_nodes` lists the seat's nodes in rank order, each with exactly the GPUs the seat uses.
    verdict: 'fits', 'does-not-fit', 'unknown' (checkpoint size unknown) or 'not-applicable' (CPU).
    """
    if settings["engine"]["device"] == "cpu":
        return {"fits": True, "verdict": "not-applicable", "per_rank_bytes": None, "per_rank": [],
                "estimate_notes": [], "loaded_bytes": None, "basis": None, "needed_utilization": None,
                "reasons": ["CPU seat: no GPU memory to fit; the engine holds the weights in host memory "
                            "and its KV cache in the space VLLM_CPU_KVCACHE_SPACE gives it"]}
    estimate = weight_estimate(settings)
    base = {"per_rank_bytes": estimate["per_rank_bytes"], "per_rank": [], "needed_utilization": None,
            "estimate_notes": estimate["notes"], "loaded_bytes": estimate["loaded_bytes"],
            "basis": estimate["basis"]}
    if estimate["basis"] in ("unknown", "observed"):
        return dict(base, fits=False, verdict="unknown", reasons=[
            "checkpoint size unknown: no verdict until model.checkpoint.bytes is declared or gathered"])

    per_rank = estimate["per_rank_bytes"]
    utilization, chosen = _utilization(settings)
    reserve = _reserve(settings)
    kv_per_token = settings.get("fit", {}).get("kv_bytes_per_token")
    context = settings["serving"]["max_model_len"]
    gpus = [(node["host"], gpu) for node in seat_nodes for gpu in node["gpus"]]
    raw = sum(gpu["memory_total_mib"] for _, gpu in gpus) * MIB
    smallest = min(gpu["memory_total_mib"] for _, gpu in gpus) * MIB
    one_context = kv_per_token * context if kv_per_token and context else 0
    needed = (per_rank + reserve + one_context) / smallest
    reasons = ["seat (%s, %d GPUs): loads %s against %s raw VRAM" % (
        " + ".join(node["host"] for node in seat_nodes), len(gpus), size_text(estimate["loaded_bytes"]),
        size_text(raw))]
    base["needed_utilization"] = round(needed, 4)
    least = math.ceil(needed * 100) / 100.0
    need_text = ("weights %s + %.1f GB runtime reserve%s need %.3f of the smallest GPU (%.1f GB)" % (
        size_text(per_rank), reserve / GB,
        " + one %d-token context of KV" % context if one_context else "", needed, smallest / GB))
    if needed > 1:
        reasons.append("per rank: %s: more than the whole GPU" % need_text)
        return dict(base, fits=False, verdict="does-not-fit", reasons=reasons)
    if needed > utilization:
        reasons.append("per rank: %s, above %s %.2f; %s" % (
            need_text, "serving.gpu_memory_utilization" if chosen else "the engine's default utilisation",
            utilization, "raise it" if chosen else "set serving.gpu_memory_utilization to at least %.2f"
            % least))
        return dict(base, fits=False, verdict="does-not-fit", reasons=reasons)

    ranks = []
    for rank, (host, gpu) in enumerate(gpus):
        total = gpu["memory_total_mib"] * MIB
        budget = int(total * utilization)
        headroom = budget - per_rank - reserve
        ranks.append({
            "rank": rank, "host": host, "gpu_index": gpu["index"], "total_bytes": total,
            "budget_bytes": budget, "weight_bytes": per_rank, "reserve_bytes": reserve,
            "kv_headroom_bytes": headroom, "kv_tokens": headroom // kv_per_token if kv_per_token else None,
        })
    tightest = min(ranks, key=lambda item: item["kv_headroom_bytes"])
    reasons.append("per rank: %s of weights + %.1f GB runtime reserve within %.2f%s x %.1f GB = %s leaves %s "
                   "for the KV cache on the tightest GPU (rank %d, %s)" % (
                       size_text(per_rank), reserve / GB, utilization, "" if chosen else " (engine default)",
                       tightest["total_bytes"] / GB, size_text(tightest["budget_bytes"]),
                       size_text(tightest["kv_headroom_bytes"]), tightest["rank"], tightest["host"]))
    if kv_per_token is None:
        reasons.append("KV bytes per token unknown (fit.kv_bytes_per_token), so the headroom is not counted "
                       "in tokens")
    elif context is None:
        reasons.append("KV headroom holds {:,} tokens per rank; the served context is the model's own, so it "
                       "is not checked".format(tightest["kv_tokens"]))
    else:
        reasons.append("KV headroom holds {:,} tokens per rank: {:.1f} full {:,}-token contexts".format(
            tightest["kv_tokens"], tightest["kv_tokens"] / float(context), context))
    return dict(base, fits=True, verdict="fits", reasons=reasons, per_rank=ranks)
