"""Pieces and peers as pure decisions (weights/pieces.py, staging.peer_list, filter staging_peers)."""

import hashlib
import os
import sys

import blake3
import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.seatwright.fleet.plugins.filter.staging_peers import staging_peers
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import StagingError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights import checkpoint_scan
from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights.checkpoint_scan import hash_pieces
from ansible_collections.seatwright.fleet.plugins.module_utils.weights import pieces
from ansible_collections.seatwright.fleet.plugins.module_utils.weights.staging import (
    build_listing,
    parse_listing,
    peer_list,
)
from conftest import ROOT

MIB = 1024 * 1024


@pytest.mark.parametrize(
    "size, piece, count, last",
    [(0, MIB, 1, (0, 0)), (1, MIB, 1, (0, 1)), (MIB, MIB, 1, (0, MIB)), (MIB + 1, MIB, 2, (MIB, MIB + 1))],
)
def test_piece_count_and_span(size, piece, count, last):
    assert pieces.piece_count(size, piece) == count
    assert pieces.piece_span(size, piece, count - 1) == last


@pytest.mark.parametrize(
    "header, size, expected",
    [
        (None, 10, (0, 10)),
        ("bytes=3-", 10, (3, 10)),
        ("bytes=0-4", 10, (0, 5)),
        ("bytes=9-9", 10, (9, 10)),
        ("bytes=10-", 10, (10, 10)),
        ("bytes=0-10", 10, None),
        ("bytes=5-3", 10, None),
        ("bytes=-3", 10, None),
        ("bytes=0-1,3-4", 10, None),
        ("bytes=a-b", 10, None),
        ("lines=0-1", 10, None),
    ],
)
def test_parse_range(header, size, expected):
    assert pieces.parse_range(header, size) == expected


@pytest.mark.parametrize(
    "total, largest, expected",
    [
        (0, 64 * MIB, MIB),
        (100 * 10**6, 64 * MIB, MIB),
        (270 * 10**6, 64 * MIB, 2 * MIB),  # the lab's 135M model: 2 MiB pieces, about 130 of them
        (2 * 1024 * MIB, 64 * MIB, 16 * MIB),
        (400 * 10**9, 64 * MIB, 64 * MIB),  # a 400 GB checkpoint: the largest, about 6,000 pieces
        (400 * 10**9, 8 * MIB, 8 * MIB),
    ],
)
def test_piece_size(total, largest, expected):
    assert pieces.piece_size(total, largest) == expected


@pytest.mark.parametrize("value", [MIB, 64 * MIB, 1024 * MIB])
def test_piece_bytes_accepted(value):
    assert pieces.check_piece_bytes(value) is None


@pytest.mark.parametrize("value", [0, 4096, MIB + 1, 2048 * MIB, "64", True, None])
def test_piece_bytes_refused(value):
    assert pieces.check_piece_bytes(value)


@pytest.mark.parametrize("held", [set(), {0}, {7, 8}, set(range(17))])
def test_bitmap_round_trip(held):
    assert pieces.decode_bitmap(pieces.encode_bitmap(held, 17), 17) == held


@pytest.mark.parametrize("text", ["", "ff", "ffffffff", "zz0000", 17, None])
def test_bitmap_that_does_not_fit_is_refused(text):
    assert pieces.decode_bitmap(text, 17) is None


COUNTS = {"blobs/a": 3, "blobs/b": 1}


def test_have_keeps_only_what_the_listing_names():
    doc = {
        "held": {"blobs/a": pieces.encode_bitmap({0, 2}, 3), "../../etc/passwd": "ff"},
        "fetching": {"blobs/b": [0, 5], "/root/x": [0]},
        "uploading": 2,
        "done": False,
    }
    view = pieces.parse_have(doc, COUNTS)
    assert view == {"held": {"blobs/a": {0, 2}}, "fetching": {"blobs/b": {0}}, "uploading": 2, "done": False}


@pytest.mark.parametrize(
    "doc",
    [
        None,
        [],
        {"held": [], "fetching": {}, "uploading": 0},
        {"held": {}, "fetching": {}, "uploading": -1},
        {"held": {}, "fetching": {}, "uploading": True},
        {"held": {"blobs/a": "fff"}, "fetching": {}, "uploading": 0},
        {"held": {}, "fetching": {"blobs/a": "0"}, "uploading": 0},
        {"held": {}, "fetching": {"blobs/a": [True]}, "uploading": 0},
    ],
)
def test_malformed_have_is_ignored_whole(doc):
    assert pieces.parse_have(doc, COUNTS) is None


def test_piece_order_interleaves_files():
    assert pieces.piece_order({"b": 2, "a": 3, "c": 1}) == [("a", 0), ("b", 0), ("c", 0), ("a", 1), ("b", 1), ("a", 2)]
    assert pieces.piece_order({}) == []


