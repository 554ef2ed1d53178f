"""A fake router in front of fake seats (tests/router_backend.py), for promotion tests on 127.0.0.1.

It forwards /v1/chat/completions for an alias to the alias's targets in exact weighted turns (smooth
weighted round robin, so a 50 % canary gets every other request) and names the seat that answered
in LiteLLM's headers. Its admin calls (Bearer key) stand in for roles/router's apply_targets,
read_targets and deregister: POST /admin/targets {alias, targets}, GET /admin/targets/<alias>,
POST /admin/deregister {seat}. A change of targets is one swap under a lock, so no request is dropped.
"""

import http.client
import json
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SEAT_HEADER, BASE_HEADER = "x-litellm-model-id", "x-litellm-model-api-base"


class Router:
    def __init__(self, key, aliases):
        self.key = key
        self.targets = {alias: dict(targets) for alias, targets in aliases.items()}
        self.current = {}
        self.lock = threading.Lock()
        self.admin_calls = []
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self.server.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = "http://127.0.0.1:%d" % self.port

    def start(self):
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return self

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    def pick(self, alias):
        """Smooth weighted round robin over the alias's targets: (seat, api_base) or None."""
        with self.lock:
            targets = self.targets.get(alias) or {}
            live = {seat: t for seat, t in targets.items() if int(t.get("weight") or 0) > 0}
            if not live:
                return None
            total = sum(int(t["weight"]) for t in live.values())
            for seat, t in live.items():
                self.current[seat] = self.current.get(seat, 0) + int(t["weight"])
            seat = max(sorted(live), key=lambda s: self.current[s])
            self.current[seat] -= total
            return seat, live[seat]["api_base"]

    def _handler(self):
        router = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, fmt, *args):
                pass

            def _json(self, status, body, extra=()):
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for name, value in extra:
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(data)

            def _admin(self):
                if self.headers.get("Authorization") != "Bearer " + router.key:
                    self._json(401, {"error": "give the admin key"})
                    return False
                router.admin_calls.append((self.command, self.path))
                return True

            def _body(self):
                return json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")

            def do_GET(self):
                if self.path.startswith("/admin/targets/"):
                    if self._admin():
                        with router.lock:
                            self._json(200, router.targets.get(self.path.rsplit("/", 1)[1], {}))
                else:
                    self._json(404, {"error": "no route"})

            def do_POST(self):
                body = self._body()
                if self.path == "/admin/targets":
                    if self._admin():
                        with router.lock:
                            router.targets[body["alias"]] = dict(body["targets"])
                            router.current = {}
                        self._json(200, {"ok": True})
                elif self.path == "/admin/deregister":
                    if self._admin():
                        with router.lock:
                            for targets in router.targets.values():
                                targets.pop(body["seat"], None)
                        self._json(200, {"ok": True})
                elif self.path == "/v1/chat/completions":
                    self._forward(body)
                else:
                    self._json(404, {"error": "no route"})

            def _forward(self, body):
                chosen = router.pick(body.get("model"))
                if chosen is None:
                    self._json(404, {"error": {"message": "no seat serves %s" % body.get("model")}})
                    return
                seat, base = chosen
                parts = urllib.parse.urlsplit(base)
                try:
                    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=30)
                    conn.request(
                        "POST",
                        parts.path.rstrip("/") + "/chat/completions",
                        json.dumps(body),
                        {"Content-Type": "application/json"},
                    )
                    answer = conn.getresponse()
                except OSError as exc:
                    self._json(502, {"error": {"message": "seat %s: %s" % (seat, exc)}})
                    return
                self.send_response(answer.status)
                self.send_header("Content-Type", answer.getheader("Content-Type") or "application/json")
                self.send_header(SEAT_HEADER, seat)
                self.send_header(BASE_HEADER, base)
                self.send_header("Connection", "close")
                self.end_headers()
                self.close_connection = True
                while True:
                    block = answer.read1(65536)
                    if not block:
                        break
                    self.wfile.write(block)
                    self.wfile.flush()
                conn.close()

        return Handler
