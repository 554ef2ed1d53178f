#!/usr/bin/env python3
"""A test seat: an OpenAI-compatible server that answers in vLLM's recorded shapes, with set faults.

Test equipment for the benchmark's traps, not an engine. Its chat stream copies the chunks vLLM
0.32 (CPU) sent (tests/fixtures/bench/vllm-0.32.0-cpu-chat-stream-tiny.txt) and its /metrics is
vLLM's recorded exposition (vllm-0.32.0-cpu-metrics-tiny.txt) with the counters the benchmark
reads kept up to date by this server. Modes:
- steady: fresh prompts miss the cache, every pass runs at one speed;
- prefix-hit: the prefix-cache counters say 90 % of every prompt was a cache hit;
- climbing: each request after the first few runs faster than the one before (the warm-up trap);
- spec-loop: speculative decoding with every draft token accepted, on output that repeats one word;
- reasoning-only: every token streams in the delta's `reasoning` field (vLLM 0.32 with a reasoning
  parser, tests/fixtures/qualify/vllm/reasoning_exhausted_stream.json), `content` stays empty and the
  stream ends at the token limit; usage counts them all as completion tokens and, as vLLM 0.32 does,
  reports `reasoning_tokens: 0`;
- half-reasoning: the first half of the tokens in `reasoning`, the rest in `content`.

    python tests/bench_server.py --port 0 --mode steady   (prints "listening on PORT" when ready)
"""

import argparse
import json
import re
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

FIXTURES = Path(__file__).resolve().parent / "fixtures" / "bench"
METRICS_FIXTURE = FIXTURES / "vllm-0.32.0-cpu-metrics-tiny.txt"
MODES = ("steady", "prefix-hit", "climbing", "spec-loop", "reasoning-only", "half-reasoning")
# The delta field vLLM 0.32 streams reasoning in (older vLLM and SGLang say `reasoning_content`).
REASONING_FIELD = "reasoning"
WORDS = (
    "seat",
    "node",
    "fabric",
    "token",
    "prefill",
    "decode",
    "cache",
    "stream",
    "power",
    "clock",
    "model",
    "engine",
    "rank",
    "draft",
    "answer",
    "record",
    "evidence",
    "level",
    "pass",
    "median",
)
COUNTERS = ("prefix_cache_queries", "prefix_cache_hits", "prompt_tokens", "generation_tokens")
SPEC_DRAFT = 4


