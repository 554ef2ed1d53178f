#!/usr/bin/env python3
"""A hostile endpoint: test equipment that attacks the controller's HTTP client, not an engine.

Binds 127.0.0.1 on a free port, serves one attack (its mode) on every path, and stops by itself
after `deadline_s`; every answer is generated lazily, so the server holds no big body in memory.
Modes:
- giant-body: a 200 JSON answer of GIANT_BYTES;
- endless-sse: a stream of well-formed chat chunks that never ends;
- endless-line: a stream whose one `data:` line never ends;
- trickle: a JSON answer whose body arrives one byte every TRICKLE_S (never a read timeout);
- redirect: 302 to a second listener on another host name (`trap`), which records every request
  and whether it carried an Authorization header;
- metrics-100mb: a 100 MB /metrics page (the API answers normally but slowly);
- malformed: a status line that is not HTTP;
- nan: a chat answer whose logprobs and usage hold NaN and Infinity;
- echo-key: a 200 answer that is not JSON and repeats the caller's key: as it is, starting where the
  client's copies are cut (`[:200]`), unicode-escaped, and once more near the end;
- dense: answers within the wire limits that are many times their size once parsed: a plain answer
  of DENSE_BODY_BYTES holding a list of empty objects, and a stream of DENSE_BYTES of well-formed
  chunks, each packed with tiny objects.

    python tests/hostile_server.py --mode endless-sse   (prints "listening on PORT" when ready)
"""

import argparse
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODES = (
    "giant-body",
    "endless-sse",
    "endless-line",
    "trickle",
    "redirect",
    "metrics-100mb",
    "malformed",
    "nan",
    "echo-key",
    "dense",
)
DENSE_BYTES = 60 * 2**20
DENSE_BODY_BYTES = 15 * 2**20
# Where the echoed key starts: the client's copies cut at 200 characters keep 15 of it.
ECHO_AT = 185
GIANT_BYTES = 2 * 2**30
METRICS_BYTES = 100 * 10**6
TRICKLE_S = 0.2
BLOCK = 64 * 1024
MODEL = "tiny"


def metrics_lines():
    """A valid Prometheus page, 100 MB of it, one block at a time."""
    sent, serial = 0, 0
    while sent < METRICS_BYTES:
        lines = []
        while sum(map(len, lines)) < BLOCK:
            lines.append('vllm:filler_total{engine="0",series="%d"} 1.0\n' % serial)
            serial += 1
        block = "".join(lines).encode()[: METRICS_BYTES - sent]
        sent += len(block)
        yield block


def chunk(text):
    return {
        "id": "chatcmpl-hostile",
        "object": "chat.completion.chunk",
        "created": 0,
        "model": MODEL,
        "choices": [{"index": 0, "delta": {"content": text}, "finish_reason": None}],
    }


class Trap(BaseHTTPRequestHandler):
    """The redirect's target: records what arrived, answers like an engine would."""

    seen = None

    def log_message(self, *_args):
        pass

    def _record(self):
        self.seen.append(
            {"method": self.command, "path": self.path, "authorization": self.headers.get("Authorization")}
        )
        body = json.dumps({"object": "list", "data": [{"id": MODEL, "max_model_len": 2048}]}).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    do_GET = do_POST = _record  # noqa: N815 (http.server's names)


