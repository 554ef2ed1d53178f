"""Pieces and peers: how a destination picks what to fetch next, and from whom, with no tracker.

Pure functions only; the serving and pulling threads live in io/weights/swarm.py.

Why pieces. A shard's sha256 is serial: one core hashes it at about 1.06-1.34 GB/s (measured on
the 16-core device machine), so with whole-file verification a node's verified rate is bounded by
how many shards are in flight, and a node cannot serve a shard onward before all of it arrived.
The source therefore lists, beside each file's sha256, the sha256 of each fixed-size piece,
computed in the same read that checks the file's own digest. A destination verifies pieces on
any stream, in any order, and a peer may serve a piece the moment it verified it. The listing is
signed, so the chain of trust is the same as for whole files: every byte checks against a digest
the run's source signed. (Dragonfly cuts blobs into 4-64 MiB pieces for the same reasons.)

Why a swarm by piece, not a chain. A pipelined chain in fabric order needs an order, and a dead
link stalls everyone behind it until it is re-planned; a swarm needs neither. Each destination
walks the pieces from its own offset (rank / ranks of the way along), takes from the origin only
pieces that no peer holds or is fetching, and takes everything else from peers. So the origin
sends each piece about once, every peer uploads what it received, and a node that dies costs
those waiting on it one re-route to another holder or to the origin. Peers learn who holds what
by asking each other (`GET /have`, signed like the listing): there is no tracker and no database.
"""

import re

from ansible_collections.seatwright.fleet.plugins.module_utils.weights.checkpoint import is_sha256

MIN_PIECE_BYTES = 1024 * 1024
MAX_PIECE_BYTES = 1024 * 1024 * 1024
# Pieces a checkpoint is cut into at least, while they stay MIN_PIECE_BYTES or more: a killed run
# loses at most its pieces in flight, and a small checkpoint still spreads over every stream and peer.
TARGET_PIECES = 128
# Piece requests one destination keeps open to one peer at a time.
PER_PEER_REQUESTS = 2
# Uploads a peer runs at once before others look elsewhere (its upload cap is shared by them).
PEER_UPLOAD_SLOTS = 4
# Seconds a peer's view may be old and the peer still count as alive (it is polled far more often).
PEER_VIEW_FRESH_S = 3.0
# Seconds a destination waits for a piece another node is fetching before it asks the origin.
PEER_WAIT_S = 120.0
# The name a destination's fetches from the source carry among its senders (peers carry their own).
ORIGIN = "origin"
_BITMAP = re.compile(r"^[0-9a-f]*$")
# Piece digests a listing may carry, in the order a destination prefers them, and the listing field
# of each. BLAKE3 checks a byte about 3.3 times as fast as sha256 on one core (4.5 against 1.35 GB/s
# on the lab host's SHA-extension Xeon), which is what verified staging into RAM is bound by; sha256
# is always listed, for nodes whose Python lacks the blake3 package.
PIECE_HASHES = ("blake3", "sha256")
PIECE_FIELDS = {"blake3": "pieces_blake3", "sha256": "pieces"}


def piece_size(total_bytes, largest):
    """The piece size for a checkpoint of `total_bytes`: a power of two from MIN_PIECE_BYTES up to
    `largest`, the largest that still cuts the checkpoint into TARGET_PIECES pieces or more."""
    size = MIN_PIECE_BYTES
    while size * 2 <= largest and total_bytes // (size * 2) >= TARGET_PIECES:
        size *= 2
    return min(size, largest)


