#!/usr/bin/env python3
"""A tiny OpenAI-compatible backend that says who it is: test equipment standing in for a seat
behind a router (LiteLLM proxy, SGLang's model gateway), for recording router exchanges.

Binds 127.0.0.1 on the port given (0 picks a free one) and answers:
- GET /v1/models: the served model names;
- POST /v1/chat/completions and /v1/completions: "answered by NAME", plain or as server-sent
  events (one chunk per max_tokens, CHUNK_S apart), with an `x-backend: NAME` header;
- GET /metrics: Prometheus text with vLLM's running-requests gauge, counted live;
- GET /health, /health_generate, /get_model_info, /get_server_info, /server_info, /model_info:
  what SGLang's workers answer, enough for a gateway's health checks and discovery.
Every request line is logged to stderr, so the recording shows what a router probes.

    python tests/router_backend.py --name seat-a --model lab --port 0   (prints "listening on PORT")
"""

import argparse
import json
import os
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

CHUNK_S = 0.05
DEFAULT_TOKENS = 4


class Backend(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    name = "seat"
    models = ("lab",)
    running = 0
    lock = threading.Lock()
    api_key = None
    strict_model = False
    chunk_s = CHUNK_S

    def log_message(self, fmt, *args):
        sys.stderr.write("%s %s\n" % (self.name, fmt % args))
        sys.stderr.flush()

    def _send(self, status, body, content_type="application/json"):
        data = body if isinstance(body, bytes) else json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(data)))
        self.send_header("x-backend", self.name)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):
        path = self.path.split("?")[0]
        if path == "/v1/models":
            data = [{"id": m, "object": "model", "created": 0, "owned_by": self.name} for m in self.models]
            self._send(200, {"object": "list", "data": data})
        elif path == "/metrics":
            text = (
                "# HELP vllm:num_requests_running Number of requests in model execution batches.\n"
                "# TYPE vllm:num_requests_running gauge\n"
                'vllm:num_requests_running{model_name="%s"} %.1f\n' % (self.models[0], Backend.running)
            )
            self._send(200, text.encode(), "text/plain; version=0.0.4")
        elif path in ("/health", "/health_generate", "/ping"):
            self._send(200, b"", "text/plain")
        elif path in ("/get_model_info", "/model_info"):
            self._send(200, {"model_path": self.models[0], "tokenizer_path": self.models[0], "is_generation": True})
        elif path in ("/get_server_info", "/server_info"):
            self._send(200, {"model_path": self.models[0], "served_model_name": self.models[0], "backend": self.name})
        else:
            self._send(404, {"error": {"message": "no route %s" % path}})

    def do_POST(self):
        path = self.path.split("?")[0]
        length = int(self.headers.get("Content-Length") or 0)
        try:
            request = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._send(400, {"error": {"message": "body is not JSON"}})
            return
        if path not in ("/v1/chat/completions", "/v1/completions", "/generate"):
            self._send(404, {"error": {"message": "no route %s" % path}})
            return
        # As vLLM does with --api-key: the key, else 401; a name it does not serve, else 404.
        if Backend.api_key and self.headers.get("Authorization") != "Bearer " + Backend.api_key:
            self._send(401, {"error": "Unauthorized"})
            return
        if Backend.strict_model and request.get("model") not in self.models:
            self._send(404, {"error": {"message": "The model `%s` does not exist." % request.get("model")}})
            return
        with Backend.lock:
            Backend.running += 1
        try:
            self._answer(path, request)
        finally:
            with Backend.lock:
                Backend.running -= 1

    def _answer(self, path, request):
        model = request.get("model") or self.models[0]
        tokens = int(request.get("max_tokens") or DEFAULT_TOKENS)
        words = ["answered", "by", self.name] + ["."] * max(0, tokens - 3)
        chat = path == "/v1/chat/completions"
        usage = {"prompt_tokens": 3, "completion_tokens": tokens, "total_tokens": 3 + tokens}
        if not request.get("stream"):
            time.sleep(self.chunk_s * tokens)
            text = " ".join(words[:tokens])
            choice = {"index": 0, "finish_reason": "length" if tokens <= 3 else "stop"}
            choice.update({"message": {"role": "assistant", "content": text}} if chat else {"text": text})
            kind = "chat.completion" if chat else "text_completion"
            body = {"id": "cmpl-" + self.name, "object": kind, "created": 0, "model": model}
            body.update({"choices": [choice], "usage": usage})
            self._send(200, body)
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Connection", "close")
        self.send_header("x-backend", self.name)
        self.end_headers()
        self.close_connection = True
        for i, word in enumerate(words[:tokens]):
            time.sleep(self.chunk_s)
            piece = word if i == 0 else " " + word
            delta = {"content": piece} if chat else None
            choice = {"index": 0, "finish_reason": None}
            choice.update({"delta": delta} if chat else {"text": piece})
            chunk = {"id": "cmpl-" + self.name, "object": "chat.completion.chunk", "created": 0, "model": model}
            chunk["choices"] = [choice]
            self.wfile.write(b"data: " + json.dumps(chunk).encode() + b"\n\n")
            self.wfile.flush()
        last = {"id": "cmpl-" + self.name, "object": "chat.completion.chunk", "created": 0, "model": model}
        last.update({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}], "usage": usage})
        self.wfile.write(b"data: " + json.dumps(last).encode() + b"\n\ndata: [DONE]\n\n")
        self.wfile.flush()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True, help="who this backend says it is")
    parser.add_argument("--model", action="append", help="a served model name (repeatable); default lab")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--key-env", help="answer 401 without `Bearer $KEY_ENV` (the key never on argv)")
    parser.add_argument("--strict-model", action="store_true", help="answer 404 for a name it does not serve")
    parser.add_argument("--chunk-s", type=float, default=CHUNK_S, help="seconds between streamed tokens")
    args = parser.parse_args()
    Backend.chunk_s = args.chunk_s
    Backend.name = args.name
    Backend.api_key = os.environ.get(args.key_env) if args.key_env else None
    Backend.strict_model = args.strict_model
    Backend.models = tuple(args.model or ["lab"])
    server = ThreadingHTTPServer(("127.0.0.1", args.port), Backend)
    server.daemon_threads = True
    print("listening on %d" % server.server_address[1], flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
