"""The plan (plugins/module_utils/seat/plan.py): recipe + declared or cached hardware -> one JSON plan."""

import json

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.plan import make_plan, node_hardware, plan_lines
from conftest import ROOT
from hypothesis import given, settings
from hypothesis import strategies as st
from seat_cases import (
    FIXTURE_SEATS,
    SCHEMA,
    SEAT_NAMES,
    example_node,
    example_nodes,
    h200_node,
    lab_image_facts,
    seat_data,
)
from seat_cases import lab_node as seat_lab_node

CONTRACT = {"seat", "fits", "reasons", "checkpoint_bytes", "node_vram_bytes", "per_rank_weight_bytes", "rules", "ranks"}


def plan(name, nodes=None, folder=None, data=None):
    data = data if data is not None else (seat_data(name) if folder is None else seat_data(name, folder))
    return make_plan(data, SCHEMA, name, example_nodes() if nodes is None else nodes, "seats/%s.yml" % name)


@pytest.mark.parametrize("name", SEAT_NAMES)
def test_every_seat_plans_on_the_example_fleet_with_the_contract_keys(name):
    result = plan(name)
    assert CONTRACT <= set(result)
    assert isinstance(result["fits"], bool)
    assert all(set(rule) >= {"id", "reason"} for rule in result["rules"])
    assert all(set(rank) >= {"host", "rank", "argv", "env"} for rank in result["ranks"])
    json.dumps(result)
    assert plan_lines(result)[0].startswith("seat %s: " % name)


def test_glm53_vendor_on_both_example_nodes():
    result = plan("glm53-vendor")
    assert (result["fits"], result["verdict"], result["launchable"], result["ready"]) == (True, "fits", True, False)
    assert result["fleet_cost"]["nodes"] == ["node-a", "node-b"]
    assert result["fleet_cost"]["checkpoint_exceeds_one_node"] is True
    assert result["checkpoint_bytes"] == 204500000000
    assert result["node_vram_bytes"] == {"node-a": 2 * 97887 * 2**20, "node-b": 2 * 97887 * 2**20}
    assert result["per_rank_weight_bytes"] == 51125000000
    ids = [rule["id"] for rule in result["rules"]]
    assert ids == ["custom-allreduce-off", "allreduce-fusion-off", "cudagraph-capture-cap"]
    assert sorted(w.split(":")[0] for w in result["warnings"]) == [
        "rule distributed-timeout",
        "rule nope-mla-backend-gate",
        "rule nope-mla-block-size",
        "rule nope-mla-flashinfer",
        "rule nope-mla-marlin-moe",
    ]
    assert all("[0" in rule["reason"] for rule in result["rules"])
    assert result["one_node"]["fits"] is False
    assert any("204.5 GB (190.46 GiB) against 205.3 GB (191.19 GiB)" in reason for reason in result["reasons"])
    assert [rank["host"] for rank in result["ranks"]] == ["node-a", "node-b"]


def test_glm53_vendor_on_one_node_does_not_fit_with_the_byte_comparison():
    result = plan("glm53-vendor", [example_node("node-a")])
    assert (result["fits"], result["verdict"], result["launchable"]) == (False, "does-not-fit", False)
    assert result["ranks"] == []
    assert "204.5 GB (190.46 GiB) against 205.3 GB (191.19 GiB) raw VRAM" in result["blockers"][0]
    assert "the seat needs 2 nodes (TP4 = 2 x 2 GPUs); 1 host given (node-a)" in result["blockers"][1]


def test_refused_seat_is_not_launchable_and_says_why():
    result = plan("glm53-b12x-mtp", folder=FIXTURE_SEATS)
    assert result["launchable"] is False
    assert result["refusals"][0]["id"] == "no-cross-node-speculation"
    assert result["blockers"][-1].startswith("refused by rule no-cross-node-speculation: serving.speculation is mtp")
    assert any(line.startswith("REFUSED by no-cross-node-speculation") for line in plan_lines(result))


def test_seat_uses_the_first_hosts_in_order():
    nodes = [example_node("node-b"), example_node("node-a")]
    result = plan("glm53-vendor", nodes)
    assert [host["host"] for host in result["hosts"]] == ["node-b", "node-a"]
    assert result["ranks"][0]["setup"][0][-1] == "--node-ip-address=10.77.0.12"