def test_walk_order_spreads_destinations_along_the_pieces():
    everything = [("t", i) for i in range(10)]
    starts = [pieces.walk_order(everything, rank, 5)[0][1] for rank in range(5)]
    assert starts == [0, 2, 4, 6, 8]
    assert sorted(pieces.walk_order(everything, 3, 5)) == everything
    assert pieces.walk_order([], 0, 1) == []


def view(held=None, fetching=None, uploading=0, at=100.0):
    return {"held": held or {}, "fetching": fetching or {}, "uploading": uploading, "at": at}


ORDER = [("t", i) for i in range(4)]


@pytest.mark.parametrize(
    "needed, local, views, banned, expected",
    [
        # Nobody holds or fetches anything: the origin, in this destination's own order.
        (set(ORDER), {}, {}, {}, ("origin", ("t", 0))),
        # A peer holds piece 2 and this destination already fetches one piece from the origin: the peer.
        (set(ORDER[:3]), {("t", 3): "origin"}, {"p": view({"t": {2}})}, {}, ("peer", "p", ("t", 2))),
        # The same with nothing fetched from the origin here: one stream keeps the origin busy with a
        # piece nobody holds or fetches, so its upload, which every byte must pass once, never idles.
        (set(ORDER), {}, {"p": view({"t": {2}})}, {}, ("origin", ("t", 0))),
        # Every piece not in flight is held by a peer: the peer, origin fetch or not.
        ({("t", 2)}, {}, {"p": view({"t": {2}})}, {}, ("peer", "p", ("t", 2))),
        # Piece 0 is being fetched by a peer: wait for it, take piece 1 from the origin instead.
        (set(ORDER), {}, {"p": view(fetching={"t": {0}})}, {}, ("origin", ("t", 1))),
        # A banned peer's holdings count for nothing.
        (set(ORDER), {}, {"p": view({"t": {0, 1, 2, 3}})}, {"p": "lied"}, ("origin", ("t", 0))),
        # A stale view (the peer stopped answering) counts for nothing either.
        (set(ORDER), {}, {"p": view({"t": {0}}, at=90.0)}, {}, ("origin", ("t", 0))),
        # The least busy holder is asked.
        (
            set(ORDER[:3]),
            {("t", 3): "origin"},
            {"p": view({"t": {0}}, uploading=3), "q": view({"t": {0}})},
            {},
            ("peer", "q", ("t", 0)),
        ),
        # Already asking a peer for PER_PEER_REQUESTS pieces: the next goes elsewhere.
        (
            {("t", 2), ("t", 3)},
            {("t", 0): "p", ("t", 1): "p"},
            {"p": view({"t": {0, 1, 2, 3}})},
            {},
            ("wait",),
        ),
        # Everything left is in flight here: wait (a failed fetch must find a stream to take it back).
        ({("t", 3)}, {("t", 3): "origin"}, {}, {}, ("wait",)),
        (set(), {}, {}, {}, ("done",)),
    ],
)
def test_choose(needed, local, views, banned, expected):
    assert pieces.choose(ORDER, needed, local, views, banned, 100.0, {}) == expected


def test_choose_stops_waiting_for_a_peer_after_wait_s():
    waiting = {}
    views = {"p": view(fetching={"t": {0, 1, 2, 3}})}
    assert pieces.choose(ORDER, set(ORDER), {}, views, {}, 100.0, waiting, wait_s=5) == ("wait",)
    views["p"]["at"] = 106.0
    assert pieces.choose(ORDER, set(ORDER), {}, views, {}, 106.0, waiting, wait_s=5) == ("origin", ("t", 0))


@pytest.mark.parametrize("payload, count, piece_mb", [("image", 209, 1.05), ("checkpoint", 131, 2.05)])
def test_fan_out_sends_each_byte_from_the_origin_about_once(payload, count, piece_mb):
    """choose driven through a model of the fleet lab (bench/staging/fanout_model.py): five
    destinations of four streams, every upload capped at 25 MB/s. Before the origin was kept busy,
    the model gave 1.458 for the image (12.96 against 8.88 s) and 1.543 for the checkpoint."""
    sys.path.insert(0, str(ROOT / "bench" / "staging"))
    try:
        import fanout_model
    finally:
        sys.path.remove(str(ROOT / "bench" / "staging"))
    result = fanout_model.fan_out(pieces, 5, count, piece_mb, seeds=3)
    assert result["ratio"] <= 1.2, (payload, result)
    assert result["origin_copies"] <= 1.06, (payload, result)


def test_hash_pieces_matches_the_file_and_each_piece(tmp_path):
    payload = os.urandom(2 * MIB + 100)
    path = tmp_path / "f"
    path.write_bytes(payload)
    digests = hash_pieces(str(path), MIB)
    assert digests["sha256"] == hashlib.sha256(payload).hexdigest()
    assert digests["pieces"] == [hashlib.sha256(payload[i : i + MIB]).hexdigest() for i in range(0, len(payload), MIB)]
    # BLAKE3 digests of the same pieces come from the same read, where the blake3 package is installed.
    by_blake3 = [blake3.blake3(payload[i : i + MIB]).hexdigest() for i in range(0, len(payload), MIB)]
    assert digests["pieces_blake3"] == by_blake3
    (tmp_path / "e").write_bytes(b"")
    empty = hash_pieces(str(tmp_path / "e"), MIB)
    assert empty["pieces"] == [hashlib.sha256(b"").hexdigest()]
    assert empty["pieces_blake3"] == [blake3.blake3(b"").hexdigest()]


