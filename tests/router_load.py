"""A client through a router's alias for the promotion tests: one request every interval on its own
thread, each request's start, end, status and the seat that answered (LiteLLM's header; smg names
none, so the fake seat's own words in its answer)."""

import json
import threading
import time
import urllib.error
import urllib.request

from ansible_collections.seatwright.fleet.plugins.module_utils.router import adapter
from promote_setup import KEY

ALIAS = "production"
INTERVAL_S = 0.05


def who(kind, headers, body):
    """The seat that answered: LiteLLM's header; smg names none, the fake seat says it in its text."""
    if kind == "litellm":
        return adapter.litellm_who_answered(headers)["seat"]
    try:
        text = json.loads(body)["choices"][0]["message"]["content"]
    except (ValueError, KeyError, IndexError, TypeError):
        return None
    words = text.split()
    return words[2] if len(words) > 2 and words[:2] == ["answered", "by"] else None


class Load:
    """A request through the alias every INTERVAL_S, each on its own thread, so a slow answer does not
    slow the cadence; every request's start (epoch), end, status and answering seat kept."""

    def __init__(self, kind, url, key=KEY, model=ALIAS, interval_s=INTERVAL_S, max_tokens=4):
        self.kind, self.url, self.key, self.model = kind, url, key, model
        self.interval_s, self.max_tokens = interval_s, max_tokens
        self.records, self.lock, self.stop = [], threading.Lock(), threading.Event()
        self.threads, self.runner = [], threading.Thread(target=self._run, daemon=True)

    def _one(self):
        record = {"t0": time.time(), "status": None, "seat": None, "error": None}
        body = {"model": self.model, "max_tokens": self.max_tokens, "messages": [{"role": "user", "content": "hi"}]}
        headers = {"Content-Type": "application/json"}
        if self.key:
            # The clients' key where the router's front asks for one (router_api_key); else LiteLLM's
            # master key, its only key without a database.
            headers["Authorization"] = "Bearer " + self.key
        request = urllib.request.Request(self.url + "/v1/chat/completions", json.dumps(body).encode(), headers)
        try:
            with urllib.request.urlopen(request, timeout=60) as response:
                text = response.read()
                record["status"] = response.status
                record["seat"] = who(self.kind, dict(response.headers.items()), text)
        except urllib.error.HTTPError as exc:
            record["status"], record["error"] = exc.code, exc.read()[:200].decode("utf-8", "replace")
        except OSError as exc:
            record["error"] = str(exc)
        record["t1"] = time.time()
        with self.lock:
            self.records.append(record)

    def _run(self):
        while not self.stop.is_set():
            thread = threading.Thread(target=self._one, daemon=True)
            thread.start()
            self.threads.append(thread)
            self.stop.wait(self.interval_s)

    def __enter__(self):
        self.runner.start()
        time.sleep(1.0)
        return self

    def __exit__(self, *exc):
        time.sleep(1.0)
        self.stop.set()
        self.runner.join()
        for thread in self.threads:
            thread.join(90)

    def failed(self):
        return [r for r in self.records if r["status"] != 200 or not r["seat"]]

    def after(self, epoch):
        return [r for r in self.records if r["t0"] >= epoch]

    def by_seat(self):
        found = {}
        for r in self.records:
            found[r["seat"] or "none"] = found.get(r["seat"] or "none", 0) + 1
        return found