def test_one_node_seat_takes_only_the_first_host():
    result = plan("qwen35-122b")
    assert [host["host"] for host in result["hosts"]] == ["node-a"]
    assert [rank["host"] for rank in result["ranks"]] == ["node-a"]


def test_cached_facts_win_over_the_declaration_and_say_so():
    result = plan("qwen35-122b", [dict(example_node("node-a"), seatwright_gpus=h200_node()["seatwright_gpus"])])
    assert result["hosts"][0]["source"] == "facts"
    assert result["node_vram_bytes"] == {"node-a": 2 * 143771 * 2**20}
    assert result["rules"] == []
    assert any("cached facts show 2 x NVIDIA H200" in note for note in result["notes"])


def test_too_few_gpus_is_a_shortfall():
    result = plan("glm53-vendor", [dict(example_node("node-a"), seatwright_node_gpu_count=1), example_node("node-b")])
    assert result["verdict"] == "does-not-fit"
    assert "host node-a has 1 GPU (inventory), the seat needs 2 per node" in result["blockers"]


def test_unknowns_are_listed_not_invented():
    result = plan("qwen38-flash-next")
    assert result["ranks"] == [] and result["ready"] is False
    text = "\n".join(result["unknowns"])
    for field in ("model.revision", "engine.name", "engine.image", "model.checkpoint.bytes"):
        assert field in text
    assert "launch: none rendered (engine unknown)" in plan_lines(result)


@pytest.mark.parametrize("with_facts", [True, False])
def test_lab_seat_is_ready_on_the_lab_inventory_only_with_its_images_flags_checked(with_facts):
    lab_node = seat_lab_node()
    if with_facts:
        lab_node["seatwright_engine_images"] = {"lab-vllm-cpu": lab_image_facts()}
    result = plan("lab", [lab_node])
    assert (result["verdict"], result["ready"], result["rules"]) == ("not-applicable", with_facts, [])
    assert result["ranks"][0]["gpus"] == []
    unchecked = [item for item in result["unknowns"] if item.startswith("image flags not checked")]
    assert bool(unchecked) is not with_facts, result["unknowns"]


ZEN3_CPU = {"model": "AMD EPYC", "logical_cpus": 2, "flags": ["avx2"], "bf16_native": False}
ZEN4_CPU = {"model": "AMD EPYC", "logical_cpus": 2, "flags": ["avx2", "avx512f", "avx512_bf16"], "bf16_native": True}


@pytest.mark.parametrize(
    "name, cpu, dtype",
    [
        ("lab", ZEN3_CPU, "float32"),
        ("lab", ZEN4_CPU, "bfloat16"),
        ("lab-allcores", ZEN3_CPU, "float32"),
        # No cached processor: no --dtype, the engine's default, and the plan says why.
        ("lab", None, None),
        # A checkpoint quantized as it loads keeps its own compute type.
        ("lab-fp8", ZEN3_CPU, None),
    ],
)
def test_a_cpu_seat_computes_in_the_dtype_its_nodes_processor_has(name, cpu, dtype):
    result = plan(name, [seat_lab_node(seatwright_host_cpu=cpu)])
    argv = result["ranks"][0]["argv"]
    assert (argv[argv.index("--dtype") + 1] if "--dtype" in argv else None) == dtype
    (item,) = [item for item in result["provenance"] if item["what"] == "compute dtype"]
    assert item["value"] == (dtype or "the engine's")
    lines = plan_lines(result)
    assert any(line.startswith("not from the field: compute dtype") for line in lines), lines


def test_a_gpu_seat_gets_no_dtype_from_the_cpu():
    nodes = [dict(node, seatwright_host_cpu=ZEN3_CPU) for node in example_nodes()]
    result = plan("glm53-vendor", nodes)
    assert all("--dtype" not in rank["argv"] for rank in result["ranks"])
    assert not [item for item in result["provenance"] if item["what"] == "compute dtype"]


def test_recipe_name_must_match_the_seat_asked_for():
    with pytest.raises(SeatError, match="name is 'glm53' but the seat asked for is 'glm53-vendor'"):
        make_plan(seat_data("glm53"), SCHEMA, "glm53-vendor", example_nodes(), "seats/glm53-vendor.yml")


