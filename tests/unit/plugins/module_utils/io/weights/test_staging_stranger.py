"""Issue 49: a stranger at the fabric cannot stall or crash staging.

Each case plays what an attack review saw, over loopback, against the real source, peer and
destination code: a flood of idle connections at the source, a squatter at a peer's port that
answers without end or a byte at a time, a peer that keeps dropping pieces, an error answer of
hundreds of MiB, and names that are one file on a folding filesystem. Every call under attack runs
with a deadline, so a regression fails by assertion instead of hanging the suite.
"""

import http.client
import json
import socket
import threading
import time

import pytest
import test_staging_attacks as staging_attacks
import test_staging_bounds as bounds
import weight_stage
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import Interrupted, StagingError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights import staging_pull, swarm
from ansible_collections.seatwright.fleet.plugins.module_utils.weights import staging as st
from ansible_collections.seatwright.fleet.plugins.module_utils.weights import staging_auth
from ansible_collections.seatwright.fleet.plugins.module_utils.weights.staging_auth import authorization
from checkpoint_cases import write_folder

server_name = getattr(staging_auth, "server_name", None)

SECRET = bounds.SECRET
MIB = 1024 * 1024


@pytest.fixture
def folder_source(tmp_path):
    running = bounds.Running(
        write_folder(tmp_path / "src", {"config.json": b'{"a": 1}\n', "model-00001.bin": b"w" * 4096}),
        str(tmp_path / "src-state"),
    )
    yield running
    running.stop()


