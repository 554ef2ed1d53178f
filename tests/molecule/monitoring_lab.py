"""The lab's Prometheus (site.yml runs it on node-a when the lab inventory enables monitoring), read from
the controller for the lifecycle checks: targets, dashboard queries, alerts and what it shows."""

import json
import time
import urllib.parse
import urllib.request
from pathlib import Path

# inventory/lab/group_vars/all/monitoring.yml: monitoring_server_listen.
PROMETHEUS = "http://172.30.99.11:9090"
# The node exporter's textfile folder on each lab node (roles/monitoring/defaults).
TEXTFILE_DIR = "/var/lib/prometheus/node-exporter"
FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "monitoring"
# TEST INPUT: the lab has no GPU and no RDMA port, so nothing there gives DCGM's or the infiniband
# collector's series. The node view's GPU and RDMA panels are run against these recorded expositions
# (tests/fixtures/monitoring/README.md says where each came from), put in each node's textfile folder.
STANDIN_FILE = "lab-test-input-gpu-rdma.prom"
STANDIN_SOURCES = ("dcgm-exporter-h200x2.prom", "node-exporter-1.5-infiniband.prom")


def api(path, **params):
    url = PROMETHEUS + path + ("?" + urllib.parse.urlencode(params) if params else "")
    with urllib.request.urlopen(url, timeout=10) as answer:
        return json.load(answer)


def targets():
    """{(job, node, seat or router or ''): health} of every active target."""
    found = {}
    for target in api("/api/v1/targets")["data"]["activeTargets"]:
        labels = target["labels"]
        which = labels.get("seat") or labels.get("router") or ""
        found[(labels["job"], labels.get("node", ""), which)] = target["health"]
    return found


def wait_for(check, limit_s, what):
    """Poll `check` until it gives something true; fail naming `what` and its last answer."""
    deadline = time.monotonic() + limit_s
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except OSError as exc:
            last = exc
        else:
            if last:
                return last
        time.sleep(1)
    raise AssertionError("%s within %d s; last: %r" % (what, limit_s, last))


def standin_text():
    """The recorded expositions, one after the other (their metric names do not overlap)."""
    lines = []
    for name in STANDIN_SOURCES:
        lines.append("# From tests/fixtures/monitoring/%s (lab test input, not this node's)" % name)
        lines.extend(line for line in (FIXTURES / name).read_text().splitlines() if line.strip())
    return "\n".join(lines) + "\n"