@pytest.mark.parametrize(
    "nodes,fragment",
    [
        (
            [dict(example_node("node-a"), seatwright_node_fabric_ip="10.77.0.300")],
            "host node-a: seatwright_node_fabric_ip is '10.77.0.300'; expected the node's IP address",
        ),
        (
            [dict(example_node("node-a"), seatwright_node_gpu_profile=None)],
            "host node-a: seatwright_node_gpu_profile is not set",
        ),
        ([dict(example_node("node-a"), in_inventory=False)], "host node-a is not in the inventory"),
        ([example_node("node-a"), example_node("node-a")], "seat_hosts: node-a listed more than once"),
        (
            [
                dict(
                    example_node("node-a"),
                    seatwright_gpus=[{"index": 0, "name": "x", "compute_capability": "12", "memory_total_mib": 97887}],
                )
            ],
            "host node-a: cached fact seatwright_gpus[0].compute_capability is '12'",
        ),
        ([dict(example_node("node-a"), seatwright_gpus="NVIDIA")], "cached fact seatwright_gpus is str"),
    ],
)
def test_bad_inventory_names_host_and_variable(nodes, fragment):
    with pytest.raises(SeatError) as caught:
        plan("qwen35-122b", nodes)
    assert fragment in str(caught.value)


def test_node_hardware_from_the_declaration():
    hardware = node_hardware(example_node("node-b"), 0)
    assert hardware["source"] == "inventory"
    assert [gpu["sm"] for gpu in hardware["gpus"]] == ["sm_120", "sm_120"]
    assert hardware["rdma_devices"] == ["mlx5_0"]


# --- property tests: malformed inventories never escape as anything but a SeatError naming the host ---

VARIABLES = [
    "seatwright_node_gpu_profile",
    "seatwright_node_gpu_count",
    "seatwright_node_fabric_ip",
    "seatwright_node_fabric_iface",
    "seatwright_node_rdma_devices",
    "seatwright_gpus",
    "seatwright_checkpoint",
    "host",
]
ANYTHING = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(10**6), max_value=10**6)
    | st.floats(allow_nan=True)
    | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
GLM_VENDOR = seat_data("glm53-vendor")


@settings(max_examples=400, deadline=None)
@given(which=st.sampled_from(["node-a", "node-b"]), variable=st.sampled_from(VARIABLES), value=ANYTHING)
def test_any_inventory_value_plans_or_fails_as_seat_error(which, variable, value):
    nodes = example_nodes()
    target = nodes[0] if which == "node-a" else nodes[1]
    target[variable] = value
    try:
        make_plan(GLM_VENDOR, SCHEMA, "glm53-vendor", nodes, "seats/glm53-vendor.yml")
    except SeatError as exc:
        assert which in str(exc) or "seat_hosts" in str(exc)


WRONG = {
    "seatwright_node_gpu_profile": st.sampled_from(["rtx-5090", "", 3, ["h200"]]),
    "seatwright_node_gpu_count": st.sampled_from([0, 17, "2", 2.5, True, -1]),
    "seatwright_node_fabric_ip": st.sampled_from(["10.77.0", "node-b", 1077, "10.77.0.256"]),
    "seatwright_node_fabric_iface": st.sampled_from(["a" * 16, "en p65", "eth/0", 5]),
    "seatwright_node_rdma_devices": st.sampled_from(["mlx5_0", [1], ["mlx5 0"], {"a": 1}]),
}


@settings(max_examples=200, deadline=None)
@given(which=st.sampled_from(["node-a", "node-b"]), data=st.data())
def test_a_wrong_declaration_is_rejected_naming_host_and_variable(which, data):
    variable = data.draw(st.sampled_from(sorted(WRONG)))
    nodes = example_nodes()
    (nodes[0] if which == "node-a" else nodes[1])[variable] = data.draw(WRONG[variable])
    with pytest.raises(SeatError) as caught:
        make_plan(GLM_VENDOR, SCHEMA, "glm53-vendor", nodes, "seats/glm53-vendor.yml")
    assert "host %s: %s is" % (which, variable) in str(caught.value)


QWEN_REVISION = "98915d837c4e7c87ac8296d02e89de19b3207e6d"


# config.json values as checkpoint_facts reports them; shaped like a hybrid with one attention layer in four.
HYBRID_CONFIG = {
    "num_hidden_layers": 48,
    "num_attention_heads": 32,
    "num_key_value_heads": 2,
    "head_dim": 256,
    "torch_dtype": "bfloat16",
    "max_position_embeddings": 262144,
    "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 12,
}


