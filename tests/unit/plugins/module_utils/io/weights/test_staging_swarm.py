"""Peer-assisted staging over loopback: an origin, several destinations that serve each other pieces,
and peers that lie, break the protocol or die."""

import errno
import os
import shutil
import socket
import threading
import time

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights import staging_source, swarm
from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights.checkpoint_scan import scan_checkpoint
from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights.staging_pull import stage
from ansible_collections.seatwright.fleet.plugins.module_utils.weights.pieces import MIN_PIECE_BYTES
from ansible_collections.seatwright.fleet.plugins.module_utils.weights.staging import fetch_units
from checkpoint_cases import REVISION, big_shards, blob_name, write_hf_entry

TOKEN = "s" * 32
PIECE = MIN_PIECE_BYTES


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Origin:
    """The run's source with pieces listed, on 127.0.0.1, serving until the test ends."""

    def __init__(self, tmp_path, files, clients, upload_mb_s=0):
        self.path = write_hf_entry(tmp_path / "src", files)
        self.files = files
        state = str(tmp_path / "src-state")
        self.listing, served, _ = staging_source.source_listing(self.path, REVISION, "m", state, piece_bytes=PIECE)
        self.server = staging_source.bind_server(
            "127.0.0.1", 0, TOKEN, self.listing, served, clients, os.path.join(state, "pid"), int(upload_mb_s * 1e6)
        )
        thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05})
        thread.daemon = True
        thread.start()
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]

    def sent(self):
        return sum(self.server.bytes_by_client.values())

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def origin_files():
    return big_shards(4, 3)


def options(tmp_path, origin, name, peers=(), rank=0, ranks=1, **changes):
    base = dict(
        dest=str(tmp_path / name / "models--org--model"),
        source_url=origin.url,
        token=TOKEN,
        client=name,
        name="m",
        revision=REVISION,
        streams=4,
        verify="full",
        direct_io=True,
        bandwidth_limit_bytes_s=0,
        state_dir=str(tmp_path / (name + "-state")),
        connect_timeout_s=3,
        io_timeout_s=5,
        retries=2,
        progress_interval_s=1,
        source_label="origin:/src",
        peers=list(peers),
        rank=rank,
        ranks=ranks,
        serve_address="127.0.0.1",
        serve_port=0,
        upload_limit_bytes_s=0,
        linger_s=2,
    )
    base.update(changes)
    return base


def run_all(jobs):
    """stage() for every options dict at once; {client: result or the exception it raised}."""
    results = {}

    def one(opts):
        try:
            results[opts["client"]] = stage(opts)
        except Exception as exc:  # noqa: BLE001 (the test inspects whatever a destination raised)
            results[opts["client"]] = exc

    threads = [threading.Thread(target=one, args=(opts,)) for opts in jobs]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    return results


def fleet(tmp_path, origin, names, **changes):
    ports = {name: free_port() for name in names}
    peers = [{"name": name, "url": "http://127.0.0.1:%d" % ports[name]} for name in names]
    return [
        options(tmp_path, origin, name, peers, rank, len(names), serve_port=ports[name], **changes)
        for rank, name in enumerate(names)
    ]


def assert_verified(result):
    assert not isinstance(result, Exception), result
    assert result["verified"]
    report, _ = scan_checkpoint(result["dest"], REVISION, "full")
    assert report["complete"] and report["verified"], report


def stage_alone(tmp_path, origin_files, **changes):
    """One destination staged from a fresh origin, no peers: the module's result."""
    origin = Origin(tmp_path, origin_files, clients=1)
    try:
        return stage(options(tmp_path, origin, "d0", peers=[], serve_address=None, **changes))
    finally:
        origin.stop()


