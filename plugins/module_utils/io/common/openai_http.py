"""A small HTTP client for OpenAI-compatible endpoints (stdlib http.client only), for qualification,
soak and benchmark runs from the controller and the readiness probe on the node.

Every call returns a response record and never raises for what a server or network does:
{"status", "json", "text", "chunks", "chunk_times", "error", "transport_error", "started_at",
 "elapsed_s", "ttft_s", "stalled"}. Streams are read line by line as they arrive (server-sent
events), with the arrival time of every chunk, so stalls and time to first token are measured by
the client. `transport_error` says why an exchange could not be read as HTTP to its end (malformed
HTTP, a redirect, a limit below, the total deadline, no connection); callers record such a run as
incomplete rather than judge the seat on it.

Every read is bounded: `read_timeout_s` for any single wait on the socket, `total_timeout_s` for
the whole exchange (enforced while reading, by a watchdog that closes the socket at the deadline),
and the sizes below. Redirects are never followed.
"""

import http.client
import json
import socket
import threading
import time
import urllib.parse

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import TransportError

# One home for the limits on every read from an engine or router: generous for real engines (a
# vLLM /metrics page is tens of KB; answers are bounded by max_tokens), small for the controller.
MAX_BODY_BYTES = 16 * 2**20  # one plain answer, prompt logprobs of a long prompt included
MAX_METRICS_BYTES = 4 * 2**20  # one Prometheus page
MAX_LINE_BYTES = 1 * 2**20  # one server-sent-event line (a real chunk is a few hundred bytes)
MAX_STREAM_CHUNKS = 65536  # one chunk per token, twice the largest budget a gate asks for
MAX_STREAM_BYTES = 64 * 2**20  # one whole stream
MAX_UNPARSED_LINES = 50  # non-JSON data lines kept from one stream
# What one answer may take once parsed, estimated by parsed_cost(): the wire limits above hold, but a
# 60 MiB stream of chunks packed with tiny objects grew the controller to 1,467 MiB (issue 50). A real
# answer's chunks cost a few times their bytes (32K tokens of vLLM chunks: about 30 MiB).
MAX_ANSWER_COST = 96 * 2**20
# Python's cost of one parsed container, and of one more item in one, beyond the text's own bytes.
_CONTAINER_COST = 64
_ITEM_COST = 16
_READ_BLOCK = 65536
_TEXT_LIMIT = 200000


class Endpoint:
    """Where and how to reach the seat: base URL ending in /v1, optional API key (never logged)."""

    def __init__(self, base_url, api_key=None, read_timeout_s=120.0, total_timeout_s=600.0):
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.read_timeout_s = read_timeout_s
        self.total_timeout_s = total_timeout_s

    def headers(self):
        headers = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
        if self.api_key:
            headers["Authorization"] = "Bearer " + self.api_key
        return headers


def _record(started):
    return {
        "status": None,
        "json": None,
        "text": None,
        "chunks": None,
        "chunk_times": None,
        "error": None,
        "transport_error": None,
        "started_at": 0.0,
        "elapsed_s": None,
        "ttft_s": None,
        "stalled": False,
        # What the answer kept costs once parsed (parsed_cost): the run's own bound adds these up.
        "kept_cost": 0,
        "_t0": started,
    }


def _finish(record):
    record["elapsed_s"] = round(time.monotonic() - record.pop("_t0"), 4)
    return record


def origin(url):
    """scheme://host:port of a URL, for naming where a redirect pointed."""
    parts = urllib.parse.urlsplit(url)
    return "%s://%s" % (parts.scheme or "?", parts.netloc or "?")


