"""The alert rules for what the field saw go wrong between benchmarks, as a Prometheus rules file.

One rule (or one per seat, for the TTFT bound) per failure, each with the field failure it stands
for; docs/monitoring.md says what to do first. `rules_document(settings, ttft_bounds)` is the whole
file; the monitoring role writes it and
tests/unit/plugins/module_utils/monitoring/test_monitoring_rules.py runs `promtool test rules` on
it with series shaped like the engines' own exposition.
"""

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import MonitoringError
from ansible_collections.seatwright.fleet.plugins.module_utils.monitoring import metrics

# The scrape jobs the monitoring role writes (targets.py scrape_config).
SEAT_JOB = "seatwright_seats"
JOBS = (SEAT_JOB, "seatwright_nodes", "seatwright_gpus", "seatwright_routers")

# Seconds and ratios the rules are built from; the role's monitoring_alert_* defaults are these.
DEFAULT_SETTINGS = {
    # A seat holding running requests whose generated-token counter did not move in the window...
    "stall_window_s": 60,
    # ...and stayed so this long: the alert fires stall_window_s + stall_for_s after the last token.
    "stall_for_s": 120,
    "scrape_for_s": 120,
    "kv_usage_ratio": 0.95,
    "kv_for_s": 300,
    "preemption_window_s": 300,
    "error_ratio": 0.05,
    "error_window_s": 300,
    "error_for_s": 300,
    "ttft_window_s": 300,
    "ttft_for_s": 600,
    "power_cap_for_s": 900,
    "rdma_window_s": 300,
    # An RDMA fault that came and went stays visible this long after its counters stop rising.
    "rdma_keep_firing_s": 1800,
    "cotenant_for_s": 600,
}

_RATIOS = ("kv_usage_ratio", "error_ratio")

# {alert: the field failure it stands for}; docs/monitoring.md says what to do first for each.
FAILURES = {
    "SeatTokensStalled": "[000]'s deadlock that printed nothing: requests were running and no token came out",
    "ScrapeFailing": "a seat, node, GPU exporter or router Prometheus cannot read",
    "SeatKvCacheNearlyFull": "the KV cache nearly full: new requests wait or push running ones out",
    "SeatPreempting": "running requests preempted (vLLM) or retracted (SGLang) for KV room",
    "SeatErrorRate": "the seat answers with server errors",
    "SeatTtftOverBound": "TTFT p95 over the bound the seat's recipe declares",
    "GpuHeldAtPowerCap": "GPUs held at their power cap, the clocks lowered by it, for a sustained time",
    "RdmaPortErrors": "an RDMA fault that came and went: the port's error counters rose",
    "CotenantNotRestored": "co-tenants evicted for an exclusive seat and not restored after it left",
}


def check_settings(settings):
    """The settings with the defaults filled in; a MonitoringError names a bad one."""
    merged = dict(DEFAULT_SETTINGS)
    for key, value in (settings or {}).items():
        if key not in DEFAULT_SETTINGS:
            raise MonitoringError(
                "monitoring_alert_settings has %r, which is not a setting; expected some of: %s"
                % (key, ", ".join(sorted(DEFAULT_SETTINGS)))
            )
        merged[key] = value
    for key, value in merged.items():
        number = isinstance(value, (int, float)) and not isinstance(value, bool)
        if key in _RATIOS and not (number and 0 < value <= 1):
            raise MonitoringError(
                "monitoring_alert_settings.%s is %r; expected a ratio above 0, at most 1" % (key, value)
            )
        if key not in _RATIOS and not (number and value == int(value) and value >= 1):
            raise MonitoringError(
                "monitoring_alert_settings.%s is %r; expected a whole number of seconds, 1 or more" % (key, value)
            )
    return merged


def check_ttft_bounds(bounds):
    """{seat: TTFT p95 bound in ms}, from the recipes' qualification.rollout_gates.ttft_ms_p95."""
    checked = {}
    for seat, bound in sorted((bounds or {}).items()):
        if bound is None:
            continue
        if isinstance(bound, bool) or not isinstance(bound, (int, float)) or bound <= 0:
            raise MonitoringError(
                "seat %s declares ttft_ms_p95 %r; expected milliseconds above 0 (seats/%s.yml)" % (seat, bound, seat)
            )
        checked[str(seat)] = float(bound)
    return checked


