"""Test equipment for the monitoring tests: Debian's Prometheus on loopback and small servers on
127.0.0.1 that serve recorded exposition."""

import contextlib
import http.server
import json
import shutil
import socket
import subprocess
import threading
import time
import urllib.error
import urllib.parse
import urllib.request

import pytest


class Exposition(http.server.BaseHTTPRequestHandler):
    body = ""
    key = None

    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.key and self.headers.get("Authorization") != "Bearer " + self.key:
            self.send_response(401)
            self.end_headers()
            return
        payload = (self.body() if callable(self.body) else self.body).encode()
        self.send_response(200)
        self.send_header("Content-Type", "text/plain; version=0.0.4")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        try:
            self.wfile.write(payload)
        except BrokenPipeError:
            pass  # Prometheus gave up on a scrape while it shut down

    def log_message(self, *args):
        pass


def serve(body, key=None):
    """A server on 127.0.0.1 answering every GET with `body` (text, or a function giving it); with
    `key`, only requests that carry it as a bearer token."""
    handler = type("Handler", (Exposition,), {"body": staticmethod(body) if callable(body) else body, "key": key})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def free_port():
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def api(base, path, raw=False, **params):
    url = base + path + ("?" + urllib.parse.urlencode(params) if params else "")
    try:
        with urllib.request.urlopen(url, timeout=10) as answer:
            return answer.read() if raw else json.load(answer)
    except urllib.error.HTTPError as exc:
        # Prometheus says why a query failed in the body (a 400 or 422 with {"error": ...}).
        body = exc.read()
        try:
            return json.loads(body or b"{}") | {"http_status": exc.code}
        except ValueError:  # not ready yet: a plain-text 503
            return {"status": "error", "error": body.decode(errors="replace"), "http_status": exc.code, "data": {}}


@contextlib.contextmanager
def start_prometheus(work, port):
    """Prometheus on 127.0.0.1:`port` with work/prometheus.yml, its data and log in `work`."""
    binary = shutil.which("prometheus")
    if binary is None:
        pytest.fail("prometheus is missing: install Debian's prometheus package (scripts/bootstrap does)")
    log = open(work / "prometheus.log", "w")
    process = subprocess.Popen(
        [
            binary,
            "--config.file=%s" % (work / "prometheus.yml"),
            "--storage.tsdb.path=%s" % (work / "data"),
            "--web.listen-address=127.0.0.1:%d" % port,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    running = {"base": "http://127.0.0.1:%d" % port, "log": work / "prometheus.log", "process": process}
    try:
        wait_until(lambda: api(running["base"], "/-/ready", raw=True), 60, "Prometheus did not start", running)
        yield running
    finally:
        process.terminate()
        process.wait(timeout=30)
        log.close()


def wait_until(check, limit_s, what, running):
    deadline = time.monotonic() + limit_s
    while True:
        try:
            if check():
                return
        except OSError:
            pass
        if running["process"].poll() is not None or time.monotonic() > deadline:
            pytest.fail("%s: %s" % (what, running["log"].read_text()[-2000:]))
        time.sleep(0.3)


def scraped_at_least(base, scrapes):
    """Every target scraped `scrapes` times: rate() and increase() need two samples."""
    result = api(base, "/api/v1/query", query="min(count_over_time(up[1m]))")["data"].get("result")
    return bool(result) and float(result[0]["value"][1]) >= scrapes
