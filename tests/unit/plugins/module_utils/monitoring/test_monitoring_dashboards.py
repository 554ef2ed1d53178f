"""Every dashboard panel's PromQL against a live Prometheus, which must return series.

Debian's Prometheus 2.42 runs on loopback with the scrape configuration, rules file and seat target
file seatwright generates (monitoring/targets.py, rules.py), scraping small servers on 127.0.0.1
that serve recorded exposition: the lab engine's (vLLM 0.32.0 CPU) as the seat, node exporter
1.5's (infiniband, meminfo) plus the co-tenant textfile as the node, and the DCGM exposition as the
GPU exporter (tests/fixtures/monitoring/README.md says where each came from). The seat answers
/metrics only with the seats' key, which Prometheus reads from its credentials file; the key must
not appear in Prometheus's config, its targets or its log. The lab's own run of these queries
(make lab) is separate.
"""

import json

import pytest
import yaml
from ansible_collections.seatwright.fleet.plugins.module_utils.monitoring import dashboards, rules, targets
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.cotenants import RECORD_FORMAT
from conftest import FIXTURES
from monitoring_live import api, free_port, scraped_at_least, serve, start_prometheus, wait_until

KEY = "sk-monitoring-test-7f3a9c1e5b"
RECORD = {
    "format": RECORD_FORMAT,
    "host": "node-a",
    "seat": "lab-allcores",
    "entries": [
        {"name": "embedder", "kind": "container", "was_running": True},
        {"name": "idle-service.service", "kind": "systemd", "was_running": False},
    ],
}


def exposition(*names):
    return "".join((FIXTURES / name).read_text() for name in names)


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory):
    work = tmp_path_factory.mktemp("prometheus")
    seat = serve(exposition("bench/vllm-0.32.0-cpu-metrics-tiny.txt"), key=KEY)
    node = serve(
        exposition("monitoring/node-exporter-1.5-infiniband.prom", "monitoring/node-exporter-1.5-meminfo.prom")
        + targets.cotenant_textfile(RECORD)
    )
    gpu = serve(exposition("monitoring/dcgm-exporter-h200x2.prom"))
    servers = (seat, node, gpu)
    (work / "file_sd").mkdir()
    plan = {
        "engine": {"name": "vllm"},
        "ranks": [{"host": "node-a", "rank": 0, "serve": "127.0.0.1:%d" % seat.server_port}],
    }
    (work / "file_sd" / targets.seat_file_name("lab")).write_text(
        json.dumps(targets.seat_groups("lab", plan, "production"))
    )
    credentials = work / "seat-api-key"
    credentials.write_text(KEY)
    credentials.chmod(0o600)
    (work / "rules.yml").write_text(yaml.safe_dump(rules.rules_document(None, {"lab": 500})))
    config = targets.scrape_config(
        nodes={"node-a": "127.0.0.1"},
        gpu_nodes={"node-a": "127.0.0.1"},
        routers=[],
        file_sd_dir=str(work / "file_sd"),
        credentials_file=str(credentials),
        rules_file=str(work / "rules.yml"),
        scrape_interval_s=1,
        node_exporter_port=node.server_port,
        dcgm_port=gpu.server_port,
    )
    (work / "prometheus.yml").write_text(yaml.safe_dump(config))
    try:
        with start_prometheus(work, free_port()) as running:
            wait_until(
                lambda: scraped_at_least(running["base"], 3), 60, "Prometheus did not scrape its targets", running
            )
            yield running
    finally:
        for server in servers:
            server.shutdown()


def test_every_target_is_up_with_the_seat_labels(prometheus):
    active = api(prometheus["base"], "/api/v1/targets")["data"]["activeTargets"]
    assert {t["labels"]["job"] for t in active} == {rules.SEAT_JOB, "seatwright_nodes", "seatwright_gpus"}
    assert all(t["health"] == "up" for t in active), [(t["scrapeUrl"], t["lastError"]) for t in active]
    seat = next(t for t in active if t["labels"]["job"] == rules.SEAT_JOB)
    assert {k: seat["labels"][k] for k in ("seat", "node", "rank", "engine", "alias")} == {
        "seat": "lab",
        "node": "node-a",
        "rank": "0",
        "engine": "vllm",
        "alias": "production",
    }


@pytest.mark.parametrize("kind", dashboards.KINDS)
def test_every_panel_returns_series(prometheus, kind):
    empty = []
    for panel in dashboards.dashboard(kind)["panels"]:
        found = 0
        for title, expr in dashboards.queries(kind):
            if title == panel["title"]:
                answer = api(prometheus["base"], "/api/v1/query", query=expr)
                assert answer["status"] == "success", (expr, answer)
                found += len(answer["data"]["result"])
        if not found:
            empty.append(panel["title"])
    assert empty == []


def test_the_engines_own_engine_label_is_kept_beside_seatwrights(prometheus):
    result = api(prometheus["base"], "/api/v1/query", query='vllm:num_requests_running{seat="lab"}')["data"]["result"]
    assert result[0]["metric"]["engine"] == "vllm"
    assert result[0]["metric"]["exported_engine"] == "0"


def test_the_rules_load_and_evaluate(prometheus):
    groups = api(prometheus["base"], "/api/v1/rules")["data"]["groups"]
    loaded = [rule for group in groups for rule in group["rules"]]
    assert sorted({rule["name"] for rule in loaded}) == sorted(rules.alert_names())
    assert all(rule["health"] in ("ok", "unknown") for rule in loaded), [
        (r["name"], r.get("lastError")) for r in loaded
    ]


def test_the_seats_key_is_nowhere_prometheus_shows(prometheus):
    shown = [
        json.dumps(api(prometheus["base"], "/api/v1/status/config")),
        json.dumps(api(prometheus["base"], "/api/v1/targets")),
        prometheus["log"].read_text(),
    ]
    assert all(KEY not in text for text in shown)
    assert "credentials_file" in shown[0]