def _dur(seconds):
    seconds = int(seconds)
    if seconds % 3600 == 0:
        return "%dh" % (seconds // 3600)
    if seconds % 60 == 0:
        return "%dm" % (seconds // 60)
    return "%ds" % seconds


def _by(*extra):
    return "by (%s)" % ", ".join(metrics.SEAT_LABELS + extra)


def _sel(name, matcher=""):
    """`name` on the seats' scrape job only (another job may expose a metric of the same name)."""
    return '%s{job="%s"%s}' % (name, SEAT_JOB, (", " + matcher) if matcher else "")


def _either(template, key):
    """One expression per engine, joined with `or`: each seat matches only its own engine's names."""
    parts = [template(engine, names[key]) for engine, names in sorted(metrics.ENGINE_METRICS.items())]
    return "\n  or\n".join(parts)


def _stalled(engine, _name, s):
    names = metrics.ENGINE_METRICS[engine]
    return "(max %s (%s) > 0)\n  and on (seat, node, rank)\n  (sum %s (increase(%s[%s])) == 0)" % (
        _by(),
        _sel(names["running"]),
        _by(),
        _sel(names["generation_tokens"]),
        _dur(s["stall_window_s"]),
    )


def _seat_rules(s):
    seat_summary = (
        "seat {{ $labels.seat }} on {{ $labels.node }} ({{ $labels.engine }}"
        "{{ if $labels.alias }}, alias {{ $labels.alias }}{{ end }})"
    )
    stall_total = s["stall_window_s"] + s["stall_for_s"]
    return [
        {
            "alert": "SeatTokensStalled",
            "expr": _either(lambda engine, name: _stalled(engine, name, s), "running"),
            "for": _dur(s["stall_for_s"]),
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": seat_summary + " holds {{ $value }} running requests and generated no token",
                "description": "No generated token for %d s while requests run: the engine may be deadlocked "
                "without a word in its log. docs/monitoring.md#seattokensstalled" % stall_total,
            },
        },
        {
            "alert": "SeatKvCacheNearlyFull",
            "expr": _either(
                lambda engine, name: "max %s (%s) > %s" % (_by(), _sel(name), s["kv_usage_ratio"]),
                "kv_usage",
            ),
            "for": _dur(s["kv_for_s"]),
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": seat_summary + " has its KV cache {{ $value | humanizePercentage }} full",
                "description": "KV cache above %d%% for %d s. docs/monitoring.md#seatkvcachenearlyfull"
                % (round(s["kv_usage_ratio"] * 100), s["kv_for_s"]),
            },
        },
        {
            "alert": "SeatPreempting",
            "expr": _either(
                lambda engine, name: (
                    "sum %s (increase(%s[%s])) > 0" % (_by(), _sel(name), _dur(s["preemption_window_s"]))
                ),
                "preemptions",
            ),
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": seat_summary
                + " preempted {{ $value }} requests in the last %s" % _dur(s["preemption_window_s"]),
                "description": "Requests lose their KV cache and are recomputed. docs/monitoring.md#seatpreempting",
            },
        },
        {
            "alert": "SeatErrorRate",
            "expr": _either(
                lambda engine, name: (
                    "(sum %s (rate(%s[%s])) / sum %s (rate(%s[%s]))) > %s"
                    % (
                        _by(),
                        _sel(name, metrics.ENGINE_ERROR_MATCHERS[engine]),
                        _dur(s["error_window_s"]),
                        _by(),
                        _sel(name),
                        _dur(s["error_window_s"]),
                        s["error_ratio"],
                    )
                ),
                "responses",
            ),
            "for": _dur(s["error_for_s"]),
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": seat_summary + " answers {{ $value | humanizePercentage }} of requests with a server error",
                "description": "Over %d%% of answers are 5xx for %d s. docs/monitoring.md#seaterrorrate"
                % (round(s["error_ratio"] * 100), s["error_for_s"]),
            },
        },
    ]