def test_hash_pieces_without_blake3_lists_sha256_pieces_only(tmp_path, monkeypatch):
    monkeypatch.setattr(checkpoint_scan, "blake3", None)
    (tmp_path / "f").write_bytes(os.urandom(MIB + 1))
    digests = hash_pieces(str(tmp_path / "f"), MIB)
    assert len(digests["pieces"]) == 2 and "pieces_blake3" not in digests
    assert checkpoint_scan.piece_hashes_here() == ("sha256",)


BOTH = {"t": {"pieces": ["a" * 64], "pieces_blake3": ["b" * 64]}}
SHA_ONLY = {"t": {"pieces": ["a" * 64], "pieces_blake3": None}}
MIXED = {"t": BOTH["t"], "u": SHA_ONLY["t"]}


@pytest.mark.parametrize(
    "units, here, forced, expected",
    [
        (BOTH, ("blake3", "sha256"), None, "blake3"),
        (BOTH, ("sha256",), None, "sha256"),
        (SHA_ONLY, ("blake3", "sha256"), None, "sha256"),
        # One unit without BLAKE3 digests: one algorithm for the whole run.
        (MIXED, ("blake3", "sha256"), None, "sha256"),
        (BOTH, ("blake3", "sha256"), "sha256", "sha256"),
        (BOTH, ("sha256",), "blake3", None),
        (SHA_ONLY, ("blake3", "sha256"), "blake3", None),
        (BOTH, ("blake3", "sha256"), "md5", None),
    ],
)
def test_piece_hash_choice(units, here, forced, expected):
    assert pieces.piece_hash_choice(units, here, forced) == expected


def listing_with(pieces_field, piece_bytes=MIB, size=MIB + 1, blake3_field=None):
    files = {"a": {"size": size, "mode": 0o644, "sha256": "a" * 64, "pieces": pieces_field}}
    files["a"]["pieces_blake3"] = blake3_field
    return build_listing("m", "folder", None, {}, files, [], piece_bytes)


@pytest.mark.parametrize(
    "pieces_field, piece_bytes, fragment",
    [
        (["b" * 64], MIB, "2 sha256 piece digests expected"),
        (["b" * 64, "B" * 64], MIB, "not 64 lowercase hex"),
        (["b" * 64, "b" * 64], 1000, "multiple of 4096"),
        (None, MIB, "piece digests expected"),
    ],
)
def test_listing_pieces_that_do_not_fit_are_refused(pieces_field, piece_bytes, fragment):
    with pytest.raises(StagingError, match=fragment):
        parse_listing(listing_with(pieces_field, piece_bytes), "http://src")


def test_listing_with_pieces_parses():
    assert parse_listing(listing_with(["b" * 64, "c" * 64]), "http://src")["piece_bytes"] == MIB
    both = parse_listing(listing_with(["b" * 64, "c" * 64], blake3_field=["d" * 64, "e" * 64]), "http://src")
    assert both["files"][0]["pieces_blake3"] == ["d" * 64, "e" * 64]


@pytest.mark.parametrize(
    "blake3_field, fragment",
    [(["d" * 64], "2 blake3 piece digests expected"), (["d" * 64, "xyz"], "a blake3 piece digest is not 64")],
)
def test_listing_blake3_pieces_that_do_not_fit_are_refused(blake3_field, fragment):
    listing = listing_with(["b" * 64, "c" * 64])
    listing["files"][0]["pieces_blake3"] = blake3_field
    with pytest.raises(StagingError, match=fragment):
        parse_listing(listing, "http://src")


def test_peer_list_and_filter():
    hostvars = {"a": {"seatwright_node_fabric_ip": "10.0.0.1"}, "b": {"seatwright_node_fabric_ip": "fd00::2"}}
    assert staging_peers(["a", "b"], hostvars, 8475) == [
        {"name": "a", "url": "http://10.0.0.1:8475"},
        {"name": "b", "url": "http://[fd00::2]:8475"},
    ]
    with pytest.raises(AnsibleFilterError, match="host c cannot take part"):
        staging_peers(["a", "c"], hostvars, 8475)
    with pytest.raises(StagingError, match="every network"):
        peer_list(["z"], {"z": "0.0.0.0"}, 1)
    # A host named as destinations name the source would be taken for it (its fetches, its URL).
    with pytest.raises(StagingError, match="host origin cannot take part.*the one destinations give the source"):
        peer_list(["a", "origin"], {"a": "10.0.0.1", "origin": "10.0.0.2"}, 1)
