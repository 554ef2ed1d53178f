#!/usr/bin/env python3
"""A fake SGLang model gateway (smg) on 127.0.0.1 for the co-tenant router tests: workers added
(POST /workers {url}) and removed (DELETE /workers/<id>) at runtime, listed at GET /workers in
smg 1.13.0's shape, every worker serving the model name given; admin calls need the Bearer key.

    FAKE_SMG_KEY=KEY python tests/fake_smg.py --port PORT --model production   (prints "listening on PORT")
"""

import argparse
import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def serve(port, model, key):
    workers, lock = {}, threading.Lock()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, fmt, *args):
            pass

        def _json(self, status, body):
            data = json.dumps(body).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _admin(self):
            if self.headers.get("Authorization") == "Bearer " + key:
                return True
            self._json(401, {"error": "give the admin key"})
            return False

        def do_GET(self):
            if self.path == "/health":
                self._json(200, {"status": "ok"})
            elif self.path == "/workers" and self._admin():
                with lock:
                    rows = [dict(row) for row in workers.values()]
                self._json(200, {"workers": rows, "total": len(rows)})
            elif self.path != "/workers":
                self._json(404, {"error": "no route"})

        def do_POST(self):
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            if self.path == "/workers" and self._admin():
                with lock:
                    worker_id = "w%d" % (len(workers) + 1)
                    while worker_id in workers:
                        worker_id += "x"
                    workers[worker_id] = {
                        "id": worker_id,
                        "url": body["url"].rstrip("/"),
                        "model_id": model,
                        "status": "healthy",
                        "is_healthy": True,
                        "load": 0,
                    }
                self._json(202, {"worker_id": worker_id})
            elif self.path != "/workers":
                self._json(404, {"error": "no route"})

        def do_DELETE(self):
            if self.path.startswith("/workers/") and self._admin():
                with lock:
                    workers.pop(self.path.rsplit("/", 1)[1], None)
                self._json(202, {"ok": True})

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    print("listening on %d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--model", default="production")
    options = parser.parse_args()
    serve(options.port, options.model, os.environ["FAKE_SMG_KEY"])