def stage_alone_in_child(tmp_path, origin_files, run, *given, **changes):
    """stage_alone's run in a process of its own, `run(options, *given, answers)` putting the result there.

    A run that waits for ever is ended after 60 s: (False, None); else (True, what it put).
    """
    import multiprocessing

    context = multiprocessing.get_context("fork")
    answers = context.Queue()
    origin = Origin(tmp_path, origin_files, clients=1)
    child = context.Process(
        target=run, args=(options(tmp_path, origin, "d0", peers=[], serve_address=None, **changes), *given, answers)
    )
    try:
        child.start()
        child.join(60)
        if child.is_alive():
            child.terminate()
            child.join(5)
            return False, None
    finally:
        origin.stop()
    return True, answers.get(timeout=5)


def test_three_destinations_share_pieces_and_the_origin_sends_about_one_copy(tmp_path, origin_files):
    # Slow enough (about 2 s a copy) that the peers' first views, polled every 0.2 s and later on a
    # loaded host, come well before the origin could send a second copy of the 12.6 MB (at 1 s a copy a
    # host busy with the lab let the origin send 1.9 copies).
    origin = Origin(tmp_path, origin_files, clients=3, upload_mb_s=6)
    try:
        results = run_all(fleet(tmp_path, origin, ["d0", "d1", "d2"]))
    finally:
        origin.stop()
    total = results["d0"]["bytes_total"]
    for result in results.values():
        assert_verified(result)
        assert result["peers_refused"] == {}
    from_peers = sum(r["bytes_from_peers"] for r in results.values())
    # Without peers the origin would send three copies; with them, well under two.
    assert origin.sent() < 1.8 * total, (origin.sent(), total)
    assert from_peers > 0.9 * total
    assert origin.sent() + from_peers == 3 * total
    print({n: (r["bytes_from_peers"], r["transfer_s"], r["peer_serving"]) for n, r in results.items()}, origin.sent())


def test_a_second_run_moves_nothing_and_still_serves_whole_files(tmp_path, origin_files):
    origin = Origin(tmp_path, origin_files, clients=4)
    try:
        first = run_all(fleet(tmp_path, origin, ["d0", "d1"]))
        for result in first.values():
            assert_verified(result)
        again = run_all(fleet(tmp_path, origin, ["d0", "d1"]))
    finally:
        origin.stop()
    for result in again.values():
        assert_verified(result)
        assert not result["changed"] and result["bytes_transferred"] == 0


class Liar:
    """A peer of the run (it holds the secret) that advertises every piece and serves damaged copies."""

    def __init__(self, tmp_path, origin, damage):
        self.copy = tmp_path / "liar"
        shutil.copytree(origin.path, self.copy, symlinks=True)
        self.server = swarm.PeerServer(("127.0.0.1", 0), TOKEN, origin.listing, 1, 0, 1)
        for target, unit in fetch_units(origin.listing).items():
            path = os.path.join(str(self.copy), target)
            if damage == "bytes" and unit["size"] > PIECE:
                with open(path, "r+b") as handle:
                    handle.seek(PIECE + 7)
                    byte = handle.read(1)
                    handle.seek(PIECE + 7)
                    handle.write(bytes([byte[0] ^ 0xFF]))
            self.server.hold_all(target, path)
        if damage == "zeros":
            self.server.send_span = lambda connection, handle, start, end: connection.sendall(b"\0" * (end - start))
        if damage == "drop":

            def drop(connection, handle, start, end):
                connection.sendall(b"\0" * ((end - start) // 2))
                connection.shutdown(socket.SHUT_RDWR)
                return (end - start) // 2

            self.server.send_span = drop
        self.server.own_done.set()
        thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05})
        thread.daemon = True
        thread.start()
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("direct_io", [True, False], ids=["direct", "spliced"])
@pytest.mark.parametrize("piece_hash", ["blake3", "sha256", None])
@pytest.mark.parametrize("damage", ["bytes", "zeros", "drop"])
def test_a_peer_that_serves_a_wrong_piece_is_caught_and_the_piece_comes_from_elsewhere(
    tmp_path, origin_files, damage, piece_hash, direct_io
):
    origin = Origin(tmp_path, origin_files, clients=1)
    liar = Liar(tmp_path, origin, damage)
    try:
        peers = [{"name": "liar", "url": liar.url}]
        opts = options(
            tmp_path, origin, "d0", peers, 0, 2, serve_port=free_port(), piece_hash=piece_hash, direct_io=direct_io
        )
        result = run_all([opts])["d0"]
    finally:
        origin.stop()
        liar.stop()
    assert_verified(result)
    # Left to the node, it checks BLAKE3: the source listed both and this Python has the package.
    assert result["piece_hash"] == (piece_hash or "blake3")
    if damage == "drop":
        # A dropped exchange is a re-route, not a verdict: the peer may be asked again later.
        assert result["peers_refused"] == {}
    else:
        assert list(result["peers_refused"]) == ["liar"]
        assert "hash to %s" % result["piece_hash"] in result["peers_refused"]["liar"]


