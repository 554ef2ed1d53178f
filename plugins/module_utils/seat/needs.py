"""What a seed seat still needs before bring-up would serve it, each need labelled by who answers it.

Pure: reads a plan (seat/plan.py make_plan's result) and returns data or Markdown; the generator
(tools/render_seats.py) reads the recipes and the inventory and writes docs/seats.md from it.

Every unknown and every refusal of a plan is one of two kinds:

- an operator pin: a fact about the operator's own copy of the seat that only the operator can
  give: the checkpoint's repository and revision (and what staging that checkpoint reads from it:
  its size, its config.json), the image's digest and repository (and the facts read from that
  image), the engine the fleet ran, the fleet's own inventory;
- an engineering gap: a question the project answers from the seeds or the engines' sources: a
  parser, the model's attention kind, an attention backend, a patch, a library version, a recipe
  that does not fit.

A need the classifier does not recognise is an engineering gap: the project must look at it.
"""

import re

OPERATOR_PIN = "operator pin"
ENGINEERING_GAP = "engineering gap"
KINDS = (OPERATOR_PIN, ENGINEERING_GAP)

# A seed seat cites a field report by its three-digit key ([000]); the lab's seats cite only URLs.
_REPORT_KEY = re.compile(r"^[0-9]{3}$")

# The node variables plan.yml hands the seat_plan module besides the contract's and the labelled
# defaults' (playbooks/plan.yml __plan_more, less the cached facts, which a generated page never reads).
PLAN_EXTRAS = (
    "seatwright_node_cotenants",
    "nccl_env_ib_dscp",
    "nccl_env_gdr_level",
    "nccl_env_p2p_disable",
    "nccl_env_gid_index",
    "seat_models_root",
    "seat_engine_run_args",
    "nccl_env_rdma_mitigation",
    "rdma_fabric_nccl_threshold",
)

# Unknown fields only the operator can give, by the plan's leading field name: (subject, why).
_PINS = {
    "model.revision": ("checkpoint revision", "the commit of the operator's checkpoint"),
    "model.repo": ("checkpoint repository", "where the operator's checkpoint comes from"),
    "engine.image": ("image digest", "the image the operator runs"),
    "engine.image.reference": ("image repository", "where the operator's pinned image is pulled from"),
    "engine.name": ("engine", "which engine the operator's fleet served it on"),
    "model.checkpoint.bytes": (
        "checkpoint size",
        "read from the operator's pinned checkpoint once staged (checkpoint facts)",
    ),
    "fit": ("checkpoint config", "read from the operator's pinned checkpoint once staged (checkpoint facts)"),
}
# Recipe fields whose being unknown makes a rule undecided, and are the operator's to give.
_PIN_FIELDS = frozenset(("engine.name", "model.revision", "model.repo", "engine.image"))
# Refusals whose remedy is the operator's inventory, not the project's code or recipes.
INVENTORY_REFUSALS = frozenset(("transport-declared", "one-gpu-kind"))

_LEADING_FIELD = re.compile(r"^([a-z_]+(?:\.[a-z_]+)*): ")
_UNDECIDED = re.compile(r"^rules? ([a-z0-9, -]+): undecided: (.+?) unknown")
_UNVERIFIED_RULE = re.compile(r"\(rule ([a-z0-9-]+)\)$")
_PARSER = re.compile(r"^serving\.(reasoning_parser|tool_call_parser): ")


def is_seed(data):
    """True when a recipe (parsed YAML) cites a field report ([000] .. [004]) among its sources."""
    sources = data.get("sources") if isinstance(data, dict) else None
    return any(isinstance(item, str) and _REPORT_KEY.match(item) for item in sources or ())


