"""node/drain.py: what a converge does with the seats on the nodes it disrupts (issue 52)."""

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.seatwright.fleet.plugins.filter.drain_plan import drain_plan
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import DrainError
from ansible_collections.seatwright.fleet.plugins.module_utils.node import drain

ORDER = ["node-a", "node-b", "node-c"]
DRIVER = {"kind": "driver", "detail": "driver 570.86.15 is loaded, branch 580 is wanted"}
IMAGE = {"kind": "engine_image", "image": "seatwright/vllm-cpu:new", "detail": "tag new"}


def seat(hosts, image="seatwright/vllm-cpu:c3df6602063ae109", cotenants=None, gpus=None, planned=True):
    return {"hosts": hosts, "image": image, "cotenants": cotenants or {}, "gpus": gpus or {}, "planned": planned}


# The lab as make lab leaves it: lab and lab-allcores on node-a (lab's co-tenant restored on teardown),
# lab-tp2 across node-a and node-b; production on lab-allcores after the promotion.
LAB = {
    "lab": seat(["node-a"], cotenants={"node-a": ["lab-cotenant"]}),
    "lab-allcores": seat(["node-a"]),
    "lab-tp2": seat(["node-a", "node-b"]),
}


def steps(plan, batch=0):
    return [
        (s["step"], s.get("seat") or s.get("alias") or ",".join(s.get("hosts", [])))
        for s in plan["batches"][batch]["steps"]
    ]


@pytest.mark.parametrize(
    "aliases, drain_asked, refused_words",
    [
        # The alias served by a second seat on another node: moved, no consent needed.
        ({"production": {"lab": 100, "other": 0}}, False, []),
        # Nobody else serves it: refused, naming the seat and the alias.
        ({"production": {"lab": 100}}, False, ["seat lab", "alias production", "seatwright_drain=true"]),
        # The operator asked for the drain: torn down, alias unserved until the seat is back.
        ({"production": {"lab": 100}}, True, []),
        # A seat serving no alias at all: its clients reach it directly, so it needs the operator's word.
        ({}, False, ["seat lab", "serves no router alias"]),
        ({}, True, []),
    ],
)
def test_a_serving_seat_is_moved_torn_down_or_refused(aliases, drain_asked, refused_words):
    live = {"lab": seat(["node-a"], cotenants={"node-a": ["lab-cotenant"]}), "other": seat(["node-b"])}
    plan = drain.drain_plan(ORDER, {"node-a": [DRIVER]}, live, aliases, drain=drain_asked)
    text = " ".join(plan["refusals"])
    for word in refused_words:
        assert word in text
    assert bool(plan["refusals"]) == bool(refused_words)
    assert plan["drain_hosts"] == ["node-a"] and plan["batch_sizes"] == [1]
    kinds = [s[0] for s in steps(plan)]
    moved = "other" in aliases.get("production", {})
    assert kinds == (["move"] if moved else []) + ["teardown", "change", "check", "bringup"] + (
        ["restore-alias"] if moved else []
    )


def test_the_move_takes_the_seats_share_to_a_standby_and_the_restore_puts_it_back():
    live = {"lab": seat(["node-a"]), "lab-allcores": seat(["node-b"])}
    plan = drain.drain_plan(ORDER, {"node-a": [DRIVER]}, live, {"production": {"lab": 100, "lab-allcores": 0}})
    move = plan["batches"][0]["steps"][0]
    assert move["targets"] == {"lab": 0, "lab-allcores": 100} and move["to"] == ["lab-allcores"]
    restore = plan["batches"][0]["steps"][-1]
    assert restore["targets"] == {"lab": 100, "lab-allcores": 0}
    # The alias label (monitoring) goes back onto the seats the router sends the alias to again.
    assert restore["to"] == ["lab"]


def test_an_alias_split_over_seats_is_labelled_on_every_seat_that_serves_it():
    live = {"a": seat(["node-a"]), "b": seat(["node-b"]), "c": seat(["node-b"])}
    plan = drain.drain_plan(ORDER, {"node-a": [DRIVER]}, live, {"production": {"a": 50, "b": 30, "c": 20}})
    steps_made = plan["batches"][0]["steps"]
    assert steps_made[0]["to"] == ["b", "c"]
    assert steps_made[-1]["step"] == "restore-alias" and steps_made[-1]["to"] == ["a", "b", "c"]


def test_the_share_a_standby_takes_stays_within_the_routers_weights():
    live = {"a": seat(["node-a"]), "b": seat(["node-a"]), "c": seat(["node-b"])}
    plan = drain.drain_plan(ORDER, {"node-a": [DRIVER]}, live, {"production": {"a": 100, "b": 100, "c": 0}})
    assert plan["batches"][0]["steps"][0]["targets"] == {"a": 0, "b": 0, "c": 100}