def test_a_piece_hash_the_node_cannot_compute_is_refused_before_anything_is_written(
    tmp_path, origin_files, monkeypatch
):
    monkeypatch.setattr(swarm, "piece_hashes_here", lambda: ("sha256",))
    origin = Origin(tmp_path, origin_files, clients=1)
    try:
        result = run_all([options(tmp_path, origin, "d0", piece_hash="blake3")])["d0"]
        fallback = run_all([options(tmp_path, origin, "d1")])["d1"]
    finally:
        origin.stop()
    assert "piece_hash blake3 cannot be used here: this node computes sha256" in str(result)
    assert not (tmp_path / "d0" / "models--org--model" / "blobs").exists() or not any(
        (tmp_path / "d0" / "models--org--model" / "blobs").iterdir()
    )
    # The same node left to choose falls back to the sha256 pieces every listing carries.
    assert_verified(fallback)
    assert fallback["piece_hash"] == "sha256"


def test_a_process_without_the_secret_cannot_advertise_pieces(tmp_path, origin_files):
    origin = Origin(tmp_path, origin_files, clients=1)
    stranger = swarm.PeerServer(("127.0.0.1", 0), "x" * 32, origin.listing, 1, 0, 1)
    for target in fetch_units(origin.listing):
        stranger.hold_all(target, "/etc/hostname")
    thread = threading.Thread(target=stranger.serve_forever, kwargs={"poll_interval": 0.05})
    thread.daemon = True
    thread.start()
    try:
        peer = swarm.PeerSource("http://127.0.0.1:%d" % stranger.server_address[1], TOKEN, "d0", 5)
        counts = {t: 1 for t in fetch_units(origin.listing)}
        assert peer.have(counts) is None
        peers = [{"name": "stranger", "url": peer.url}]
        result = run_all([options(tmp_path, origin, "d0", peers, 0, 2, serve_port=free_port())])["d0"]
    finally:
        origin.stop()
        stranger.shutdown()
        stranger.server_close()
    assert_verified(result)
    assert result["bytes_from_peers"] == 0


@pytest.mark.parametrize("piece_hash", ["blake3", "sha256"])
def test_an_interrupted_piece_run_keeps_only_the_pieces_that_still_verify(tmp_path, origin_files, piece_hash):
    origin = Origin(tmp_path, origin_files, clients=2)
    shard = "model-00001-of-00004.safetensors"
    payload = origin_files[shard]
    blob = blob_name(shard, payload)
    dest = tmp_path / "d0" / "models--org--model" / "blobs"
    dest.mkdir(parents=True)
    # Two good pieces, then a damaged one: a killed run's file, with a byte flipped since.
    leftover = bytearray(payload[: 3 * PIECE])
    leftover[2 * PIECE + 5] ^= 0xFF
    (dest / (blob + ".incomplete")).write_bytes(bytes(leftover))
    try:
        result = stage(options(tmp_path, origin, "d0", piece_hash=piece_hash))
    finally:
        origin.stop()
    assert_verified(result)
    record = [r for r in result["transfers"] if r["target"] == "blobs/" + blob][0]
    assert record["piece_hash"] == piece_hash
    assert record["action"] == "resume"
    assert record["bytes_reused"] == 2 * PIECE
    assert record["bytes"] == len(payload) - 2 * PIECE