def _ttft_rules(s, bounds):
    buckets = metrics.name_regex(sorted(names["ttft_bucket"] for names in metrics.ENGINE_METRICS.values()))
    rules = []
    for seat, bound_ms in bounds.items():
        rules.append(
            {
                "alert": "SeatTtftOverBound",
                "expr": 'histogram_quantile(0.95, sum %s (rate({__name__=~"%s", job="%s", seat="%s"}[%s]))) > %s'
                % (_by("le"), buckets, SEAT_JOB, seat, _dur(s["ttft_window_s"]), bound_ms / 1000.0),
                "for": _dur(s["ttft_for_s"]),
                "labels": {"severity": "warning", "bound_ms": "%g" % bound_ms},
                "annotations": {
                    "summary": "seat {{ $labels.seat }} on {{ $labels.node }}: TTFT p95 {{ $value | humanizeDuration }}"
                    " over its declared %g ms" % bound_ms,
                    "description": "From seats/%s.yml qualification.rollout_gates.ttft_ms_p95. "
                    "docs/monitoring.md#seatttftoverbound" % seat,
                },
            }
        )
    return rules


def _fleet_rules(s):
    events = metrics.name_regex(metrics.DCGM_CLOCK_EVENTS)
    bit = metrics.DCGM_SW_POWER_CAP_BIT
    return [
        {
            "alert": "ScrapeFailing",
            "expr": 'up{job=~"%s"} == 0' % metrics.name_regex(JOBS),
            "for": _dur(s["scrape_for_s"]),
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": "{{ $labels.job }} target {{ $labels.instance }} ({{ $labels.seat }}{{ $labels.node }})"
                " has not answered a scrape",
                "description": "Prometheus cannot read this target. docs/monitoring.md#scrapefailing",
            },
        },
        {
            "alert": "GpuHeldAtPowerCap",
            "expr": 'floor(max by (instance, node, gpu, UUID) ({__name__=~"%s"}) / %d) %% 2 == 1' % (events, bit),
            "for": _dur(s["power_cap_for_s"]),
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "GPU {{ $labels.gpu }} on {{ $labels.node }} runs clocked down by its power cap",
                "description": "The software power cap held the clocks for %d s. docs/monitoring.md#gpuheldatpowercap"
                % s["power_cap_for_s"],
            },
        },
        {
            "alert": "RdmaPortErrors",
            "expr": "sum by (instance, node, device, port) (\n  %s\n) > 0"
            % metrics.increase_each(metrics.RDMA_ERROR_COUNTERS, _dur(s["rdma_window_s"])).replace(" or ", "\n  or "),
            "keep_firing_for": _dur(s["rdma_keep_firing_s"]),
            "labels": {"severity": "warning"},
            "annotations": {
                "summary": "RDMA port {{ $labels.device }}/{{ $labels.port }} on {{ $labels.node }} counted"
                " {{ $value }} errors",
                "description": "Error counters rose; the alert stays %d s after they stop so a fault that came and went"
                " is seen. docs/monitoring.md#rdmaporterrors" % s["rdma_keep_firing_s"],
            },
        },
        {
            "alert": "CotenantNotRestored",
            # One sample per seat holding the co-tenant stopped: it is missed only when none of them serves.
            "expr": "(max by (node, seat, cotenant) (%s) == 1)\n  unless on (node, cotenant)\n"
            "  (max by (node, cotenant) (%s * on (seat) group_left () (max by (seat) (%s) == 1)))"
            % (metrics.COTENANT_EVICTED, metrics.COTENANT_EVICTED, _sel("up")),
            "for": _dur(s["cotenant_for_s"]),
            "labels": {"severity": "critical"},
            "annotations": {
                "summary": "co-tenant {{ $labels.cotenant }} on {{ $labels.node }}, stopped for seat"
                " {{ $labels.seat }}, is still stopped and the seat is not serving",
                "description": "docs/monitoring.md#cotenantnotrestored",
            },
        },
    ]


def rules_document(settings=None, ttft_bounds=None):
    """The Prometheus rules file (a dict to write as YAML)."""
    s = check_settings(settings)
    bounds = check_ttft_bounds(ttft_bounds)
    return {
        "groups": [
            {"name": "seatwright-seats", "rules": _seat_rules(s) + _ttft_rules(s, bounds)},
            {"name": "seatwright-fleet", "rules": _fleet_rules(s)},
        ]
    }


def ttft_bounds_from_recipes(recipes):
    """{seat: ttft_ms_p95} of the recipes ({seat: recipe dict}) that declare one."""
    bounds = {}
    for seat, recipe in sorted((recipes or {}).items()):
        gates = ((recipe or {}).get("qualification") or {}).get("rollout_gates") or {}
        if gates.get("ttft_ms_p95") is not None:
            bounds[seat] = gates["ttft_ms_p95"]
    return bounds


def alert_names():
    """Every alert the rules file can hold, in FAILURES' order."""
    return list(FAILURES)