class State:
    def __init__(self, mode, token_delay_s, model):
        self.mode = mode
        self.token_delay_s = token_delay_s
        self.model = model
        self.lock = threading.Lock()
        self.requests = 0
        self.counts = {name: 0.0 for name in COUNTERS}
        self.spec = {"drafts": 0.0, "draft_tokens": 0.0, "accepted_tokens": 0.0}

    def delay_for(self, serial):
        if self.mode != "climbing":
            return self.token_delay_s
        # Each request after the fourth is faster than the last: passes climb, as an engine still
        # tuning itself does; the floor keeps it from reaching a steady state within a test.
        return max(self.token_delay_s * (0.93 ** max(0, serial - 4)), self.token_delay_s * 0.05)

    def account(self, prompt_tokens, generated):
        with self.lock:
            self.counts["prefix_cache_queries"] += prompt_tokens
            if self.mode == "prefix-hit":
                self.counts["prefix_cache_hits"] += int(prompt_tokens * 0.9)
            self.counts["prompt_tokens"] += prompt_tokens
            self.counts["generation_tokens"] += generated
            if self.mode == "spec-loop":
                drafts = max(1, generated // (SPEC_DRAFT + 1))
                self.spec["drafts"] += drafts
                self.spec["draft_tokens"] += drafts * SPEC_DRAFT
                self.spec["accepted_tokens"] += drafts * SPEC_DRAFT


def metrics_text(state):
    """The recorded vLLM exposition with this server's counter values (and spec counters in spec-loop)."""
    text = METRICS_FIXTURE.read_text()
    labels = '{engine="0",model_name="%s"}' % state.model
    with state.lock:
        for name in COUNTERS:
            text = re.sub(
                r"^vllm:%s_total\{[^}]*\} \S+$" % name,
                "vllm:%s_total%s %.1f" % (name, labels, state.counts[name]),
                text,
                flags=re.M,
            )
        text = text.replace('model_name="tiny"', 'model_name="%s"' % state.model)
        if state.mode == "spec-loop":
            for key, doc in (
                ("drafts", "Number of spec decoding drafts."),
                ("draft_tokens", "Number of draft tokens."),
                ("accepted_tokens", "Number of accepted tokens."),
            ):
                text += (
                    "# HELP vllm:spec_decode_num_%s_total %s\n# TYPE vllm:spec_decode_num_%s_total counter\n"
                    "vllm:spec_decode_num_%s_total%s %.1f\n" % (key, doc, key, key, labels, state.spec[key])
                )
    return text


def answer_words(mode, serial, count):
    if mode == "spec-loop":
        return ["lock"] * count
    return [WORDS[(serial * 7 + i * 3 + i * i) % len(WORDS)] for i in range(count)]


def reasoning_count(mode, count):
    """How many of a reply's `count` tokens go to the reasoning field (the first ones)."""
    if mode == "reasoning-only":
        return count
    if mode == "half-reasoning":
        return count // 2
    return 0


def usage_block(mode, prompt_tokens, count):
    """vLLM's usage: completion_tokens counts reasoning and answer alike; 0.32 reports reasoning_tokens 0."""
    usage = {"prompt_tokens": prompt_tokens, "completion_tokens": count, "total_tokens": prompt_tokens + count}
    if reasoning_count(mode, count):
        usage["completion_tokens_details"] = {"reasoning_tokens": 0}
    return usage


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    state = None

    def log_message(self, *_args):
        pass

    def _send(self, status, body, ctype="application/json"):
        data = body.encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self):  # noqa: N802 (http.server's name)
        if self.path == "/metrics":
            self._send(200, metrics_text(self.state), "text/plain; version=0.0.4; charset=utf-8")
        elif self.path == "/v1/models":
            self._send(
                200,
                json.dumps(
                    {
                        "object": "list",
                        "data": [
                            {"id": self.state.model, "object": "model", "owned_by": "vllm", "max_model_len": 2048}
                        ],
                    }
                ),
            )
        elif self.path == "/health":
            self._send(200, "")
        else:
            self._send(404, json.dumps({"error": {"message": "not found", "code": 404}}))

    def do_POST(self):  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            self._send(400, json.dumps({"error": {"message": "bad JSON", "code": 400}}))
            return
        if self.path != "/v1/chat/completions":
            self._send(404, json.dumps({"error": {"message": "not found", "code": 404}}))
            return
        state = self.state
        with state.lock:
            state.requests += 1
            serial = state.requests
        prompt = " ".join(str(m.get("content") or "") for m in body.get("messages") or [])
        prompt_tokens = max(1, len(prompt.split()))
        count = int(body.get("max_completion_tokens") or body.get("max_tokens") or 16)
        words = answer_words(state.mode, serial, count)
        cid = "chatcmpl-" + uuid.uuid4().hex[:16]
        created = int(time.time())
        delay = state.delay_for(serial)
        if not body.get("stream"):
            time.sleep(delay * count)
            state.account(prompt_tokens, count)
            thought = reasoning_count(state.mode, count)
            message = {"role": "assistant", "content": " ".join(words[thought:]) or None}
            if thought:
                message[REASONING_FIELD] = " ".join(words[:thought])
            self._send(
                200,
                json.dumps(
                    {
                        "id": cid,
                        "object": "chat.completion",
                        "created": created,
                        "model": state.model,
                        "choices": [
                            {
                                "index": 0,
                                "message": message,
                                "finish_reason": "length",
                            }
                        ],
                        "usage": usage_block(state.mode, prompt_tokens, count),
                    }
                ),
            )
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()

        def event(payload):
            data = ("data: %s\n\n" % payload).encode("utf-8")
            self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.flush()

        base = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": state.model}
        event(
            json.dumps(
                dict(
                    base,
                    choices=[
                        {
                            "index": 0,
                            "delta": {"role": "assistant", "content": ""},
                            "logprobs": None,
                            "finish_reason": None,
                        }
                    ],
                )
            )
        )
        time.sleep(delay * 2)  # prefill
        thought = reasoning_count(state.mode, count)
        for i, word in enumerate(words):
            last = i == len(words) - 1
            # The answer's first word has no leading space, as the reasoning's first word has none.
            text = ("" if i in (0, thought) else " ") + word
            event(
                json.dumps(
                    dict(
                        base,
                        choices=[
                            {
                                "index": 0,
                                "delta": {REASONING_FIELD: text} if i < thought else {"content": text},
                                "logprobs": None,
                                "finish_reason": "length" if last else None,
                            }
                        ],
                    )
                )
            )
            if not last:
                time.sleep(delay)
        state.account(prompt_tokens, count)
        if (body.get("stream_options") or {}).get("include_usage"):
            event(
                json.dumps(
                    dict(
                        base,
                        choices=[],
                        usage=usage_block(state.mode, prompt_tokens, count),
                    )
                )
            )
        event("[DONE]")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()


def serve(mode="steady", port=0, token_delay_s=0.004, model="tiny"):
    """Start the server in a thread; returns (server, port)."""
    handler = type("BoundHandler", (Handler,), {"state": State(mode, token_delay_s, model)})
    server = ThreadingHTTPServer(("127.0.0.1", port), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--mode", choices=MODES, default="steady")
    p.add_argument("--port", type=int, default=0)
    p.add_argument("--token-delay", type=float, default=0.004)
    p.add_argument("--model", default="tiny")
    args = p.parse_args()
    server, port = serve(args.mode, args.port, args.token_delay, args.model)
    print("listening on %d" % port, flush=True)
    try:
        while True:
            time.sleep(3600)
    except KeyboardInterrupt:
        server.shutdown()
    return 0


if __name__ == "__main__":
    sys.exit(main())
