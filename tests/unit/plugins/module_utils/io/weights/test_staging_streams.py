"""The stream count a destination derives from its node, and when a stream hashes on a lane of its own."""

import hashlib
import os

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights import staging_pull
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


class _Response:
    def __init__(self, body, status=200):
        self.body, self.status, self.chunked = body, status, False
        self.at = 0

    def getheader(self, _name):
        return str(len(self.body))

    def readinto(self, view):
        count = min(len(view), len(self.body) - self.at)
        view[:count] = self.body[self.at : self.at + count]
        self.at += count
        return count

    def read(self):
        return b""


class _Conn:
    def __init__(self, response):
        self.response = response

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
        return _Conn(_Response(self.body, self.status))


@pytest.mark.parametrize("offset", [0, 5 * 1024 * 1024 + 17])
def test_pull_hashes_every_byte_in_order(tmp_path, offset):
    """A file's digest covers every byte in order, the resumed prefix included."""
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