def piece_count(size, piece_bytes):
    """Pieces of a file of `size` bytes; an empty file has one (empty) piece."""
    return max(1, -(-size // piece_bytes))


def piece_span(size, piece_bytes, index):
    """(first byte, end) of piece `index`, end exclusive."""
    start = index * piece_bytes
    return start, min(size, start + piece_bytes)


def check_piece_bytes(value):
    """None when `value` is a usable piece size in bytes, else why not."""
    if not isinstance(value, int) or isinstance(value, bool):
        return "piece size %r is not a whole number of bytes" % (value,)
    if value < MIN_PIECE_BYTES or value > MAX_PIECE_BYTES or value % 4096:
        return "piece size %d is not a multiple of 4096 between %d and %d bytes" % (
            value,
            MIN_PIECE_BYTES,
            MAX_PIECE_BYTES,
        )
    return None


def listing_pieces_problem(entry, piece_bytes):
    """None when a listing entry's piece digests fit its size, else why not (sha256 always, BLAKE3 when listed)."""
    count = piece_count(entry["size"], piece_bytes)
    for algo in PIECE_HASHES:
        pieces = entry.get(PIECE_FIELDS[algo])
        if pieces is None and algo != "sha256":
            continue
        if not isinstance(pieces, list) or len(pieces) != count:
            return "%d %s piece digests expected for %d bytes" % (count, algo, entry["size"])
        if not all(is_sha256(p) for p in pieces):
            return "a %s piece digest is not 64 lowercase hex characters" % algo
    if not is_sha256(entry.get("sha256")):
        return "pieces are listed without the file's sha256"
    return None


def piece_hashes_offered(units):
    """The piece digests (PIECE_HASHES order) that every unit of a listing lists."""
    return tuple(algo for algo in PIECE_HASHES if all(unit.get(PIECE_FIELDS[algo]) for unit in units.values()))


def piece_hash_choice(units, can_compute, forced=None):
    """The piece digest a destination checks: `forced` when given, else the first of PIECE_HASHES
    that this node can compute and that every unit lists. None when `forced` cannot be used."""
    offered = piece_hashes_offered(units)
    for algo in [forced] if forced else PIECE_HASHES:
        if algo in can_compute and algo in offered:
            return algo
    return None


def parse_range(header, size):
    """(start, end exclusive) asked for by `bytes=N-` or `bytes=A-B`; (0, size) without a header; None otherwise."""
    if not header:
        return 0, size
    if not header.startswith("bytes=") or header.count("-") != 1:
        return None
    first, _, last = header[len("bytes=") :].partition("-")
    if not first.isdigit() or (last and not last.isdigit()):
        return None
    start = int(first)
    end = int(last) + 1 if last else size
    if start > size or end > size or end < start:
        return None
    return start, end


def encode_bitmap(indices, count):
    """Hex text with bit i set for every piece index i held (most significant bit first in each byte)."""
    raw = bytearray(-(-count // 8))
    for index in indices:
        raw[index // 8] |= 0x80 >> (index % 8)
    return raw.hex()


def decode_bitmap(text, count):
    """The set of piece indices in a bitmap of `count` pieces; None when the text does not fit."""
    if not isinstance(text, str) or not _BITMAP.match(text) or len(text) != 2 * (-(-count // 8)):
        return None
    raw = bytes.fromhex(text)
    held = {i for i in range(count) if raw[i // 8] & (0x80 >> (i % 8))}
    return held


def parse_have(doc, counts):
    """A peer's answer to GET /have as {held, fetching, uploading, done}; None when it is malformed.

    counts: {target: pieces} from the run's own listing. A peer's word only ever narrows what it
    offers: a target the listing does not name, or an index past the piece count, is dropped
    (it could never become a path here), and anything malformed makes the whole answer ignored.
    """
    if not isinstance(doc, dict):
        return None
    held_doc, fetching_doc = doc.get("held"), doc.get("fetching")
    uploading = doc.get("uploading")
    if not isinstance(held_doc, dict) or not isinstance(fetching_doc, dict):
        return None
    if not isinstance(uploading, int) or isinstance(uploading, bool) or uploading < 0:
        return None
    held, fetching = {}, {}
    for target, bitmap in held_doc.items():
        if target not in counts:
            continue
        indices = decode_bitmap(bitmap, counts[target])
        if indices is None:
            return None
        if indices:
            held[target] = indices
    for target, indices in fetching_doc.items():
        if target not in counts:
            continue
        if not isinstance(indices, list) or not all(isinstance(i, int) and not isinstance(i, bool) for i in indices):
            return None
        kept = {i for i in indices if 0 <= i < counts[target]}
        if kept:
            fetching[target] = kept
    return {"held": held, "fetching": fetching, "uploading": uploading, "done": doc.get("done") is True}


def piece_order(counts):
    """Every (target, index) of a run, the files interleaved: piece 0 of each file, then piece 1 of each, ...

    Streams that take consecutive pieces then write to different files: writes into one file take
    that file's lock in the kernel, and 16 streams in one file ran at a quarter of 16 in eight
    (3.3 against 12 GB/s into RAM on the 16-core device machine).
    """
    longest = max(counts.values()) if counts else 0
    return [(target, index) for index in range(longest) for target in sorted(counts) if index < counts[target]]


def walk_order(pieces, rank, ranks):
    """The order one destination walks the run's pieces: all of them, starting rank/ranks of the way along.

    pieces: the run's (target, index) pairs in one order every destination shares.
    """
    if not pieces:
        return []
    start = (len(pieces) * rank // max(1, ranks)) % len(pieces)
    return pieces[start:] + pieces[:start]


def choose(order, needed, local, views, banned, now, waiting_since, wait_s=PEER_WAIT_S):
    """The next piece to fetch and from whom: ('peer', name, piece), ('origin', piece), ('wait',) or ('done',).

    order: this destination's walk (walk_order). needed: pieces not yet verified here. local:
    {piece: sender} fetched here now, the origin's fetches under ORIGIN. views: {peer: {held,
    fetching, uploading, at}} where `at` is the time of the view and a stale view counts as a dead
    peer. banned: peers that served a wrong piece or broke the protocol. waiting_since: {piece: when
    this destination first saw it fetched elsewhere} (updated here). now: the current time.

    A peer that holds a piece is asked before the origin, with one exception: while a piece that
    no node holds or fetches is left, every destination keeps one fetch from the origin going. In a
    fan-out the origin's upload is what every byte must pass once, and a destination whose streams
    had all turned to peers left it idle (bench/staging/fanout_model.py).
    """
    if not needed:
        return ("done",)
    live = {
        name: view
        for name, view in views.items()
        if name not in banned and view is not None and now - view["at"] <= PEER_VIEW_FRESH_S
    }
    ours = {}
    for source in local.values():
        ours[source] = ours.get(source, 0) + 1
    from_peer = origin_piece = None
    for piece in order:
        if piece not in needed or piece in local:
            continue
        target, index = piece
        holders = [
            name
            for name, view in live.items()
            if index in view["held"].get(target, ())
            and ours.get(name, 0) < PER_PEER_REQUESTS
            and view["uploading"] < PEER_UPLOAD_SLOTS + PER_PEER_REQUESTS
        ]
        if holders:
            waiting_since.pop(piece, None)
            if from_peer is None:
                best = min(holders, key=lambda name: (live[name]["uploading"] + ours.get(name, 0), name))
                from_peer = ("peer", best, piece)
        elif origin_piece is None:
            elsewhere = any(
                index in view["fetching"].get(target, ()) or index in view["held"].get(target, ())
                for view in live.values()
            )
            if elsewhere:
                first = waiting_since.setdefault(piece, now)
                if now - first <= wait_s:
                    continue
            origin_piece = piece
        if origin_piece is not None and (from_peer is not None or not live or not ours.get(ORIGIN)):
            break  # the answer is settled: nothing later in the walk can change it
    if origin_piece is not None and (from_peer is None or not ours.get(ORIGIN)):
        return ("origin", origin_piece)
    if from_peer is not None:
        return from_peer
    # Every needed piece is in flight here or elsewhere: a stream that left now could not take
    # back a piece whose fetch fails, so it waits until nothing is needed.
    return ("wait",)
