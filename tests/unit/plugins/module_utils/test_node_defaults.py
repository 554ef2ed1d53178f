"""Node defaults that did not come from the field carry their source into the plan (issue 11)."""

import re

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.defaults import (
    COLLECT_PATTERN,
    LABELLED_DEFAULTS,
    default_origins,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.plan import make_plan, plan_lines
from seat_cases import SCHEMA, example_nodes, seat_data

MTU, THRESHOLD, BRANCH = LABELLED_DEFAULTS


@pytest.mark.parametrize("item", LABELLED_DEFAULTS, ids=lambda item: item.name)
def test_labelled_default_names_its_source_and_is_collected(item):
    assert re.search(r"docs/field\.md#[a-z0-9-]+", item.source), item.source
    assert re.match(COLLECT_PATTERN, item.name)


def host(name, rdma=True, **settings):
    return dict({"host": name, "seatwright_node_rdma_devices": ["mlx5_0"] if rdma else []}, **settings)


@pytest.mark.parametrize(
    "hosts,expected",
    [
        # Nothing set in the inventory: every host runs the defaults, each with its label, one entry for both.
        (
            [host("node-a"), host("node-b")],
            [
                ("fabric MTU (bytes) on node-a, node-b", 9000, MTU.source),
                ("bandwidth probe threshold (fraction of line rate) on node-a, node-b", 0.9, THRESHOLD.source),
                ("NVIDIA driver branch on node-a, node-b", "580", BRANCH.source),
            ],
        ),
        # The inventory's value is shown as the inventory's, the other host keeps the labelled default.
        (
            [host("node-a", rdma_fabric_mtu=4200), host("node-b")],
            [
                ("fabric MTU (bytes) on node-a", 4200, "inventory"),
                ("fabric MTU (bytes) on node-b", 9000, MTU.source),
                ("bandwidth probe threshold (fraction of line rate) on node-a, node-b", 0.9, THRESHOLD.source),
                ("NVIDIA driver branch on node-a, node-b", "580", BRANCH.source),
            ],
        ),
        # A lowered threshold carries the reason the inventory gives for it; a null MTU is left alone.
        (
            [
                host(
                    "node-a",
                    rdma_fabric_probe_threshold=0.6,
                    rdma_fabric_probe_threshold_reason="bonded 2x100G",
                    rdma_fabric_mtu=None,
                    nvidia_driver_branch="610",
                )
            ],
            [
                (
                    "fabric MTU (bytes) on node-a",
                    None,
                    "inventory (rdma_fabric_mtu is null: the MTU is left as the node has it)",
                ),
                ("bandwidth probe threshold (fraction of line rate) on node-a", 0.6, "inventory: bonded 2x100G"),
                ("NVIDIA driver branch on node-a", "610", "inventory"),
            ],
        ),
        # The role sets no MTU on a node without RDMA devices, so the plan claims none.
        (
            [host("node-a", rdma=False)],
            [
                ("bandwidth probe threshold (fraction of line rate) on node-a", 0.9, THRESHOLD.source),
                ("NVIDIA driver branch on node-a", "580", BRANCH.source),
            ],
        ),
    ],
)
def test_default_origins(hosts, expected):
    assert [(item["what"], item["value"], item["source"]) for item in default_origins(hosts)] == expected


@pytest.mark.parametrize("seat,hosts", [("glm53", ["node-a", "node-b"]), ("qwen35-122b", ["node-a"])])
def test_plan_shows_the_seat_nodes_defaults_with_their_source(seat, hosts):
    plan = make_plan(seat_data(seat), SCHEMA, seat, example_nodes(), "seats/%s.yml" % seat)
    shown = {item["what"]: (item["value"], item["source"]) for item in plan["provenance"]}
    on = ", ".join(hosts)
    assert shown["fabric MTU (bytes) on %s" % on] == (9000, MTU.source)
    assert shown["NVIDIA driver branch on %s" % on] == ("580", BRANCH.source)
    assert "not from the field: bandwidth probe threshold (fraction of line rate) on %s 0.9 (%s)" % (
        on,
        THRESHOLD.source,
    ) in plan_lines(plan)
