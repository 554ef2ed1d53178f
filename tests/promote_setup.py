"""Test equipment for promotions on 127.0.0.1: two fake seats (tests/router_backend.py) behind the
fake router (tests/fake_router.py), a candidate's evidence folder, and a client load through the alias."""

import json
import os
import subprocess
import sys
import threading
import time

from ansible_collections.seatwright.fleet.plugins.module_utils.io.common import openai_http
from ansible_collections.seatwright.fleet.plugins.module_utils.io.evidence import writer
from conftest import ROOT
from fake_router import SEAT_HEADER, Router

# The one builder of a real benchmark part in the tests, from anywhere:
# tests/unit/plugins/module_utils/evidence/evidence_cases.py.
sys.path.insert(0, str(ROOT / "tests" / "unit" / "plugins" / "module_utils" / "evidence"))
from evidence_cases import benchmark  # noqa: E402

KEY = "sk-router-admin-5f3c9a7e1b2d4c68"
RUN_ID = "20261201T120000Z"
# Gates a fake seat streaming 20 tok/s passes on a loaded two-core host, with enough answers in 3 s.
GATES = {"min_requests": 4, "min_visible_ratio": 0.1}


def start_seat(name, *extra):
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "tests" / "router_backend.py"), "--name", name, "--model", "lab", "--port", "0"]
        + list(extra),
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    port = int(proc.stdout.readline().split()[-1])
    return proc, "http://127.0.0.1:%d/v1" % port


class Fleet:
    """lab (the incumbent) and lab-fast (the candidate) behind a router with production -> lab."""

    def __init__(self):
        self.procs, self.bases = [], {}
        for name in ("lab", "lab-fast"):
            proc, base = start_seat(name)
            self.procs.append(proc)
            self.bases[name] = base
        self.router = Router(KEY, {"production": {"lab": {"api_base": self.bases["lab"], "weight": 100}}}).start()

    def close(self):
        self.router.stop()
        for proc in self.procs:
            proc.terminate()
            proc.wait(timeout=10)


def evidence_folder(root, seat="lab-fast", decision="promote", against="lab"):
    """evidence/<seat>/<RUN_ID>/ with a real benchmark part and a promotion decision, assembled."""
    folder = os.path.join(str(root), "evidence", seat, RUN_ID)
    os.makedirs(folder)
    promotion = {
        "seat": seat,
        "decision": decision,
        "reasons": ["beats %s at every level" % against if decision == "promote" else "loses at c=4"],
        "comparisons": [{"incumbent": against, "comparable": True}],
    }
    with open(os.path.join(folder, "benchmark.json"), "w", encoding="utf-8") as handle:
        json.dump(benchmark({1: 20.0, 4: 60.0}), handle)
    with open(os.path.join(folder, "promotion.json"), "w", encoding="utf-8") as handle:
        json.dump(promotion, handle)
    writer.assemble(folder, plots=False)
    return folder


class Clients:
    """Requests through the alias one after another until stopped: who answered, and failures."""

    def __init__(self, url, alias="production", streams=2):
        self.point = openai_http.Endpoint(url + "/v1", None, 30.0, 30.0)
        self.alias, self.answers, self.stop = alias, [], threading.Event()
        self.threads = [threading.Thread(target=self._run, daemon=True) for _ in range(streams)]

    def _run(self):
        while not self.stop.is_set():
            answer = self.ask()
            self.answers.append(answer)

    def ask(self):
        body = {"model": self.alias, "max_tokens": 4, "stream": True, "messages": [{"role": "user", "content": "hi"}]}
        answer = openai_http.call(
            self.point,
            {
                "method": "POST",
                "path": "/chat/completions",
                "body": body,
                "stream": True,
                "keep_headers": (SEAT_HEADER,),
            },
        )
        ok = answer["status"] == 200 and not answer["error"]
        return {"ok": ok, "seat": (answer.get("headers") or {}).get(SEAT_HEADER), "at": time.time()}

    def __enter__(self):
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        for thread in self.threads:
            thread.join()

    def failed(self):
        return [a for a in self.answers if not a["ok"]]


def assert_judged_against_the_incumbent(document, named):
    """Every gated hold of a moved rollout was judged against the incumbent, not the benchmark alone:
    beside it in the same hold when the router names who answered and it answered enough there (a
    canary), else against its baseline hold."""
    baseline = document["steps"][1]["verdict"]["figures"]
    for step in document["steps"][2:4]:
        figures = step["verdict"]["figures"]
        beside = figures.get("incumbent_beside")
        if beside:
            assert named and step["step"] != "all", step
            assert figures["expected_visible_tok_s_p50"] == beside["visible_tok_s_p50"], step
            assert figures["expected_from"].startswith("the incumbent beside it in this hold"), step
        else:
            assert figures["expected_visible_tok_s_p50"] == baseline["visible_tok_s_p50"], step
            assert figures["expected_from"].startswith("the incumbent's baseline hold"), step
