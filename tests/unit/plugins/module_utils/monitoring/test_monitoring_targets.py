"""The seats' scrape targets: file_sd entries (monitoring/targets.py) and the monitoring_targets module."""

import json

import monitoring_targets
import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import MonitoringError, SeatError
from ansible_collections.seatwright.fleet.plugins.module_utils.monitoring import targets
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.cotenants import RECORD_FORMAT

# The shape of a two-node plan (seat/launch.py): only node rank 0 serves the API.
TP2 = {
    "engine": {"name": "vllm"},
    "ranks": [
        {"host": "node-a", "rank": 0, "serve": "172.30.99.11:8010", "argv": ["vllm", "serve"]},
        {"host": "node-b", "rank": 1, "serve": None, "argv": ["vllm", "serve", "--headless"]},
    ],
}
ONE = {"engine": {"name": "sglang"}, "ranks": [{"host": "node-b", "rank": 0, "serve": "172.30.99.12:30000"}]}


def run(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            monitoring_targets.main()
    return json.loads(capsys.readouterr().out)


def test_only_the_serving_rank_is_a_target_with_the_seat_labels():
    assert targets.seat_groups("lab-tp2", TP2, "production") == [
        {
            "targets": ["172.30.99.11:8010"],
            "labels": {"seat": "lab-tp2", "node": "node-a", "rank": "0", "engine": "vllm", "alias": "production"},
        }
    ]
    assert "alias" not in targets.seat_groups("ds4", ONE)[0]["labels"]


@pytest.mark.parametrize(
    "seat,plan,expected",
    [
        ("lab", {"engine": {"name": "unknown"}, "ranks": []}, "the plan's engine is 'unknown'"),
        ("lab", {"engine": {"name": "vllm"}, "ranks": [{"host": "a", "rank": 1, "serve": None}]}, "no serving rank"),
        (
            "lab",
            {"engine": {"name": "vllm"}, "ranks": [{"host": "a", "rank": 0, "serve": "http://x/"}]},
            "not host:port",
        ),
        ("../etc/passwd", ONE, "cannot name a target file"),
    ],
)
def test_a_plan_that_gives_no_target_is_refused_by_name(seat, plan, expected):
    with pytest.raises(MonitoringError, match=expected):
        targets.seat_groups(seat, plan)


def test_bring_up_then_again_changes_nothing_then_teardown_removes(capsys, tmp_path):
    args = {"file_sd_dir": str(tmp_path), "seat": "lab-tp2", "plan": TP2, "alias": "production"}
    check = run(capsys, dict(args, _ansible_check_mode=True, _ansible_diff=True))
    assert check["changed"] is True and not list(tmp_path.iterdir())
    assert '"seat": "lab-tp2"' in check["diff"][0]["after"]
    assert run(capsys, args)["changed"] is True
    assert json.loads((tmp_path / "seat-lab-tp2.json").read_text()) == targets.seat_groups("lab-tp2", TP2, "production")
    assert run(capsys, args)["changed"] is False
    gone = run(capsys, {"file_sd_dir": str(tmp_path), "seat": "lab-tp2", "state": "absent"})
    assert gone["changed"] is True and gone["seats"] == []
    assert run(capsys, {"file_sd_dir": str(tmp_path), "seat": "lab-tp2", "state": "absent"})["changed"] is False


def test_an_alias_move_relabels_both_seats_and_only_once(capsys, tmp_path):
    run(capsys, {"file_sd_dir": str(tmp_path), "seat": "lab", "plan": ONE, "alias": "production"})
    run(capsys, {"file_sd_dir": str(tmp_path), "seat": "lab-allcores", "plan": TP2})
    move = {"file_sd_dir": str(tmp_path), "seat": "lab-allcores", "alias": "production", "state": "alias"}
    moved = run(capsys, move)
    assert sorted(p.rsplit("/", 1)[1] for p in moved["changed_paths"]) == ["seat-lab-allcores.json", "seat-lab.json"]
    labels = {seat: groups[0]["labels"] for seat, groups in targets_of(tmp_path).items()}
    assert labels["lab-allcores"]["alias"] == "production" and "alias" not in labels["lab"]
    assert run(capsys, move)["changed"] is False
    # lab-allcores brought up again (no alias given) keeps the alias it serves.
    assert run(capsys, {"file_sd_dir": str(tmp_path), "seat": "lab-allcores", "plan": TP2})["changed"] is False


def test_a_drain_labels_every_seat_the_alias_moved_to_and_puts_it_back(capsys, tmp_path):
    for name in ("lab", "b", "c"):
        alias = "production" if name == "lab" else ""
        run(capsys, {"file_sd_dir": str(tmp_path), "seat": name, "plan": ONE, "alias": alias})
    move = {"file_sd_dir": str(tmp_path), "seats": ["b", "c"], "alias": "production", "state": "alias"}
    assert run(capsys, move)["changed"] is True
    labels = {seat: groups[0]["labels"] for seat, groups in targets_of(tmp_path).items()}
    assert [labels[s].get("alias") for s in ("lab", "b", "c")] == [None, "production", "production"]
    assert run(capsys, move)["changed"] is False
    back = {"file_sd_dir": str(tmp_path), "seats": ["lab"], "alias": "production", "state": "alias"}
    assert run(capsys, back)["changed"] is True
    labels = {seat: groups[0]["labels"] for seat, groups in targets_of(tmp_path).items()}
    assert [labels[s].get("alias") for s in ("lab", "b", "c")] == ["production", None, None]


@pytest.mark.parametrize(
    ("args", "words"),
    [
        ({"state": "alias", "alias": "production"}, "seat, seats"),
        ({"state": "alias", "alias": "production", "seat": "a", "seats": ["b"]}, "mutually exclusive"),
        ({"state": "absent"}, "seat"),
    ],
)
def test_the_seat_or_seats_an_alias_moves_to_must_be_named_once(capsys, tmp_path, args, words):
    result = run(capsys, dict(args, file_sd_dir=str(tmp_path)))
    assert result["failed"] is True and words in result["msg"]


def targets_of(folder):
    return {targets.seat_of_file(p.name): json.loads(p.read_text()) for p in folder.glob("seat-*.json")}


def test_a_broken_target_file_is_named(capsys, tmp_path):
    (tmp_path / "seat-lab.json").write_text("{not json")
    result = run(capsys, {"file_sd_dir": str(tmp_path), "seat": "lab", "alias": "production", "state": "alias"})
    assert result["failed"] is True and "seat-lab.json is not a file_sd JSON file" in result["msg"]


def test_the_cotenant_textfile_names_what_is_still_stopped():
    record = {
        "format": RECORD_FORMAT,
        "host": "node-a",
        "seat": "lab-allcores",
        "entries": [
            {"name": "embedder", "kind": "container", "was_running": True},
            {"name": "vllm-embed.service", "kind": "systemd", "was_running": True},
            {"name": "was-stopped", "kind": "container", "was_running": False},
        ],
    }
    text = targets.cotenant_textfile(record)
    samples = [line for line in text.splitlines() if not line.startswith("#")]
    assert samples == [
        'seatwright_cotenant_evicted{seat="lab-allcores",cotenant="embedder"} 1',
        'seatwright_cotenant_evicted{seat="lab-allcores",cotenant="vllm-embed.service"} 1',
    ]
    assert [line for line in targets.cotenant_textfile(None).splitlines() if not line.startswith("#")] == []


def test_the_cotenant_textfile_names_every_seat_holding_it_stopped():
    record = {
        "format": RECORD_FORMAT,
        "host": "node-a",
        "seat": "lab",
        "holders": ["lab", "lab-allcores"],
        "entries": [{"name": "embedder", "kind": "container", "was_running": True}],
    }
    samples = [line for line in targets.cotenant_textfile(record).splitlines() if not line.startswith("#")]
    assert samples == [
        'seatwright_cotenant_evicted{seat="lab",cotenant="embedder"} 1',
        'seatwright_cotenant_evicted{seat="lab-allcores",cotenant="embedder"} 1',
    ]


def test_a_record_seatwright_did_not_write_is_refused_by_the_seat_code():
    with pytest.raises(SeatError, match="is not a .* record"):
        targets.cotenant_textfile({"format": "something else", "entries": []})


def test_the_scrape_config_keeps_the_key_in_a_file_and_follows_the_seat_files():
    config = targets.scrape_config(
        nodes={"node-b": "172.30.99.12", "node-a": "172.30.99.11"},
        gpu_nodes={},
        routers=[{"node": "node-b", "kind": "smg", "address": "172.30.99.12:29000"}],
        file_sd_dir="/etc/prometheus/seatwright/file_sd/",
        credentials_file="/etc/prometheus/seatwright/seat-api-key",
        rules_file="/etc/prometheus/seatwright/alerts.yml",
    )
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    assert sorted(jobs) == ["seatwright_nodes", "seatwright_routers", "seatwright_seats"]
    assert jobs["seatwright_seats"]["file_sd_configs"] == [
        {"files": ["/etc/prometheus/seatwright/file_sd/seat-*.json"]}
    ]
    assert jobs["seatwright_seats"]["authorization"]["credentials_file"].endswith("seat-api-key")
    assert [g["targets"] for g in jobs["seatwright_nodes"]["static_configs"]] == [
        ["172.30.99.11:9100"],
        ["172.30.99.12:9100"],
    ]


@pytest.mark.parametrize(
    ("router", "keyed", "address", "path", "authorized"),
    [
        # LiteLLM's /metrics/ (its prometheus callback) is behind the front on the public port, which takes
        # the clients' key there as on the data plane.
        ({"node": "node-a", "kind": "litellm", "ip": "172.30.99.11", "port": 4000}, True, "172.30.99.11:4000",
         "/metrics/", True),
        # smg serves its metrics on a port of its own, with no key.
        ({"node": "node-b", "kind": "smg", "ip": "172.30.99.12", "port": 4100}, True, "172.30.99.12:29000",
         "/metrics", False),
        ({"node": "node-b", "kind": "smg", "ip": "172.30.99.12", "port": 4100}, False, "172.30.99.12:29000",
         "/metrics", False),
    ],
    ids=["litellm behind its front", "smg with a client key", "smg without"],
)  # fmt: skip
def test_each_router_kind_is_scraped_where_its_description_says(router, keyed, address, path, authorized):
    config = targets.scrape_config(
        nodes={},
        gpu_nodes={},
        routers=[router],
        file_sd_dir="/f",
        credentials_file="",
        rules_file="/r",
        router_credentials_file="/etc/prometheus/seatwright/router-api-key" if keyed else "",
    )
    job = {job["job_name"]: job for job in config["scrape_configs"]}["seatwright_routers"]
    assert job["static_configs"][0]["targets"] == [address] and job["metrics_path"] == path
    assert job["static_configs"][0]["labels"] == {"node": router["node"], "router": router["kind"]}
    assert ("authorization" in job) is authorized
    if authorized:
        assert job["authorization"]["credentials_file"].endswith("router-api-key")


def test_a_litellm_router_without_a_clients_key_is_not_scraped_with_its_admin_key():
    router = {"node": "node-a", "kind": "litellm", "ip": "172.30.99.11", "port": 4000}
    target, note = targets.router_target(router, clients_keyed=False)
    assert target is None and "router_api_key" in note and "admin key" in note
    config = targets.scrape_config(
        nodes={}, gpu_nodes={}, routers=[router], file_sd_dir="/f", credentials_file="", rules_file="/r"
    )
    assert [job["job_name"] for job in config["scrape_configs"]] == ["seatwright_seats", "seatwright_nodes"]
