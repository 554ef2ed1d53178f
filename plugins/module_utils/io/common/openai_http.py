"""A small HTTP client for OpenAI-compatible endpoints (stdlib urllib only), for qualification
and soak runs from the controller.

Every call returns a response record and never raises for what a server or network does:
{"status", "json", "text", "chunks", "chunk_times", "error", "started_at", "elapsed_s", "ttft_s",
 "stalled"}. Streams are read line by line as they arrive (server-sent events), with the arrival
time of every chunk, so stalls and time to first token are measured by the client.
Timeouts are bounded: `read_timeout_s` for any single wait on the socket, `total_timeout_s` for
the whole exchange.
"""

import json
import socket
import time
import urllib.error
import urllib.request

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
        "started_at": 0.0,
        "elapsed_s": None,
        "ttft_s": None,
        "stalled": False,
        "_t0": started,
    }


def _finish(record):
    record["elapsed_s"] = round(time.monotonic() - record.pop("_t0"), 4)
    return record


def _read_stream(response, record, endpoint, t0):
    chunks, times = [], []
    record["chunks"], record["chunk_times"] = chunks, times
    raw_lines = []
    while True:
        if time.monotonic() - t0 > endpoint.total_timeout_s:
            record["error"] = "stream still open after %.0f s (total timeout)" % endpoint.total_timeout_s
            record["stalled"] = True
            return
        line = response.readline()
        if not line:
            return
        line = line.decode("utf-8", "replace").strip()
        if not line.startswith("data:"):
            continue
        data = line[len("data:") :].strip()
        if data == "[DONE]":
            return
        now = time.monotonic() - t0
        try:
            chunk = json.loads(data)
        except ValueError:
            raw_lines.append(data[:500])
            record["text"] = "\n".join(raw_lines)
            continue
        if isinstance(chunk, dict) and "error" in chunk and not chunk.get("choices"):
            record["error"] = "error event in the stream: %s" % json.dumps(chunk)[:500]
        chunks.append(chunk)
        times.append(round(now, 4))
        if record["ttft_s"] is None and _has_output(chunk):
            record["ttft_s"] = round(now, 4)


def _has_output(chunk):
    for choice in chunk.get("choices") or []:
        delta = choice.get("delta") or {}
        if delta.get("content") or delta.get("reasoning_content") or delta.get("reasoning") or delta.get("tool_calls"):
            return True
    return False


def call(endpoint, request):
    """Send one request {"method", "path", "body", "stream"}; return its response record."""
    t0 = time.monotonic()
    record = _record(t0)
    data = json.dumps(request["body"]).encode("utf-8") if request.get("body") is not None else None
    http_request = urllib.request.Request(
        endpoint.base_url + request["path"], data=data, headers=endpoint.headers(), method=request.get("method", "POST")
    )
    try:
        with urllib.request.urlopen(http_request, timeout=endpoint.read_timeout_s) as response:
            record["status"] = response.status
            if request.get("stream"):
                _read_stream(response, record, endpoint, t0)
            else:
                text = response.read().decode("utf-8", "replace")
                record["text"] = text[:_TEXT_LIMIT]
                try:
                    record["json"] = json.loads(text)
                except ValueError:
                    record["error"] = "HTTP 200 but the body is not JSON: %r" % text[:200]
    except urllib.error.HTTPError as exc:
        record["status"] = exc.code
        try:
            record["text"] = exc.read().decode("utf-8", "replace")[:_TEXT_LIMIT]
        except (TimeoutError, OSError):
            record["text"] = ""
        try:
            record["json"] = json.loads(record["text"])
        except ValueError:
            pass
    except TimeoutError:
        record["error"] = "no data for %.0f s (read timeout)" % endpoint.read_timeout_s
        record["stalled"] = True
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        if isinstance(reason, socket.timeout):
            record["error"] = "no data for %.0f s (read timeout)" % endpoint.read_timeout_s
            record["stalled"] = True
        else:
            record["error"] = "%s: %s" % (type(reason).__name__, reason)
    return _finish(record)