def test_a_seat_on_the_same_node_is_no_place_to_move_an_alias():
    # make lab's own state: both one-node seats on node-a, so production has nowhere to go.
    plan = drain.drain_plan(ORDER, {"node-a": [DRIVER]}, LAB, {"production": {"lab": 0, "lab-allcores": 100}})
    text = " ".join(plan["refusals"])
    assert "seat lab-allcores (on node-a) serves alias production" in text
    assert "seat lab (on node-a) serves no router alias" in text
    assert "seat lab-tp2 (on node-a, node-b) serves no router alias" in text


def test_a_seat_spanning_two_nodes_drains_whole_in_one_batch():
    plan = drain.drain_plan(ORDER, {"node-a": [DRIVER]}, LAB, {"production": {"lab-allcores": 100}}, drain=True)
    assert plan["refusals"] == []
    # node-b joins node-a's batch although nothing changes on it: lab-tp2 comes down and back on both.
    assert plan["batches"][0]["hosts"] == ["node-a", "node-b"] and plan["batch_sizes"] == [2]
    teardown = [s for s in plan["batches"][0]["steps"] if s["step"] == "teardown"]
    assert [(s["seat"], s["hosts"]) for s in teardown] == [
        ("lab", ["node-a"]),
        ("lab-allcores", ["node-a"]),
        ("lab-tp2", ["node-a", "node-b"]),
    ]
    assert teardown[0]["cotenants"] == {"node-a": ["lab-cotenant"]}
    assert teardown[1]["stranded"] == ["production"]
    assert plan["batches"][1]["hosts"] == ["node-c"] and plan["batches"][1]["steps"] == []


def test_batches_run_in_order_and_never_split_a_seat():
    live = {"wide": seat(["node-b", "node-c"]), "one": seat(["node-a"])}
    pending = {host: [DRIVER] for host in ORDER}
    plan = drain.drain_plan(ORDER, pending, live, {}, drain=True, batch_size=1)
    assert [b["hosts"] for b in plan["batches"]] == [["node-a"], ["node-b", "node-c"]]
    plan = drain.drain_plan(ORDER, pending, live, {}, drain=True, batch_size=3)
    assert [b["hosts"] for b in plan["batches"]] == [ORDER]


@pytest.mark.parametrize(
    "change, image, hit",
    [
        (IMAGE, "seatwright/vllm-cpu:c3df6602063ae109", True),
        (IMAGE, "seatwright/sglang-cpu:1", False),
        # A registry port's colon is not a tag's.
        ({"kind": "engine_image", "image": "reg:5000/vllm:new"}, "reg:5000/vllm:old", True),
        ({"kind": "power_cap", "gpus": [0]}, None, False),  # a CPU seat holds no GPU
        ({"kind": "mtu"}, None, True),
        ({"kind": "docker"}, None, True),
    ],
)
def test_what_each_change_reaches(change, image, hit):
    live = {"s": seat(["node-a"], image=image)}
    assert drain.affected("node-a", [change], live) == (["s"] if hit else [])


def test_a_power_cap_reaches_the_seats_on_its_gpus():
    live = {"g": seat(["node-a"], gpus={"node-a": [0, 1]}), "h": seat(["node-a"], gpus={"node-a": [2]})}
    assert drain.affected("node-a", [{"kind": "power_cap", "gpus": [1]}], live) == ["g"]


def test_the_router_node_going_down_needs_the_operators_word():
    plan = drain.drain_plan(ORDER, {"node-a": [DRIVER]}, {}, {}, router_node="node-a")
    assert "the router runs here" in plan["refusals"][0] and plan["drain_hosts"] == ["node-a"]
    assert drain.drain_plan(ORDER, {"node-a": [DRIVER]}, {}, {}, drain=True, router_node="node-a")["refusals"] == []
    # An image change does not restart the router's process.
    assert drain.drain_plan(ORDER, {"node-a": [IMAGE]}, {}, {}, router_node="node-a")["drain_hosts"] == []


def test_a_seat_without_a_plan_or_with_a_node_out_of_reach_is_refused_even_when_drain_is_asked():
    live = {"lab": seat(["node-a"], planned=False), "tp": seat(["node-a", "node-z"])}
    text = " ".join(drain.drain_plan(ORDER, {"node-a": [DRIVER]}, live, {}, drain=True)["refusals"])
    assert "seat lab (on node-a): no plan of it is recorded" in text
    assert "seat tp spans node-z, which this run does not reach" in text