class Recording(bounds.Hostile):
    """A squatter at a peer's port that keeps the start of every request it gets."""

    def __init__(self, answer=None, lifetime_s=8):
        self.seen = []
        bounds.Hostile.__init__(self, answer or self._not_found, lifetime_s)

    @staticmethod
    def _not_found(_hostile, conn):
        conn.sendall(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n")

    def _one(self, conn):
        try:
            conn.settimeout(2)
            self.seen.append(conn.recv(65536))
            self.answer(self, conn)
        except OSError:
            pass
        finally:
            conn.close()


# ---- the connection cap ---------------------------------------------------------------------------


def test_a_strangers_idle_connections_leave_room_for_a_destination(folder_source):
    """More idle connections than the cap: the oldest unproven ones make way, and a destination gets in."""
    server = folder_source.server
    server.max_connections, server.unproven_timeout_s = 40, 60
    strangers = [socket.create_connection(("127.0.0.1", folder_source.port), timeout=3) for _ in range(60)]
    try:
        time.sleep(0.3)
        conn = http.client.HTTPConnection("127.0.0.1", folder_source.port, timeout=3)
        try:
            here = server_name("127.0.0.1", folder_source.port) if server_name else None
            headers = {"Authorization": _made_for(here, "GET", "/listing")}
            conn.request("GET", "/listing", headers=headers)
            status = conn.getresponse().status
        except (OSError, http.client.HTTPException) as exc:
            status = "refused (%s)" % exc
        assert status == 200, "a destination behind 60 idle strangers got %s" % status
        with server._lock:
            held = len(server.unproven)
        assert held <= server.unproven_per_address
        assert server.evicted_connections >= 60 - server.unproven_per_address
    finally:
        for stranger in strangers:
            stranger.close()


def test_a_flooded_run_does_not_read_as_idle(folder_source):
    server = folder_source.server
    server.max_connections, server.unproven_per_address, server.unproven_timeout_s = 4, 100, 60
    strangers = [socket.create_connection(("127.0.0.1", folder_source.port), timeout=3) for _ in range(12)]
    time.sleep(0.3)
    for stranger in strangers:
        stranger.close()
    assert server.refused_connections >= 1
    time.sleep(1.2)
    reason = server.finished_reason(1, time.monotonic() + 60)
    assert reason is not None and not reason.startswith("idle"), reason
    assert "flooded" in reason and "0 of 99 destinations" in reason


# ---- a squatter at a peer's port ------------------------------------------------------------------


def _swarm_for(peers, **extra):
    """A Swarm with only what finish, _poll_peers and _failed use."""
    made = object.__new__(swarm.Swarm)
    made.peers = peers
    made.banned, made.failures, made.server = {}, {}, None
    made.lock = threading.Lock()
    made.changed = threading.Condition(made.lock)
    made.views = {name: None for name in peers}
    made.rested, made.local, made.needed = {}, {}, set()
    made.interruptions, made.peer_interruptions = {}, {}
    made.polling = threading.Event()
    made.counts = {"a.bin": 4}
    made.options = {"retries": 1}
    for name, value in extra.items():
        setattr(made, name, value)
    return made


def test_done_goes_only_to_peers_whose_signed_have_was_seen():
    squatter = Recording()
    try:
        peer = swarm.PeerSource(squatter.url, SECRET, "node-b", 1)
        assert peer.have({"a.bin": 4}) is None, "an unsigned /have was taken"
        heard = len(squatter.seen)
        finished, elapsed, value = bounds.with_deadline(lambda: swarm.Swarm.finish(_swarm_for({"node-c": peer}), 5), 10)
    finally:
        squatter.stop()
    assert finished and not isinstance(value, BaseException), value
    posted = [request for request in squatter.seen[heard:] if request.startswith(b"POST /done")]
    assert not posted, "a squatter that never signed a /have was told this node is done"
    assert elapsed < 2


def test_an_endless_done_answer_is_read_only_so_far():
    squatter = bounds.Hostile(bounds.flood(384 * MIB))
    source = staging_pull.Source(squatter.url, SECRET, "node-b", 1)
    source.proven = True
    try:
        finished, growth, value = bounds.peak_growth(lambda: source.done({"ok": True}), 10)
    finally:
        squatter.stop()
    assert finished, "an endless /done answer held the destination"
    assert not isinstance(value, BaseException), "an endless /done answer raised %r" % value
    assert growth < 64 * MIB, "an endless /done answer took %d MiB" % (growth // MIB)


@pytest.mark.parametrize("call", ["done", "have"])
def test_a_trickled_answer_from_a_peer_ends_within_the_io_timeout(call):
    squatter = bounds.Hostile(bounds.trickle("body"))
    peer = swarm.PeerSource(squatter.url, SECRET, "node-b", 1)
    peer.proven = True
    try:
        finished, elapsed, value = bounds.with_deadline(
            (lambda: peer.done({"ok": True})) if call == "done" else (lambda: peer.have({"a.bin": 4})), 10
        )
    finally:
        squatter.stop()
    assert finished and not isinstance(value, BaseException), value
    assert elapsed < 3, "a trickled /%s held the destination %.1f s" % (call, elapsed)


def test_peers_are_polled_at_once(monkeypatch):
    """A peer that takes seconds to answer /have does not delay what the others hold."""

    def have(peer, _counts):
        if peer.url.endswith(":1"):
            time.sleep(3)
            return None
        return {"held": {"a.bin": {0}}, "fetching": {}, "uploading": 0, "done": False}

    monkeypatch.setattr(swarm.PeerSource, "have", have)
    slow = swarm.PeerSource("http://127.0.0.1:1", SECRET, "node-b", 1)
    fast = swarm.PeerSource("http://127.0.0.1:2", SECRET, "node-b", 1)
    made = _swarm_for({"slow": slow, "fast": fast})
    poller = threading.Thread(target=made._poll_peers, daemon=True)
    poller.start()
    try:
        seen_by = time.monotonic() + 1.5
        while made.views["fast"] is None and time.monotonic() < seen_by:
            time.sleep(0.02)
        assert made.views["fast"] is not None, "a slow peer held up the poll of a fast one"
    finally:
        made.polling.set()


def test_a_peer_that_keeps_dropping_pieces_is_banned():
    made = _swarm_for({"node-c": swarm.PeerSource("http://127.0.0.1:1", SECRET, "node-b", 1)})
    limit = getattr(swarm, "PEER_MAX_INTERRUPTIONS", 3)
    for attempt in range(limit):
        assert "node-c" not in made.banned
        made._failed(("a.bin", attempt), "node-c", Interrupted("sent piece %d too slowly" % attempt))
    assert "node-c" in made.banned and "interrupted 3 times" in made.banned["node-c"]
    assert made.needed == {("a.bin", i) for i in range(limit)}


def test_a_destination_whose_files_verified_succeeds_with_a_warning(tmp_path, monkeypatch):
    class Failing:
        def finish(self, _lifetime_s):
            raise MemoryError("an endless answer from a peer")

    def staged(options, _source, _check_mode, _now, _started, outcome):
        outcome["swarm"] = Failing()
        return {"name": options["name"], "verified": True}

    monkeypatch.setattr(staging_pull, "_stage", staged)
    try:
        result = staging_pull.stage(bounds.options(tmp_path, "http://127.0.0.1:1"))
    except MemoryError as exc:
        pytest.fail("a node whose files verified failed because of a peer: %r" % exc)
    assert result["verified"] and "every file here verified" in result["warnings"][0]


@pytest.mark.parametrize("error", [MemoryError("out of memory"), RuntimeError("unexpected")])
def test_weight_stage_always_returns_json(capsys, tmp_path, monkeypatch, error):
    def broken(_params, _check_mode, _want_diff):
        raise error

    monkeypatch.setattr(weight_stage, "run_stage", broken)
    args = dict(bounds.options(tmp_path, "http://127.0.0.1:1"), bandwidth_limit_mb_per_s=0)
    for field in ("bandwidth_limit_bytes_s", "progress_interval_s", "source_label", "prune"):
        args.pop(field, None)
    try:
        answer = staging_attacks.run_module(capsys, weight_stage, args)
    except (json.JSONDecodeError, type(error)) as exc:
        pytest.fail("weight_stage printed no JSON for %r" % exc)
    assert answer["failed"] and type(error).__name__ in answer["msg"]


# ---- signatures bound to a server -----------------------------------------------------------------


def _made_for(server, method, path, body=b""):
    """The Authorization of a request made for `server`; where requests name no server, one that names none."""
    try:
        return authorization(SECRET, method, path, "node-b", body, server=server)[0]
    except TypeError:
        return authorization(SECRET, method, path, "node-b", body)[0]


def test_a_request_made_for_one_peer_is_refused_by_the_origin(folder_source):
    peer_a = server_name("127.0.0.1", 1) if server_name else "127.0.0.1:1"
    body = json.dumps({"ok": True}).encode()
    conn = http.client.HTTPConnection("127.0.0.1", folder_source.port, timeout=3)
    conn.request("GET", "/listing", headers={"Authorization": _made_for(peer_a, "GET", "/listing")})
    assert conn.getresponse().status == 403, "the origin answered a request made for another server"
    conn = http.client.HTTPConnection("127.0.0.1", folder_source.port, timeout=3)
    conn.request("POST", "/done", body=body, headers={"Authorization": _made_for(peer_a, "POST", "/done", body)})
    assert conn.getresponse().status == 403
    assert folder_source.server.done_reports == {}, "a /done made for a peer counted at the origin"


def test_a_squatter_that_relays_signed_answers_is_not_believed(tmp_path, folder_source):
    relay = bounds.Relay(folder_source.port, "16")
    source = staging_pull.Source(relay.url, SECRET, "node-b", 2)
    try:
        finished, _elapsed, value = bounds.with_deadline(lambda: source.listing(2), 10)
    finally:
        relay.stop()
    assert finished and isinstance(value, StagingError), "a relayed listing was taken: %r" % (value,)
    assert not source.proven


# ---- leftovers --------------------------------------------------------------------------------------


def error_flood(total_bytes):
    def answer(hostile, conn):
        conn.sendall(b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: %d\r\n\r\n" % total_bytes)
        block = b"e" * MIB
        for _ in range(total_bytes // MIB):
            if not hostile.alive():
                return
            conn.sendall(block)

    return answer


def _pull_from(url, partial):
    unit = {"target": "a.bin", "size": 4096, "sha256": "0" * 64, "mode": 0o644}

    class Quiet:
        def add(self, *_given):
            pass

        def consume(self, *_given):
            pass

    source = staging_pull.Source(url, SECRET, "node-b", 1)
    return lambda: staging_pull.pull(source, unit, str(partial), 0, Quiet(), Quiet(), False)


def test_an_http_500_of_200_mib_is_not_read_whole(tmp_path):
    hostile = bounds.Hostile(error_flood(200 * MIB))
    try:
        finished, growth, value = bounds.peak_growth(_pull_from(hostile.url, tmp_path / ".a.bin.partial"), 10)
    finally:
        hostile.stop()
    assert finished and isinstance(value, StagingError) and "HTTP 500" in str(value), value
    assert growth < 64 * MIB, "the body of an HTTP 500 took %d MiB" % (growth // MIB)


def test_a_transfer_that_failed_before_its_first_byte_leaves_no_partial_file(tmp_path):
    hostile = bounds.Hostile(error_flood(MIB))
    partial = tmp_path / ".a.bin.partial"
    try:
        finished, _elapsed, value = bounds.with_deadline(_pull_from(hostile.url, partial), 10)
    finally:
        hostile.stop()
    assert finished and isinstance(value, StagingError), value
    assert not partial.exists(), "an empty %s was left behind" % partial.name


@pytest.mark.parametrize(
    "names",
    [
        ("Model.bin", "model.bin"),
        ("caf\u00e9.json", "cafe\u0301.json"),
        ("sub/STRASSE.txt", "sub/stra\u00dfe.txt"),
    ],
)
def test_names_that_are_one_file_on_a_folding_filesystem_are_refused(names):
    doc = st.build_listing(
        "m",
        "folder",
        None,
        {},
        {name: {"size": 1, "mode": 0o644, "sha256": "%d" % i * 64} for i, name in enumerate(names)},
        [],
    )
    with pytest.raises(StagingError) as caught:
        st.parse_listing(doc, "http://10.0.0.1:8473")
    assert "one file" in str(caught.value)


def test_distinct_names_are_still_listed():
    doc = st.build_listing(
        "m",
        "folder",
        None,
        {},
        {name: {"size": 1, "mode": 0o644, "sha256": "a" * 64} for name in ("model-1.bin", "model-2.bin")},
        [],
    )
    assert st.parse_listing(doc, "http://10.0.0.1:8473") is doc
