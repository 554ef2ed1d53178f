"""The stream count a destination derives from its node, and when a stream hashes on a lane of its own."""

import hashlib
import http.client
import os
import socket
import threading

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights import staging_pull, transport
from ansible_collections.seatwright.fleet.plugins.module_utils.weights.staging import splice_pieces, stream_count


@pytest.mark.parametrize(
    ("cores", "nic_bytes_s", "override", "expected"),
    [
        (2, None, None, 4),  # the lab host: never fewer than the old fixed 4
        (4, None, None, 4),  # the most cores that still splice
        (8, None, None, 6),  # buffered from here on: 6 streams, measured on 8 and 16 cores
        (16, None, None, 6),  # the device machine (8 before issue 49)
        (64, None, None, 6),
        (None, None, None, 4),  # cpu_count unknown
        (32, 12.5e9, None, 6),  # 100 GbE
        (16, 50e9, None, 6),  # a faster NIC than the cores can hash
        (16, 1.25e8, None, 4),  # 1 GbE
        (16, None, 3, 3),  # an explicit count always wins
        (2, 50e9, 24, 24),
        (16, None, 0, 6),  # 0 means derive
    ],
)
def test_stream_count(cores, nic_bytes_s, override, expected):
    assert stream_count(cores, nic_bytes_s, override) == expected


@pytest.mark.parametrize(
    ("cores", "direct", "expected"),
    [(2, False, True), (4, False, True), (5, False, False), (16, False, False), (2, True, False), (None, False, True)],
)
def test_only_buffered_files_on_nodes_of_few_cores_take_pieces_by_splice(cores, direct, expected):
    """The path a piece takes is a function of the node's cores and the file's kind (issue 49)."""
    assert splice_pieces(cores, direct) is expected


class _Progress:
    def add(self, _target, _count):
        pass


class _Throttle:
    def consume(self, _count):
        pass


def _answer(body, status=200):
    """A real http.client response to a real socket, its sender on a thread (the body may outsize the buffers)."""
    near, far = socket.socketpair()
    reason = http.client.responses[status]
    head = ("HTTP/1.1 %d %s\r\nContent-Length: %d\r\n\r\n" % (status, reason, len(body))).encode()

    def send():
        with far:
            far.sendall(head + body)

    threading.Thread(target=send, daemon=True).start()
    near.settimeout(10)
    response = http.client.HTTPResponse(near)
    response.begin()
    return near, response


class _Conn:
    def __init__(self, body, status):
        self.sock, self.response = _answer(body, status)

    def request(self, *_args, **_kwargs):
        pass

    def getresponse(self):
        return self.response


class _Source:
    def __init__(self, body, status=200):
        self.body, self.status = body, status

    def headers(self, *_args):
        return {}

    def connection(self, fresh=False):
        return _Conn(self.body, self.status)


@pytest.mark.parametrize("whole_chunks", [True, False])
@pytest.mark.parametrize("offset", [0, 5 * 1024 * 1024 + 17])
def test_pull_hashes_every_byte_in_order(tmp_path, monkeypatch, offset, whole_chunks):
    """A file's digest covers every byte in order, the resumed prefix included, however the body is received."""
    monkeypatch.setattr(transport, "WHOLE_CHUNK_RECV", whole_chunks)
    data = os.urandom(3 * staging_pull.CHUNK + 12345)
    partial = tmp_path / "x.partial"
    partial.write_bytes(data[:offset])
    os.chmod(str(partial), 0o600)
    unit = {"target": "x", "size": len(data), "sha256": hashlib.sha256(data).hexdigest(), "mode": 0o644}
    digests, start, _direct = staging_pull.pull(
        _Source(data[offset:], 206 if offset else 200),
        unit,
        str(partial),
        offset,
        _Throttle(),
        _Progress(),
        False,
    )
    assert start == offset
    assert digests["sha256"] == unit["sha256"]
    assert partial.read_bytes() == data


def test_pull_sees_a_corrupted_chunk(tmp_path):
    """One flipped byte in the middle chunk gives a digest the unit refuses."""
    data = bytearray(os.urandom(3 * staging_pull.CHUNK))
    unit = {"target": "x", "size": len(data), "sha256": hashlib.sha256(bytes(data)).hexdigest(), "mode": 0o644}
    data[staging_pull.CHUNK + 7] ^= 1
    digests, _start, _direct = staging_pull.pull(
        _Source(bytes(data)), unit, str(tmp_path / "x.partial"), 0, _Throttle(), _Progress(), False
    )
    assert staging_pull.digest_problem(unit, digests) is not None