def test_a_destination_that_dies_does_not_hold_the_others(tmp_path, origin_files):
    origin = Origin(tmp_path, origin_files, clients=3, upload_mb_s=30)
    jobs = fleet(tmp_path, origin, ["d0", "d1", "ghost"])
    try:
        # The ghost is listed as a peer but never comes up: its port refuses every connection.
        results = run_all(jobs[:2])
    finally:
        origin.stop()
    for name in ("d0", "d1"):
        assert_verified(results[name])
        # It waited for nobody: it lingered no longer than the idle time after the last request.
        assert results[name]["peer_serving"]["lingered_s"] < 10


def test_the_source_reads_a_file_again_after_a_same_size_rewrite_with_its_mtime_put_back(tmp_path, origin_files):
    path = write_hf_entry(tmp_path / "src", origin_files)
    state = str(tmp_path / "state")
    shard = "model-00002-of-00004.safetensors"
    blob = os.path.join(path, "blobs", blob_name(shard, origin_files[shard]))

    def flip():
        before = os.stat(blob)
        with open(blob, "r+b") as handle:
            handle.seek(4096)
            byte = handle.read(1)
            handle.seek(4096)
            handle.write(bytes([byte[0] ^ 0xFF]))
        os.utime(blob, ns=(before.st_atime_ns, before.st_mtime_ns))

    assert staging_source.source_listing(path, REVISION, "m", state, piece_bytes=PIECE)[0]["problems"] == []
    flip()
    problems = staging_source.source_listing(path, REVISION, "m", state, piece_bytes=PIECE)[0]["problems"]
    assert len(problems) == 1 and shard in problems[0] and "hashes to sha256" in problems[0]
    flip()
    assert staging_source.source_listing(path, REVISION, "m", state, piece_bytes=PIECE)[0]["problems"] == []


def _dying_fetch(marker, every):
    """A receive_piece whose worker exits at its first piece: the first worker only, or every one."""
    real = swarm.Swarm.receive_piece

    def receive_piece(self, *given):
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
            first = True
        except FileExistsError:
            first = False
        if first or every:
            os._exit(3)
        return real(self, *given)

    return receive_piece


def test_a_stream_whose_worker_dies_hands_its_piece_to_the_other_streams(tmp_path, origin_files, monkeypatch):
    monkeypatch.setattr(swarm.Swarm, "receive_piece", _dying_fetch(str(tmp_path / "died"), every=False))
    origin = Origin(tmp_path, origin_files, clients=1)
    try:
        result = stage(options(tmp_path, origin, "d0", peers=[], serve_address=None))
    finally:
        origin.stop()
    assert (tmp_path / "died").exists()
    assert_verified(result)
    assert result["bytes_transferred"] == result["bytes_total"]


def test_when_every_worker_dies_the_run_fails_saying_so_and_keeps_nothing_half_written(
    tmp_path, origin_files, monkeypatch
):
    monkeypatch.setattr(swarm.Swarm, "receive_piece", _dying_fetch(str(tmp_path / "died"), every=True))
    origin = Origin(tmp_path, origin_files, clients=1)
    try:
        with pytest.raises(Exception) as raised:
            stage(options(tmp_path, origin, "d0", peers=[], serve_address=None))
    finally:
        origin.stop()
    assert "fetch worker of this stream stopped" in str(raised.value)
    dest = tmp_path / "d0" / "models--org--model"
    finals = [p for p in dest.rglob("*.safetensors") if p.is_file()]
    assert finals == []
    # No transfer that never got a piece leaves an empty file behind (issue 49).
    empty = [p.name for p in dest.rglob("*") if p.is_file() and not p.stat().st_size and p.suffix == ".incomplete"]
    assert empty == []


