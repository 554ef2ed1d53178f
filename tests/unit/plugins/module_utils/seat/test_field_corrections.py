"""Issue 11: rules apply where the field saw them, a fit for the served context, one GPU kind, fleet cost.

Each case cites the field report (docs/field.md) or upstream item it comes from.
"""

import copy

import pytest
import yaml
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.fit import GIB, fit_seat
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.kv import kv_bytes_per_token, model_context
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.plan import make_plan, plan_lines
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.recipe import validate_recipe
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.rules import RULE_IDS, RULES, evaluate
from seat_cases import (
    FIXTURE_SEATS,
    SCHEMA,
    SEAT_NAMES,
    SEATS,
    example_node,
    example_nodes,
    h200_gpus,
    mutated,
    profile_gpus,
    seat_data,
)

gpus = profile_gpus


SM120_X2, SM120_X4 = gpus(), gpus() + gpus()


def recipe(name, changes=(), folder=SEATS):
    data = seat_data(name, folder)
    for path, value in changes:
        data = mutated(data, path, value)
    return validate_recipe(data, SCHEMA, name, RULE_IDS)


def plan(name, changes=(), nodes=None, folder=SEATS):
    data = seat_data(name, folder)
    for path, value in changes:
        data = mutated(data, path, value)
    return make_plan(data, SCHEMA, name, example_nodes() if nodes is None else nodes, "seats/%s.yml" % name)


def applied(result):
    return [entry["id"] for entry in result["applied"]]


def warned(result):
    return [entry["id"] for entry in result["warnings"]]


# ------------------------------------------------------------------ rules carry their evidence


def test_every_rule_says_where_it_was_seen_with_sources():
    for rule in RULES:
        assert rule["seen"], rule["id"]
        for scope in rule["seen"]:
            assert scope["text"] and scope["sources"], rule["id"]


PINNED_B12X = [
    (("engine", "image", "digest"), "sha256:" + "c" * 64),
    (("engine", "image", "status"), "pinned"),
    (("engine", "patches"), []),
]


@pytest.mark.parametrize(
    "own_kernels,required",
    [
        # [000] section 6: the community SM120 image carried its own kernels and served GLM-5.3-Flash cross-node
        # without the NoPE gate: a warning, not a requirement.
        (True, False),
        # [000] section 4: on the stock image the MLA backend is required and stays unverified (no patch makes
        # the FA3 backend run on capability 12, issue 24).
        (False, True),
    ],
)
def test_nope_gate_belongs_to_the_stock_image_family(own_kernels, required):
    data = recipe("glm53", PINNED_B12X + [(("engine", "image", "sm120_kernels"), own_kernels)])
    result = evaluate(data, SM120_X4, "glm53")
    if required:
        assert "nope-mla-backend-gate" in applied(result)
        assert any("rule nope-mla-backend-gate" in line for line in result["unverified"])
        return
    assert "nope-mla-backend-gate" in warned(result) and "nope-mla-backend-gate" not in applied(result)
    message = next(w["message"] for w in result["warnings"] if w["id"] == "nope-mla-backend-gate")
    assert "untested here, so not applied" in message and "[000] section 4" in message


def test_multi_node_vllm_with_the_multiprocessing_executor_is_allowed():
    # [000] section 2: Nemotron 3 Ultra ran across both nodes on vLLM's multiprocessing executor.
    result = plan("nemotron3-ultra")
    assert result["topology"]["executor"] == "mp"
    assert [rank["role"] for rank in result["ranks"]] == ["server", "headless"]
    assert "ray-executor" not in RULE_IDS


def test_multi_node_vllm_must_choose_its_executor():
    # Ray is the recipe's choice, not a rule: the field used both ([000] sections 2 and 6).
    with pytest.raises(SeatError, match="vLLM across nodes runs on Ray .ray. or on its own multi-node launch .mp."):
        recipe("glm53-vendor", [(("topology", "executor"), None)])