def test_describe_lists_the_batches_and_steps_in_order():
    live = {"lab": seat(["node-a"], cotenants={"node-a": ["lab-cotenant"]}), "lab-allcores": seat(["node-b"])}
    plan = drain.drain_plan(
        ORDER, {"node-a": [DRIVER], "node-c": [DRIVER]}, live, {"production": {"lab": 100, "lab-allcores": 0}}
    )
    assert drain.describe(plan) == [
        "batch 1: node-a: drain",
        "  1. move alias production from lab to lab-allcores (lab 0, lab-allcores 100)",
        "  2. tear seat lab down on node-a, restoring co-tenants lab-cotenant on node-a",
        "  3. make the changes: node-a: driver (driver 570.86.15 is loaded, branch 580 is wanted)",
        "  4. check node-a",
        "  5. bring seat lab back on node-a from its plan",
        "  6. put alias production back (lab 100, lab-allcores 0)",
        "batch 2: node-b: no disruptive change pending",
        "batch 3: node-c: no serving seat is touched, converges as usual",
    ]


@pytest.mark.parametrize(
    "kind, version, tests, done, kinds",
    [
        ("linux", "580.95.05", [], [], []),
        ("linux", "570.86.15", [], [], ["driver"]),
        ("wsl2", "570.86.15", [], [], []),  # the Windows host's driver: never changed here
        ("linux", None, [], [], []),  # a first install: nothing can be serving yet
        ("linux", "580.95.05", [{"kind": "driver", "id": "lab-590"}], [], ["driver"]),
        ("linux", "580.95.05", [{"kind": "driver", "id": "lab-590"}], ["lab-590"], []),
    ],
)
def test_pending_changes(kind, version, tests, done, kinds):
    found = drain.pending_changes("node-a", kind, version, "580", tests, done)
    assert [c["kind"] for c in found] == kinds


@pytest.mark.parametrize(
    "call, words",
    [
        (lambda: drain.affected("node-a", [{"kind": "reboot"}], {}), "is not one of"),
        (lambda: drain.affected("node-a", [{"kind": "engine_image"}], {}), "needs the image repository"),
        (lambda: drain.drain_plan(ORDER, {}, {"s": {"hosts": []}}, {}), "live seat s: needs the hosts"),
        (lambda: drain.drain_plan(ORDER, {}, {}, {"production": "lab"}), "router alias production"),
        (lambda: drain.batches(ORDER, {}, {}, 0), "seatwright_serial 0"),
        (lambda: drain.pending_changes("node-a", "linux", None, "580", [{"kind": "driver"}]), "needs an id"),
    ],
)
def test_bad_input_is_named(call, words):
    with pytest.raises(DrainError, match=words):
        call()


def test_a_docker_ps_line_of_the_wrong_shape_is_named():
    with pytest.raises(DrainError, match="docker ps line 1: .* has 3 columns"):
        drain.parse_seat_containers("a\tb\tc\n")


def test_live_seats_take_their_hosts_and_gpus_from_the_plan_and_their_cotenants_from_the_record():
    running = [{"name": "x", "image": "seatwright/vllm-cpu:c3df", "running": True, "seat": "lab-tp2", "rank": 0}]
    nodes = {
        "node-a": {
            "containers": running
            + [{"name": "y", "image": "seatwright/vllm-cpu:c3df", "running": True, "seat": "lab", "rank": 0}]
            + [{"name": "z", "image": "i", "running": False, "seat": "gone", "rank": 0}],
            "cotenants": {"seat": "lab", "entries": [{"name": "lab-cotenant", "was_running": True}]},
        },
        "node-b": {"containers": [dict(running[0], rank=1)], "cotenants": None},
    }
    plans = {"lab-tp2": {"ranks": [{"host": "node-a", "gpus": [0]}, {"host": "node-b", "gpus": [1]}]}, "lab": None}
    live = drain.live_seats(nodes, plans)
    assert sorted(live) == ["lab", "lab-tp2"]  # a stopped container serves nothing
    assert live["lab-tp2"]["hosts"] == ["node-a", "node-b"] and live["lab-tp2"]["gpus"] == {
        "node-a": [0],
        "node-b": [1],
    }
    assert live["lab"]["cotenants"] == {"node-a": ["lab-cotenant"]} and live["lab"]["planned"] is False


def test_a_node_s_cotenants_come_back_with_the_last_of_their_holders_in_teardown_order():
    seat = {"image": "i", "running": True, "rank": 0}
    record = {
        "seat": "lab",
        "holders": ["lab", "lab-tp2", "gone"],
        "entries": [{"name": "lab-omni", "was_running": True}],
    }
    containers = [dict(seat, name="a", seat="lab"), dict(seat, name="b", seat="lab-tp2")]
    nodes = {"node-a": {"containers": containers, "cotenants": record}}
    live = drain.live_seats(nodes, {})
    assert live["lab-tp2"]["cotenants"] == {"node-a": ["lab-omni"]} and live["lab"]["cotenants"] == {}


