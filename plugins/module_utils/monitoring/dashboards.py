"""The Grafana dashboards, from one list of panels: a seat overview and a node view.

Each panel is (title, unit, [(PromQL, legend)]); `dashboard(kind)` is Grafana's JSON model,
`queries(kind)` the PromQL with the template variables set to match everything, which
tests/unit/plugins/module_utils/monitoring/test_monitoring_dashboards.py runs against a live
Prometheus and requires series from.
"""

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import MonitoringError
from ansible_collections.seatwright.fleet.plugins.module_utils.monitoring import metrics, rules


def _either(key):
    return metrics.name_regex(sorted(names[key] for names in metrics.ENGINE_METRICS.values()))


SEATS = '{__name__=~"%%s", job="%s", seat=~"$seat"}' % rules.SEAT_JOB
NODES = 'node=~"$node"'


def _seat(key):
    return SEATS % _either(key)


def _ttft(quantile):
    return "histogram_quantile(%s, sum by (seat, le) (rate(%s[5m])))" % (quantile, _seat("ttft_bucket"))


_EVENTS = metrics.name_regex(metrics.DCGM_CLOCK_EVENTS)

PANELS = {
    "seat-overview": {
        "title": "seatwright: seats",
        "variables": ("seat",),
        "panels": [
            ("Generated tok/s", "short", [("sum by (seat) (rate(%s[1m]))" % _seat("generation_tokens"), "{{seat}}")]),
            ("Prompt tok/s", "short", [("sum by (seat) (rate(%s[1m]))" % _seat("prompt_tokens"), "{{seat}}")]),
            ("TTFT", "s", [(_ttft(0.5), "{{seat}} p50"), (_ttft(0.95), "{{seat}} p95")]),
            (
                "Requests running and queued",
                "short",
                [
                    ("sum by (seat) (%s)" % _seat("running"), "{{seat}} running"),
                    ("sum by (seat) (%s)" % _seat("waiting"), "{{seat}} queued"),
                ],
            ),
            ("KV cache used", "percentunit", [("max by (seat) (%s)" % _seat("kv_usage"), "{{seat}}")]),
            (
                "Preemptions per minute",
                "short",
                [("sum by (seat) (increase(%s[1m]))" % _seat("preemptions"), "{{seat}}")],
            ),
            (
                "Answers per second by status",
                "reqps",
                [
                    (
                        'sum by (seat, status) (rate(http_requests_total{job="%s", seat=~"$seat"}[1m]))'
                        % rules.SEAT_JOB,
                        "{{seat}} {{status}}",
                    ),
                    (
                        'sum by (seat, status_code) (rate(sglang:http_responses_total{job="%s", seat=~"$seat"}[1m]))'
                        % rules.SEAT_JOB,
                        "{{seat}} {{status_code}}",
                    ),
                ],
            ),
            ("Scrape up", "short", [('up{job="%s", seat=~"$seat"}' % rules.SEAT_JOB, "{{seat}} on {{node}}")]),
        ],
    },
    "node-view": {
        "title": "seatwright: nodes",
        "variables": ("node",),
        "panels": [
            (
                "GPU power and its limit",
                "watt",
                [
                    ("%s{%s}" % (metrics.DCGM_POWER, NODES), "{{node}} GPU {{gpu}}"),
                    ("%s{%s}" % (metrics.DCGM_POWER_LIMIT, NODES), "{{node}} GPU {{gpu}} limit"),
                ],
            ),
            ("SM clock", "MHz", [("%s{%s}" % (metrics.DCGM_SM_CLOCK, NODES), "{{node}} GPU {{gpu}}")]),
            ("GPU temperature", "celsius", [("%s{%s}" % (metrics.DCGM_GPU_TEMP, NODES), "{{node}} GPU {{gpu}}")]),
            (
                "Clocks held by the power cap",
                "short",
                [
                    (
                        'floor({__name__=~"%s", %s} / %d) %% 2' % (_EVENTS, NODES, metrics.DCGM_SW_POWER_CAP_BIT),
                        "{{node}} GPU {{gpu}}",
                    )
                ],
            ),
            ("GPU memory used", "mbytes", [("%s{%s}" % (metrics.DCGM_FB_USED, NODES), "{{node}} GPU {{gpu}}")]),
            (
                "RDMA traffic",
                "Bps",
                [
                    ("rate(%s{%s}[1m])" % (name, NODES), "{{node}} {{device}}/{{port}} %s" % direction)
                    for name, direction in zip(metrics.RDMA_DATA, ("in", "out"))
                ],
            ),
            (
                "RDMA port errors (5 min)",
                "short",
                [
                    (
                        "sum by (node, device, port) (%s)"
                        % metrics.increase_each(metrics.RDMA_ERROR_COUNTERS, "5m", NODES),
                        "{{node}} {{device}}/{{port}}",
                    )
                ],
            ),
            # A download that evicts the page cache swung a seat's throughput 26x in the field.
            ("Page cache", "bytes", [("node_memory_Cached_bytes{%s}" % NODES, "{{node}}")]),
            (
                "Co-tenants stopped for a seat",
                "short",
                [("%s{%s}" % (metrics.COTENANT_EVICTED, NODES), "{{node}} {{cotenant}} (for {{seat}})")],
            ),
        ],
    },
}

KINDS = tuple(PANELS)


def _variable(name):
    query = "label_values(up{job=~\"%s\"}, %s)" % (metrics.name_regex(rules.JOBS), name)
    return {
        "name": name,
        "type": "query",
        "datasource": {"type": "prometheus", "uid": "${datasource}"},
        "query": {"query": query, "refId": "%s-values" % name},
        "definition": query,
        "includeAll": True,
        "multi": True,
        "allValue": ".*",
        "current": {"text": "All", "value": "$__all"},
        "refresh": 2,
    }


def dashboard(kind):
    """Grafana's JSON model of one dashboard (provisioned from a file; uid seatwright-<kind>)."""
    if kind not in PANELS:
        raise MonitoringError("dashboard %r is not one of seatwright's: %s" % (kind, ", ".join(KINDS)))
    spec = PANELS[kind]
    panels = []
    for index, (title, unit, queries_) in enumerate(spec["panels"]):
        panels.append(
            {
                "id": index + 1,
                "type": "timeseries",
                "title": title,
                "datasource": {"type": "prometheus", "uid": "${datasource}"},
                "gridPos": {"h": 8, "w": 12, "x": 12 * (index % 2), "y": 8 * (index // 2)},
                "fieldConfig": {"defaults": {"unit": unit}, "overrides": []},
                "targets": [
                    {"refId": chr(ord("A") + number), "expr": expr, "legendFormat": legend}
                    for number, (expr, legend) in enumerate(queries_)
                ],
            }
        )
    datasource = {
        "name": "datasource",
        "type": "datasource",
        "query": "prometheus",
        "current": {"text": "Prometheus", "value": "prometheus"},
    }
    return {
        "uid": "seatwright-%s" % kind,
        "title": spec["title"],
        "tags": ["seatwright"],
        "timezone": "utc",
        "schemaVersion": 39,
        "version": 1,
        "refresh": "30s",
        "time": {"from": "now-6h", "to": "now"},
        "templating": {"list": [datasource] + [_variable(name) for name in spec["variables"]]},
        "panels": panels,
    }


def queries(kind):
    """[(panel title, PromQL)] of one dashboard, its variables matching everything (as "All" does)."""
    found = []
    for panel in dashboard(kind)["panels"]:
        for target in panel["targets"]:
            found.append((panel["title"], target["expr"].replace("$seat", ".*").replace("$node", ".*")))
    return found