@pytest.mark.parametrize(
    "engine,changes,outcome,sources",
    [
        # vLLM, one SM12x node: required on an upstream source (vLLM PR #47751), not the field.
        ("qwen35-122b", (), "applied", ["vLLM PR #47751"]),
        # SGLang on one SM12x node: outside every scope it was seen in [003] ran SGLang single-node: a warning.
        ("deepseek-v4-flash", (), "warning", None),
        # Across nodes on SM12x, any engine: the field's deadlock [000].
        ("deepseek-v4-flash", [(("topology", "nodes"), 2), (("topology", "tensor_parallel"), 4)], "applied", ["000"]),
    ],
)
def test_custom_allreduce_off_is_labelled_with_its_source(engine, changes, outcome, sources):
    gpus_ = SM120_X4 if changes else SM120_X2
    result = evaluate(recipe(engine, changes), gpus_, engine)
    if outcome == "applied":
        entry = next(e for e in result["applied"] if e["id"] == "custom-allreduce-off")
        assert entry["sources"] == sources
    else:
        assert "custom-allreduce-off" in warned(result)
        assert result["settings"]["serving"]["custom_all_reduce"] is None


def test_a_single_node_recipe_may_keep_custom_allreduce_on_with_a_reason():
    # The field's single-node image used its PCIe all-reduce [000]; the rule there rests on vLLM PR #47751.
    reason = "single node, image built after vLLM PR #47751 was fixed [test]"
    data = recipe(
        "qwen35-122b",
        [
            (("serving", "custom_all_reduce"), True),
            (("overrides",), [{"rule": "custom-allreduce-off", "reason": reason}]),
        ],
    )
    result = evaluate(data, SM120_X2, "qwen35")
    entry = next(e for e in result["applied"] if e["id"] == "custom-allreduce-off")
    assert entry["overridden"] == reason and result["settings"]["serving"]["custom_all_reduce"] is True


def test_allreduce_fusion_reason_leads_with_the_3740_baseline():
    # [001] is the primary evidence (3,740 tok/s without fusion, 236 with); [004]'s 1,867 is a later point.
    rule = next(r for r in RULES if r["id"] == "allreduce-fusion-off")
    assert rule["reason"].index("3,740") < rule["reason"].index("1,867")
    assert "[001]" in rule["reason"]


@pytest.mark.parametrize(
    "engine_changes,rule_id",
    [
        # The one-hour timeout was given for one vLLM seat across nodes [000]; SGLang across nodes gets a warning.
        ([(("topology", "nodes"), 2), (("topology", "tensor_parallel"), 4)], "distributed-timeout"),
        # The capture cap was seen with the community SM120 image [000] section 6.
        ([(("topology", "nodes"), 2), (("topology", "tensor_parallel"), 4)], "cudagraph-capture-cap"),
    ],
)
def test_rules_outside_their_conditions_warn_and_change_nothing(engine_changes, rule_id):
    result = evaluate(recipe("deepseek-v4-flash", engine_changes), SM120_X4, "deepseek")
    assert rule_id in warned(result) and rule_id not in applied(result)
    assert result["settings"]["serving"]["distributed_timeout_s"] is None
    assert result["settings"]["serving"]["max_cudagraph_capture_size"] is None


def test_plan_shows_warnings_and_the_readme_table_shows_conditions_and_sources():
    from ansible_collections.seatwright.fleet.plugins.module_utils.seat.rules import table_markdown

    table = table_markdown()
    assert "[[000]](docs/field.md#report-000)" in table
    assert "[vLLM PR #47751](https://github.com/vllm-project/vllm/pull/47751)" in table
    assert "Elsewhere: a warning, not applied" in table
    assert any(line.startswith("warning: rule cudagraph-capture-cap") for line in plan_lines(plan("glm53")))


# ------------------------------------------------------------------ numbers say where they come from


@pytest.mark.parametrize("name", SEAT_NAMES)
def test_every_recipe_labels_its_startup_timeout(name):
    assert seat_data(name)["qualification"].get("startup_timeout_source")