def plan_candidate(host, variables, pattern, labelled_pattern, in_inventory=True):
    """One host's mapping as plan.yml builds it from the inventory alone: the contract's variables
    (names matching `pattern`), the labelled defaults' (`labelled_pattern`) and PLAN_EXTRAS."""
    keep = re.compile(pattern)
    labelled = re.compile(labelled_pattern)
    node = {name: value for name, value in variables.items() if keep.match(name) or labelled.match(name)}
    node.update({name: variables.get(name) for name in PLAN_EXTRAS})
    if node["seatwright_node_cotenants"] is None:
        node["seatwright_node_cotenants"] = []
    node.update(host=host, in_inventory=in_inventory)
    return node


def _need(kind, subject, text, why):
    return {"kind": kind, "subject": subject, "text": text, "why": why}


def classify(text, image_local=False):
    """{kind, subject, text, why} for one of a plan's unknowns, as the plan words it.

    `image_local`: the seat's image is one the project builds (engine.image.status local), so
    reading its facts is the project's work (make images), not the operator's.
    """
    if text.startswith("image flags not checked:"):
        if image_local:
            return _need(ENGINEERING_GAP, "image facts", text, "the project builds this image: record its facts")
        return _need(OPERATOR_PIN, "image facts", text, "read from the image the operator pins, where it is pulled")
    parser = _PARSER.match(text)
    if parser:
        subject = parser.group(1).replace("_", " ").replace("tool call", "tool-call")
        return _need(ENGINEERING_GAP, subject, text, "the project reads the engine's parser registry for the family")
    undecided = _UNDECIDED.match(text)
    if undecided:
        fields = {field.strip() for field in undecided.group(2).split(" and ")}
        rules = ", ".join(rule.strip() for rule in undecided.group(1).split(","))
        if fields <= _PIN_FIELDS:
            return _need(
                OPERATOR_PIN, "rule %s" % rules, text, "decided once %s is pinned" % " and ".join(sorted(fields))
            )
        return _need(
            ENGINEERING_GAP, "rule %s" % rules, text, "decided once %s is declared" % " and ".join(sorted(fields))
        )
    unverified = _UNVERIFIED_RULE.search(text)
    if unverified:
        return _need(
            ENGINEERING_GAP, "rule %s" % unverified.group(1), text, "a backend, patch or version the image must carry"
        )
    field = _LEADING_FIELD.match(text)
    if field and field.group(1) in _PINS:
        subject, why = _PINS[field.group(1)]
        return _need(OPERATOR_PIN, subject, text, why)
    return _need(ENGINEERING_GAP, "unclassified", text, "not a need the classifier knows: the project must look")


def classify_refusal(refusal):
    """{kind, subject, text, why} for one of a plan's refusals (a dict with id, detail, remedy)."""
    rule = refusal.get("id") or "unnamed"
    text = "%s; %s" % (refusal.get("detail") or "", refusal.get("remedy") or "")
    if rule in INVENTORY_REFUSALS:
        return _need(OPERATOR_PIN, "refused by %s" % rule, text, "the operator's inventory answers it")
    return _need(ENGINEERING_GAP, "refused by %s" % rule, text, "the project's recipe, image or rules must answer it")


def failed_plan(seat, data, message):
    """What stands for a plan when the planner stops on the recipe (a SeatError's message); a rule's
    conflict keeps what was seen and what to do, and points at the rules table for the rule's reason."""
    seen, cut, _reason = message.partition(" Rule reason: ")
    error = "%s (the rule's reason: docs/rules.md)" % seen if cut else message
    return {"seat": seat, "title": data.get("title"), "sources": data.get("sources") or [], "error": error}


def seat_needs(plan):
    """Every need of a plan, classified: the fit's shortfall, each refusal, then each unknown. A plan
    that stopped on its recipe (failed_plan) needs that recipe mended: the project's to answer."""
    if plan.get("error"):
        return [_need(ENGINEERING_GAP, "plan stops", plan["error"], "the recipe conflicts with a rule or the schema")]
    image_local = ((plan.get("engine") or {}).get("image") or {}).get("status") == "local"
    needs = []
    if plan.get("verdict") == "does-not-fit":
        shortfall = [line for line in plan.get("blockers") or [] if not line.startswith("refused by rule ")]
        needs.append(
            _need(ENGINEERING_GAP, "fit", "; ".join(shortfall), "the recipe's shape does not fit the fleet's GPUs")
        )
    needs += [classify_refusal(item) for item in plan.get("refusals") or []]
    needs += [classify(item, image_local) for item in plan.get("unknowns") or []]
    return needs