class Hostile(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    mode = None
    deadline = 0.0
    trap_url = None

    def log_message(self, *_args):
        pass

    def _alive(self):
        return time.monotonic() < self.deadline

    def _head(self, status, ctype, length=None, extra=()):
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        if length is not None:
            self.send_header("Content-Length", str(length))
        else:
            self.send_header("Connection", "close")
        for name, value in extra:
            self.send_header(name, value)
        self.end_headers()

    def _json(self, payload):
        body = json.dumps(payload).encode()
        self._head(200, "application/json", len(body))
        self.wfile.write(body)

    def _body(self):
        length = int(self.headers.get("Content-Length") or 0)
        return self.rfile.read(length) if length else b""

    def handle_one_request(self):
        try:
            super().handle_one_request()
        except (TimeoutError, BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client stopped reading, as it should

    def do_GET(self):  # noqa: N802 (http.server's name)
        self._serve(None)

    def do_POST(self):  # noqa: N802
        self._serve(self._body())

    def _serve(self, body):
        mode = self.mode
        if mode == "malformed":
            self.wfile.write(b"SEATWRIGHT/9 two hundred\r\nbanana\r\n\r\n")
            self.close_connection = True
            return
        if mode == "redirect":
            self._head(302, "text/plain", 0, [("Location", self.trap_url + self.path)])
            return
        if self.path == "/metrics":
            if mode == "metrics-100mb":
                self._head(200, "text/plain; version=0.0.4", METRICS_BYTES)
                for block in metrics_lines():
                    if not self._alive():
                        break
                    self.wfile.write(block)
                return
            page = b'vllm:prompt_tokens_total{model_name="tiny"} 0.0\n'
            self._head(200, "text/plain; version=0.0.4", len(page))
            self.wfile.write(page)
            return
        if self.command == "GET":
            self._json({"object": "list", "data": [{"id": MODEL, "object": "model", "max_model_len": 2048}]})
            return
        if mode == "giant-body":
            self._head(200, "application/json", GIANT_BYTES)
            self.wfile.write(b'{"junk": "')
            filler = b"x" * BLOCK
            sent = 10
            while sent < GIANT_BYTES and self._alive():
                self.wfile.write(filler)
                sent += BLOCK
        elif mode in ("endless-sse", "endless-line"):
            self._head(200, "text/event-stream")
            if mode == "endless-line":
                self.wfile.write(b"data: ")
            event = ("data: %s\n\n" % json.dumps(chunk("word " * 200))).encode()
            filler = b"x" * BLOCK
            while self._alive():
                self.wfile.write(filler if mode == "endless-line" else event)
        elif mode == "trickle":
            payload = json.dumps({"choices": [{"message": {"content": "slow " * 2000}}]}).encode()
            self._head(200, "application/json", len(payload))
            for index in range(len(payload)):
                if not self._alive():
                    break
                self.wfile.write(payload[index : index + 1])
                self.wfile.flush()
                time.sleep(TRICKLE_S)
        elif mode == "echo-key":
            key = (self.headers.get("Authorization") or "").split(" ", 1)[-1]
            escaped = "".join("\\u%04x" % ord(c) for c in key)
            text = ("x" * (ECHO_AT - len("bad key "))) + "bad key " + key + " (as sent: " + escaped + ") " + key
            self._head(200, "text/plain", len(text.encode()))
            self.wfile.write(text.encode())
        elif mode == "dense" and b'"stream": true' not in (body or b""):
            head, tail = (
                b'{"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}], "junk": [',
                b"{}]}",
            )
            count = (DENSE_BODY_BYTES - len(head) - len(tail)) // 3
            self._head(200, "application/json", len(head) + 3 * count + len(tail))
            self.wfile.write(head)
            for _ in range(count // 4096):
                self.wfile.write(b"{}," * 4096)
            self.wfile.write(b"{}," * (count % 4096) + tail)
        elif mode == "dense":
            self._head(200, "text/event-stream")
            dense = dict(chunk("a"), logprobs={"content": [{"t": [[{}] * 8] * 8} for _ in range(6)]})
            event = ("data: %s\n\n" % json.dumps(dense, separators=(",", ":"))).encode()
            sent = 0
            while sent < DENSE_BYTES and self._alive():
                self.wfile.write(event)
                sent += len(event)
            self.wfile.write(b"data: [DONE]\n\n")
        elif mode == "nan":
            text = (
                '{"id": "chatcmpl-nan", "object": "chat.completion", "model": "%s", "choices": [{"index": 0, '
                '"message": {"role": "assistant", "content": "Paris"}, "finish_reason": "stop", "logprobs": '
                '{"content": [{"token": "Paris", "logprob": NaN}, {"token": ".", "logprob": -Infinity}]}}], '
                '"usage": {"prompt_tokens": 9, "completion_tokens": 2, "total_tokens": 11, "score": Infinity}}' % MODEL
            ).encode()
            self._head(200, "application/json", len(text))
            self.wfile.write(text)
        else:  # metrics-100mb: the API itself answers like a slow engine
            time.sleep(0.5)
            self._json({"choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}}]})


class Running:
    """A started hostile server (and its trap); stop() ends both, and they end themselves at the deadline."""

    def __init__(self, mode, deadline_s):
        self.trap_seen = []
        trap_handler = type("BoundTrap", (Trap,), {"seen": self.trap_seen})
        self.trap = ThreadingHTTPServer(("127.0.0.1", 0), trap_handler)
        # Another host name than the endpoint's, so the redirect crosses origins by name and port.
        trap_url = "http://localhost:%d" % self.trap.server_address[1]
        handler = type(
            "BoundHostile", (Hostile,), {"mode": mode, "deadline": time.monotonic() + deadline_s, "trap_url": trap_url}
        )
        self.server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.server.daemon_threads = self.trap.daemon_threads = True
        self.port = self.server.server_address[1]
        self.url = "http://127.0.0.1:%d/v1" % self.port
        for server in (self.server, self.trap):
            threading.Thread(target=server.serve_forever, daemon=True).start()
        self._timer = threading.Timer(deadline_s, self.stop)
        self._timer.daemon = True
        self._timer.start()

    def stop(self):
        self._timer.cancel()
        for server in (self.server, self.trap):
            server.shutdown()
            server.server_close()


def serve(mode, deadline_s=120.0):
    if mode not in MODES:
        raise SystemExit("mode must be one of %s" % ", ".join(MODES))
    return Running(mode, deadline_s)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--mode", choices=MODES, required=True)
    parser.add_argument("--deadline-s", type=float, default=120.0)
    args = parser.parse_args()
    running = serve(args.mode, args.deadline_s)
    print("listening on %d" % running.port, flush=True)
    time.sleep(args.deadline_s)


if __name__ == "__main__":
    main()
