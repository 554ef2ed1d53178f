"""A response body received a whole chunk per call, around http.client (transport.BodyReader)."""

import http.client
import http.server
import os
import socket
import threading
import time

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights import transport

BODY = os.urandom(3 * 1024 * 1024 + 4321)


class _Handler(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self):  # noqa: N802 (the name http.server dispatches to)
        body = b"second answer" if self.path == "/small" else BODY
        if self.path == "/tail":
            body = BODY[: 1100 * 1024]
        cut = self.path == "/cut"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        if self.path == "/tail":
            # Part of the body at once, the rest (less than a low-water mark) later: a reader that took
            # the first part and then waits for a whole mark in the kernel waits out its timeout.
            self.wfile.write(body[: 600 * 1024])
            self.wfile.flush()
            time.sleep(0.3)
            self.wfile.write(body[600 * 1024 : 1100 * 1024])
            return
        if self.path == "/stall":
            self.wfile.write(body[:1000])
            self.wfile.flush()
            time.sleep(3)
            return
        self.wfile.write(body[: len(body) // 2] if cut else body)
        if cut:
            self.close_connection = True

    def log_message(self, *_args):
        pass


@pytest.fixture
def server():
    made = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Handler)
    made.daemon_threads = True
    threading.Thread(target=made.serve_forever, daemon=True).start()
    yield made.server_address[1]
    made.shutdown()
    made.server_close()


# (WHOLE_CHUNK_RECV, RECV_LOWAT_BYTES): http.client's reads, MSG_WAITALL, a low-water mark, both.
MODES = [(False, 0), (True, 0), (False, 1024 * 1024), (True, 1024 * 1024), (False, 64 * 1024 * 1024)]


def _mode(monkeypatch, mode):
    monkeypatch.setattr(transport, "WHOLE_CHUNK_RECV", mode[0])
    monkeypatch.setattr(transport, "RECV_LOWAT_BYTES", mode[1])


def _receive(conn, path, chunk):
    conn.request("GET", path)
    response = conn.getresponse()
    got, view = bytearray(), memoryview(bytearray(chunk))
    with transport.BodyReader(conn.sock, response) as body:
        while True:
            count = body.readinto(view)
            got += view[:count]
            if count < len(view):
                return response, bytes(got)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("chunk", [4 * 1024 * 1024, 1024 * 1024 + 3, 4096])
def test_a_body_arrives_whole_and_the_connection_serves_the_next_request(server, monkeypatch, mode, chunk):
    """Every byte in order, none read past the body, the socket's timeout and low-water mark restored,
    the connection kept. A mark above what the body still owes would hold the last read to the timeout."""
    _mode(monkeypatch, mode)
    conn = http.client.HTTPConnection("127.0.0.1", server, timeout=5)
    conn.connect()
    sock = conn.sock
    started = time.monotonic()
    response, got = _receive(conn, "/big", chunk)
    assert time.monotonic() - started < 2
    assert got == BODY
    assert sock.gettimeout() == 5
    assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT) == 1
    conn.request("GET", "/small")
    assert conn.getresponse().read() == b"second answer"
    assert conn.sock is sock and response.isclosed()
    conn.close()


@pytest.mark.parametrize("mode", MODES)
def test_a_body_whose_last_part_is_under_the_mark_arrives_at_once(server, monkeypatch, mode):
    _mode(monkeypatch, mode)
    conn = http.client.HTTPConnection("127.0.0.1", server, timeout=5)
    started = time.monotonic()
    _response, got = _receive(conn, "/tail", 4 * 1024 * 1024)
    assert got == BODY[: 1100 * 1024]
    assert time.monotonic() - started < 2
    conn.close()


@pytest.mark.parametrize("mode", MODES)
def test_a_body_cut_short_returns_a_short_count(server, monkeypatch, mode):
    _mode(monkeypatch, mode)
    conn = http.client.HTTPConnection("127.0.0.1", server, timeout=5)
    _response, got = _receive(conn, "/cut", 1 << 20)
    assert got == BODY[: len(BODY) // 2]
    conn.close()


@pytest.mark.parametrize("mode", MODES)
def test_a_stalled_body_ends_at_the_socket_timeout(server, monkeypatch, mode):
    """A sender that goes quiet mid-body fails the read after the per-wait timeout, never holds it for longer."""
    _mode(monkeypatch, mode)
    conn = http.client.HTTPConnection("127.0.0.1", server, timeout=0.3)
    started = time.monotonic()
    with pytest.raises(socket.timeout):
        _receive(conn, "/stall", 1 << 20)
    assert time.monotonic() - started < 2
    conn.close()
