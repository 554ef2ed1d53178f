"""SeatTokensStalled live: Prometheus 2.42 on loopback scrapes a seat whose token counter stops while
its running gauge stays up (as a frozen engine core's API server keeps answering), and the alert must
fire within its stated time and clear once tokens flow again.

The seat here is a small server on 127.0.0.1 serving the lab engine's exposition with two series
moving; the lab's own run freezes the real engine (make lab). Short windows keep the test short:
stall_window_s 4 and stall_for_s 4 at a 1 s scrape and evaluation interval.
"""

import json
import threading
import time

import pytest
import yaml
from ansible_collections.seatwright.fleet.plugins.module_utils.monitoring import rules, targets
from conftest import FIXTURES
from monitoring_live import api, free_port, scraped_at_least, serve, start_prometheus, wait_until

SETTINGS = {"stall_window_s": 4, "stall_for_s": 4}
RUNNING = "vllm:num_requests_running{engine=\"0\",model_name=\"tiny\"}"
TOKENS = "vllm:generation_tokens_total{engine=\"0\",model_name=\"tiny\"}"


class Engine:
    """The lab engine's exposition with two requests running and the token counter moving unless frozen."""

    def __init__(self):
        self.base = (FIXTURES / "bench" / "vllm-0.32.0-cpu-metrics-tiny.txt").read_text()
        self.tokens = 3600.0
        self.frozen = False
        self.lock = threading.Lock()

    def text(self):
        with self.lock:
            if not self.frozen:
                self.tokens += 16
            tokens = self.tokens
        lines = []
        for line in self.base.splitlines():
            if line.startswith(RUNNING):
                line = "%s 2.0" % RUNNING
            elif line.startswith(TOKENS):
                line = "%s %s" % (TOKENS, tokens)
            lines.append(line)
        return "\n".join(lines) + "\n"


def alert_state(base):
    alerts = api(base, "/api/v1/alerts")["data"]["alerts"]
    states = [a["state"] for a in alerts if a["labels"]["alertname"] == "SeatTokensStalled"]
    return states[0] if states else "inactive"


def wait_for(base, wanted, limit_s):
    start = time.monotonic()
    while time.monotonic() - start < limit_s:
        if alert_state(base) == wanted:
            return time.monotonic() - start
        time.sleep(0.2)
    pytest.fail("SeatTokensStalled did not become %s within %s s" % (wanted, limit_s))


def test_the_stall_alert_fires_within_its_stated_time_and_clears(tmp_path):
    engine = Engine()
    seat = serve(engine.text)
    work = tmp_path
    (work / "file_sd").mkdir()
    plan = {
        "engine": {"name": "vllm"},
        "ranks": [{"host": "node-a", "rank": 0, "serve": "127.0.0.1:%d" % seat.server_port}],
    }
    (work / "file_sd" / targets.seat_file_name("lab")).write_text(json.dumps(targets.seat_groups("lab", plan)))
    (work / "rules.yml").write_text(yaml.safe_dump(rules.rules_document(SETTINGS)))
    config = targets.scrape_config(
        nodes={},
        gpu_nodes={},
        routers=[],
        file_sd_dir=str(work / "file_sd"),
        credentials_file="",
        rules_file=str(work / "rules.yml"),
        scrape_interval_s=1,
    )
    (work / "prometheus.yml").write_text(yaml.safe_dump(config))
    with start_prometheus(work, free_port()) as prometheus:
        base = prometheus["base"]
        # Tokens flowing through more than two whole windows first (file_sd's first read takes seconds).
        wait_until(lambda: scraped_at_least(base, 10), 60, "Prometheus did not scrape the seat", prometheus)
        assert alert_state(base) == "inactive"
        engine.frozen = True
        fired_s = wait_for(base, "firing", 30)
        engine.frozen = False
        cleared_s = wait_for(base, "inactive", 30)
    seat.shutdown()
    stated = SETTINGS["stall_window_s"] + SETTINGS["stall_for_s"]
    print(
        "SeatTokensStalled: fired %.1f s after the counter stopped (stated %d s + a scrape and an evaluation), "
        "cleared %.1f s after it moved again" % (fired_s, stated, cleared_s)
    )
    # The window's flat stretch starts at the last scrape that saw a token, up to a scrape before the
    # counter stopped: so a scrape early at most, and a scrape and an evaluation late (7.3-8.0 s measured).
    assert stated - 2 <= fired_s <= stated + 3
    assert cleared_s <= 3