class _Exchange:
    """One request on its own connection, with a per-read timeout and a total deadline.

    A watchdog shuts the socket down at the deadline, so a server that trickles bytes (headers or
    body) cannot hold a read past it; every read also waits at most the time left.
    """

    def __init__(self, url, read_timeout_s, total_timeout_s):
        self.url = url
        self.read_timeout_s = read_timeout_s
        self.total_timeout_s = total_timeout_s
        self.deadline = time.monotonic() + total_timeout_s
        self.conn = None
        self.sock = None  # kept: http.client lets go of it once a response will close the connection
        self.expired = False
        self._timer = None

    def _wait(self):
        left = self.deadline - time.monotonic()
        if left <= 0:
            self._expire()
            raise TransportError(self.deadline_text())
        return min(self.read_timeout_s, left)

    def deadline_text(self):
        return "no complete answer after %.0f s (total timeout)" % self.total_timeout_s

    def _expire(self):
        self.expired = True
        if self.sock is not None:
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def open(self, method, headers, body):
        parts = urllib.parse.urlsplit(self.url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise TransportError("%s is not an http:// or https:// URL" % self.url)
        kind = http.client.HTTPSConnection if parts.scheme == "https" else http.client.HTTPConnection
        try:
            port = parts.port
        except ValueError:
            raise TransportError("%s has a port that is not a number" % self.url)
        self.conn = kind(parts.hostname, port, timeout=self._wait())
        self._timer = threading.Timer(max(0.0, self.deadline - time.monotonic()), self._expire)
        self._timer.daemon = True
        self._timer.start()
        target = (parts.path or "/") + ("?" + parts.query if parts.query else "")
        self.conn.connect()
        self.sock = self.conn.sock
        if self.expired:
            raise TransportError(self.deadline_text())
        self.conn.request(method, target, body=body, headers=headers)
        self.sock.settimeout(self._wait())
        response = self.conn.getresponse()
        if 300 <= response.status < 400:
            # Never followed, same origin or not: an engine or router does not redirect its API, and
            # following would carry the Authorization header (the seat's key) to wherever Location
            # points; a redirect means the URL given is not the seat's, which a person should fix.
            location = response.getheader("Location") or ""
            raise TransportError(
                "HTTP %d redirect to %s: not followed (seatwright never follows redirects, so the key stays "
                "with the seat); give the endpoint's own URL" % (response.status, origin(location))
            )
        return response

    def read_block(self, response):
        """Up to one block of the body (b"" at its end); TransportError or a socket timeout otherwise."""
        self.sock.settimeout(self._wait())
        return response.read1(_READ_BLOCK)

    def close(self):
        if self._timer is not None:
            self._timer.cancel()
        if self.conn is not None:
            self.conn.close()


def read_body(exchange, response, limit):
    """The whole body, refused (TransportError) past `limit` bytes."""
    blocks, size = [], 0
    while True:
        block = exchange.read_block(response)
        if not block:
            return b"".join(blocks)
        size += len(block)
        if size > limit:
            raise TransportError("the body is larger than %d bytes: stopped reading (a limit on every read)" % limit)
        blocks.append(block)


def _lines(exchange, response):
    """The stream's lines as they arrive, each bounded by MAX_LINE_BYTES, the whole by MAX_STREAM_BYTES."""
    pending, total = b"", 0
    while True:
        block = exchange.read_block(response)
        if not block:
            if pending:
                yield pending
            return
        total += len(block)
        if total > MAX_STREAM_BYTES:
            raise TransportError("the stream is longer than %d bytes: stopped reading" % MAX_STREAM_BYTES)
        pending += block
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            yield line
        if len(pending) > MAX_LINE_BYTES:
            raise TransportError("a stream line is longer than %d bytes: stopped reading" % MAX_LINE_BYTES)


def parsed_cost(text):
    """About how many bytes `text` takes once json.loads has made Python objects of it: its own size,
    plus each container and each item in one (the counts are of raw characters, so an upper bound)."""
    if isinstance(text, bytes):
        text = text.decode("utf-8", "replace")
    containers = text.count("{") + text.count("[")
    return len(text) + _CONTAINER_COST * containers + _ITEM_COST * (text.count(",") + text.count(":"))


def _too_costly(what, cost):
    return TransportError(
        "%s would take more than %d MiB once parsed (about %d MiB): stopped reading (a bound on what one "
        "answer keeps)" % (what, MAX_ANSWER_COST >> 20, cost >> 20)
    )


def _read_stream(exchange, response, record, t0):
    chunks, times = [], []
    record["chunks"], record["chunk_times"] = chunks, times
    raw_lines = []
    for raw in _lines(exchange, response):
        line = raw.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            return
        record["kept_cost"] += parsed_cost(data)
        if record["kept_cost"] > MAX_ANSWER_COST:
            raise _too_costly("the stream", record["kept_cost"])
        now = time.monotonic() - t0
        try:
            chunk = json.loads(data)
        except (ValueError, RecursionError):
            if len(raw_lines) < MAX_UNPARSED_LINES:
                raw_lines.append(data[:500])
                record["text"] = "\n".join(raw_lines)
            continue
        if len(chunks) >= MAX_STREAM_CHUNKS:
            raise TransportError("the stream sent more than %d chunks: stopped reading" % MAX_STREAM_CHUNKS)
        if isinstance(chunk, dict) and "error" in chunk and not chunk.get("choices"):
            record["error"] = "error event in the stream: %s" % json.dumps(chunk)[:500]
        chunks.append(chunk)
        times.append(round(now, 4))
        if record["ttft_s"] is None and _has_output(chunk):
            record["ttft_s"] = round(now, 4)


def _has_output(chunk):
    if not isinstance(chunk, dict):
        return False
    for choice in chunk.get("choices") or []:
        delta = (choice.get("delta") if isinstance(choice, dict) else None) or {}
        if not isinstance(delta, dict):
            continue
        if delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or delta.get("tool_calls"):
            return True
    return False


def _parse(text):
    try:
        return json.loads(text), None
    except (ValueError, RecursionError) as exc:
        return None, exc


def _transport(record, exchange, exc):
    """Name what went wrong on the wire; a deadline or a silent socket is also a stall."""
    if exchange.expired or time.monotonic() >= exchange.deadline - 0.05:
        text, stalled = exchange.deadline_text(), True
    elif isinstance(exc, (TimeoutError, socket.timeout)):
        record["error"] = "no data for %.0f s (read timeout)" % exchange.read_timeout_s
        record["stalled"] = True
        return
    elif isinstance(exc, TransportError):
        text, stalled = str(exc), False
    elif isinstance(exc, http.client.HTTPException):
        text, stalled = "malformed HTTP from the server: %s: %r" % (type(exc).__name__, str(exc)[:200]), False
    else:
        text, stalled = "%s: %s" % (type(exc).__name__, str(exc)[:200]), False
    record["error"] = record["transport_error"] = text
    record["stalled"] = record["stalled"] or stalled


def call(endpoint, request):
    """Send one request {"method", "path", "body", "stream", "keep_headers"?}; return its response record."""
    t0 = time.monotonic()
    record = _record(t0)
    data = json.dumps(request["body"]).encode("utf-8") if request.get("body") is not None else None
    exchange = _Exchange(endpoint.base_url + request["path"], endpoint.read_timeout_s, endpoint.total_timeout_s)
    try:
        response = exchange.open(request.get("method", "POST"), endpoint.headers(), data)
        record["status"] = response.status
        if request.get("keep_headers"):
            # Only the headers asked for (a router's "who answered"): a response's others stay out of records.
            wanted = {name.lower() for name in request["keep_headers"]}
            record["headers"] = {k.lower(): v for k, v in response.getheaders() if k.lower() in wanted}
        if response.status == 200 and request.get("stream"):
            _read_stream(exchange, response, record, t0)
        else:
            text = read_body(exchange, response, MAX_BODY_BYTES).decode("utf-8", "replace")
            record["text"] = text[:_TEXT_LIMIT]
            record["kept_cost"] = parsed_cost(text)
            if record["kept_cost"] > MAX_ANSWER_COST:
                raise _too_costly("the body", record["kept_cost"])
            record["json"], problem = _parse(text)
            if problem is not None and response.status == 200:
                record["error"] = "HTTP 200 but the body is not JSON: %r" % text[:200]
        if exchange.expired:
            raise TransportError(exchange.deadline_text())
    except (OSError, http.client.HTTPException, TransportError, ValueError) as exc:
        _transport(record, exchange, exc)
    finally:
        exchange.close()
    return _finish(record)


def get_text(url, api_key=None, timeout_s=10.0, limit=MAX_METRICS_BYTES):
    """One GET of a page such as /metrics or /health, bounded like call():
    {"status", "text", "problem", "answered"}.

    `problem` is None, or what went wrong (the same texts as `transport_error`); `answered` says
    whether a server took the connection, so a refused port can be told from a misbehaving server.
    """
    headers = {"Authorization": "Bearer " + api_key} if api_key else {}
    exchange = _Exchange(url, timeout_s, timeout_s)
    page = {"status": None, "text": None, "problem": None, "answered": False}
    try:
        response = exchange.open("GET", headers, None)
        page["status"] = response.status
        page["text"] = read_body(exchange, response, limit).decode("utf-8", "replace")
        if exchange.expired:
            raise TransportError(exchange.deadline_text())
    except (OSError, http.client.HTTPException, TransportError, ValueError) as exc:
        record = _record(0.0)
        _transport(record, exchange, exc)
        page["problem"] = record["error"]
    finally:
        exchange.close()
    page["answered"] = exchange.sock is not None
    return page


def page_failure(page):
    """Why a get_text() page is not a 200 answer (the transport's problem, else its HTTP status), or None."""
    if page["problem"] is None and page["status"] == 200:
        return None
    return page["problem"] or "HTTP %s" % page["status"]
