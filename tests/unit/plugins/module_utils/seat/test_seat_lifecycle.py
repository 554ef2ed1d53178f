"""Pure decisions of the seat lifecycle: co-tenant eviction and restore, readiness, read-back, transports."""

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError
from ansible_collections.seatwright.fleet.plugins.module_utils.fabric.nccl import engine_transports
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.cotenants import (
    check_cotenants,
    eviction_plan,
    merge_record,
    release,
    restore_actions,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.readiness import (
    engine_pids,
    last_lines,
    ray_alive_verdict,
    readiness_verdict,
    root_cause,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.running import (
    compare_running,
    container_name,
    nccl_env_drift,
    parse_env_file,
    redact_env,
)
from conftest import FIXTURES

OMNI = {"name": "omni", "kind": "container", "gpus": "all"}
EMBED = {"name": "embedder", "kind": "systemd", "gpus": [1]}
ROUTER = {"name": "router.service", "kind": "systemd", "gpus": [0]}


# ------------------------------------------------------------------ co-tenants


@pytest.mark.parametrize(
    "declared,exclusive,seat_gpus,stopped,kept",
    [
        ([OMNI, EMBED], True, [0, 1], ["omni", "embedder.service"], []),
        ([OMNI, EMBED], True, [0], ["omni"], ["embedder.service"]),
        ([OMNI, EMBED, ROUTER], True, [0], ["omni", "router.service"], ["embedder.service"]),
        # A CPU seat needs no GPU, but an exclusive seat still takes the node from one that claims all.
        ([OMNI, EMBED], True, [], ["omni"], ["embedder.service"]),
        ([OMNI, EMBED], False, [0, 1], [], ["omni", "embedder.service"]),
        (None, True, [0, 1], [], []),
        ([], True, [0, 1], [], []),
    ],
)
def test_eviction_plan(declared, exclusive, seat_gpus, stopped, kept):
    plan = eviction_plan("node-a", declared, seat_gpus, exclusive)
    assert [item["name"] for item in plan["stop"]] == stopped
    assert [item["name"] for item in plan["keep"]] == kept
    assert all(item["reason"] for item in plan["stop"] + plan["keep"])


@pytest.mark.parametrize(
    "declared,message",
    [
        ("omni", "seatwright_node_cotenants is str; expected a list"),
        ([{"name": "omni", "kind": "podman", "gpus": "all"}], "[0].kind is 'podman'; expected container or systemd"),
        ([{"name": "omni", "kind": "container", "gpus": []}], "[0].gpus is []; expected all, or a non-empty list"),
        ([{"name": "omni", "kind": "container", "gpus": [True]}], "[0].gpus is [True]"),
        ([{"name": "om ni; rm -rf /", "kind": "container", "gpus": "all"}], "[0].name is 'om ni; rm -rf /'"),
        ([OMNI, OMNI], "[1].name omni is declared twice"),
        ([dict(OMNI, gpu="all")], "[0]: unknown field gpu; allowed: name, kind, gpus"),
        (["omni"], "[0] is 'omni'; expected a mapping"),
    ],
)
def test_bad_cotenants_are_named(declared, message):
    with pytest.raises(SeatError) as caught:
        check_cotenants("node-b", declared)
    assert message in str(caught.value)
    assert "host node-b" in str(caught.value) and "host_vars/node-b.yml" in str(caught.value)


def test_systemd_names_get_their_suffix():
    assert check_cotenants("n", [EMBED])[0]["name"] == "embedder.service"


@pytest.mark.parametrize(
    "existing,observed,expected",
    [
        # First eviction: what is observed now is the prior state.
        (
            None,
            [
                {"name": "omni", "kind": "container", "running": True},
                {"name": "batch", "kind": "container", "running": False},
            ],
            {"omni": True, "batch": False},
        ),
        # A second run (seat up, or a failed bring-up that never restored) sees omni stopped by us:
        # the first record wins, so the restore still starts it.
        (
            {
                "format": "seatwright-cotenants/1",
                "host": "n",
                "seat": "lab",
                "entries": [{"name": "omni", "kind": "container", "was_running": True}],
            },
            [{"name": "omni", "kind": "container", "running": False}],
            {"omni": True},
        ),
        (
            {
                "format": "seatwright-cotenants/1",
                "host": "n",
                "seat": "lab",
                "entries": [{"name": "omni", "kind": "container", "was_running": True}],
            },
            [
                {"name": "omni", "kind": "container", "running": False},
                {"name": "extra", "kind": "systemd", "running": True},
            ],
            {"omni": True, "extra": True},
        ),
    ],
)
def test_merge_record_keeps_the_first_prior_state(existing, observed, expected):
    record = merge_record("n", "lab", existing, observed)
    assert {e["name"]: e["was_running"] for e in record["entries"]} == expected
    assert record["format"] == "seatwright-cotenants/1"


def _record(seat="lab", holders=None, running=True):
    record = {
        "format": "seatwright-cotenants/1",
        "host": "n",
        "seat": seat,
        "entries": [{"name": "omni", "kind": "container", "was_running": running}],
    }
    if holders is not None:
        record["holders"] = holders
    return record


def test_a_cotenant_started_since_the_record_is_brought_back_by_the_run_that_stops_it():
    # The seat came up while omni was stopped; omni was started by hand; the seat is brought up again.
    record = merge_record("n", "lab", _record(running=False), [{"name": "omni", "kind": "container", "running": True}])
    assert record["entries"] == [{"name": "omni", "kind": "container", "was_running": True}]


@pytest.mark.parametrize(
    "existing,seat,observed,holders",
    [
        (None, "lab", [{"name": "omni", "kind": "container", "running": True}], ["lab"]),
        (_record(), "lab-allcores", [{"name": "omni", "kind": "container", "running": False}], ["lab", "lab-allcores"]),
        (_record(holders=["a", "lab"]), "lab", [{"name": "omni", "kind": "container", "running": False}], ["a", "lab"]),
        # A seat that stops nothing (not exclusive, no GPU shared) holds nothing.
        (_record(), "resident", [], ["lab"]),
    ],
)
def test_every_seat_that_stops_the_cotenants_holds_them(existing, seat, observed, holders):
    assert merge_record("n", seat, existing, observed)["holders"] == holders


@pytest.mark.parametrize(
    "record,seat,running,restore,left",
    [
        (_record(holders=["lab"]), "lab", set(), True, []),
        (_record(holders=["lab", "lab-allcores"]), "lab", {"lab-allcores"}, False, ["lab-allcores"]),
        (_record(holders=["lab", "lab-allcores"]), "lab", None, False, ["lab-allcores"]),
        # A holder whose containers are gone (crashed, removed by hand) holds nothing.
        (_record(holders=["lab", "lab-allcores"]), "lab", {"lab-tp2"}, True, []),
        # A record from before holders: its seat holds it.
        (_record(seat="lab-tp2"), "lab", {"lab-tp2"}, False, ["lab-tp2"]),
        (_record(seat="lab-tp2"), "lab-tp2", {"lab"}, True, []),
        # A seat that holds nothing going down leaves them with their holder.
        (_record(holders=["lab"]), "other", {"lab"}, False, ["lab"]),
    ],
)
def test_cotenants_come_back_only_when_no_holder_runs(record, seat, running, restore, left):
    decided = release(record, seat, running)
    assert (decided["restore"], decided["holders"]) == (restore, left)
    if not restore:
        assert ", ".join(left) in decided["reason"]


@pytest.mark.parametrize("holders", ["lab", [1], ["x;y"]])
def test_a_record_with_malformed_holders_is_refused(holders):
    with pytest.raises(SeatError, match="holders .* are not a list of seat names"):
        restore_actions("node-a", _record(holders=holders), {})


@pytest.mark.parametrize(
    "entries,observed,starts",
    [
        ([("omni", True)], {"omni": False}, ["omni"]),
        ([("omni", True)], {"omni": True}, []),
        ([("omni", False)], {"omni": False}, []),
        ([("omni", True), ("batch", False), ("embed.service", True)], {}, ["omni", "embed.service"]),
    ],
)
def test_restore_starts_only_what_was_running(entries, observed, starts):
    record = {
        "format": "seatwright-cotenants/1",
        "host": "n",
        "seat": "lab",
        "entries": [
            {"name": n, "kind": "systemd" if n.endswith(".service") else "container", "was_running": r}
            for n, r in entries
        ],
    }
    actions = restore_actions("n", record, observed)
    assert [a["name"] for a in actions if a["action"] == "start"] == starts
    assert len(actions) == len(entries)


@pytest.mark.parametrize(
    "record",
    [
        {"format": "other/1", "entries": []},
        {"format": "seatwright-cotenants/1", "entries": [{"name": "x", "kind": "container"}]},
        {"format": "seatwright-cotenants/1", "entries": [{"name": "x;y", "kind": "container", "was_running": True}]},
        ["not", "a", "record"],
    ],
)
def test_a_foreign_record_is_refused(record):
    with pytest.raises(SeatError, match="restore the services by hand"):
        restore_actions("node-a", record, {})


def test_no_record_restores_nothing():
    assert restore_actions("n", None, {}) == []


# ------------------------------------------------------------------ readiness

RUNNING = [{"host": "node-a", "name": "seatwright-lab-rank0", "running": True, "exit_code": 0}]
EXITED = [{"host": "node-a", "name": "seatwright-lab-rank0", "running": False, "exit_code": 1}]


@pytest.mark.parametrize(
    "probe,elapsed,state",
    [
        ({"containers": RUNNING, "health_status": 200, "models": ["lab"]}, 50, "ready"),
        # The clock has run out but the engine just became ready: ready wins.
        ({"containers": RUNNING, "health_status": 200, "models": ["lab"]}, 400, "ready"),
        ({"containers": RUNNING, "health_status": None, "models": None, "error": "connection refused"}, 10, "waiting"),
        ({"containers": RUNNING, "health_status": 503, "models": None}, 10, "waiting"),
        ({"containers": RUNNING, "health_status": None, "models": None}, 300, "timeout"),
        # A dead container ends the wait at once, whatever the clock says.
        ({"containers": EXITED, "health_status": None, "models": None}, 3, "exited"),
        (
            {
                "containers": RUNNING + [dict(EXITED[0], host="node-b", name="seatwright-lab-rank1")],
                "health_status": None,
                "models": None,
            },
            3,
            "exited",
        ),
        ({"containers": [], "health_status": None, "models": None}, 3, "exited"),
        ({"containers": RUNNING, "health_status": 200, "models": ["other"]}, 50, "exited"),
    ],
)
def test_readiness_verdict(probe, elapsed, state):
    verdict = readiness_verdict(probe, elapsed, 300, "lab")
    assert verdict["state"] == state
    assert verdict["done"] is (state != "waiting")
    assert verdict["failed"] is (state not in ("ready", "waiting"))


def test_exited_names_the_container_and_host():
    probe = {"containers": RUNNING + [dict(EXITED[0], host="node-b", name="seatwright-lab-rank1")]}
    message = readiness_verdict(probe, 4, 300, "lab")["message"]
    assert "seatwright-lab-rank1 on node-b" in message and "exit code 1" in message


@pytest.mark.parametrize("timeout", [0, -5, None, True, "300"])
def test_readiness_needs_a_positive_timeout(timeout):
    with pytest.raises(SeatError, match="startup_timeout_s"):
        readiness_verdict({"containers": RUNNING}, 1, timeout, "lab")


@pytest.mark.parametrize(
    "log, cause",
    [
        # A real vLLM 0.32.0 CPU engine on a checkpoint path that is not there.
        (
            "vllm-cpu-missing-model.log",
            "huggingface_hub.errors.HFValidationError: Repo id must be in the form 'repo_name' or "
            "'namespace/repo_name': '/models/absent'. Use `repo_type` argument if needed.",
        ),
        # A real FP8 copy of the lab seat on an AMD EPYC node (no AMX): the worker's ValueError, not the
        # engine core's wrappers that end the log.
        (
            "vllm-cpu-fp8-no-amx.log",
            "ValueError: Failed to find a kernel that can implement the ScaledMM linear layer. Reasons: "
            "CPUFp8W8A8BlockScaledMMKernel requires AMX tile support (Sapphire Rapids or newer).. "
            "CPUFp8BlockScaledMMKernel requires AMX tile support (Sapphire Rapids or newer)..",
        ),
    ],
)
def test_root_cause_of_a_real_engine_failure(log, cause):
    assert root_cause((FIXTURES / "engine" / log).read_text()) == cause


@pytest.mark.parametrize(
    "text, cause",
    [
        ("", None),
        ("INFO 12-03 20:29:16 [a.py:1] all well\n", None),
        # An error word inside a warning is not an exception the engine raised.
        ("(APIServer pid=1) WARNING 12-03 20:28:37 [s.py:255] fd limit errors like `OSError: [Errno 24]`", None),
        ("RuntimeError: Engine core initialization failed. See root cause above.", None),
        (
            "Exception: WorkerProc initialization failed due to an exception in a background process. See stack "
            "trace for root cause.\nRuntimeError: out of memory",
            "RuntimeError: out of memory",
        ),
        ("Exception: no model at /models/x", "Exception: no model at /models/x"),
        ("KeyError: 'x'\n  File \"a.py\", line 1\n", "KeyError: 'x'"),
        ("ValueError: " + "x" * 500, "ValueError: " + "x" * 385 + "..."),
    ],
)
def test_root_cause(text, cause):
    assert root_cause(text) == cause


def test_exited_names_its_logs_first_error():
    probe = {"containers": [dict(EXITED[0], root_cause="ValueError: needs AMX")]}
    message = readiness_verdict(probe, 40, 300, "lab")["message"]
    assert message.endswith("its log's first error: ValueError: needs AMX")


def test_last_lines_of_a_real_engine_failure():
    text = (FIXTURES / "engine" / "vllm-cpu-missing-model.log").read_text()
    tail = last_lines(text, 5)
    assert len(tail) == 5
    assert tail[-1] == text.rstrip().splitlines()[-1].rstrip()
    assert last_lines("a\n\n b \n", 10) == ["a", " b"]
    assert last_lines("a\nb", 0) == []


NODES = [
    {"NodeManagerAddress": "172.30.99.11", "Alive": True, "Resources": {"CPU": 2.0, "GPU": 2.0}},
    {"NodeManagerAddress": "172.30.99.12", "Alive": True, "Resources": {"CPU": 2.0, "GPU": 2.0}},
]
WANT = [
    {"host": "node-a", "address": "172.30.99.11", "resources": {"GPU": 2}},
    {"host": "node-b", "address": "172.30.99.12", "resources": {"GPU": 2}},
]


@pytest.mark.parametrize(
    "nodes,elapsed,alive,done,missing",
    [
        (NODES, 5, True, True, []),
        (NODES[:1], 5, False, False, ["node-b (172.30.99.12) is not alive"]),
        (NODES[:1], 60, False, True, ["node-b (172.30.99.12) is not alive"]),
        ([NODES[0], dict(NODES[1], Alive=False)], 5, False, False, ["node-b (172.30.99.12) is not alive"]),
        (
            [NODES[0], dict(NODES[1], Resources={"CPU": 2.0, "GPU": 1.0})],
            5,
            False,
            False,
            ["node-b (172.30.99.12) offers GPU 1.0, the seat needs 2"],
        ),
    ],
)
def test_ray_alive_verdict(nodes, elapsed, alive, done, missing):
    verdict = ray_alive_verdict(nodes, WANT, elapsed, 60)
    assert (verdict["alive"], verdict["done"]) == (alive, done)
    assert len(verdict["missing"]) == len(missing)
    assert all(want in have for want, have in zip(missing, verdict["missing"]))
    assert verdict["failed"] is (done and not alive)


@pytest.mark.parametrize(
    "ps_text,pids",
    [
        (
            "    1 python3 -m vllm.entrypoints.openai.api_server --model /models/lab\n"
            "   57 VLLM::EngineCore\n"
            "   90 /usr/bin/python3 -c from multiprocessing.resource_tracker import main;main(6)\n"
            "  200 sleep 5\n"
            "  201 py-spy dump --pid 1\n"
            "  202 ps -eo pid=,args=\n",
            [1, 57, 90],
        ),
        (
            "    1 ray start --head --block --port=6379\n   12 /usr/bin/python3 -u /ray/_private/log_monitor.py\n",
            [1, 12],
        ),
        ("", []),
        ("garbage line\n", []),
    ],
)
def test_engine_pids(ps_text, pids):
    assert engine_pids(ps_text) == pids


# ------------------------------------------------------------------ read-back

ARGV = ["python3", "-m", "vllm.entrypoints.openai.api_server", "--model", "/models/lab", "--port", "8000"]
ENV = {"HF_HUB_OFFLINE": "1", "VLLM_CPU_KVCACHE_SPACE": "1"}


@pytest.mark.parametrize(
    "running_argv,running_env,problems",
    [
        (ARGV, dict(ENV, PATH="/usr/bin"), []),
        (["/usr/bin/python3"] + ARGV[1:], ENV, []),
        (ARGV[:-1] + ["8001"], ENV, ["argument 6 is '8001', the plan says '8000'"]),
        (ARGV + ["--enforce-eager"], ENV, ["argument 7 is '--enforce-eager', the plan says None"]),
        (ARGV, {"HF_HUB_OFFLINE": "0", "VLLM_CPU_KVCACHE_SPACE": "1"}, ["env HF_HUB_OFFLINE is '0'"]),
        (ARGV, {"VLLM_CPU_KVCACHE_SPACE": "1"}, ["env HF_HUB_OFFLINE is not set"]),
        (None, ENV, ["engine process was not found"]),
    ],
)
def test_compare_running(running_argv, running_env, problems):
    found = compare_running("node-a", ARGV, running_argv, ENV, running_env)
    assert len(found) == len(problems)
    for text, expected in zip(found, problems):
        assert expected in text and text.startswith("node-a")


def test_a_secret_never_appears_in_a_difference():
    found = compare_running("node-a", ARGV, ARGV, dict(ENV, VLLM_API_KEY="s3cret"), dict(ENV, VLLM_API_KEY="other"))
    assert found == ["node-a: env VLLM_API_KEY differs from the plan (value not shown)"]
    assert "s3cret" not in repr(redact_env({"VLLM_API_KEY": "s3cret"}))


NCCL_FILE = """# rendered by seatwright's nccl_env role
NCCL_SOCKET_IFNAME==eth0
GLOO_SOCKET_IFNAME=eth0
NCCL_IB_DISABLE=1
"""


@pytest.mark.parametrize(
    "plan_env,problems",
    [
        (
            {
                "HF_HUB_OFFLINE": "1",
                "NCCL_SOCKET_IFNAME": "=eth0",
                "GLOO_SOCKET_IFNAME": "eth0",
                "NCCL_IB_DISABLE": "1",
            },
            [],
        ),
        (
            {"NCCL_SOCKET_IFNAME": "=eth1", "GLOO_SOCKET_IFNAME": "eth0", "NCCL_IB_DISABLE": "1"},
            ["NCCL_SOCKET_IFNAME is '=eth0' in the node's NCCL env file but '=eth1' in the plan"],
        ),
        (
            {"NCCL_SOCKET_IFNAME": "=eth0", "GLOO_SOCKET_IFNAME": "eth0"},
            ["NCCL_IB_DISABLE is '1' in the node's NCCL env file but unset in the plan"],
        ),
        (
            {
                "NCCL_SOCKET_IFNAME": "=eth0",
                "GLOO_SOCKET_IFNAME": "eth0",
                "NCCL_IB_DISABLE": "1",
                "NCCL_IB_HCA": "=mlx5_0:1",
            },
            ["NCCL_IB_HCA is unset in the node's NCCL env file but '=mlx5_0:1' in the plan"],
        ),
    ],
)
def test_a_plan_whose_nccl_env_drifted_from_the_node_is_named(plan_env, problems):
    found = nccl_env_drift("node-b", plan_env, parse_env_file(NCCL_FILE))
    assert len(found) == len(problems)
    for text, expected in zip(found, problems):
        assert text == "node-b: " + expected


def test_bad_env_file_line_is_named():
    with pytest.raises(SeatError, match="line 2"):
        parse_env_file("A=1\nnot a pair\n")


def test_container_names_are_stable_per_rank_and_part():
    assert container_name("lab", 1) == "seatwright-lab-rank1"
    assert container_name("lab", 0, "ray-head") == "seatwright-lab-rank0-ray-head"


# ------------------------------------------------------------------ NCCL transports from engine logs


def _fixture(name):
    return (FIXTURES / "nccl" / name).read_text()


@pytest.mark.parametrize(
    "name,multi_node,roce,flagged,gdrdma",
    [
        ("roce-2node-gdrdma-channels.txt", True, True, False, True),
        ("h200x2-torch-sweep.txt", False, False, False, False),
        # One node's P2P log judged as if it spanned nodes over RoCE: no NET channel, flagged.
        ("h200x2-torch-sweep.txt", True, True, True, False),
    ],
)
def test_engine_transports_from_recorded_logs(name, multi_node, roce, flagged, gdrdma):
    result = engine_transports(_fixture(name), multi_node, roce)
    assert (result["flag"] is not None) is flagged
    assert result["net_gdrdma"] is gdrdma
    assert result["lines"] and all("via" in line for line in result["lines"])


def test_net_channels_without_gdrdma_are_flagged_and_kept():
    text = _fixture("roce-2node-gdrdma-channels.txt").replace("/GDRDMA", "", 3)
    result = engine_transports(text, True, True)
    assert result["flag"].startswith("3 of ")
    assert "without GPUDirect RDMA (NET/IB/0" in result["flag"]
    assert sum(1 for line in result["lines"] if "via NET/" in line and "GDRDMA" not in line) == 3


def test_a_log_without_channel_lines_is_flagged_only_across_nodes_on_roce():
    assert "NCCL_DEBUG=INFO" in engine_transports("INFO started\n", True, True)["flag"]
    assert engine_transports("INFO started\n", True, False)["flag"] is None
    assert engine_transports("", False, True)["flag"] is None