def test_a_stream_fetches_while_the_next_workers_are_forked(tmp_path, origin_files, monkeypatch):
    # Each worker after the first is forked only once a piece has moved (or after 3 s): a run that
    # started no stream before its last fork finds no piece moved when forking the second (issue 49).
    real = swarm._FetchWorker
    moved = threading.Event()
    seen = []

    class Watched(real):
        def __init__(self, *given):
            if seen:
                moved.wait(3)
            seen.append(moved.is_set())
            real.__init__(self, *given)

        def hear(self, limit_s):
            heard = real.hear(self, limit_s)
            if heard[0] == "ok":
                moved.set()
            return heard

    monkeypatch.setattr(swarm, "_FetchWorker", Watched)
    origin = Origin(tmp_path, origin_files, clients=1)
    try:
        result = stage(options(tmp_path, origin, "d0", peers=[], serve_address=None, streams=4))
    finally:
        origin.stop()
    assert_verified(result)
    assert seen == [False, True, True, True]


def test_every_worker_is_told_to_stop_before_the_run_waits_for_any(tmp_path, origin_files, monkeypatch):
    real = swarm._FetchWorker
    events = []

    class Watched(real):
        def stop(self):
            events.append("stop")
            real.stop(self)

        def close(self):
            real.close(self)
            events.append("closed")

    monkeypatch.setattr(swarm, "_FetchWorker", Watched)
    origin = Origin(tmp_path, origin_files, clients=1)
    try:
        result = stage(options(tmp_path, origin, "d0", peers=[], serve_address=None, streams=4))
    finally:
        origin.stop()
    assert_verified(result)
    told = [i for i, event in enumerate(events) if event == "stop"][:4]
    assert len(told) == 4 and events.count("closed") == 4
    assert max(told) < events.index("closed"), events


def test_a_worker_that_cannot_be_forked_leaves_the_run_to_the_streams_already_started(
    tmp_path, origin_files, monkeypatch
):
    real = swarm._FetchWorker
    made = []

    class Refused(real):
        def __init__(self, *given):
            if len(made) == 2:
                raise OSError(errno.EAGAIN, "Resource temporarily unavailable")
            made.append(self)
            real.__init__(self, *given)

    monkeypatch.setattr(swarm, "_FetchWorker", Refused)
    origin = Origin(tmp_path, origin_files, clients=1)
    try:
        result = stage(options(tmp_path, origin, "d0", peers=[], serve_address=None, streams=4))
    finally:
        origin.stop()
    assert_verified(result)
    assert len(made) == 2
    assert result["bytes_transferred"] == result["bytes_total"]


class _Litter:
    """Garbage in a reference cycle, as a Watchdog and its timer are; says which process finalized it."""

    def __init__(self, log):
        self.log = log
        self.me = self

    def __del__(self):
        with open(self.log, "a") as handle:
            handle.write("%d\n" % os.getpid())


def test_a_worker_never_collects_the_parents_garbage(tmp_path, origin_files, monkeypatch):
    # Collected in a worker, a parent's socket left in a cycle closes a descriptor number the worker
    # freed and reused for its own connection or pipe: EBADF, and the file failed (fleet lab, issue 49).
    import gc

    log = str(tmp_path / "finalized")
    real = swarm.Swarm.receive_piece

    def collecting(self, *given):
        gc.collect()
        return real(self, *given)

    monkeypatch.setattr(swarm.Swarm, "receive_piece", collecting)
    origin = Origin(tmp_path, origin_files, clients=1)
    gc.disable()
    try:
        _Litter(log)
        result = stage(options(tmp_path, origin, "d0", peers=[], serve_address=None))
    finally:
        gc.enable()
        origin.stop()
    gc.collect()
    assert_verified(result)
    with open(log) as handle:
        finalized_by = handle.read().split()
    assert finalized_by == [str(os.getpid())]


