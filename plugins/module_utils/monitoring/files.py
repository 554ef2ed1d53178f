"""The text of each file the monitoring role writes, by name, for the filter monitoring_render."""

import json

import yaml
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import MonitoringError
from ansible_collections.seatwright.fleet.plugins.module_utils.monitoring import dashboards, metrics, rules, targets

HEADER = "# Written by seatwright (roles/monitoring); a re-run puts it back as generated.\n"


def _yaml(data):
    return HEADER + yaml.safe_dump(data, sort_keys=False, default_flow_style=False, width=120)


def render(what, args=None):
    """The text of `what`: rules (settings, recipes, ttft_bounds), prometheus (targets.scrape_config's
    arguments), dashboard (kind), cotenants (record), dcgm_counters."""
    args = dict(args or {})
    if what == "rules":
        # The recipes' declared bounds ({seat: recipe}), then any given outright on top.
        bounds = dict(rules.ttft_bounds_from_recipes(args.get("recipes")), **(args.get("ttft_bounds") or {}))
        return _yaml(rules.rules_document(args.get("settings"), bounds))
    if what == "prometheus":
        return _yaml(targets.scrape_config(**args))
    if what == "dashboard":
        return json.dumps(dashboards.dashboard(args.get("kind")), indent=2, sort_keys=True) + "\n"
    if what == "cotenants":
        return targets.cotenant_textfile(args.get("record"))
    if what == "dcgm_counters":
        return metrics.dcgm_counters_csv()
    raise MonitoringError(
        "monitoring_render cannot write %r; expected rules, prometheus, dashboard, cotenants or dcgm_counters" % (what,)
    )
