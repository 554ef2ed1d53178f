"""The plan of one seat: recipe + the hosts' hardware -> rules, fit, and the launch of every rank.

Needs no node: each host's GPUs come from its cached facts (seatwright_gpus) when present, else
from what the inventory declares (GPU profile x count). Hosts are taken in the order given; the
seat uses the first topology.nodes of them and node rank 0 is the first.
"""

import re
import shlex

from ansible_collections.seatwright.fleet.plugins.module_utils.bench.workload import DEFAULT_PROFILE, bench_profile_for
from ansible_collections.seatwright.fleet.plugins.module_utils.defaults import default_origins
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import NcclError, SeatError
from ansible_collections.seatwright.fleet.plugins.module_utils.fabric.crossnode import plan_line, seat_entries
from ansible_collections.seatwright.fleet.plugins.module_utils.fabric.nccl import node_options
from ansible_collections.seatwright.fleet.plugins.module_utils.fabric.transport import (
    DECLARED_VARIABLE,
    REASON_VARIABLE,
    container_rdma,
    required_transport,
    socket_refusal,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.images.facts import kernel_refusal, recipe_with_image
from ansible_collections.seatwright.fleet.plugins.module_utils.node.contract import check_fleet, check_node
from ansible_collections.seatwright.fleet.plugins.module_utils.node.cpu import engine_dtype
from ansible_collections.seatwright.fleet.plugins.module_utils.node.hardware import GPU_PROFILES, MIB, sm_of
from ansible_collections.seatwright.fleet.plugins.module_utils.node.kind import kind_of, multi_node_refusal
from ansible_collections.seatwright.fleet.plugins.module_utils.ranks import runs_engine
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.container import (
    DEFAULT_MODELS_ROOT,
    rank_specs,
    shown_run,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.cotenants import eviction_plan, resident_footprint
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.engines import argv_flags, default_port
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.fit import (
    context_refusal,
    fit_seat,
    memory_setting,
    one_node,
    size_text,
    weight_estimate,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.imageflags import flag_refusals, flags_unchecked
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.launch import render
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.recipe import (
    nesting_problem,
    parser_unknowns,
    validate_recipe,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.rules import RULE_IDS, evaluate
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.running import container_name
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.verdict import bringup_verdict

PLAN_FORMAT = "seatwright-plan/1"
_CC = re.compile(r"^[0-9]{1,2}\.[0-9]{1,2}$")
_HOST = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,252}$")


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _cached_gpus(host, facts):
    """GPUs from a host's cached seatwright_gpus facts, checked so bad caches get a clear message."""
    if not isinstance(facts, list):
        raise SeatError(
            "host %s: cached fact seatwright_gpus is %s, expected a list; re-gather GPU facts "
            "or delete .cache/facts/*%s" % (host, type(facts).__name__, host)
        )
    gpus = []
    for position, gpu in enumerate(facts):
        where = "host %s: cached fact seatwright_gpus[%d]" % (host, position)
        if not isinstance(gpu, dict):
            raise SeatError("%s is %r, expected a mapping of GPU facts; re-gather GPU facts" % (where, gpu))
        checks = (
            ("index", lambda v: _is_int(v) and v >= 0, "a GPU index (0, 1, ...)"),
            ("name", lambda v: isinstance(v, str) and v != "", "the GPU's name"),
            ("compute_capability", lambda v: isinstance(v, str) and _CC.match(v), "a capability like '12.0'"),
            ("memory_total_mib", lambda v: _is_int(v) and v > 0, "total memory in MiB, a whole number"),
        )
        for key, valid, expected in checks:
            if not valid(gpu.get(key)):
                raise SeatError("%s.%s is %r; expected %s; re-gather GPU facts" % (where, key, gpu.get(key), expected))
        gpus.append(
            {
                "index": gpu["index"],
                "name": gpu["name"],
                "compute_capability": gpu["compute_capability"],
                "sm": sm_of(gpu["compute_capability"]),
                "memory_total_mib": gpu["memory_total_mib"],
            }
        )
    indexes = [gpu["index"] for gpu in gpus]
    if len(set(indexes)) != len(indexes):
        raise SeatError(
            "host %s: cached fact seatwright_gpus repeats a GPU index %s; re-gather GPU facts" % (host, indexes)
        )
    return sorted(gpus, key=lambda gpu: gpu["index"])


def _cached_fabric(host, facts):
    """The host's cached seatwright_fabric facts (module fabric_facts), or None when not gathered."""
    if facts in (None, {}):
        return None
    if not isinstance(facts, dict):
        raise SeatError(
            "host %s: cached fact seatwright_fabric is %s, expected a mapping; re-gather fabric "
            "facts or delete .cache/facts/*%s" % (host, type(facts).__name__, host)
        )
    return facts


def _nccl_options(host, candidate):
    """The host's nccl_env_* settings, as the nccl_env role hands them to nccl_env_render."""
    try:
        return node_options(
            candidate.get("nccl_env_ib_dscp"),
            candidate.get("nccl_env_gdr_level"),
            candidate.get("nccl_env_p2p_disable"),
            candidate.get("nccl_env_gid_index"),
            candidate.get("nccl_env_rdma_mitigation"),
            candidate.get("seatwright_fleet_roce_qos"),
        )
    except NcclError as exc:
        raise SeatError("host %s: %s" % (host, exc))


def node_hardware(candidate, position):
    """One host's hardware for planning, from cached facts or the inventory's declaration."""
    if not isinstance(candidate, dict):
        raise SeatError(
            "seat_hosts[%d]: %r is not a host's variables; the plan needs a mapping per host" % (position, candidate)
        )
    host = candidate.get("host")
    if not isinstance(host, str) or not _HOST.match(host):
        raise SeatError("seat_hosts[%d]: host name %r is not a valid inventory host name" % (position, host))
    if candidate.get("in_inventory") is False:
        raise SeatError("host %s is not in the inventory; list hosts of group gpu_nodes in seat_hosts" % host)
    problems = check_node(host, candidate)
    if problems:
        raise SeatError("%s\nfix these in the inventory (host_vars/%s.yml)" % ("\n".join(problems), host))
    profile = GPU_PROFILES[candidate["seatwright_node_gpu_profile"]]
    declared = [
        {
            "index": index,
            "name": profile["name"],
            "compute_capability": profile["compute_capability"],
            "sm": sm_of(profile["compute_capability"]),
            "memory_total_mib": profile["memory_mib"],
        }
        for index in range(candidate["seatwright_node_gpu_count"])
    ]
    facts = candidate.get("seatwright_gpus")
    notes = []
    if facts:
        gpus, source = _cached_gpus(host, facts), "facts"
        if [g["name"] for g in gpus] != [g["name"] for g in declared]:
            notes.append(
                "host %s: cached facts show %d x %s, the inventory declares %d x %s; the facts "
                "are used"
                % (host, len(gpus), ", ".join(sorted({g["name"] for g in gpus})), len(declared), profile["name"])
            )
    else:
        gpus, source = declared, "inventory"
    # Linux or WSL2 (node/kind.py): the node's cached fact, else the inventory's seatwright_node_kind.
    kind, kind_source = kind_of(candidate.get("seatwright_host_kind"), candidate.get("seatwright_node_kind"))
    return {
        "host": host,
        "source": source,
        "kind": kind,
        "kind_source": kind_source,
        "gpus": gpus,
        "notes": notes,
        "checkpoint": candidate.get("seatwright_checkpoint"),
        # The node's processor (node_kind's cached fact): a CPU seat's compute dtype follows it.
        "cpu": candidate.get("seatwright_host_cpu"),
        "fabric_ip": str(candidate["seatwright_node_fabric_ip"]),
        "fabric_iface": candidate["seatwright_node_fabric_iface"],
        # Where the seat's API listens on this node; the fabric address unless the inventory says.
        "serve_address": str(candidate.get("seatwright_node_serve_address") or candidate["seatwright_node_fabric_ip"]),
        "rdma_devices": list(candidate.get("seatwright_node_rdma_devices") or []),
        "fabric": _cached_fabric(host, candidate.get("seatwright_fabric")),
        "nccl_options": _nccl_options(host, candidate),
        "models_root": _models_root(host, candidate),
        "engine_run_args": _engine_run_args(host, candidate),
    }


def _models_root(host, candidate):
    # The inventory's seat_models_root when it sets one, else the seat role's default.
    root = candidate.get("seat_models_root") or DEFAULT_MODELS_ROOT
    if not isinstance(root, str) or not root.startswith("/"):
        raise SeatError("%s: seat_models_root is %r; it must be an absolute path on the node" % (host, root))
    return root


def _engine_run_args(host, candidate):
    args = candidate.get("seat_engine_run_args") or []
    if not isinstance(args, list) or not all(isinstance(arg, (str, int)) for arg in args):
        raise SeatError(
            "%s: seat_engine_run_args is %r; it must be a list of docker run arguments, "
            "e.g. ['--pids-limit', '4096']" % (host, args)
        )
    return [str(arg) for arg in args]


def _placement(settings, candidates):
    """(seat nodes with the GPUs the seat uses, every candidate's hardware, shortfall reasons)."""
    if not isinstance(candidates, list):
        raise SeatError("seat_hosts: expected a list of hosts, found %s" % type(candidates).__name__)
    for position, candidate in enumerate(candidates):
        host = candidate.get("host") if isinstance(candidate, dict) else None
        where = (
            "host %s: its inventory variables (host_vars/%s.yml or a group_vars file of its groups)" % (host, host)
            if isinstance(host, str) and _HOST.match(host)
            else "seat_hosts[%d]" % position
        )
        nesting_problem(candidate, where, "an inventory host's variables are")
    names = [c.get("host") for c in candidates if isinstance(c, dict)]
    repeated = sorted({str(name) for name in names if names.count(name) > 1})
    if repeated:
        raise SeatError("seat_hosts: %s listed more than once; each node can hold one rank" % ", ".join(repeated))
    topo = settings["topology"]
    wanted = candidates[: topo["nodes"]]
    hardware = [node_hardware(candidate, position) for position, candidate in enumerate(wanted)]
    # The same fleet-wide checks as preflight, over every candidate host.
    problems = check_fleet(
        dict((c["host"], c) for c in candidates if isinstance(c, dict) and isinstance(c.get("host"), str))
    )
    if problems:
        raise SeatError("%s\nfix these in the inventory" % "\n".join(problems))
    shortfall = []
    if len(hardware) < topo["nodes"]:
        shortfall.append(
            "the seat needs %d node%s (TP%d = %d x %d GPUs); %d host%s given (%s)"
            % (
                topo["nodes"],
                "" if topo["nodes"] == 1 else "s",
                topo["tensor_parallel"],
                topo["nodes"],
                topo["gpus_per_node"],
                len(hardware),
                "" if len(hardware) == 1 else "s",
                ", ".join(node["host"] for node in hardware) or "none",
            )
        )
    seat_nodes = []
    for node in hardware:
        if len(node["gpus"]) < topo["gpus_per_node"]:
            shortfall.append(
                "host %s has %d GPU%s (%s), the seat needs %d per node"
                % (
                    node["host"],
                    len(node["gpus"]),
                    "" if len(node["gpus"]) == 1 else "s",
                    node["source"],
                    topo["gpus_per_node"],
                )
            )
        seat_nodes.append(dict(node, gpus=node["gpus"][: topo["gpus_per_node"]]))
    return seat_nodes, hardware, shortfall


def _model_config(recipe, hardware):
    """(config.json values from a seat host's checkpoint facts of the pinned revision, or None, a note)."""
    revision = recipe["model"]["revision"]
    for node in hardware:
        facts = node["checkpoint"]
        if revision is None or not isinstance(facts, dict) or facts.get("revision") != revision:
            continue
        config = facts.get("model_config")
        if isinstance(config, dict) and config:
            return config, "model config.json values from the checkpoint facts on %s" % node["host"]
    return None, None


def _with_residents(recipe, seat_nodes, candidates):
    """The seat's GPUs, each with the memory of the co-tenants that stay resident on it (seat/cotenants.py)."""
    declared = {c.get("host"): c.get("seatwright_node_cotenants") for c in candidates if isinstance(c, dict)}
    gpus = []
    for node in seat_nodes:
        for gpu in node["gpus"]:
            resident = resident_footprint(
                node["host"], declared.get(node["host"]), gpu["index"], recipe["topology"]["exclusive"]
            )
            gpus.append(
                dict(
                    gpu,
                    host=node["host"],
                    resident_bytes=resident["bytes"],
                    resident_sources=resident["sources"],
                    resident_unknown=resident["unknown"],
                    resident_entries=resident["entries"],
                    # Unset is not "none runs here": [] says that (cotenants.engine_share).
                    cotenants_declared=declared.get(node["host"]) is not None,
                )
            )
    return gpus


def _gpu_kind_problem(seat_nodes):
    """A refusal when the seat's ranks are not one kind of GPU (compute capability and memory)."""
    kinds = {}
    for node in seat_nodes:
        for gpu in node["gpus"]:
            kinds.setdefault((gpu["compute_capability"], gpu["memory_total_mib"]), []).append(
                "%s gpu %d (%s, capability %s, %d MiB)"
                % (node["host"], gpu["index"], gpu["name"], gpu["compute_capability"], gpu["memory_total_mib"])
            )
    if len(kinds) < 2:
        return None
    groups = ["; ".join(members) for members in kinds.values()]
    return {
        "id": "one-gpu-kind",
        "reason": "a tensor-parallel group runs at the pace and memory of its weakest "
        "rank, and SM12x rules are decided per rank: a seat spans one kind of GPU",
        "detail": "the seat's ranks mix GPU kinds: %s" % " | ".join(groups),
        "remedy": "place the seat on hosts with the same GPU (seat_hosts), or fix the inventory's GPU profile",
    }


def fleet_cost(settings, seat_nodes, candidates, first):
    """What the seat costs the fleet: nodes used, co-tenant services it evicts, one-node comparison."""
    declared = {c.get("host"): c.get("seatwright_node_cotenants") or [] for c in candidates if isinstance(c, dict)}
    evicted, stay = [], []
    for node in seat_nodes:
        # The same decision bring-up acts on (seat/cotenants.py): who shares the seat's GPUs goes.
        decided = eviction_plan(
            node["host"],
            declared.get(node["host"]),
            [gpu["index"] for gpu in node["gpus"]],
            settings["topology"]["exclusive"],
        )
        for key, bucket in (("stop", evicted), ("keep", stay)):
            bucket.extend(
                {
                    "host": node["host"],
                    "name": item["name"],
                    "kind": item["kind"],
                    "gpus": item["gpus"],
                    "reason": item["reason"],
                }
                for item in decided[key]
            )
    exceeds = bool(first and first["fits"] is False and settings["topology"]["nodes"] > 1)
    summary = "uses %d node%s (%s)" % (
        len(seat_nodes),
        "" if len(seat_nodes) == 1 else "s",
        ", ".join(node["host"] for node in seat_nodes),
    )
    if evicted:
        summary += "; evicts %d co-tenant service%s (%s)" % (
            len(evicted),
            "" if len(evicted) == 1 else "s",
            ", ".join("%s on %s" % (e["name"], e["host"]) for e in evicted),
        )
    elif settings["topology"]["exclusive"]:
        summary += "; evicts every other GPU service on them (none declared in seatwright_node_cotenants)"
    if stay:
        summary += "; %d co-tenant service%s stay resident beside it" % (len(stay), "" if len(stay) == 1 else "s")
    if exceeds:
        summary += "; the checkpoint does not fit one node's raw VRAM, so this seat needs more than one node [002]"
    return {
        "nodes": [node["host"] for node in seat_nodes],
        "node_count": len(seat_nodes),
        "exclusive": settings["topology"]["exclusive"],
        "cotenants": {"evicted": evicted, "stay_resident": stay},
        "checkpoint_exceeds_one_node": exceeds,
        "summary": summary,
    }


def provenance(settings, fit):
    """Every number the plan uses that is not a field measurement, with where it comes from."""
    items = []
    inputs = fit.get("inputs") or {}
    for key, label in (
        ("utilization", "memory utilisation"),
        ("runtime_reserve", "runtime reserve per GPU"),
        ("context_tokens", "served context"),
        ("kv_bytes_per_token", "KV bytes per token"),
    ):
        item = inputs.get(key)
        # Measured figures are listed with their source under `measured`, not here.
        if item and item.get("value") is not None and item.get("kind") not in MEASURED_KINDS:
            items.append({"what": label, "value": item["value"], "source": item["source"]})
    qualification = settings["qualification"]
    items.append(
        {
            "what": "start-up timeout (s)",
            "value": qualification["startup_timeout_s"],
            "source": qualification.get("startup_timeout_source") or "the recipe gives no source",
        }
    )
    dtype = settings.get("_dtype_default")
    if dtype:
        items.append({"what": "compute dtype", "value": dtype["value"] or "the engine's", "source": dtype["reason"]})
    if "port" not in settings.get("_declared_serving", ()):
        items.append(
            {
                "what": "port",
                "value": settings["serving"]["port"],
                "source": default_port(settings["engine"]["name"])["source"],
            }
        )
    return items


MEASURED_KINDS = ("measured", "measured-run")


def measured_figures(fit):
    """The field's measurements the fit uses, each with what it is, its value and its source."""
    items = []
    weights = fit.get("weights") or {}
    if weights.get("basis") == "measured":
        items.append(
            {
                "what": "weights per rank",
                "value": weights["value"],
                "predicted": weights.get("predicted"),
                "source": weights["source"],
            }
        )
    inputs = fit.get("inputs") or {}
    for key, label in (("runtime_reserve", "runtime reserve per GPU"), ("kv_bytes_per_token", "KV bytes per token")):
        item = inputs.get(key)
        if item and item.get("kind") in MEASURED_KINDS:
            items.append({"what": label, "value": item["value"], "predicted": None, "source": item["source"]})
    ranks = fit.get("per_rank") or []
    if ranks and ranks[0].get("kv_basis") == "measured":
        tightest = min(ranks, key=lambda item: item["kv_headroom_bytes"])
        for what, key in (("KV cache per rank", "kv_headroom_bytes"), ("KV tokens per rank", "kv_tokens")):
            if tightest[key] is not None:
                items.append(
                    {
                        "what": what,
                        "value": tightest[key],
                        "predicted": tightest[
                            "kv_predicted_bytes" if key == "kv_headroom_bytes" else "kv_predicted_tokens"
                        ],
                        "source": tightest["kv_source"],
                    }
                )
    return items


def _measured_checkpoint(recipe, hardware):
    """The recipe with checkpoint bytes from a seat host's cached checkpoint facts, and a note.

    Only facts for the recipe's pinned revision that judged the checkpoint complete count; the
    tensor bytes of its safetensors headers replace the declared size.
    """
    revision = recipe["model"]["revision"]
    for node in hardware:
        facts = node["checkpoint"]
        if revision is None or not isinstance(facts, dict) or facts.get("revision") != revision:
            continue
        tensors = facts.get("safetensors")
        measured = tensors.get("tensor_bytes") if isinstance(tensors, dict) else None
        if facts.get("complete") is not True or not _is_int(measured) or measured <= 0:
            return (
                recipe,
                "host %s: cached checkpoint facts for revision %s are incomplete; the declared size "
                "is used" % (node["host"], revision[:12]),
            )
        checkpoint = recipe["model"]["checkpoint"]
        declared = checkpoint["bytes"]
        note = "checkpoint bytes measured from the safetensors headers on %s: %s" % (node["host"], size_text(measured))
        if declared is not None:
            note += " (the recipe declares %s)" % size_text(declared)
        updated = dict(
            recipe,
            model=dict(
                recipe["model"],
                checkpoint=dict(
                    checkpoint,
                    bytes=measured,
                    bytes_status="measured",
                    bytes_source="checkpoint facts on %s, revision %s" % (node["host"], revision[:12]),
                ),
            ),
        )
        return updated, note
    return recipe, None


def _image_facts(recipe, candidates, recorded):
    """(facts, note) of the image the recipe builds (engine.image.build): the first host's cache, else the record.

    A node's cache describes the image it holds; the record (images/facts/<build>.json) the image a
    real build of the definition produced, which a fleet that has not built it yet plans against.
    """
    build = recipe["engine"]["image"].get("build")
    for candidate in candidates if build else []:
        images = candidate.get("seatwright_engine_images") if isinstance(candidate, dict) else None
        if isinstance(images, dict) and isinstance(images.get(build), dict):
            return images[build], None
    facts = (recorded or {}).get(build) if build else None
    if not isinstance(facts, dict):
        return None, None
    return facts, (
        "no node caches facts of image %s: planned against those recorded from a real build in %s (%s, %s)"
        % (build, facts.get("recorded_in"), facts.get("reference"), (facts.get("id") or "")[:19])
    )


def _image_checked(image, ranks):
    """The image the plan checked the launch against, with how many launch flags met its --help."""
    if not image:
        return None
    checked = {"reference": image.get("reference"), "id": image.get("id")}
    if image.get("flags"):
        passed = {flag for rank in ranks if runs_engine(rank) for flag in argv_flags(rank.get("argv") or [])}
        checked.update(launch_flags=len(passed), help_flags=len(image["flags"]))
    return checked


def _unknowns(settings, rules, fit):
    model, engine = settings["model"], settings["engine"]
    items = []
    if model["revision_status"] == "unknown":
        items.append("model.revision: not given by the field; pin the full 40-hex commit before bring-up")
    # A revision pinned by content (a checkpoint made or converted locally) needs no repository.
    if model["repo"] is None and model["revision_status"] == "unknown":
        items.append("model.repo: the field does not name the checkpoint's repository")
    if engine["name"] == "unknown":
        items.append("engine.name: the field does not say which engine served it; no launch is rendered")
    if engine["image"]["status"] == "unknown":
        items.append("engine.image: no reference or digest from the field; pin the image before bring-up")
    elif engine["image"]["reference"] is None:
        items.append("engine.image.reference: the repository is not named; the digest alone cannot be pulled")
    if fit["verdict"] == "unknown" and not fit.get("inputs"):
        items.append("model.checkpoint.bytes: unknown; declare it or gather checkpoint facts")
    elif fit["verdict"] == "unknown":
        items.append("fit: %s" % fit["reasons"][-1])
    items.extend(parser_unknowns(settings))
    items.extend(rules["unverified"])
    grouped = {}
    for item in rules["undecided"]:
        grouped.setdefault(item["reason"], []).append(item["id"])
    items.extend(
        "rule%s %s: %s" % ("s" if len(ids) > 1 else "", ", ".join(ids), reason) for reason, ids in grouped.items()
    )
    return items


def make_plan(data, schema, seat, candidates, source, recorded_images=None, served_aliases=()):
    """The plan for `seat` (recipe data as loaded from `source`) on the candidate hosts, in order;
    `served_aliases` are the router alias names it serves ahead of its own (router/adapter.py seat_aliases).

    The steps: the recipe checked; its nodes placed; what is known of its checkpoint, config and
    image gathered; the rules applied (_settings); the refusals of the hardware, the engine's memory
    share and the fabric added; the ranks rendered and fitted with their containers (_fit_and_ranks);
    then the document written (_plan_document) and bring-up's verdict on it.
    """
    recipe = _checked_recipe(data, schema, seat, source)
    gpus_per_node = recipe["topology"]["gpus_per_node"]
    seat_nodes, hardware, shortfall = _placement(recipe, candidates)
    recipe, config, image, gathered_notes = _gathered(recipe, hardware, candidates, recorded_images)
    rules = _settings(data, recipe, seat_nodes, candidates, source, image, served_aliases)
    settings = rules["settings"]
    rules["refusals"] += _hardware_refusals(settings, seat_nodes, image, config)
    _memory_share(settings, rules)
    _cpu_dtype(settings, seat_nodes)
    node_rdma, transport = _transport(settings, seat_nodes, candidates, source, rules)
    fit, ranks = _fit_and_ranks(settings, seat, seat_nodes, config, image, node_rdma, rules, shortfall, source)
    first = one_node(settings, hardware[0]) if hardware and gpus_per_node else None
    plan = _plan_document(
        seat,
        recipe,
        rules,
        fit,
        ranks,
        first,
        seat_nodes,
        hardware,
        candidates,
        image,
        dict(transport, nodes=[dict(r, host=n["host"]) for r, n in zip(node_rdma, seat_nodes)]),
        list(recipe["notes"]) + [note for node in hardware for note in node["notes"]] + gathered_notes,
        shortfall,
        served_aliases,
    )
    # What bring-up decides from this plan, for a real run and --check alike (seat/verdict.py).
    plan["bringup"] = bringup_verdict(plan)
    return plan


def _checked_recipe(data, schema, seat, source):
    """The recipe validated against the schema and the rules' ids, named as the seat asked for."""
    recipe = validate_recipe(data, schema, source, RULE_IDS)
    if recipe["name"] != seat:
        raise SeatError(
            "%s: name is %r but the seat asked for is %r; the name must equal the file name"
            % (source, recipe["name"], seat)
        )
    return recipe


def _gathered(recipe, hardware, candidates, recorded_images):
    """(recipe, config, image facts, notes): the recipe with what the nodes measured of its checkpoint
    and what its image's facts say, the model's config.json, and a note for each of them."""
    recipe, measured_note = _measured_checkpoint(recipe, hardware)
    config, config_note = _model_config(recipe, hardware)
    image, recorded_note = _image_facts(recipe, candidates, recorded_images)
    recipe, image_notes = recipe_with_image(recipe, image)
    notes = [note for note in (measured_note, config_note, recorded_note) if note] + image_notes
    return recipe, config, image, notes


def _settings(data, recipe, seat_nodes, candidates, source, image, served_aliases):
    """The rules applied to the recipe on the seat's GPUs (co-tenants resident included); the settings
    carry, until the plan is written, what rendering needs besides the recipe."""
    rules = evaluate(recipe, _with_residents(recipe, seat_nodes, candidates), source)
    settings = rules["settings"]
    settings["_declared_serving"] = tuple((data.get("serving") or {}).keys())
    # A flag renamed upstream is rendered as the image's --help spells it (seat/engines.py spelled_flag).
    settings["_image_flags"] = tuple((image or {}).get("flags") or ())
    settings["_served_aliases"] = tuple(served_aliases or ())
    return rules


def _hardware_refusals(settings, seat_nodes, image, config):
    """Refusals of the seat's GPUs: mixed kinds, kernels the image lacks, a context the model refuses."""
    gpus = [gpu for node in seat_nodes for gpu in node["gpus"]]
    found = [_gpu_kind_problem(seat_nodes), kernel_refusal(image, gpus), context_refusal(settings, config)]
    return [item for item in found if item]


def _memory_share(settings, rules):
    """The engine's memory setting: unknown beside resident co-tenants of unknown memory (nothing is
    rendered or fitted on), else the engine's default rendered where the recipe sets none."""
    memory = memory_setting(settings)
    share_unknown = [item["detail"] for item in rules["refusals"] if item.get("memory_unknown")]
    if share_unknown and not memory["chosen"]:
        settings["_memory_unknown"] = share_unknown[0]
    elif settings["engine"]["device"] == "cuda" and settings["engine"]["name"] != "unknown" and not memory["chosen"]:
        # The engine takes exactly the memory the fit assumed: the plan renders the default itself.
        settings["serving"]["gpu_memory_utilization"] = memory["value"]
        settings["_memory_default"] = dict(memory)


def _cpu_dtype(settings, seat_nodes):
    """A CPU seat's compute dtype, from its nodes' processors (node/cpu.py), where the recipe sets none."""
    serving = settings["serving"]
    if settings["engine"]["device"] != "cpu" or serving["dtype"] is not None:
        return
    choice = engine_dtype(
        settings["model"]["checkpoint"]["quantization"],
        serving["quantization"],
        [(node["host"], node.get("cpu")) for node in seat_nodes],
    )
    serving["dtype"] = choice["value"]
    settings["_dtype_default"] = choice


def _transport(settings, seat_nodes, candidates, source, rules):
    """(each node's RDMA for its containers, the transport bring-up must read in the logs); a
    multi-node seat left to sockets, or across WSL 2 nodes, is refused."""
    multi_node = settings["topology"]["nodes"] > 1
    node_rdma = [container_rdma(n["host"], n["fabric"], n["rdma_devices"]) for n in seat_nodes] if multi_node else []
    fleet = candidates[0] if candidates else {}
    try:
        transport = required_transport(
            fleet.get(DECLARED_VARIABLE),
            fleet.get(REASON_VARIABLE),
            node_rdma,
            multi_node,
            settings["engine"]["device"],
        )
    except SeatError as exc:
        raise SeatError("%s: %s" % (source, exc))
    if multi_node and socket_refusal(transport):
        rules["refusals"].append(socket_refusal(transport))
    wsl2 = multi_node_refusal(seat_nodes, multi_node)
    if wsl2:
        rules["refusals"].append(wsl2)
    return node_rdma, transport


def _fit_and_ranks(settings, seat, seat_nodes, config, image, node_rdma, rules, shortfall, source):
    """(fit, ranks): a seat short of nodes or GPUs has no ranks and does not fit; else every rank
    rendered, the fit on node rank 0's launch, the image's flag refusals, and each rank's containers."""
    if shortfall:
        estimate = weight_estimate(settings)
        fit = {
            "fits": False,
            "verdict": "does-not-fit",
            "reasons": shortfall,
            "per_rank": [],
            "per_rank_bytes": estimate["per_rank_bytes"],
            "estimate_notes": estimate["notes"],
            "loaded_bytes": estimate["loaded_bytes"],
            "basis": estimate["basis"],
            "inputs": {},
        }
        return fit, []
    ranks = render(settings, seat_nodes, source)
    fit = fit_seat(settings, seat_nodes, config, ranks[0]["argv"] if ranks else None)
    rules["refusals"] += flag_refusals(settings, ranks, image)
    for rank in ranks:
        rank["container"] = container_name(seat, rank["rank"])
        rank["setup_container"] = container_name(seat, rank["rank"], "ray-head") if rank["setup"] else None
    for index, (rank, node) in enumerate(zip(ranks, seat_nodes)):
        ctx = {
            "rdma": node_rdma[index] if node_rdma else None,
            "seat": seat,
            "engine": settings["engine"]["name"],
            "device": settings["engine"]["device"],
            # The built image the plan was checked against when there is one, else the recipe's.
            "image": (image or {}).get("reference") or settings["engine"]["image"]["reference"],
            "image_id": (image or {}).get("id"),
            "served_name": settings["model"]["served_name"],
            "models_root": node["models_root"],
            "run_args": node["engine_run_args"],
        }
        rank["container_spec"], rank["setup_container_spec"] = rank_specs(ctx, rank)
    return fit, ranks


def _verdict_texts(first, fit, rules, shortfall):
    """(reasons, blockers): the one-node check's and the fit's reasons, then each refusal."""
    reasons = list(first["reasons"] if first else []) + list(fit["reasons"])
    blockers = list(fit["reasons"]) if fit["verdict"] == "does-not-fit" else []
    if shortfall and first and first["fits"] is False:
        blockers = list(first["reasons"]) + blockers
    blockers += [
        "refused by rule %s: %s; %s. %s" % (item["id"], item["detail"], item["remedy"], item["reason"])
        for item in rules["refusals"]
    ]
    reasons += [
        "refused by rule %s: %s. %s" % (item["id"], item["detail"], item["reason"]) for item in rules["refusals"]
    ]
    return reasons, blockers


def _host_entry(index, node):
    return {
        "host": node["host"],
        "node_rank": index,
        "source": node["source"],
        "kind": node["kind"],
        "kind_source": node["kind_source"],
        "fabric_ip": node["fabric_ip"],
        "fabric_iface": node["fabric_iface"],
        "nccl_env_source": "facts" if node["fabric"] else "inventory",
        "serve_address": node["serve_address"],
        "gpus": ["%d: %s (%s, %d MiB)" % (g["index"], g["name"], g["sm"], g["memory_total_mib"]) for g in node["gpus"]],
    }


def _plan_document(
    seat,
    recipe,
    rules,
    fit,
    ranks,
    first,
    seat_nodes,
    hardware,
    candidates,
    image,
    transport,
    notes,
    shortfall,
    aliases,
):
    """The plan as written (docs/architecture.md, Plan JSON); the settings' working keys leave here."""
    settings = rules["settings"]
    reasons, blockers = _verdict_texts(first, fit, rules, shortfall)
    unknowns = _unknowns(settings, rules, fit)
    # Without the image's facts its flags are unchecked, so the plan is not ready (seat/imageflags.py).
    unknowns += [item for item in [flags_unchecked(settings, image)] if item]
    cost = fleet_cost(settings, seat_nodes, candidates, first)
    origin = provenance(settings, fit) + default_origins(candidates[: len(seat_nodes)])
    for key in (
        "_declared_serving",
        "_memory_default",
        "_memory_unknown",
        "_dtype_default",
        "_image_flags",
        "_served_aliases",
    ):
        settings.pop(key, None)
    launchable = bool(fit["fits"] and not rules["refusals"] and ranks)
    return {
        "format": PLAN_FORMAT,
        "seat": seat,
        "title": recipe["title"],
        "sources": recipe["sources"],
        "fits": bool(fit["fits"]),
        "verdict": fit["verdict"],
        "launchable": launchable,
        "ready": launchable and not unknowns,
        "reasons": reasons,
        "blockers": blockers,
        "checkpoint_bytes": settings["model"]["checkpoint"]["bytes"],
        "checkpoint_bytes_status": settings["model"]["checkpoint"]["bytes_status"],
        "loaded_bytes": fit.get("loaded_bytes"),
        "node_vram_bytes": {node["host"]: sum(g["memory_total_mib"] for g in node["gpus"]) * MIB for node in hardware},
        "per_rank_weight_bytes": fit["per_rank_bytes"],
        "per_rank": fit["per_rank"],
        "estimate_notes": fit["estimate_notes"],
        "one_node": first,
        "rules": [
            {key: item[key] for key in ("id", "reason", "sources", "seen", "effect", "launch", "details", "overridden")}
            for item in rules["applied"]
        ],
        "refusals": rules["refusals"],
        "undecided": rules["undecided"],
        "unused_overrides": rules["unused_overrides"],
        "warnings": [item["message"] for item in rules["warnings"]],
        "unknowns": unknowns,
        "fleet_cost": cost,
        "provenance": origin,
        "fit_inputs": fit.get("inputs") or {},
        "measured": measured_figures(fit),
        "notes": notes,
        "model": dict(
            {key: settings["model"][key] for key in ("name", "repo", "revision", "revision_status", "served_name")},
            served_aliases=list(aliases or ()),
        ),
        "engine": {
            "name": settings["engine"]["name"],
            "version": settings["engine"]["version"],
            "device": settings["engine"]["device"],
            "image": settings["engine"]["image"],
            # The built image the plan was checked against (its facts): bring-up runs exactly it.
            "image_checked": _image_checked(image, ranks),
        },
        "topology": settings["topology"],
        "serving": settings["serving"],
        "qualification": settings["qualification"],
        # The workload the seat is benchmarked on: its report's, or the lab's where the report recorded none.
        "bench_profile": bench_profile_for(settings["qualification"].get("workload_profile", DEFAULT_PROFILE)),
        "hosts": [_host_entry(index, node) for index, node in enumerate(seat_nodes)],
        # The cached two-node all-reduce of each neighbouring node pair, or unknown with what to run.
        "cross_node_nccl": seat_entries(seat_nodes, candidates, settings["engine"]["device"]),
        # What bring-up must read in the ranks' logs, and the RDMA devices each node's containers get.
        "transport": transport,
        "ranks": ranks,
    }


def _figure(what, value):
    """A measured figure as a person reads it: tokens with separators, bytes as GB and GiB."""
    if "tokens per rank" in what:
        return "{:,} tokens".format(value)
    if "per token" in what:
        return "{:,} B".format(value)
    return size_text(value)


def _command(argv):
    return " ".join(shlex.quote(str(arg)) for arg in argv)


def plan_lines(plan):
    """The plan as lines a person reads: verdict, reasons, rules, unknowns, then each rank's launch."""
    verdict = {
        "fits": "FITS",
        "does-not-fit": "DOES NOT FIT",
        "unknown": "FIT UNKNOWN",
        "not-applicable": "FIT N/A (CPU)",
    }[plan["verdict"]]
    state = (
        "ready to launch"
        if plan["ready"]
        else ("launchable once the unknowns are pinned" if plan["launchable"] else "not launchable")
    )
    model = plan["model"]
    image = plan["engine"]["image"]
    lines = [
        "seat %s: %s" % (plan["seat"], plan["title"]),
        "model: %s, repo %s, revision %s"
        % (
            model["name"],
            model["repo"]
            or {"local": "none (built on the node)", "pinned": "none (pinned by content)"}.get(
                model["revision_status"], "unknown"
            ),
            model["revision"] or model["revision_status"],
        ),
        "engine: %s %s, image %s"
        % (
            plan["engine"]["name"],
            plan["engine"]["version"] or "(version unknown)",
            image["digest"] or image["reference"] or image["status"],
        ),
        "verdict: %s; %s" % (verdict, state),
    ]
    checked = plan["engine"].get("image_checked") or {}
    if "help_flags" in checked:
        refused = [item for item in plan.get("refusals") or [] if item.get("id") == "image-flags"]
        lines.append(
            "image checked: %s (%s), %d flags in its --help; the launch passes %d flags, %s"
            % (
                checked["reference"],
                (checked["id"] or "")[:19],
                checked["help_flags"],
                checked["launch_flags"],
                "%d of them unlisted (refused below)" % len(refused) if refused else "every one listed",
            )
        )
    if plan["checkpoint_bytes"] is not None:
        lines.append("checkpoint: %s, %s" % (size_text(plan["checkpoint_bytes"]), plan["checkpoint_bytes_status"]))
    if plan["per_rank_weight_bytes"] is not None:
        lines.append("weights per rank: %s" % size_text(plan["per_rank_weight_bytes"]))
    lines += ["reason: " + reason for reason in plan["reasons"]]
    lines += ["estimate: " + note for note in plan["estimate_notes"]]
    for item in plan["per_rank"]:
        lines.append(
            "rank %d (%s gpu %d): %s total, %s budget, %s weights, %s reserve, %s KV headroom%s"
            % (
                item["rank"],
                item["host"],
                item["gpu_index"],
                size_text(item["total_bytes"]),
                size_text(item["budget_bytes"]),
                size_text(item["weight_bytes"]),
                size_text(item["reserve_bytes"]),
                size_text(max(item["kv_headroom_bytes"], 0)),
                "" if item["kv_tokens"] is None else " = {:,} tokens".format(item["kv_tokens"]),
            )
        )
    for rule in plan["rules"]:
        lines.append("rule %s: %s" % (rule["id"], "; ".join(rule["details"]) or rule["effect"]))
        lines.append("  why: %s" % rule["reason"])
        lines.append("  required where seen: %s" % rule["seen"])
    lines += ["REFUSED by %s: %s; %s" % (item["id"], item["detail"], item["remedy"]) for item in plan["refusals"]]
    lines += ["warning: " + item for item in plan["warnings"]]
    lines.append("fleet cost: " + plan["fleet_cost"]["summary"])
    lines += [plan_line(entry) for entry in plan.get("cross_node_nccl") or []]
    transport = plan.get("transport") or {}
    if transport.get("required"):
        lines.append(
            "transport required: %s (%s: %s; the nodes promise %s)"
            % (transport["required"], transport["source"], transport["reason"], transport["promised"])
        )
    lines += ["rdma (%s): %s" % (item["source"], item["note"]) for item in transport.get("nodes") or []]
    lines += [
        "not from the field: %s %s (%s)" % (item["what"], item["value"], item["source"]) for item in plan["provenance"]
    ]
    lines += [
        "measured: %s %s (%s)%s"
        % (
            item["what"],
            _figure(item["what"], item["value"]),
            item["source"],
            "" if item["predicted"] is None else "; predicted %s" % _figure(item["what"], item["predicted"]),
        )
        for item in plan["measured"]
    ]
    lines += ["unknown: " + item for item in plan["unknowns"]]
    lines += ["override of %s is not needed by this placement" % rule for rule in plan["unused_overrides"]]
    lines += ["note: " + note for note in plan["notes"]]
    for rank in plan["ranks"]:
        lines.append(
            "launch node rank %d on %s (%s, TP ranks %s, GPUs %s):"
            % (
                rank["rank"],
                rank["host"],
                rank["role"],
                ",".join(str(r) for r in rank["tp_ranks"]) or "-",
                ",".join(str(g) for g in rank["gpus"]) or "none",
            )
        )
        for step in rank["setup"]:
            lines.append("  setup: " + _command(step))
        if rank["wait_for"]:
            lines.append(
                "  wait for Ray nodes alive: %s"
                % ", ".join(
                    "%s at %s with %s"
                    % (
                        item["host"],
                        item["address"],
                        ", ".join("%s %s" % resource for resource in sorted(item["resources"].items())),
                    )
                    for item in rank["wait_for"]["ray_nodes"]
                )
            )
        lines.append("  env: " + " ".join("%s=%s" % (k, shlex.quote(v)) for k, v in sorted(rank["env"].items())))
        lines.append("  run: " + _command(rank["argv"]))
        for spec in (rank.get("setup_container_spec"), rank.get("container_spec")):
            if spec:
                lines.append("  container %s (%s): %s" % (spec["name"], spec["part"], _command(shown_run(spec))))
                lines += ["  api key: " + item["note"] for item in spec["secrets"] if item.get("note")]
    if not plan["ranks"]:
        lines.append(
            "launch: none rendered (%s)"
            % ("engine unknown" if plan["engine"]["name"] == "unknown" else "the seat cannot be placed")
        )
    return lines