def checkpoint_facts(revision=QWEN_REVISION, complete=True, tensor_bytes=75 * 10**9, model_config=None):
    return {
        "path": "/srv/hf/hub/models--nvidia--Qwen3.5-122B-A10B-NVFP4",
        "revision": revision,
        "complete": complete,
        "safetensors": {"files": 15, "tensors": 1000, "tensor_bytes": tensor_bytes},
        "model_config": model_config,
    }


def test_checkpoint_facts_of_the_pinned_revision_give_a_verdict():
    facts = checkpoint_facts(model_config=HYBRID_CONFIG)
    result = plan("qwen35-122b", [dict(example_node("node-a"), seatwright_checkpoint=facts)])
    assert (result["checkpoint_bytes"], result["checkpoint_bytes_status"]) == (75 * 10**9, "measured")
    assert result["verdict"] == "fits" and result["per_rank_weight_bytes"] == 37500000000
    # 2 x 1 of 2 KV heads x 256 x 2 B x 12 attention layers at TP2 [issue 11: KV bytes from config.json].
    assert result["fit_inputs"]["kv_bytes_per_token"]["value"] == 12288
    assert "computed from config.json" in result["fit_inputs"]["kv_bytes_per_token"]["source"]
    assert "checkpoint bytes measured from the safetensors headers on node-a: 75.0 GB (69.85 GiB)" in result["notes"]


@pytest.mark.parametrize(
    "facts,note",
    [
        (checkpoint_facts(revision="0" * 40), None),
        (checkpoint_facts(complete=False), "cached checkpoint facts for revision 98915d837c4e are incomplete"),
        ("not a mapping", None),
    ],
)
def test_checkpoint_facts_of_another_revision_or_incomplete_are_not_used(facts, note):
    result = plan("qwen35-122b", [dict(example_node("node-a"), seatwright_checkpoint=facts)])
    assert result["verdict"] == "unknown" and result["checkpoint_bytes"] is None
    assert (note is None) or any(note in item for item in result["notes"])


@settings(max_examples=200, deadline=None)
@given(complete=ANYTHING, safetensors=ANYTHING | st.fixed_dictionaries({"tensor_bytes": ANYTHING}))
def test_any_checkpoint_fact_shape_plans_without_a_traceback(complete, safetensors):
    facts = {"revision": QWEN_REVISION, "complete": complete, "safetensors": safetensors}
    result = plan("qwen35-122b", [dict(example_node("node-a"), seatwright_checkpoint=facts)])
    assert result["checkpoint_bytes_status"] in ("measured", "unknown")


@pytest.mark.parametrize(
    "change,words",
    [
        (
            {"seatwright_node_fabric_ip": "10.77.0.11"},
            "seatwright_node_fabric_ip 10.77.0.11 is also declared by node-a",
        ),
        ({"seatwright_fabric_subnet": "10.99.0.0/24"}, "seatwright_fabric_subnet differs between hosts"),
    ],
)
def test_plan_runs_the_fleet_checks_of_preflight(change, words):
    nodes = example_nodes()
    nodes[1] = dict(nodes[1], **change)
    with pytest.raises(SeatError, match=words):
        plan("glm53-vendor", nodes)


def _recorded_vllm_sm120(**changes):
    facts = json.loads((ROOT / "images" / "facts" / "vllm-sm120.json").read_text())
    facts.update(changes, recorded_in="images/facts/vllm-sm120.json")
    return {"vllm-sm120": facts}


def test_glm53_plans_against_the_built_images_patch_with_only_the_operators_pins_open():
    result = make_plan(seat_data("glm53"), SCHEMA, "glm53", example_nodes(), "seats/glm53.yml", _recorded_vllm_sm120())
    gate = next(rule for rule in result["rules"] if rule["id"] == "nope-mla-backend-gate")
    assert "check nope-mla-sm120 passed" in gate["details"][0]
    assert [item.split(":")[0] for item in result["unknowns"]] == ["model.revision", "model.repo"]


def test_glm53_is_refused_by_the_gate_when_the_image_lacks_the_fix_2_patch():
    with pytest.raises(SeatError) as caught:
        make_plan(
            seat_data("glm53"), SCHEMA, "glm53", example_nodes(), "seats/glm53.yml", _recorded_vllm_sm120(patches=[])
        )
    assert "rule nope-mla-backend-gate: image seatwright/vllm-sm120" in str(caught.value)
    assert "not sm120-nope-mla-fa2" in str(caught.value)