def test_a_run_killed_mid_piece_leaves_no_worker_behind_and_the_next_run_completes(tmp_path, origin_files):
    import multiprocessing
    import signal
    import time

    origin = Origin(tmp_path, origin_files, clients=2, upload_mb_s=4)
    opts = options(tmp_path, origin, "d0", peers=[], serve_address=None)
    killed = multiprocessing.get_context("fork").Process(target=stage, args=(opts,))
    try:
        killed.start()
        dest = tmp_path / "d0"
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and not any(p.suffix == ".incomplete" for p in dest.rglob("*")):
            time.sleep(0.05)
        time.sleep(0.3)
        os.kill(killed.pid, signal.SIGKILL)
        killed.join(10)
        # Straight away: no worker of the killed run may still hold its lock or write its files.
        result = stage(opts)
    finally:
        origin.stop()
    assert_verified(result)


def _count_hashed_from_pages(monkeypatch, log):
    """Record every span a fetch worker hashes from the file's pages (workers are forked after this)."""
    hash_range = swarm._hash_range

    def counted(digest, fd, start, end):
        with open(str(log), "a") as handle:
            handle.write("%d %d\n" % (start, end))
        hash_range(digest, fd, start, end)

    monkeypatch.setattr(swarm, "_hash_range", counted)


@pytest.mark.parametrize(
    "direct_io, in_line, cores",
    [(True, True, 2), (False, True, 2), (False, False, 2), (False, True, 16)],
    ids=["direct", "in-line", "hash-lane", "many-cores"],
)
def test_buffered_destinations_splice_pieces_into_place_and_hash_them_from_the_file(
    tmp_path, origin_files, monkeypatch, direct_io, in_line, cores
):
    """Only a node of few cores splices (weights/staging.py splice_pieces); one of 16 receives into buffers."""
    log = tmp_path / "hashed-from-pages"
    _count_hashed_from_pages(monkeypatch, log)
    monkeypatch.setattr(swarm, "HASH_IN_LINE", in_line)
    monkeypatch.setattr(swarm, "usable_cores", lambda: cores)
    origin = Origin(tmp_path, origin_files, clients=2)
    try:
        results = run_all(fleet(tmp_path, origin, ["d0", "d1"], direct_io=direct_io))
    finally:
        origin.stop()
    for result in results.values():
        assert_verified(result)
    spans = [tuple(map(int, line.split())) for line in log.read_text().splitlines()] if log.exists() else []
    if direct_io or cores > 4:
        # Direct writes bypass the pages a splice fills, and a node of many cores receives into buffers:
        # those pieces are hashed in the buffers.
        assert spans == []
    else:
        moved = sum(r["bytes_transferred"] for r in results.values())
        assert sum(end - start for start, end in spans) == moved
        assert max(end - start for start, end in spans) <= swarm.SPLICE_PIPE_BYTES


def test_a_filesystem_that_refuses_splice_gets_the_pieces_by_buffered_writes(tmp_path, origin_files, monkeypatch):
    splice = os.splice

    def refusing(src, dst, count, offset_src=None, offset_dst=None, flags=0):
        if offset_dst is not None:
            raise OSError(errno.EINVAL, "Invalid argument")
        return splice(src, dst, count, offset_src, offset_dst, flags)

    monkeypatch.setattr(os, "splice", refusing)
    monkeypatch.setattr(swarm, "SPLICE", True)
    origin = Origin(tmp_path, origin_files, clients=1)
    try:
        result = stage(options(tmp_path, origin, "d0", direct_io=False, retries=0))
    finally:
        origin.stop()
    # Not one interruption: the refused bytes were written from the pipe, and the rest received into buffers.
    assert_verified(result)
    assert all(r["interruptions"] == 0 for r in result["transfers"])