def test_plan_lists_the_numbers_that_are_not_field_measurements():
    result = plan("glm53")
    what = {item["what"]: item["source"] for item in result["provenance"]}
    assert "vLLM's default --gpu-memory-utilization" in what["memory utilisation"]
    assert what["start-up timeout (s)"].startswith("seatwright's choice")
    # The reserve is GLM-5.3's one derived figure: attempt 5 records no engine setting, so its own
    # back-calculation (at an assumed 0.90) is not used; the figure is listed here with its derivation.
    assert what["runtime reserve per GPU"].startswith("GLM-5.3 on vLLM: derived from the field's")
    measured = {item["what"]: item["source"] for item in result["measured"]}
    assert "runtime reserve per GPU" not in measured
    assert what["served context"].startswith("[000] section 4")
    assert what["port"] == "vLLM's default --port"
    assert any(line.startswith("not from the field: memory utilisation 0.9") for line in plan_lines(result))


# ------------------------------------------------------------------ a fit that holds for the served context


def _glm(changes):
    return recipe("glm53", changes)


def _settings(name, changes=(), hardware=SM120_X4):
    return evaluate(recipe(name, changes), hardware, name)["settings"]


NODES = [{"host": "node-a", "gpus": gpus()}, {"host": "node-b", "gpus": gpus()}]
CARD = 97887 * 2**20


@pytest.mark.parametrize(
    "utilization_for_headroom,verdict",
    [
        # Headroom exactly zero: no KV cache at all is not a fit (issue 11, the field's GLM FP8 example [000]).
        (0, "does-not-fit"),
        # Negative headroom.
        (-(10**9), "does-not-fit"),
        # Positive but smaller than one 261,900-token sequence at 12,580 B per token (3.29 GB) [000].
        (10**9, "does-not-fit"),
        # Room for one sequence and more.
        (20 * 10**9, "fits"),
    ],
)
def test_headroom_must_hold_one_served_sequence(utilization_for_headroom, verdict):
    settings = _settings("glm53")
    per_rank = fit_seat(settings, NODES)["per_rank_bytes"]
    wanted = per_rank + 10200000000 + utilization_for_headroom
    settings["serving"]["gpu_memory_utilization"] = (wanted + 0.5) / CARD
    result = fit_seat(settings, NODES)
    assert result["verdict"] == verdict, result["reasons"]


@pytest.mark.parametrize(
    "changes,unknown_word",
    [
        # No max_model_len, no field context, no config.json: the served context is unknown.
        ([(("fit", "context_tokens"), None)], "the served context"),
        # No declared KV size and no config.json to compute it from.
        (
            [(("model", "observed"), {"per_rank_weight_bytes": "44.69 GiB", "tensor_parallel": 4, "source": "[000]"})],
            "KV bytes per token",
        ),
    ],
)
def test_unknown_context_or_kv_is_unknown_not_fits(changes, unknown_word):
    result = fit_seat(_settings("glm53", changes), NODES)
    assert result["verdict"] == "unknown" and result["fits"] is False
    assert unknown_word in result["reasons"][-1]


# config.json values: a DeepSeek-V3-style MLA model and a grouped-query Llama.
MLA_CONFIG = {
    "num_hidden_layers": 61,
    "kv_lora_rank": 512,
    "qk_rope_head_dim": 64,
    "num_attention_heads": 128,
    "num_key_value_heads": 128,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 163840,
}
NOPE_CONFIG = dict(MLA_CONFIG, qk_rope_head_dim=0)
GQA_CONFIG = {
    "num_hidden_layers": 32,
    "num_attention_heads": 32,
    "num_key_value_heads": 8,
    "hidden_size": 4096,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 131072,
}
HYBRID = {
    "num_hidden_layers": 88,
    "hybrid_override_pattern": "M-M*" * 22,
    "num_attention_heads": 64,
    "num_key_value_heads": 2,
    "head_dim": 128,
    "torch_dtype": "bfloat16",
}