def test_test_input_problem():
    assert drain.test_input_problem("node-a", [], False, "example") is None
    assert drain.test_input_problem("node-a", [{"id": "x"}], True, "lab") is None
    assert "lab test equipment" in drain.test_input_problem("node-a", [{"id": "x"}], True, "fleet")


def _lab_hostvars(driver="580.159.04", facts=True):
    running = {"name": "seatwright-lab-rank0", "image": "seatwright/vllm-cpu:c3df", "running": True, "rank": 0}
    node_a = {
        "docker": True,
        "containers": [dict(running, seat="lab"), dict(running, name="seatwright-lab-tp2-rank0", seat="lab-tp2")],
        "cotenants": {"seat": "lab", "entries": [{"name": "lab-cotenant", "kind": "container", "was_running": True}]},
        "done": [],
    }
    node_b = {
        "docker": True,
        "containers": [dict(running, name="x", seat="lab-allcores")],
        "cotenants": None,
        "done": [],
    }
    gpu = {"seatwright_gpu_summary": {"driver_version": driver}}
    return {
        "node-a": {"ansible_facts": gpu, "seatwright_drain_node": node_a if facts else None},
        "node-b": {
            "ansible_facts": gpu,
            "seatwright_drain_node": node_b if facts else None,
            "nvidia_driver_branch": 580,
        },
    }


def test_the_filter_reads_the_plans_and_the_listing(tmp_path):
    (tmp_path / "lab.json").write_text('{"ranks": [{"host": "node-a", "gpus": []}]}')
    (tmp_path / "lab-tp2.json").write_text(
        '{"ranks": [{"host": "node-a", "gpus": []}, {"host": "node-b", "gpus": []}]}'
    )
    (tmp_path / "lab-allcores.json").write_text('{"ranks": [{"host": "node-b", "gpus": []}]}')
    listing = {
        "production": {"lab": {"api_base": "http://a/v1", "weight": 100}, "lab-allcores": {"api_base": "http://b/v1"}}
    }
    simulated = {"node-a": [{"kind": "driver", "id": "lab-driver-590", "detail": "simulated"}]}
    hosts = ["node-a", "node-b"]
    # The first pass, before any node is read: only what is pending.
    first = drain_plan(hosts, _lab_hostvars(facts=False), "580", test_changes=simulated)
    assert list(first["pending"]) == ["node-a"] and first["drain_hosts"] == [] and first["lines"]
    plan = drain_plan(hosts, _lab_hostvars(), "580", str(tmp_path), listing, "node-a", False, 1, simulated)
    # lab-tp2 serves no alias and spans node-b: refused without seatwright_drain, the whole seat named.
    # The router runs on node-a and a driver change may reboot it: named first.
    assert plan["refusals"][0].startswith("node node-a: the router runs here") and plan["refusals"][1:] == [
        "seat lab-tp2 (on node-a, node-b) serves no router alias, so its clients would lose it during the change; "
        "set -e seatwright_drain=true to tear it down (co-tenants restored) and bring it back after"
    ]
    plan = drain_plan(hosts, _lab_hostvars(), "580", str(tmp_path), listing, "node-a", True, 1, simulated)
    assert plan["refusals"] == [] and plan["batch_sizes"] == [2]
    move = plan["batches"][0]["steps"][0]
    assert move["router_targets"] == {
        "lab": {"api_base": "http://a/v1", "weight": 0},
        "lab-allcores": {"api_base": "http://b/v1", "weight": 100},
    }
    assert move["metrics_urls"] == {"lab": "http://a/metrics"}
    assert plan["batches"][0]["steps"][-1]["router_targets"]["lab"]["weight"] == 100
    # Once the node records the simulated change as made, nothing is pending and nothing is drained.
    made = _lab_hostvars()
    made["node-a"]["seatwright_drain_node"]["done"] = ["lab-driver-590"]
    assert drain_plan(hosts, made, "580", str(tmp_path), listing, "node-a", True, 1, simulated)["drain_hosts"] == []


def test_the_filter_names_an_unreadable_plan(tmp_path):
    (tmp_path / "lab.json").write_text("{not json")
    with pytest.raises(AnsibleFilterError, match="the plan of live seat lab .* cannot be read"):
        drain_plan(["node-a", "node-b"], _lab_hostvars(driver="570.86.15"), "580", str(tmp_path))