@pytest.mark.parametrize("ahead", [True, False])
def test_a_stream_is_handed_its_next_piece_while_the_last_settles_only_when_looking_ahead(
    tmp_path, origin_files, monkeypatch, ahead
):
    # The next request goes out while the last piece's chunks are still hashed and written (issue 49);
    # without LOOKAHEAD a stream holds one piece at a time, as before.
    monkeypatch.setattr(swarm, "LOOKAHEAD", ahead)
    real = swarm._FetchWorker
    most = []

    class Watched(real):
        def __init__(self, *given):
            real.__init__(self, *given)
            self.holding = 0
            most.append(0)
            self.index = len(most) - 1

        def hand(self, job):
            self.holding += job is not None
            most[self.index] = max(most[self.index], self.holding)
            real.hand(self, job)

        def hear(self, limit_s):
            heard = real.hear(self, limit_s)
            self.holding -= heard != swarm.RECEIVED
            return heard

    monkeypatch.setattr(swarm, "_FetchWorker", Watched)
    result = stage_alone(tmp_path, origin_files, streams=2)
    assert_verified(result)
    assert result["bytes_transferred"] == result["bytes_total"]
    assert max(most) == (2 if ahead else 1), most


class _Landed:
    def __init__(self, fail_at=None):
        self.fail_at, self.written = fail_at, []

    def write_at(self, view, offset):
        if offset == self.fail_at:
            raise OSError(errno.ENOSPC, "No space left on device")
        self.written.append((offset, bytes(view)))


def test_a_failed_write_is_answered_by_its_own_piece_not_by_the_one_received_after_it():
    import hashlib

    pipeline = swarm._Pipeline()
    try:
        first, second = _Landed(fail_at=0), _Landed()
        for handle in (first, second):
            for offset in range(0, 3 * 4, 4):
                # Reusing a buffer whose last chunk failed to write must not fail the piece now received.
                buffer = pipeline.buffer()
                buffer[:4] = b"abcd"
                pipeline.submit(hashlib.sha256(), handle, buffer[:4], offset)
            if handle is first:
                failed = pipeline.take()
        received = pipeline.take()
        with pytest.raises(swarm.StagingError, match="No space left"):
            swarm._Pipeline._results(failed)
        swarm._Pipeline._results(received)
        assert [offset for offset, _ in second.written] == [0, 4, 8]
    finally:
        pipeline.close()


def _stage_losing_the_first_hand_over(opts, answers):
    """Stage, the first piece handed to any worker lost with it; (lost, result) to `answers`."""
    real = swarm._FetchWorker
    lost = []

    class Breaking(real):
        def hand(self, job):
            if job is not None and not lost:
                lost.append(job)
                raise swarm.WorkerLost("the fetch worker of this stream stopped (test)")
            real.hand(self, job)

    swarm._FetchWorker = Breaking
    result = stage(opts)
    answers.put((bool(lost), result))


def test_a_worker_lost_as_it_is_handed_a_piece_gives_that_piece_back(tmp_path, origin_files):
    # A piece left marked in flight here would keep the run waiting for ever.
    ended, answer = stage_alone_in_child(tmp_path, origin_files, _stage_losing_the_first_hand_over, streams=2)
    assert ended, "the run still waits for the piece handed to the lost worker"
    lost, result = answer
    assert lost
    assert_verified(result)
    assert result["bytes_transferred"] == result["bytes_total"]


def _stage_with_a_stuck_worker(opts, marker, answers):
    """Stage, the first worker to receive a piece stuck in it for good; the result to `answers`."""
    real = swarm.Swarm.receive_piece

    def receive_piece(self, *given):
        try:
            os.close(os.open(marker, os.O_CREAT | os.O_EXCL))
        except FileExistsError:
            return real(self, *given)
        time.sleep(3600)

    swarm.Swarm.receive_piece = receive_piece
    swarm.WORKER_GRACE_S = 0
    answers.put(stage(opts))


def test_a_worker_silent_past_its_pieces_limits_is_ended_and_its_piece_fetched_by_another_stream(
    tmp_path, origin_files
):
    # A stuck worker used to hold its stream, and so the run, until the module's async limit, saying nothing.
    marker = str(tmp_path / "stuck")
    ended, result = stage_alone_in_child(
        tmp_path, origin_files, _stage_with_a_stuck_worker, marker, streams=2, io_timeout_s=1
    )
    assert os.path.exists(marker)
    assert ended, "the run still waits for its stuck worker"
    assert_verified(result)
    assert result["bytes_transferred"] == result["bytes_total"]