@pytest.mark.parametrize(
    "config,kv,tp,expected",
    [
        # MLA keeps the compressed latent (512) plus the rotary key (64) whole on every rank.
        (MLA_CONFIG, "fp8", 4, (512 + 64) * 1 * 61),
        (MLA_CONFIG, "bf16", 8, (512 + 64) * 2 * 61),
        # NoPE MLA (rotary dimension 0, as GLM-5.3-Flash [000]): the latent alone.
        (NOPE_CONFIG, None, 4, 512 * 2 * 61),
        # GQA: 8 KV heads split over TP4 -> 2 per rank, head_dim 4096/32 = 128.
        (GQA_CONFIG, "bf16", 4, 2 * 2 * 128 * 2 * 32),
        # More ranks than KV heads: each rank keeps one head.
        (GQA_CONFIG, "fp8", 16, 2 * 1 * 128 * 1 * 32),
        # Hybrid Mamba: only the attention layers ('*') hold KV.
        (HYBRID, "fp8", 4, 2 * 1 * 128 * 1 * 22),
        # Nothing to compute from.
        ({}, "fp8", 4, None),
        ({"num_hidden_layers": 2}, None, 1, None),
    ],
)
def test_kv_bytes_per_token_from_config(config, kv, tp, expected):
    assert kv_bytes_per_token(config, kv, tp)["bytes"] == expected


def test_unset_max_model_len_takes_the_models_own_context_from_config():
    settings = _settings(
        "glm53",
        [
            (("fit", "context_tokens"), None),
            (("model", "observed", "kv_tokens"), None),
            (("model", "observed", "kv_cache_bytes"), None),
        ],
    )
    result = fit_seat(settings, NODES, config=NOPE_CONFIG)
    assert result["inputs"]["context_tokens"] == {
        "value": 163840,
        "source": "the model's own context as vLLM derives it from config.json (max_position_embeddings 163,840)",
    }
    assert result["inputs"]["kv_bytes_per_token"]["value"] == 512 * 2 * 61
    assert model_context({"max_position_embeddings": 4096}) == 4096


def test_glm53_fp8_tp4_ep4_is_rejected_for_kv():
    # [000] section 3 (75.74 GB per rank at TP4/EP4) and section 7: "FP8 cannot be a resident seat".
    result = plan("glm53-fp8")
    assert result["verdict"] == "does-not-fit" and not result["launchable"]
    assert any("no KV cache room" in reason for reason in result["blockers"])


def test_inkling_reserve_comes_from_its_own_record_not_the_glm_figure():
    # [003]: ~86 GiB weights + 3.14 GiB KV per rank on 97,887 MiB cards served; a universal 10.2 GB reserve
    # inside the budget rejects it.
    result = plan("inkling-small", nodes=[example_node("node-a")])
    assert result["verdict"] != "does-not-fit"
    assert result["fit_inputs"]["runtime_reserve"]["kind"] == "recipe"
    assert "[003]" in result["fit_inputs"]["runtime_reserve"]["source"]
    as_vllm = _settings(
        "inkling-small",
        [
            (("engine", "name"), "vllm"),
            (("fit", "runtime_reserve_bytes"), None),
            # The measured KV pool was SGLang's; it says nothing about a vLLM run.
            (("model", "observed", "kv_cache_bytes"), None),
        ],
        SM120_X2,
    )
    assert fit_seat(as_vllm, NODES[:1])["verdict"] == "does-not-fit"


def test_reserve_of_an_unknown_family_is_a_labelled_stand_in():
    result = fit_seat(_settings("nemotron3-ultra"), NODES)
    assert result["inputs"]["runtime_reserve"]["kind"] == "stand-in"


# ------------------------------------------------------------------ one kind of GPU per seat


def _h200_node_b():
    node = example_node("node-b")
    node["seatwright_gpus"] = h200_gpus()
    return node


def test_mixed_compute_capability_is_refused_naming_both_hosts():
    result = plan("glm53-vendor", nodes=[example_node("node-a"), _h200_node_b()])
    refusal = next(item for item in result["refusals"] if item["id"] == "one-gpu-kind")
    assert "node-a gpu 0" in refusal["detail"] and "capability 12.0" in refusal["detail"]
    assert "node-b gpu 0" in refusal["detail"] and "capability 9.0" in refusal["detail"]
    assert result["launchable"] is False


def test_sm12x_rules_come_from_every_rank_not_the_first_host():
    # The first host is an H200 (9.0); the second is SM120: the SM12x rules still hold.
    mixed = h200_gpus() + gpus()
    result = evaluate(recipe("glm53-vendor"), mixed, "v")
    assert "allreduce-fusion-off" in applied(result)


# ------------------------------------------------------------------ fleet cost [002]