def _cell(text):
    return " ".join(str(text).split()).replace("|", "\\|")


# The fit's verdict (seat/fit.py) as the page words it.
_FIT_WORDS = {
    "fits": "fits",
    "does-not-fit": "does not fit",
    "unknown": "fit unknown",
    "not-applicable": "fit not applicable (no GPU)",
}


def _verdict_line(plan):
    if plan.get("error"):
        return "no plan (the planner stops on the recipe); bring-up would refuse it"
    bringup = plan.get("bringup") or {}
    fit = _FIT_WORDS.get(plan.get("verdict"), "fit %s" % plan.get("verdict"))
    state = "launchable" if plan.get("launchable") else "not launchable"
    return "%s, %s; bring-up %s" % (fit, state, "would serve" if bringup.get("serve") else "would refuse it")


def _counts(needs):
    return {kind: sum(1 for need in needs if need["kind"] == kind) for kind in KINDS}


def seats_markdown(planned, inventory, generator):
    """docs/seats.md: `planned` is [(seat name, recipe source, plan)], sorted by the caller."""
    lines = [
        "# What each seed seat still needs",
        "",
        "<!-- Generated by %s from seats/*.yml and %s; do not edit. make docs rewrites it and" % (generator, inventory),
        "     make lint fails while it is stale. -->",
        "",
        "Every seat whose recipe cites a field report, planned on `%s` with the hardware its inventory" % inventory,
        "declares (no cached facts) and the image facts recorded in `images/facts/`, as `playbooks/plan.yml`",
        "plans it. Each unknown or refusal of the plan is labelled:",
        "",
        "- **%s**: only the operator can give it: the checkpoint's repository and revision (and what" % OPERATOR_PIN,
        "  staging that checkpoint reads: its size and config), the image's digest and repository (and the",
        "  facts read from that image), the engine the fleet ran, the fleet's inventory;",
        "- **%s**: the project answers it from the seeds or the engines' sources: a parser, the" % ENGINEERING_GAP,
        "  model's attention kind, an attention backend, a patch, a library version, a shape that does not fit.",
        "",
        "The labels come from `plugins/module_utils/seat/needs.py`; the words after them are the plan's own.",
        "",
        "| Seat | Sources | Verdict | Operator pins | Engineering gaps |",
        "|---|---|---|---|---|",
    ]
    for name, _source, plan in planned:
        counts = _counts(seat_needs(plan))
        lines.append(
            "| [%s](#%s) | %s | %s | %d | %d |"
            % (
                name,
                name,
                _cell(", ".join(plan.get("sources") or [])),
                _cell(_verdict_line(plan)),
                counts[OPERATOR_PIN],
                counts[ENGINEERING_GAP],
            )
        )
    for name, source, plan in planned:
        needs = seat_needs(plan)
        hosts = ", ".join(host["host"] for host in plan.get("hosts") or [])
        where = "Planned on %s." % hosts if hosts else "No host was placed."
        lines += [
            "",
            "## %s" % name,
            "",
            "%s (`%s`; sources %s). %s" % (plan.get("title"), source, ", ".join(plan.get("sources") or []), where),
            "",
            "Verdict: **%s**." % _verdict_line(plan),
            "",
        ]
        if not needs:
            lines.append("Nothing is unknown and nothing refuses it.")
            continue
        lines += ["| Kind | Need | Why this kind | What the plan says |", "|---|---|---|---|"]
        for kind in KINDS:
            lines += [
                "| %s | %s | %s | %s |" % (kind, _cell(need["subject"]), _cell(need["why"]), _cell(need["text"]))
                for need in needs
                if need["kind"] == kind
            ]
    return "\n".join(lines) + "\n"
