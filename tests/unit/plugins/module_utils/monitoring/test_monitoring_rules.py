"""The alert rules (plugins/module_utils/monitoring/rules.py) under `promtool test rules`.

tests/fixtures/monitoring/alerts.test.yml holds, for every alert, a case where it fires and one
where it must not, on series named and labelled as the engines' and exporters' own exposition.
promtool comes with Debian's `prometheus` package (scripts/bootstrap installs it).
"""

import shutil
import subprocess

import pytest
import yaml
from ansible_collections.seatwright.fleet.plugins.module_utils.bench.counters import parse_exposition
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import MonitoringError
from ansible_collections.seatwright.fleet.plugins.module_utils.monitoring import metrics, rules
from conftest import FIXTURES

CASES = FIXTURES / "monitoring" / "alerts.test.yml"
# The bounds the cases were written for: lab-allcores' recipe declares 20000 ms.
BOUNDS = {"lab-allcores": 20000}


def promtool():
    path = shutil.which("promtool")
    if path is None:
        pytest.fail("promtool is missing: install Debian's prometheus package (scripts/bootstrap does)")
    return path


def run_cases(tmp_path, settings=None, bounds=BOUNDS):
    (tmp_path / "seatwright-alerts.yml").write_text(yaml.safe_dump(rules.rules_document(settings, bounds)))
    shutil.copy(CASES, tmp_path / "alerts.test.yml")
    return subprocess.run(
        [promtool(), "test", "rules", "alerts.test.yml"], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )


def test_every_rule_passes_its_promtool_cases(tmp_path):
    result = run_cases(tmp_path)
    assert result.returncode == 0, result.stdout + result.stderr


def test_the_cases_catch_a_rule_that_drifts(tmp_path):
    """A threshold moved (KV 0.99) or a stall bound lengthened makes the suite fail: the cases bite."""
    assert run_cases(tmp_path, {"kv_usage_ratio": 0.99}).returncode != 0
    assert run_cases(tmp_path, {"stall_for_s": 600}).returncode != 0


def test_every_alert_has_a_case_that_fires_and_one_that_must_not():
    fires, silent = set(), set()
    for case in yaml.safe_load(CASES.read_text())["tests"]:
        for check in case["alert_rule_test"]:
            (fires if check["exp_alerts"] else silent).add(check["alertname"])
    assert fires == set(rules.alert_names())
    assert silent == set(rules.alert_names())


def test_the_rules_file_is_valid_for_promtool(tmp_path):
    path = tmp_path / "rules.yml"
    path.write_text(yaml.safe_dump(rules.rules_document(None, {"lab": 500, "glm53": 2500})))
    result = subprocess.run([promtool(), "check", "rules", str(path)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "SUCCESS: 10 rules found" in result.stdout


def test_the_engine_names_are_in_the_lab_engines_own_exposition():
    exposed = parse_exposition((FIXTURES / "bench" / "vllm-0.32.0-cpu-metrics-tiny.txt").read_text())
    for what, name in metrics.ENGINE_METRICS["vllm"].items():
        assert name in exposed, (what, name)
    assert any(
        labels.get("status") == "5xx" or labels.get("status") == "2xx" for labels, _ in exposed["http_requests_total"]
    )


def test_the_rdma_names_are_node_exporters_own():
    exposed = parse_exposition((FIXTURES / "monitoring" / "node-exporter-1.5-infiniband.prom").read_text())
    for name in metrics.RDMA_ERROR_COUNTERS + metrics.RDMA_DATA:
        assert name in exposed, name


def test_the_dcgm_fixture_carries_every_field_of_the_collector_file():
    exposed = parse_exposition((FIXTURES / "monitoring" / "dcgm-exporter-h200x2.prom").read_text())
    csv_fields = [line.split(",")[0] for line in metrics.dcgm_counters_csv().splitlines() if not line.startswith("#")]
    assert sorted(csv_fields) == sorted(exposed)


def test_ttft_bounds_come_from_the_recipes_that_declare_one():
    recipes = {
        "lab-allcores": {"qualification": {"rollout_gates": {"ttft_ms_p95": 20000, "reason": "x"}}},
        "lab": {"qualification": {}},
        "glm53": {},
    }
    assert rules.ttft_bounds_from_recipes(recipes) == {"lab-allcores": 20000}


@pytest.mark.parametrize(
    "settings,expected",
    [
        ({"stall_secs": 60}, "'stall_secs', which is not a setting"),
        ({"kv_usage_ratio": 95}, "kv_usage_ratio is 95; expected a ratio"),
        ({"stall_for_s": 0}, "stall_for_s is 0; expected a whole number of seconds"),
        ({"stall_for_s": True}, "stall_for_s is True"),
    ],
)
def test_a_bad_setting_is_named(settings, expected):
    with pytest.raises(MonitoringError, match=expected.replace("(", r"\(")):
        rules.rules_document(settings)


def test_a_bad_ttft_bound_names_the_seat_and_its_recipe():
    with pytest.raises(MonitoringError, match="seat lab declares ttft_ms_p95 -1.*seats/lab.yml"):
        rules.rules_document(None, {"lab": -1})