COTENANTS = {
    "node-a": [{"name": "agent-model", "kind": "container", "gpus": "all"}],
    "node-b": [{"name": "embedder", "kind": "systemd", "gpus": [1]}, {"name": "ocr", "kind": "container", "gpus": [0]}],
}


@pytest.mark.parametrize("exclusive,evicted,stay", [(True, 3, 0), (False, 0, 3)])
def test_fleet_cost_names_the_cotenants_a_seat_evicts(exclusive, evicted, stay):
    nodes = example_nodes()
    for node in nodes:
        node["seatwright_node_cotenants"] = copy.deepcopy(COTENANTS[node["host"]])
    result = plan("glm53-vendor", [(("topology", "exclusive"), exclusive)], nodes=nodes)
    cost = result["fleet_cost"]
    assert cost["nodes"] == ["node-a", "node-b"] and cost["node_count"] == 2
    assert (len(cost["cotenants"]["evicted"]), len(cost["cotenants"]["stay_resident"])) == (evicted, stay)
    # 204.5 GB against one node's 205.3 GB raw [002].
    assert cost["checkpoint_exceeds_one_node"] is True
    assert "does not fit one node's raw VRAM" in cost["summary"]


# ------------------------------------------------------------------ recipes say what the field said


def test_vendor_glm_recipe_is_exclusive_as_its_note_says():
    # [002]: a seat on both nodes evicts every other GPU service (seven services).
    assert seat_data("glm53-vendor")["topology"]["exclusive"] is True


def _anchors(name, metric, concurrency=1):
    return [
        a["value"]
        for a in seat_data(name)["qualification"]["anchors"]
        if a["metric"] == metric and a.get("concurrency") == concurrency
    ]


@pytest.mark.parametrize(
    "name,ttfo,ttft",
    [
        # [003] capacity-v4-reasoning: first output (reasoning included) and first visible token differ.
        ("deepseek-v4-flash", 2705, 29106),
        ("inkling-small", 2789, 4630),
    ],
)
def test_first_output_and_first_visible_token_are_kept_apart(name, ttfo, ttft):
    assert _anchors(name, "ttfo_ms") == [ttfo] and _anchors(name, "ttft_ms") == [ttft]


def test_both_c16_passes_of_the_incumbent_are_kept():
    # [002]: two passes at c=16, 896.9 and 982.5; both values reported.
    assert sorted(_anchors("qwen38-flash-next", "aggregate_tok_s", 16)) == [896.9, 982.5]


def test_the_incumbents_single_stream_decode_is_its_own():
    # [002] section 4: it beats the EXL3 seat on every metric except per-stream decode at c=1 (112.8 vs 108.6).
    assert _anchors("qwen38-flash-next", "decode_tok_s") == [108.6]


def test_refusal_fixture_still_plans_as_refused():
    data = yaml.safe_load((FIXTURE_SEATS / "glm53-b12x-mtp.yml").read_text())
    data["engine"]["image"]["sm120_kernels"] = True
    result = make_plan(data, SCHEMA, "glm53-b12x-mtp", example_nodes(), "x")
    assert [item["id"] for item in result["refusals"]] == ["no-cross-node-speculation"]
    assert GIB == 2**30


def test_checkpoint_facts_read_the_planning_values_of_config_json(tmp_path):
    import json

    from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights.checkpoint_scan import read_model_config

    assert read_model_config(str(tmp_path)) is None
    (tmp_path / "config.json").write_text(
        json.dumps(
            {
                "architectures": ["Glm4MoeForCausalLM"],
                "vocab_size": 151552,
                "max_position_embeddings": 131072,
                "text_config": {"num_hidden_layers": 46, "kv_lora_rank": 512, "qk_rope_head_dim": 0},
            }
        )
    )
    config = read_model_config(str(tmp_path))
    assert config == {
        "architectures": ["Glm4MoeForCausalLM"],
        "max_position_embeddings": 131072,
        "num_hidden_layers": 46,
        "kv_lora_rank": 512,
        "qk_rope_head_dim": 0,
    }
    assert kv_bytes_per_token(config, "fp8", 4)["bytes"] == 512 * 46
