"""Seat recipes: parse, validate against schemas/seat.schema.json, normalise.

The schema is passed in by the caller (the module reads it from schemas/), so the JSON file stays
the single source of truth. Every problem becomes a SeatError whose message names the recipe, the
field path, the value, what is expected and what to do.
"""

import copy
import difflib
import math

import yaml
from ansible_collections.seatwright.fleet.plugins.module_utils.bench.workload import (
    DEFAULT_PROFILE,
    PROFILES,
    profile_problem,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import DuplicateKeyError, SeatError
from ansible_collections.seatwright.fleet.plugins.module_utils.jsondoc import MAX_NESTING, path_text, too_deep
from ansible_collections.seatwright.fleet.plugins.module_utils.qualify.settings import DEFAULTS as QUALIFY_DEFAULTS
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.engines import default_port
from ansible_collections.seatwright.fleet.plugins.module_utils.sizes import parse_size
from ansible_collections.seatwright.fleet.plugins.module_utils.strict_yaml import strict_load

try:
    from jsonschema import Draft202012Validator, validators

    # JSON Schema counts 2.0 as an integer; an engine flag would then read "2.0", so only int passes.
    _TYPES = Draft202012Validator.TYPE_CHECKER.redefine(
        "integer", lambda checker, value: isinstance(value, int) and not isinstance(value, bool)
    )
    _Validator = validators.extend(Draft202012Validator, type_checker=_TYPES)
    HAS_JSONSCHEMA = True
except ImportError:
    _Validator = None
    HAS_JSONSCHEMA = False


# Fields holding sizes: written as '204.5 GB' in recipes, integers of bytes after normalising.
SIZE_FIELDS = (
    ("model", "checkpoint", "bytes"),
    ("model", "checkpoint", "mtp_bytes"),
    ("model", "checkpoint", "replicated_bytes"),
    ("model", "observed", "per_rank_weight_bytes"),
    ("model", "observed", "kv_cache_bytes"),
    ("fit", "runtime_reserve_bytes"),
)
_MAX_ERRORS = 12
# The gates that send tools to the engine; the quality protocol's tools category does too.
TOOL_GATES = ("tool-calls", "streaming-tool-calls", "tool-result-continuation")
PARSERS = ("reasoning_parser", "tool_call_parser")
_WHAT = {"reasoning_parser": "the reasoning inside the answer", "tool_call_parser": "tool calls"}


def field_path(parts):
    """('serving', 'extra_args', 2) -> 'serving.extra_args[2]'."""
    text = ""
    for part in parts:
        if isinstance(part, int) and not isinstance(part, bool):
            text += "[%d]" % part
        else:
            text += ("." if text else "") + str(part)
    return text or "(the recipe itself)"


def _shown(value, limit=80):
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def recipe_from_text(text, source):
    """The data of a recipe file's text; YAML errors, a key given twice among them, become a SeatError with the line."""
    try:
        data = strict_load(text)
    except RecursionError:
        # PyYAML composes nested nodes recursively: thousands of levels exhaust the stack.
        raise SeatError(
            "%s: nested too deeply to read (more levels than Python can follow; a recipe is at most a "
            "few levels deep); look for runaway [ or { in the file" % source
        )
    except DuplicateKeyError as exc:
        raise SeatError(
            "%s: key %r is given twice in one mapping (lines %d and %d); YAML would keep only the last and "
            "drop the other without a word: keep one" % (source, exc.key, exc.first_line, exc.line)
        )
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = " at line %d, column %d" % (mark.line + 1, mark.column + 1) if mark else ""
        problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
        raise SeatError("%s: not valid YAML%s: %s; fix the file's syntax" % (source, where, problem))
    if data is None:
        raise SeatError("%s: the file is empty; a recipe is a YAML mapping (see schemas/seat.schema.json)" % source)
    nesting_problem(data, source)
    return data


def nesting_problem(data, source, what="a recipe is"):
    """SeatError naming `source` when `data` nests deeper than any real recipe or inventory does."""
    path = too_deep(data)
    if path is not None:
        shown = path_text(path[:4]) + ("..." if len(path) > 4 else "")
        raise SeatError(
            "%s: nested more than %d levels deep (under %s); %s only a few levels deep, so look for "
            "runaway nesting in the file" % (source, MAX_NESTING, shown or "the top level", what)
        )


def _subschema(schema, parts):
    """The schema node that describes the field at `parts`, following $ref and oneOf, or None."""
    node = schema
    for part in parts:
        node = _resolve(schema, node)
        if node is None:
            return None
        if isinstance(part, int) and not isinstance(part, bool) and "items" in node:
            node = node["items"]
        elif part in node.get("properties", {}):
            node = node["properties"][part]
        elif isinstance(node.get("additionalProperties"), dict):
            node = node["additionalProperties"]
        else:
            return None
    return _resolve(schema, node)


def _resolve(schema, node):
    while isinstance(node, dict) and "$ref" in node:
        target = schema
        for key in node["$ref"].lstrip("#/").split("/"):
            target = target.get(key, {})
        merged = dict(target)
        merged.update({k: v for k, v in node.items() if k != "$ref"})
        node = merged
    if isinstance(node, dict) and "properties" not in node and "oneOf" in node:
        for option in node["oneOf"]:
            option = _resolve(schema, option)
            if isinstance(option, dict) and "properties" in option:
                return dict(option, description=node.get("description", option.get("description")))
    return node


def _expected(schema, parts):
    node = _subschema(schema, parts)
    if isinstance(node, dict) and node.get("description"):
        return node["description"]
    return "see schemas/seat.schema.json"


def _describe(error, schema):
    """One line for one jsonschema error: path, value, what is expected."""
    parts = list(error.absolute_path)
    if error.validator in ("oneOf", "anyOf") and error.context:
        deepest = max(len(list(inner.absolute_path)) for inner in error.context)
        if deepest > len(parts):
            lines = []
            for inner in error.context:
                if len(list(inner.absolute_path)) == deepest:
                    lines.extend(_describe(inner, schema))
            return lines
    if error.validator == "required":
        missing = [
            name for name in error.validator_value if isinstance(error.instance, dict) and name not in error.instance
        ]
        lines = []
        for name in missing:
            lines.append("%s: missing; expected %s" % (field_path(parts + [name]), _expected(schema, parts + [name])))
        return lines
    if error.validator == "additionalProperties" and isinstance(error.instance, dict):
        known = list((_subschema(schema, parts) or {}).get("properties", {}))
        lines = []
        for key in error.instance:
            if key in known:
                continue
            hint = difflib.get_close_matches(str(key), known, n=1)
            suggestion = " (did you mean %s?)" % hint[0] if hint else ""
            lines.append(
                "%s: unknown field%s; allowed here: %s"
                % (field_path(parts + [key]), suggestion, ", ".join(known) or "none")
            )
        return lines
    if "propertyNames" in error.schema_path:
        return [
            "%s: key %s is not allowed; expected %s"
            % (field_path(parts), _shown(error.instance), _expected(schema, parts))
        ]
    return ["%s: %s is not valid; expected %s" % (field_path(parts), _shown(error.instance), _expected(schema, parts))]


def _schema_problems(data, schema):
    validator = _Validator(schema)
    lines = []
    for error in sorted(validator.iter_errors(data), key=lambda e: [str(p) for p in e.absolute_path]):
        for line in _describe(error, schema):
            if line not in lines:
                lines.append(line)
    return lines


def _get(data, parts, default=None):
    node = data
    for part in parts:
        if not isinstance(node, dict) or part not in node:
            return default
        node = node[part]
    return node


def parser_needs(recipe):
    """{parser field: why the qualification needs it, or None} for serving.reasoning_parser and tool_call_parser.

    Tools are asked for by a tool gate or by the quality protocol's tools category (on unless
    qualification.quality.categories leaves it out); reasoning by qualification.reasoning or a
    reasoning variant other than none. Without the parser the engine returns tool calls and
    reasoning as plain text, and those gates fail for the launch, not the model.
    """
    qualification = recipe.get("qualification") or {}
    gates = [gate for gate in qualification.get("gates") or [] if gate in TOOL_GATES]
    categories = (qualification.get("quality") or {}).get("categories", QUALIFY_DEFAULTS["quality"]["categories"])
    tools = []
    if gates:
        tools.append("qualification.gates has %s" % ", ".join(gates))
    if "tools" in categories:
        tools.append("the quality protocol runs its tools category")
    modes = [qualification.get("reasoning", QUALIFY_DEFAULTS["reasoning"])]
    modes += [mode for mode in qualification.get("reasoning_variants") or [] if mode not in modes]
    reasoning = [mode for mode in modes if mode != "none"]
    return {
        "reasoning_parser": "qualification asks for reasoning %s" % ", ".join(reasoning) if reasoning else None,
        "tool_call_parser": " and ".join(tools) if tools else None,
    }


def _parser_problems(recipe):
    serving, needs = recipe["serving"], parser_needs(recipe)
    problems = []
    for field in PARSERS:
        value, status, source = serving[field], serving[field + "_status"], serving.get(field + "_source")
        if value is not None and status == "unknown":
            problems.append(
                "serving.%s: %r is given but serving.%s_status is unknown; set the status to declared "
                "or the parser to null" % (field, value, field)
            )
        elif value is not None and not source:
            problems.append(
                "serving.%s_source: missing; say where the engine names %r for this model family "
                "(its documentation page or source file)" % (field, value)
            )
        elif value is None and status == "unknown" and not source:
            problems.append(
                "serving.%s_source: missing; say why the parser is unknown (what the engine's "
                "documentation does and does not name)" % field
            )
        elif value is None and status == "declared":
            problems.append(
                "serving.%s: null but serving.%s_status says declared; name the parser or set the "
                "status to unknown" % (field, field)
            )
        elif value is None and status is None and needs[field]:
            problems.append(
                "serving.%s: missing while %s; without it the engine hands %s back as plain text. "
                "Name the parser with serving.%s_source saying where the engine documents it, or set "
                "it null with serving.%s_status: unknown and say why in the source (bring-up is then "
                "refused until it is declared)" % (field, needs[field], _WHAT[field], field, field)
            )
    return problems


def parser_unknowns(recipe):
    """Plan unknowns for parsers a qualification needs and the recipe declares unknown."""
    serving, needs = recipe["serving"], parser_needs(recipe)
    return [
        "serving.%s: unknown while %s (%s); declare it before bring-up"
        % (field, needs[field], serving[field + "_source"])
        for field in PARSERS
        if serving[field] is None and serving[field + "_status"] == "unknown" and needs[field]
    ]


def _workload_profile_problems(qualification):
    """The recipe's workload profile must be a known one, and named wherever the recipe holds field figures."""
    name = qualification.get("workload_profile")
    if name is None:
        if qualification.get("anchors"):
            return [
                "qualification.workload_profile: missing; qualification.anchors hold the field's figures, so name "
                "the workload they were measured on: one of %s" % ", ".join(PROFILES)
            ]
        return []
    problem = profile_problem(name)
    return ["qualification.workload_profile: %s" % problem] if problem else []


# Checkpoint formats an engine can quantize further as it loads them (serving.quantization).
FULL_PRECISION = frozenset(("bf16", "fp16", "fp32"))


def _cross_field_problems(recipe, rule_ids):
    """Problems the schema cannot express: fields that must agree with each other."""
    problems = []
    model, engine, topo, serving = recipe["model"], recipe["engine"], recipe["topology"], recipe["serving"]
    checkpoint = model["checkpoint"]

    pairs = (
        ("model.revision", model["revision"], "model.revision_status", model["revision_status"]),
        ("engine.image.digest", engine["image"]["digest"], "engine.image.status", engine["image"]["status"]),
    )
    for value_path, value, status_path, status in pairs:
        if status == "pinned" and value is None:
            problems.append(
                "%s: is null but %s says pinned; give the value or set the status to unknown"
                % (value_path, status_path)
            )
        if status != "pinned" and value is not None:
            problems.append("%s: is given but %s is %r; set the status to pinned" % (value_path, status_path, status))
    if (checkpoint["bytes"] is None) != (checkpoint["bytes_status"] == "unknown"):
        problems.append(
            "model.checkpoint.bytes: %s disagrees with model.checkpoint.bytes_status %r; "
            "null bytes go with unknown, a size with declared or derived"
            % (_shown(checkpoint["bytes"]), checkpoint["bytes_status"])
        )
    if checkpoint["bytes_status"] == "derived" and not checkpoint.get("bytes_source"):
        problems.append("model.checkpoint.bytes_source: missing; a derived size must say how it was derived")
    if serving["quantization"] and str(checkpoint["quantization"]).lower() not in FULL_PRECISION:
        problems.append(
            "serving.quantization: %r quantizes a full-precision checkpoint as it loads, but "
            "model.checkpoint.quantization is %r; drop serving.quantization or point the seat at the %s checkpoint"
            % (serving["quantization"], checkpoint["quantization"], "/".join(sorted(FULL_PRECISION)))
        )
    if model["revision_status"] == "local" and engine["device"] != "cpu" and model["repo"] is not None:
        problems.append(
            "model.revision_status: 'local' is for models built on the node; "
            "model.repo names an upstream checkpoint, so pin its revision or mark it unknown"
        )

    nodes, per_node, tp, ep = (topo["nodes"], topo["gpus_per_node"], topo["tensor_parallel"], topo["expert_parallel"])
    if engine["device"] == "cpu":
        if per_node != 0 or tp != nodes:
            problems.append(
                "topology: a CPU seat (engine.device: cpu) has topology.gpus_per_node 0 and "
                "one tensor-parallel rank per node (tensor_parallel = nodes); found nodes %d, "
                "gpus_per_node %d, tensor_parallel %d" % (nodes, per_node, tp)
            )
    else:
        if per_node < 1:
            problems.append("topology.gpus_per_node: 0 GPUs per node needs engine.device: cpu")
        elif tp != nodes * per_node:
            problems.append(
                "topology.tensor_parallel: %d does not equal topology.nodes (%d) x "
                "topology.gpus_per_node (%d); seatwright places one TP rank per GPU" % (tp, nodes, per_node)
            )
    if ep not in (1, tp):
        problems.append("topology.expert_parallel: %d must be 1 or equal topology.tensor_parallel (%d)" % (ep, tp))
    if engine["name"] == "vllm" and nodes > 1 and topo.get("executor") not in ("ray", "mp"):
        problems.append(
            "topology.executor: %r; vLLM across nodes runs on Ray (ray) or on its own multi-node "
            "launch (mp), and the field used both: choose one" % topo.get("executor")
        )
    # Refused, not warned: on one node the engine would start a Ray runtime of its own inside its container,
    # which the plan neither places (no Ray head, no wait for its nodes) nor fits (its object store takes
    # shared memory the fit does not count); the field used Ray only to span nodes [000] section 6.
    if engine["name"] == "vllm" and nodes == 1 and topo.get("executor") == "ray":
        problems.append(
            "topology.executor: 'ray' on a one-node seat; Ray only spans nodes here, and on one node vLLM would "
            "start a Ray runtime the plan does not place or fit: set it to null (one node) or mp"
        )
    if topo.get("resident_fraction") is not None and not topo.get("resident_fraction_source"):
        problems.append(
            "topology.resident_fraction: %s has no topology.resident_fraction_source; name the run that took "
            "this share of each GPU beside its co-tenants (a field report and section)" % topo["resident_fraction"]
        )
    if engine["name"] == "sglang" and topo.get("executor") is not None:
        problems.append(
            "topology.executor: %r is a vLLM setting; SGLang spans nodes with --nnodes, so "
            "leave it null" % topo["executor"]
        )

    observed = model.get("observed")
    if observed and engine["device"] == "cpu":
        problems.append("model.observed: per-rank GPU weights do not apply to a CPU seat")
    if observed and (observed["kv_cache_bytes"] or observed["kv_tokens"]) and not observed["kv_cache_dtype"]:
        problems.append(
            "model.observed.kv_cache_dtype: missing; a measured KV cache only compares with a seat of the same "
            "KV cache type, so say which type that run used"
        )
    own_context = model["architecture"]["max_position_embeddings"]
    if serving["max_model_len"] and own_context and serving["max_model_len"] > own_context:
        if not serving["rope_scaling_reason"]:
            problems.append(
                "serving.max_model_len: %d is above the model's own context (model.architecture."
                "max_position_embeddings %d); serve at most %d, or name the rope scaling that stretches it in "
                "serving.rope_scaling_reason" % (serving["max_model_len"], own_context, own_context)
            )

    max_seqs = serving["max_num_seqs"]
    levels = recipe["qualification"]["concurrency"]
    if max_seqs is not None and max(levels) > max_seqs:
        problems.append(
            "qualification.concurrency: %d streams exceed serving.max_num_seqs %d; raise "
            "max_num_seqs or drop that level" % (max(levels), max_seqs)
        )
    soak_streams = (recipe["qualification"].get("soak") or {}).get("concurrency")
    if max_seqs is not None and soak_streams is not None and soak_streams > max_seqs:
        problems.append(
            "qualification.soak.concurrency: %d streams exceed serving.max_num_seqs %d; the soak "
            "would measure the engine's queue" % (soak_streams, max_seqs)
        )

    gates = recipe["qualification"]["gates"]
    for index, gate in enumerate(recipe["qualification"].get("expect_fail", [])):
        if gate not in gates:
            problems.append(
                "qualification.expect_fail[%d]: %r is not in qualification.gates; list it there too" % (index, gate)
            )

    seen = set()
    for index, override in enumerate(recipe.get("overrides", [])):
        rule = override["rule"]
        if rule not in rule_ids:
            hint = difflib.get_close_matches(rule, sorted(rule_ids), n=1)
            problems.append(
                "overrides[%d].rule: %r is not a rule id%s; known rules: %s"
                % (index, rule, " (did you mean %s?)" % hint[0] if hint else "", ", ".join(sorted(rule_ids)))
            )
        if rule in seen:
            problems.append("overrides[%d].rule: %r is overridden twice; keep one entry" % (index, rule))
        seen.add(rule)
    return problems + _parser_problems(recipe)


def _normalise(data):
    """A copy with sizes in bytes and optional sections filled in, so later code reads one shape."""
    recipe = copy.deepcopy(data)
    for parts in SIZE_FIELDS:
        holder = _get(recipe, parts[:-1])
        if isinstance(holder, dict) and parts[-1] in holder:
            holder[parts[-1]] = parse_size(holder[parts[-1]])
    recipe.setdefault("notes", [])
    recipe.setdefault("overrides", [])
    recipe.setdefault("fit", {})
    recipe["qualification"].setdefault("expect_fail", [])
    recipe["qualification"].setdefault("workload_profile", DEFAULT_PROFILE)
    engine = recipe["engine"]
    engine.setdefault("version", None)
    engine.setdefault("flashinfer_version", None)
    engine.setdefault("patches", [])
    engine.setdefault("python", "python3")
    recipe["topology"].setdefault("executor", None)
    recipe["topology"].setdefault("resident_fraction", None)
    recipe["topology"].setdefault("resident_fraction_source", None)
    engine["image"].setdefault("sm120_kernels", None)
    serving = recipe["serving"]
    for key in (
        "dtype",
        "block_size",
        "max_cudagraph_capture_size",
        "custom_all_reduce",
        "allreduce_fusion",
        "distributed_timeout_s",
        "moe_backend",
        "attention_backend",
        "quantization",
        "reasoning_parser",
        "tool_call_parser",
    ):
        serving.setdefault(key, None)
    for key in PARSERS:
        serving.setdefault(key + "_status", "declared" if serving[key] is not None else None)
        serving.setdefault(key + "_source", None)
    serving.setdefault("enforce_eager", False)
    serving.setdefault("extra_args", [])
    serving.setdefault("env", {})
    serving.setdefault("port", default_port(engine["name"])["value"])
    for key in ("mtp_bytes", "replicated_bytes", "files", "bytes_source"):
        recipe["model"]["checkpoint"].setdefault(key, None)
    recipe["model"].setdefault("observed", None)
    if recipe["model"]["observed"] is not None:
        for key in (
            "kv_cache_bytes",
            "kv_tokens",
            "kv_cache_dtype",
            "memory_utilization",
            "memory_utilization_source",
            "gpu_memory_mib",
        ):
            recipe["model"]["observed"].setdefault(key, None)
    recipe["model"]["architecture"].setdefault("max_position_embeddings", None)
    serving.setdefault("rope_scaling_reason", None)
    return recipe


def _bad_number_paths(value, parts=()):
    if isinstance(value, float) and not math.isfinite(value):
        return [field_path(parts)]
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            found.extend(_bad_number_paths(item, parts + (key,)))
    elif isinstance(value, (list, tuple)):
        for index, item in enumerate(value):
            found.extend(_bad_number_paths(item, parts + (index,)))
    return found


def validate_recipe(data, schema, source, rule_ids=()):
    """The normalised recipe, or a SeatError listing every problem with its field path.

    `source` names the recipe in messages (e.g. 'seats/glm53.yml'); `rule_ids` are the ids an
    override may name.
    """
    if not HAS_JSONSCHEMA:
        raise SeatError(
            "the Python package jsonschema is missing on the controller; install the pinned "
            "versions with `pip install -r requirements.txt`"
        )
    if not isinstance(data, dict):
        raise SeatError(
            "%s: a recipe is a YAML mapping of fields, found %s; see schemas/seat.schema.json"
            % (source, type(data).__name__)
        )
    nesting_problem(data, source)
    problems = [
        "%s: NaN or infinity is not a setting; expected %s" % (path, "a finite number")
        for path in _bad_number_paths(data)
    ]
    if not problems:
        problems = _schema_problems(data, schema)
    if not problems:
        recipe = _normalise(data)
        problems = _workload_profile_problems(data["qualification"]) + _cross_field_problems(recipe, set(rule_ids))
    if problems:
        shown = problems[:_MAX_ERRORS]
        more = len(problems) - len(shown)
        raise SeatError(
            "%s: %d problem%s:\n  - %s%s"
            % (
                source,
                len(problems),
                "" if len(problems) == 1 else "s",
                "\n  - ".join(shown),
                "\n  - ... and %d more" % more if more else "",
            )
        )
    return recipe
