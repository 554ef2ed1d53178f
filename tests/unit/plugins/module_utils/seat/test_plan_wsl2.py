"""The five seats of field report [003] planned on inventory/example-wsl2, the field's node (one Windows 11
workstation, WSL 2 with Docker Desktop, two RTX PRO 6000 Max-Q at 300 W, driver 610.88), with the field's
revisions, image digests and served contexts; each verdict names what is still unknown. And a seat across
nodes with a rank on a WSL2 node is refused, naming why."""

import json

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.node.kind import NODE_KIND_ENV, wsl2_nccl_env
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.container import docker_run_argv
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.needs import classify
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.plan import make_plan
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.recipe import recipe_from_text
from conftest import ROOT, load_script

render_seats = load_script("tools/render_seats.py")

SCHEMA = json.loads((ROOT / "schemas" / "seat.schema.json").read_text())
INVENTORY = ROOT / "inventory" / "example-wsl2"

# [003]'s pinned configurations: seat, exact revision, image digest, served context.
FIELD = [
    ("qwen35-122b", "98915d837c4e7c87ac8296d02e89de19b3207e6d", "bebcf9576b17", 262144),
    ("nemotron3-super", "4f0cf9daaeb7a4d5e23f80a00e7ed15f0e03caf6", "bebcf9576b17", 65536),
    ("laguna-s21", "07614121b31898586430f189d27a25a0be310843", "e4f88a835143", 262144),
    ("deepseek-v4-flash", "7872f01b1d1fe23eabc4c98b48bffcef5a386062", "0aa5324c4f38", 32768),
    ("inkling-small", "b6a99534467840620d411e4cd4ad5819b2610d9c", "6a8afc5ca003", 32768),
]


def plan_on(seat, nodes):
    source = "seats/%s.yml" % seat
    data = recipe_from_text((ROOT / source).read_text(), source)
    recorded = render_seats.recorded_image_facts(data, str(ROOT / "images" / "facts"))
    return make_plan(data, SCHEMA, seat, nodes, source, recorded_images=recorded)


def test_the_inventory_declares_the_field_node():
    (node,) = render_seats.inventory_nodes(INVENTORY)
    assert node["host"] == "wsl-node" and node["seatwright_node_kind"] == "wsl2"
    assert node["seatwright_node_gpu_profile"] == "rtx-pro-6000-maxq" and node["seatwright_node_gpu_count"] == 2
    assert node["gpu_power_limit_w"] == 300 and node["seatwright_node_rdma_devices"] == []


@pytest.mark.parametrize("seat, revision, digest, context", FIELD, ids=[row[0] for row in FIELD])
def test_each_field_seat_plans_on_the_wsl2_node(seat, revision, digest, context):
    plan = plan_on(seat, render_seats.inventory_nodes(INVENTORY))
    assert plan["verdict"] in ("fits", "unknown"), plan["blockers"]
    assert plan["refusals"] == []
    (host,) = plan["hosts"]
    assert (host["host"], host["kind"], host["kind_source"]) == ("wsl-node", "wsl2", "inventory")
    assert plan["model"]["revision"] == revision
    assert plan["engine"]["image"]["digest"].startswith("sha256:" + digest)
    assert plan["serving"]["max_model_len"] == context
    (rank,) = plan["ranks"]
    # The field's portable GPU contract: both cards by a quoted device request, numbered from 0 inside.
    assert rank["container_spec"]["gpus"]["device_ids"] == ["0", "1"]
    argv = docker_run_argv(rank["container_spec"], "/etc/seatwright/seat.env", shown=True)
    assert argv[argv.index("--gpus") + 1] == '"device=0,1"'
    assert rank["env"]["CUDA_VISIBLE_DEVICES"] == "0,1"
    # Served offline from the verified cache, with the WSL2 NCCL contract.
    assert rank["env"]["HF_HUB_OFFLINE"] == "1"
    assert {name: rank["env"][name] for name in wsl2_nccl_env()} == wsl2_nccl_env()
    # The node's kind, which the sglang-sm120 image's wsl2-logits-symm-mem guard reads.
    assert rank["env"][NODE_KIND_ENV] == "wsl2"


@pytest.mark.parametrize("seat", [row[0] for row in FIELD])
def test_each_verdict_names_what_is_still_unknown(seat):
    plan = plan_on(seat, render_seats.inventory_nodes(INVENTORY))
    assert plan["ready"] is False and plan["unknowns"]
    needs = [classify(text) for text in plan["unknowns"]]
    assert all(need["kind"] in ("operator pin", "engineering gap") for need in needs), needs
    # Each seat's digest is pinned, its repository is not: [003] names no image repository.
    assert any(need["subject"] == "image repository" for need in needs)


def test_a_linux_node_plans_without_the_wsl2_contract():
    (node,) = render_seats.inventory_nodes(INVENTORY)
    linux = dict(node, seatwright_node_kind="linux")
    plan = plan_on("laguna-s21", [linux])
    assert plan["hosts"][0]["kind"] == "linux"
    assert "NCCL_P2P_DISABLE" not in plan["ranks"][0]["env"]
    assert NODE_KIND_ENV not in plan["ranks"][0]["env"]


def test_cached_facts_of_the_node_decide_its_kind():
    (node,) = render_seats.inventory_nodes(INVENTORY)
    cached = dict(node, seatwright_node_kind=None, seatwright_host_kind={"kind": "wsl2", "source": "node"})
    plan = plan_on("laguna-s21", [cached])
    assert (plan["hosts"][0]["kind"], plan["hosts"][0]["kind_source"]) == ("wsl2", "facts")


def test_a_seat_across_nodes_with_a_wsl2_rank_is_refused_with_the_reason():
    nodes = render_seats.inventory_nodes(ROOT / "inventory" / "example")
    nodes[0] = dict(nodes[0], seatwright_node_kind="wsl2")
    plan = plan_on("glm53-vendor", nodes)
    refusal = next(item for item in plan["refusals"] if item["id"] == "wsl2-single-node")
    assert refusal["detail"].startswith("node-a is a WSL2 node")
    assert "single-node seat host" in refusal["reason"]
    assert any("refused by rule wsl2-single-node" in line for line in plan["blockers"])
    assert plan["launchable"] is False
