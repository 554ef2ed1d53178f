"""Peer-assisted staging by piece: every destination pulls pieces from the origin and from its peers,
verifies each against the signed listing, and serves what it verified to the others.

The decisions (piece spans, who to ask next, what a peer's answer may say) are in
weights/pieces.py; this file holds the threads and the sockets. The wire is the origin's: the
same HMAC on every request, the same per-run secret; a peer's `GET /have` answer is signed like
the listing, so a process that does not hold the secret cannot advertise pieces. A peer never
names a path: the listing comes from the origin alone, and a peer only answers for targets and
piece indices the listing already holds, with bytes that must hash to the listing's digest.
"""

import collections
import concurrent.futures
import contextlib
import ctypes
import errno
import fcntl
import gc
import http.client
import json
import mmap
import multiprocessing
import os
import signal
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import quote, unquote

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import (
    BadPiece,
    Interrupted,
    StagingError,
    WorkerLost,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights.checkpoint_scan import (
    piece_hasher,
    piece_hashes_here,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights.staging_source import (
    SourceServer,
    SourceServer6,
    _Handler,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights.throttle import Throttle
from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights.transport import (
    BodyReader,
    PartialFile,
    Source,
    Watchdog,
    bounded_body,
    fsync_dir,
    kernel_timeout,
    make_dirs_under,
    resolve_under,
    usable_cores,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.jsondoc import parse_json
from ansible_collections.seatwright.fleet.plugins.module_utils.weights.pieces import (
    ORIGIN,
    PIECE_FIELDS,
    choose,
    encode_bitmap,
    parse_have,
    piece_count,
    piece_hash_choice,
    piece_hashes_offered,
    piece_order,
    piece_span,
    walk_order,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.weights.staging import (
    fetch_units,
    parse_content_length,
    partial_name,
    splice_pieces,
    write_turns,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.weights.staging_auth import (
    CHUNK_BYTES,
    SIGNATURE_HEADER,
    authorization,
    listing_signature,
    listing_signed,
    new_nonce,
)

# prctl option: the signal a process gets when its parent ends (linux/prctl.h).
_PR_SET_PDEATHSIG = 1
# The most bytes a /have answer may hold before its signature is checked (bitmaps of ~2M pieces).
MAX_HAVE_BYTES = 4 * 1024 * 1024
# Seconds between two looks at the peers' holdings, and between two looks at the choice when waiting.
POLL_S = 0.2
WAIT_S = 0.05
# Seconds a peer that dropped a request is left aside before it is asked again.
PEER_REST_S = 2.0
# Bytes a stream receives, hashes and writes at a time: every chunk costs a few hand-offs of the
# interpreter lock, and at 16 streams those, not the cores, bound a smaller chunk (device machine).
PIECE_CHUNK_BYTES = CHUNK_BYTES
# splice(2) moves a piece from the socket into the file through a pipe of this many bytes (Linux's
# pipe-max-size for unprivileged processes), and each pipeful is hashed while its pages are still in cache.
SPLICE_PIPE_BYTES = 1024 * 1024
# Whether buffered files take pieces by splice: None lets the node decide (weights/staging.py
# splice_pieces: only nodes of few cores), True or False forces it (the bench times both side by
# side). Whether a spliced pipeful is hashed on the thread that spliced it, from the cache its copy
# just filled, rather than on the hash lane (5 % less CPU per byte in the pull on the two-core host:
# bench/results/staging-ram/host-2026-12-05).
SPLICE = None
HASH_IN_LINE = True
# Whether a stream starts fetching once its own worker is forked, while the next ones are forked,
# rather than every stream waiting for the last fork (False: the order before, which the bench
# times beside it). Forking 16 workers one after another took 0.23-0.35 s on the loaded two-core host.
STREAMS_AT_ONCE = True
# Linux fcntl and mmap values Python names only from 3.10 on (linux/fcntl.h, asm-generic/mman-common.h).
F_SETPIPE_SZ = getattr(fcntl, "F_SETPIPE_SZ", 1031)
F_GETPIPE_SZ = getattr(fcntl, "F_GETPIPE_SZ", 1032)
MAP_POPULATE = getattr(mmap, "MAP_POPULATE", 0x8000)
# Buffered writes into one file take turns on its inode lock in the kernel, and a writer waiting
# there spins on a core while the holder copies: on the 16-core device two writers in one tmpfs file
# wrote no faster than one at twice the CPU, 8 files at 16 writers at twice that of 8 (bench/staging/
# file_writers.py). A node's streams (a process each) take a lock of this file's first, which sleeps.
# None lets the run decide (weights/staging.py write_turns: only where its streams outnumber its
# files); True or False forces it (the bench times both). The lock covers one byte past any file's end.
WRITE_TURNS = None
WRITE_TURN_OFFSET = 1 << 62
# Whether a stream is handed its next piece as soon as the current one's bytes are all in, so the
# request goes out while the last chunks are still hashed and written. At the derived 6 streams on the
# 16-core device it ran 5-8 % faster in four calls; where the streams keep every core busy it was level
# (bench/results/staging-ram/README.md). False: one piece at a time, each settled before the next is
# asked for, the order before, which the bench times beside it.
LOOKAHEAD = True
# Slowest rate a peer may send a piece at before the piece is taken elsewhere (bytes/s).
PEER_MIN_RATE = 1e6
# Seconds past the limits of the two pieces a worker may hold that its stream waits for a word from it
# before it counts the worker stuck, ends it and hands its pieces to the other streams.
WORKER_GRACE_S = 30
# Dropped or too slow pieces after which a peer is asked no more in this run.
PEER_MAX_INTERRUPTIONS = 3
# Peers asked for their holdings, or told this node is done, at once.
PEER_POLL_THREADS = 16


class _PeerHandler(_Handler):
    def do_GET(self):  # noqa: N802 (the name http.server dispatches to)
        checked = self._authenticated()
        if checked is None:
            self._reply(403, {"error": "request not authenticated for this run"})
            return
        client, nonce = checked
        with self.server.activity():
            if self.path == "/have":
                body = self.server.have_bytes()
                signature = listing_signature(self.server.secret, nonce, body, self.server.name)
                self._reply(200, body, headers={SIGNATURE_HEADER: signature})
            elif self.path.startswith("/file/"):
                self._send_file(unquote(self.path[len("/file/") :]), client)
            else:
                # A peer never hands out a listing: destinations take it from the origin alone.
                self._reply(404, {"error": "no such resource on a peer"})


class PeerServer(SourceServer):
    """A destination's server for the pieces it verified; it answers peers of the same run only."""

    def __init__(self, address, secret, listing, peers, upload_limit_bytes_s, linger_s):
        self.piece_bytes = listing["piece_bytes"]
        SourceServer.__init__(
            self, address, secret, listing, {}, max(1, peers), upload_limit_bytes_s, handler=_PeerHandler
        )
        self.units = fetch_units(listing)
        self.sizes = {target: unit["size"] for target, unit in self.units.items()}
        self.paths = {}
        self.held = {target: set() for target in self.units}
        self.fetching = {target: set() for target in self.units}
        self.uploads = 0
        self.uploaded = 0
        self.own_done = threading.Event()
        self.linger_s = linger_s

    def path_for(self, target):
        with self._lock:
            return self.paths.get(target) if self.held.get(target) else None

    def partial_ok(self, _target):
        return True

    def may_send(self, target, span, header):
        """Only a whole piece this node verified, asked for by its exact range."""
        if not header:
            return False
        start, end = span
        index = start // self.piece_bytes
        if start % self.piece_bytes or piece_span(self.sizes[target], self.piece_bytes, index) != (start, end):
            return False
        with self._lock:
            return index in self.held[target]

    def send_span(self, connection, handle, start, end):
        with self._lock:
            self.uploads += 1
        try:
            sent = SourceServer.send_span(self, connection, handle, start, end)
        finally:
            with self._lock:
                self.uploads -= 1
        with self._lock:
            self.uploaded += sent
        return sent

    def located(self, target, path):
        with self._lock:
            self.paths[target] = path

    def fetching_piece(self, piece, on):
        with self._lock:
            (self.fetching[piece[0]].add if on else self.fetching[piece[0]].discard)(piece[1])

    def verified(self, piece):
        with self._lock:
            self.held[piece[0]].add(piece[1])
            self.fetching[piece[0]].discard(piece[1])

    def hold_all(self, target, path):
        with self._lock:
            self.paths[target] = path
            self.held[target] = set(range(piece_count(self.sizes[target], self.piece_bytes)))

    def have_bytes(self):
        with self._lock:
            doc = {
                "held": {
                    target: encode_bitmap(indices, piece_count(self.sizes[target], self.piece_bytes))
                    for target, indices in self.held.items()
                    if indices
                },
                "fetching": {target: sorted(indices) for target, indices in self.fetching.items() if indices},
                "uploading": self.uploads,
                "done": self.own_done.is_set(),
            }
        return json.dumps(doc, sort_keys=True).encode("utf-8")

    def finished_reason(self, idle_timeout_s, deadline):
        """Serving ends once this node is done and every peer said so too, or nobody asked for linger_s."""
        if not self.own_done.is_set():
            return "reached its lifetime" if time.monotonic() > deadline else None
        return SourceServer.finished_reason(self, self.linger_s, deadline)


class PeerServer6(PeerServer):
    address_family = SourceServer6.address_family


class PeerSource(Source):
    """A peer seen from this destination: its signed holdings and its pieces."""

    def have(self, counts):
        """The peer's parsed holdings, or None when it does not answer as a peer of this run."""
        nonce = new_nonce()
        watchdog = None
        try:
            conn = self.connection()
            header = authorization(self.secret, "GET", "/have", self.client, nonce=nonce, server=self.name)[0]
            conn.request("GET", "/have", headers={"Authorization": header})
            # The whole exchange within io_timeout_s, however slowly the answer trickles in.
            with Watchdog(conn.sock, self.io_timeout_s) as watchdog:
                response = conn.getresponse()
                body = bounded_body(response, MAX_HAVE_BYTES)
        except (OSError, http.client.HTTPException, AttributeError):
            self.connection(fresh=True)
            return None
        if body is None or watchdog.fired:
            self.connection(fresh=True)
            return None
        signature = response.getheader(SIGNATURE_HEADER)
        if response.status != 200 or not listing_signed(self.secret, nonce, body, signature, self.name):
            return None
        try:
            view = parse_have(parse_json(body), counts)
        except ValueError:
            return None
        # A signed, well-formed answer: this is a peer of the run, and it may hear that this node is done.
        self.proven = self.proven or view is not None
        return view


class PieceFile:
    """A unit's file in progress: pieces land at their offsets, from any stream, in any order."""

    def __init__(self, path, direct, resume, turns=False):
        self.handle = PartialFile(path, False, resume)
        self.fd = self.handle.fd
        self.turns = turns
        self.direct_fd = None
        if direct:
            try:
                fd = os.open(path, os.O_WRONLY | os.O_NOFOLLOW | os.O_DIRECT)
                if os.fstat(fd).st_ino == os.fstat(self.fd).st_ino:
                    self.direct_fd = fd
                else:
                    os.close(fd)
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise

    def size(self):
        return os.fstat(self.fd).st_size

    @contextlib.contextmanager
    def turn(self):
        """This process's turn at buffered writes into the file, where the run takes turns (WRITE_TURNS):
        other streams wait sleeping.

        A POSIX record lock, so held per process: each stream's worker is one, and the kernel drops
        it if the worker dies. A filesystem that keeps no locks (NFS mounted nolock) leaves the
        writes to the kernel's own lock, as before turns.
        """
        if self.turns:
            try:
                fcntl.lockf(self.fd, fcntl.LOCK_EX, 1, WRITE_TURN_OFFSET)
            except OSError as exc:
                if exc.errno not in (errno.ENOLCK, errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                self.turns = False
        if not self.turns:
            yield
            return
        try:
            yield
        finally:
            fcntl.lockf(self.fd, fcntl.LOCK_UN, 1, WRITE_TURN_OFFSET)

    def write_at(self, view, offset):
        """Direct where offset and length are block-aligned (every chunk but a file's tail), buffered otherwise.

        Only buffered writes take turns: their copy into the page cache is what a waiting writer spins through.
        """
        fd = self.direct_fd if self.direct_fd is not None and not (len(view) % 4096 or offset % 4096) else self.fd
        while view:
            try:
                with self.turn() if fd == self.fd else contextlib.nullcontext():
                    written = os.pwrite(fd, view, offset)
            except OSError as exc:
                if fd == self.fd or exc.errno != errno.EINVAL:
                    raise
                fd = self.fd
                continue
            view, offset = view[written:], offset + written

    def read_at(self, view, offset):
        return os.preadv(self.fd, [view], offset)

    def close(self, sync, mode=None):
        if self.direct_fd is not None:
            os.close(self.direct_fd)
            self.direct_fd = None
        self.handle.close(sync, mode)


def _hash_range(digest, fd, start, end):
    """Hash bytes [start, end) of the file from its pages in memory: spliced bytes never pass through a buffer."""
    base = start - start % mmap.ALLOCATIONGRANULARITY
    pages = mmap.mmap(fd, end - base, flags=mmap.MAP_SHARED | MAP_POPULATE, prot=mmap.PROT_READ, offset=base)
    try:
        with memoryview(pages) as whole, whole[start - base :] as span:
            digest.update(span)
    finally:
        pages.close()


def _splice_pipe():
    """(read end, write end, capacity) of a pipe for splice(2), as large as this process may make it.

    None where this Python has no os.splice (before 3.10).
    """
    if not hasattr(os, "splice"):
        return None
    read_end, write_end = os.pipe()
    try:
        fcntl.fcntl(write_end, F_SETPIPE_SZ, SPLICE_PIPE_BYTES)
    except OSError:
        pass  # a system with a smaller pipe-max-size: the pipe keeps the size it has
    return read_end, write_end, fcntl.fcntl(write_end, F_GETPIPE_SZ)


class _Landing:
    """A piece whose bytes are all in a worker: its answer waits for the lanes' futures that hold its chunks."""

    def __init__(self, count, digest, futures, expected):
        self.count, self.digest, self.futures, self.expected = count, digest, futures, expected

    def ready(self):
        return all(future.done() for future in self.futures)


class _Pipeline:
    """A stream's buffers and its two lanes: a chunk is hashed and written while the next one arrives.

    Receiving, hashing and writing each take about as long as the others, so in line they would cut
    a stream's rate to a third; on one thread and its write lane, the hash alone held the device
    machine's streams to 0.77-0.86 of the plain pull (bench/results/staging-ram/README.md). The
    hash lane takes a piece's chunks in order, so one digest object serves the whole piece.

    Where the file takes buffered writes, a piece is spliced from the socket into the file
    instead (splice(2): the kernel moves the socket's pages into the file, one copy where receiving
    into a buffer and writing it makes two), and each pipeful is hashed from the file's own pages
    (HASH_IN_LINE: on the splicing thread, while the copy has them in cache).
    """

    DEPTH = 3

    def __init__(self):
        self.buffers = [memoryview(mmap.mmap(-1, PIECE_CHUNK_BYTES)) for _ in range(self.DEPTH)]
        self.busy = [None] * self.DEPTH
        self.hashing = []
        # Every future handed to the lanes since the last take(): one piece's, for its own answer.
        self.landed = []
        self.turn = 0
        self.hash_lane = ThreadPoolExecutor(max_workers=1)
        self.write_lane = ThreadPoolExecutor(max_workers=1)
        spliced = splice_pieces(usable_cores(), direct=False) if SPLICE is None else SPLICE
        self.pipe = _splice_pipe() if spliced else None

    def buffer(self):
        """The buffer to fill next, once its last chunk is hashed and written.

        A failure there is the answer of the piece that chunk was of (settle_piece), not of this one.
        """
        self.current = self.turn
        self.turn = (self.turn + 1) % self.DEPTH
        futures, self.busy[self.current] = self.busy[self.current], None
        concurrent.futures.wait(futures or ())
        return self.buffers[self.current]

    def submit(self, digest, handle, view, offset):
        self.busy[self.current] = (
            self.hash_lane.submit(digest.update, view),
            self.write_lane.submit(handle.write_at, view, offset),
        )
        self.landed.extend(self.busy[self.current])

    def take(self):
        """The futures handed over since the last take: what one piece waits for before its answer."""
        landed, self.landed = self.landed, []
        return landed

    def hash_written(self, digest, handle, start, end):
        """Hash bytes already in the file, after every span handed over before them."""
        if HASH_IN_LINE:
            _hash_range(digest, handle.fd, start, end)
        else:
            self.hashing.append(self.hash_lane.submit(_hash_range, digest, handle.fd, start, end))
            self.landed.append(self.hashing[-1])

    def splice(self, sock, handle, start, end, on_moved):
        """Move the socket's next bytes into the file from `start` until `end`; the offset reached.

        on_moved(upto) after each pipeful. Short of `end` only where the filesystem refuses splice:
        what the pipe held is written from a buffer, this stream splices no more, and the caller
        receives the rest. Interrupted when the socket ends first or stays silent for its timeout.
        """
        read_end, write_end, capacity = self.pipe
        offset = start
        while offset < end:
            try:
                count = os.splice(sock.fileno(), write_end, min(capacity, end - offset))
            except BlockingIOError:
                raise Interrupted("sent nothing for the socket's timeout with %d bytes to go" % (end - offset))
            if not count:
                raise Interrupted("closed the connection with %d bytes to go" % (end - offset))
            moved = 0
            while moved < count:
                try:
                    with handle.turn():
                        moved += os.splice(read_end, handle.fd, count - moved, offset_dst=offset + moved)
                except OSError as exc:
                    if exc.errno != errno.EINVAL:
                        raise
                    while moved < count:
                        held = os.read(read_end, count - moved)
                        handle.write_at(memoryview(held), offset + moved)
                        moved += len(held)
                    self.unsplice()
                    on_moved(offset + count)
                    return offset + count
            offset += count
            on_moved(offset)
        return offset

    @staticmethod
    def _results(futures):
        """Wait for every one of `futures`, then raise the first failure among them."""
        failure = None
        for future in futures:
            try:
                future.result()
            except OSError as exc:
                failure = failure or StagingError("write failed here: %s" % exc)
        if failure is not None:
            raise failure

    def wait(self):
        """Every chunk handed over so far hashed and written; the first failure among them, once all ended."""
        pending = [future for futures in self.busy if futures for future in futures] + self.hashing
        self.busy, self.hashing, self.landed = [None] * self.DEPTH, [], []
        self._results(pending)

    def settle(self):
        """Wait out the last chunks after a failed piece, so no late write lands over a later fetch of it.

        A pipe that may still hold a failed piece's bytes is replaced: they must never land in the next one.
        """
        try:
            self.wait()
        except StagingError:
            pass
        if self.pipe is not None:
            self.unsplice()
            self.pipe = _splice_pipe()

    def unsplice(self):
        if self.pipe is not None:
            os.close(self.pipe[0])
            os.close(self.pipe[1])
            self.pipe = None

    def close(self):
        self.settle()
        self.hash_lane.shutdown(wait=True)
        self.write_lane.shutdown(wait=True)
        self.unsplice()


# What a fetch worker answers, and the exception each answer is raised as in the stream.
_ANSWERS = {"bad": BadPiece, "interrupted": Interrupted, "error": StagingError}
# A worker's word that a piece's bytes are all in (its answer follows once they are hashed and
# written), and the stream's reply when it has no next piece to hand over yet.
RECEIVED = ("in", None)
NONE_NOW = "none"


class _FetchWorker:
    """A stream's data plane in a process of its own: it receives, hashes and writes the pieces it is handed.

    The stream's thread keeps the choosing and the bookkeeping and waits on a pipe while the piece
    moves. Threads of one process take turns at the interpreter lock at every receive, hash and
    write; at 8 streams on 16 cores those turns, not the cores, set the pace, so each stream's three
    lanes live in a process that holds no other stream. Forked after the files are open: a worker
    writes through the same open files, at the piece's offsets.

    The wire, in order: the stream hands a piece; the worker says RECEIVED once its bytes are in,
    and the stream hands the next piece or NONE_NOW; the worker answers for each piece in the order
    it was handed, ("ok", bytes) or an _ANSWERS kind and why, a failed piece with no RECEIVED before.
    """

    def __init__(self, swarm, streams):
        context = multiprocessing.get_context("fork")
        self.conn, theirs = context.Pipe()
        rate = swarm.throttle.rate / streams if swarm.throttle.rate else 0
        self.process = context.Process(target=_worker_main, args=(theirs, swarm, rate, os.getpid()), daemon=True)
        self.process.start()
        theirs.close()
        self.stopped = False

    def hand(self, job):
        """Give the worker (sender, piece) to fetch, or None: nothing more for now."""
        try:
            self.conn.send(NONE_NOW if job is None else job)
        except OSError as exc:
            raise WorkerLost("the fetch worker of this stream stopped (%s)" % exc)

    def hear(self, limit_s):
        """The worker's next word: RECEIVED, or the answer for the oldest piece it holds.

        WorkerLost where it is gone, or silent for `limit_s`: then it is ended first, so that no late
        write of a stuck worker lands over the same piece fetched again by another stream.
        """
        try:
            if not self.conn.poll(limit_s):
                self.process.terminate()
                self.process.join(5)
                raise WorkerLost("the fetch worker of this stream said nothing for %ds and was ended" % limit_s)
            return self.conn.recv()
        except (EOFError, OSError) as exc:
            raise WorkerLost("the fetch worker of this stream stopped (%s)" % (exc or "exited"))

    def stop(self):
        """Tell the worker to end after its piece (once); close() then waits for it."""
        if self.stopped:
            return
        self.stopped = True
        try:
            self.conn.send(None)
        except OSError:
            pass

    def close(self):
        self.stop()
        self.process.join(10)
        if self.process.is_alive():
            self.process.terminate()
            self.process.join(5)
        self.conn.close()


def _answer(work, *given):
    """("ok", what work(*given) returned), or what it raised as a worker's answer."""
    try:
        return ("ok", work(*given))
    except BadPiece as exc:
        return ("bad", str(exc))
    except Interrupted as exc:
        return ("interrupted", str(exc))
    except StagingError as exc:
        return ("error", str(exc))
    except Exception as exc:  # noqa: BLE001 (the stream reports it; a worker never dies silently)
        return ("error", "fetch worker: %s: %s" % (type(exc).__name__, exc))


def _close_workers(workers):
    """End every worker: all are told first, so they wind down together and the run waits for the slowest only."""
    for worker in workers:
        worker.stop()
    for worker in workers:
        worker.close()


def _die_with(parent_pid):
    """End this worker when the staging process ends, however it ends (SIGKILL included).

    A worker left behind would write on into a file a later run owns; the kernel signals it when
    its parent goes (Linux prctl PR_SET_PDEATHSIG), and a parent gone before that was set ends it here.
    """
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if os.getppid() != parent_pid:
        os._exit(0)


def _keep_only(keep):
    """Close every inherited descriptor but `keep`: the run's lock and the peer server's socket stay the parent's."""
    try:
        inherited = [int(name) for name in os.listdir("/proc/self/fd")]
    except OSError:
        return
    for fd in inherited:
        if fd > 2 and fd not in keep:
            try:
                os.close(fd)
            except OSError:
                pass


def _worker_main(conn, swarm, rate, parent_pid):
    """A fetch worker's loop: one (sender, piece) at a time until told to stop or the stream is gone."""
    # The parent's garbage is never collected here: a socket of its left in a reference cycle (a
    # Watchdog's) would close, when collected, a descriptor number _keep_only freed and this worker
    # reused for its own connection or pipe (EBADF on the fleet lab, issue 49).
    if hasattr(gc, "freeze"):
        gc.freeze()
    _die_with(parent_pid)
    keep = {conn.fileno()}
    for handle in swarm.files.values():
        keep.update(fd for fd in (handle.fd, handle.direct_fd) if fd is not None)
    _keep_only(keep)
    origin = swarm.origin
    sources = {ORIGIN: Source(origin.url, origin.secret, origin.client, origin.io_timeout_s)}
    for name, peer in swarm.peers.items():
        sources[name] = PeerSource(peer.url, peer.secret, peer.client, peer.io_timeout_s)
    pipeline, throttle = _Pipeline(), Throttle(rate)
    # A piece whose bytes are in and whose answer waits for its last chunks' hash and write.
    held = []

    def answer_held(wait):
        if held and (wait or held[0].ready()):
            conn.send(_answer(swarm.settle_piece, held.pop()))

    def answer_held_if_ready():
        answer_held(False)

    try:
        while True:
            try:
                job = conn.recv()
            except (EOFError, OSError):
                return
            if job is None or job == NONE_NOW:
                answer_held(True)
                if job is None:
                    return
                continue
            sender, piece = job
            answer, landing = _answer(
                swarm.receive_piece, sources[sender], sender, piece, pipeline, throttle, answer_held_if_ready
            )
            # Answers go in the order the pieces were handed: the one before first.
            answer_held(True)
            if answer == "ok":
                held.append(landing)
                conn.send(RECEIVED)
            else:
                conn.send((answer, landing))
    finally:
        pipeline.close()


class Swarm:
    """One destination's pieces: who holds what, what is in flight, and the streams that fetch them.

    options: token, client, io_timeout_s, retries, direct_io, streams, peers ([{name, url}], this
    node's own entry ignored), rank and ranks (this destination's place among all of them).
    """

    def __init__(self, origin, listing, units, pending, root, layout, options, progress, throttle):
        self.origin, self.listing = origin, listing
        self.piece_bytes = listing["piece_bytes"]
        self.units, self.pending, self.root, self.layout = units, pending, root, layout
        self.options, self.progress, self.throttle = options, progress, throttle
        self.counts = {target: piece_count(unit["size"], self.piece_bytes) for target, unit in units.items()}
        self.piece_hash = piece_hash_choice(units, piece_hashes_here(), options.get("piece_hash"))
        if self.piece_hash is None:
            raise StagingError(
                "piece_hash %s cannot be used here: this node computes %s and the listing offers %s"
                % (
                    options.get("piece_hash"),
                    ", ".join(piece_hashes_here()),
                    ", ".join(piece_hashes_offered(units)) or "none",
                )
            )
        self.expected = {target: unit[PIECE_FIELDS[self.piece_hash]] for target, unit in units.items()}
        self.peers = {
            peer["name"]: PeerSource(peer["url"], options["token"], options["client"], options["io_timeout_s"])
            for peer in options.get("peers") or []
            if peer["name"] != options["client"]
        }
        self.lock = threading.Lock()
        # Told whenever a piece in flight here settles or comes back: a stream with nothing to take waits on it.
        self.changed = threading.Condition(self.lock)
        self.needed, self.local, self.left, self.files = set(), {}, {}, {}
        self.views = {name: None for name in self.peers}
        self.rested, self.banned, self.waiting_since = {}, {}, {}
        self.failures, self.records, self.lost = {}, [], []
        self.started, self.received, self.reused = {}, {}, {}
        self.from_peers = {}
        self.interruptions, self.peer_interruptions = {}, {}
        self.server = None
        self.polling = threading.Event()
        self.order = walk_order(piece_order(self.counts), options.get("rank") or 0, options.get("ranks") or 1)

    # serving ----------------------------------------------------------------------------------

    def serve(self, address, port, linger_s, upload_limit_bytes_s):
        """Start this node's peer server; every unit already in place here is offered whole."""
        server_class = PeerServer6 if ":" in address else PeerServer
        try:
            self.server = server_class(
                (address, port), self.options["token"], self.listing, len(self.peers), upload_limit_bytes_s, linger_s
            )
        except OSError as exc:
            raise StagingError(
                "cannot serve pieces to peers on %s:%d (%s): another run's staging may still serve there, or the "
                "address is not this node's fabric address. Free the port or set weights_peer_port, and run again."
                % (address, port, exc)
            )
        for target in self.units:
            if target not in self.pending:
                self.server.hold_all(target, resolve_under(self.root, target))
        worker = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": POLL_S})
        worker.daemon = True
        worker.start()

    def finish(self, lifetime_s):
        """Tell the peers this node is done, then serve until they are all done or none asks for linger_s.

        Only peers whose signed /have this node has seen hear of it (PeerSource.proven), all at once,
        each exchange bounded in bytes and time: a squatter at a peer's port gets nothing and holds
        nothing up.
        """
        told = [peer for name, peer in self.peers.items() if peer.proven and name not in self.banned]
        if told:
            with ThreadPoolExecutor(max_workers=min(len(told), PEER_POLL_THREADS)) as pool:
                list(pool.map(lambda peer: peer.done({"ok": not self.failures}), told))
        if self.server is None:
            return {}
        self.server.own_done.set()
        started = time.monotonic()
        try:
            while not self.server.finished_reason(None, started + lifetime_s):
                time.sleep(POLL_S)
            reason = self.server.finished_reason(None, started + lifetime_s)
        finally:
            self.server.shutdown()
            self.server.server_close()
        return {
            "stopped": reason,
            "lingered_s": round(time.monotonic() - started, 3),
            "bytes_to_peers": dict(self.server.bytes_by_client),
            "refused_requests": self.server.refused_requests,
        }

    # pulling ----------------------------------------------------------------------------------

    def run(self):
        """Fetch every pending unit's pieces; (records, {target: error})."""
        self._open_units()
        poller = threading.Thread(target=self._poll_peers)
        poller.daemon = True
        try:
            streams = max(1, self.options["streams"])
            workers, futures = [], []
            # Peers are asked for their holdings from the start: streams fetch while later workers are forked.
            if self.peers:
                poller.start()
            try:
                with ThreadPoolExecutor(max_workers=streams) as pool:
                    # Each stream starts as soon as its worker is forked (STREAMS_AT_ONCE), not after the last.
                    for _ in range(streams):
                        try:
                            workers.append(_FetchWorker(self, streams))
                        except OSError:
                            if not workers:
                                raise
                            break  # the streams already started carry the run
                        if STREAMS_AT_ONCE:
                            futures.append(pool.submit(self._stream_on, workers[-1]))
                    if not STREAMS_AT_ONCE:
                        futures = [pool.submit(self._stream_on, worker) for worker in workers]
                    for future in futures:
                        future.result()
            finally:
                _close_workers(workers)
        finally:
            self.polling.set()
            for target, handle in list(self.files.items()):
                empty = not handle.size()
                handle.close(sync=False)
                self.files.pop(target, None)
                if empty:
                    # Not one piece landed: nothing to resume, so no empty partial file is left behind.
                    try:
                        os.unlink(resolve_under(self.root, partial_name(target, self.layout, self.units[target])))
                    except OSError:
                        pass
        for target in self.pending:
            if target not in self.failures and not any(r["target"] == target for r in self.records):
                self.failures[target] = "not every piece arrived" + (": %s" % self.lost[0] if self.lost else "")
        return self.records, self.failures

    def _open_units(self):
        shared = sum(1 for target in self.pending if self.counts[target] > 1)
        turns = write_turns(max(1, self.options["streams"]), shared) if WRITE_TURNS is None else WRITE_TURNS
        for target in sorted(self.pending):
            unit = self.units[target]
            make_dirs_under(self.root, os.path.dirname(target))
            partial = resolve_under(self.root, partial_name(target, self.layout, unit))
            resume = self.pending[target]["action"] == "resume"
            handle = PieceFile(partial, self.options["direct_io"], resume, turns)
            self.files[target] = handle
            self.started[target] = time.monotonic()
            if self.server is not None:
                self.server.located(target, partial)
            kept = self._kept_pieces(unit, handle) if resume else set()
            self.reused[target] = sum(
                piece_span(unit["size"], self.piece_bytes, i)[1] - piece_span(unit["size"], self.piece_bytes, i)[0]
                for i in kept
            )
            self.left[target] = self.counts[target] - len(kept)
            for index in range(self.counts[target]):
                if index in kept:
                    self._verified((target, index))
                else:
                    self.needed.add((target, index))
            if not self.left[target]:
                self._complete(target)

    def _kept_pieces(self, unit, handle):
        """Pieces an interrupted run left that still hash to the listing: only they are kept."""
        size = handle.size()
        kept = set()
        buffer = memoryview(mmap.mmap(-1, CHUNK_BYTES))
        for index in range(self.counts[unit["target"]]):
            start, end = piece_span(unit["size"], self.piece_bytes, index)
            if end > size or end == start:
                continue
            digest = piece_hasher(self.piece_hash)
            offset = start
            while offset < end:
                count = handle.read_at(buffer[: min(CHUNK_BYTES, end - offset)], offset)
                if not count:
                    break
                digest.update(buffer[:count])
                offset += count
            if offset == end and digest.hexdigest() == self.expected[unit["target"]][index]:
                kept.add(index)
        return kept

    def _poll_peers(self):
        """Ask every peer for its holdings, all at once: a slow or silent one delays none of the others."""
        with ThreadPoolExecutor(max_workers=min(max(1, len(self.peers)), PEER_POLL_THREADS)) as pool:
            asking = {}
            while not self.polling.is_set():
                for name, peer in self.peers.items():
                    if name not in self.banned and name not in asking:
                        asking[name] = pool.submit(self._poll_one, name, peer)
                for name in [name for name, future in asking.items() if future.done()]:
                    asking.pop(name)
                self.polling.wait(POLL_S)

    def _poll_one(self, name, peer):
        view = peer.have(self.counts)
        if view is not None:
            view["at"] = time.monotonic()
            with self.lock:
                if self.rested.get(name, 0) <= time.monotonic():
                    self.views[name] = view

    def _stream_on(self, worker):
        """Hand pieces to one worker until none is left; looking ahead, the next while the last settles."""
        handed = collections.deque()
        # A worker holds at most two pieces, each bounded by its own watchdog.
        limit_s = 2 * self._piece_limit_s(self.piece_bytes) + WORKER_GRACE_S
        try:
            while True:
                if not handed:
                    job = self._next_job(wait=True)
                    if job is None:
                        return
                    # Counted as handed first: a worker lost at the hand-over gives its piece back too.
                    handed.append(job)
                    worker.hand(job)
                heard = worker.hear(limit_s)
                if heard == RECEIVED:
                    job = self._next_job(wait=False) if LOOKAHEAD else None
                    if job is not None:
                        handed.append(job)
                    worker.hand(job)
                    continue
                sender, piece = handed.popleft()
                self._settled(piece, sender, heard)
        except WorkerLost as exc:
            with self.lock:
                for _sender, piece in handed:
                    self.local.pop(piece, None)
                    self.needed.add(piece)
                self.lost.append(str(exc))
                self.changed.notify_all()

    def _next_job(self, wait):
        """(sender, piece) to fetch next, marked in flight here; None when none is left, or none now and not `wait`.

        None is left only once no piece is in flight here either: one whose worker is lost comes back,
        and a stream still running takes it.
        """
        with self.lock:
            while True:
                decision = choose(
                    self.order, self.needed, self.local, self.views, self.banned, time.monotonic(), self.waiting_since
                )
                if decision[0] == "done" and not self.local:
                    return None
                if decision[0] not in ("done", "wait"):
                    piece = decision[-1]
                    sender = decision[1] if decision[0] == "peer" else ORIGIN
                    self.local[piece] = sender
                    self.needed.discard(piece)
                    break
                if not wait:
                    return None
                self.changed.wait(WAIT_S)
        if self.server is not None:
            self.server.fetching_piece(piece, True)
        return sender, piece

    def _settled(self, piece, sender, heard):
        """A worker's answer for one piece: its bytes counted and the file completed, or the failure recorded."""
        target, _index = piece
        answer, detail = heard
        if answer == "error":
            with self.lock:
                self.local.pop(piece, None)
                self.changed.notify_all()
                self.failures[target] = detail
                self.needed -= {(target, i) for i in range(self.counts[target])}
            return
        if answer != "ok":
            self._failed(piece, sender, _ANSWERS[answer](detail))
            return
        count = detail
        self._received(target, count)
        self.progress.add(target, count)
        with self.lock:
            self.local.pop(piece, None)
            self.changed.notify_all()
            self.left[target] -= 1
            if sender != ORIGIN:
                self.from_peers[target] = self.from_peers.get(target, 0) + count
            last = self.left[target] == 0
        self._verified(piece)
        if last:
            self._complete(target)

    def _complete(self, target):
        try:
            self._rename_into_place(target)
        except OSError as exc:
            with self.lock:
                self.failures[target] = "write failed here: %s" % exc

    def _failed(self, piece, sender, exc):
        target = piece[0]
        with self.lock:
            self.local.pop(piece, None)
            self.changed.notify_all()
            if self.server is not None:
                self.server.fetching_piece(piece, False)
            if sender != ORIGIN:
                dropped = self.peer_interruptions[sender] = self.peer_interruptions.get(sender, 0) + (
                    not isinstance(exc, BadPiece)
                )
                if isinstance(exc, BadPiece):
                    self.banned[sender] = str(exc)
                elif dropped >= PEER_MAX_INTERRUPTIONS:
                    # A peer that keeps dropping or trickling pieces is asked no more in this run.
                    self.banned[sender] = "interrupted %d times, the last: %s" % (dropped, exc)
                else:
                    # A dropped exchange: leave the peer aside until a fresh answer shows it alive.
                    self.views[sender] = None
                    self.rested[sender] = time.monotonic() + PEER_REST_S
                self.needed.add(piece)
                return
            tries = self.interruptions[target] = self.interruptions.get(target, 0) + 1
            if isinstance(exc, BadPiece) or tries > self.options["retries"]:
                self.failures[target] = (
                    "the source sent bytes of piece %d that %s: its copy of %s is corrupt or was changed. "
                    "Nothing in place here was replaced" % (piece[1], exc, self.units[target]["source_path"])
                    if isinstance(exc, BadPiece)
                    else "%s (interrupted %d times; verified pieces are kept and resume on the next run)" % (exc, tries)
                )
                self.needed -= {(target, i) for i in range(self.counts[target])}
                return
            self.needed.add(piece)
        time.sleep(min(2**tries, 10) / 10.0)

    def _piece_limit_s(self, count):
        """Seconds a piece of `count` bytes may take before its sender counts as too slow."""
        return int(self.options["io_timeout_s"] + count / PEER_MIN_RATE)

    def receive_piece(self, source, sender, piece, pipeline, throttle, between):
        """In a fetch worker: one piece's bytes all in and handed to the lanes; a _Landing for settle_piece.

        between() is called once the answer's headers are in and before each chunk: the worker
        answers there for the piece before this one as soon as its lanes are done with it.
        BadPiece / Interrupted / StagingError where the piece could not be received.
        """
        target, index = piece
        unit = self.units[target]
        start, end = piece_span(unit["size"], self.piece_bytes, index)
        handle = self.files[target]
        digest = piece_hasher(self.piece_hash)
        if end > start:
            path = "/file/" + quote(target, safe="/")
            headers = source.headers("GET", path)
            headers["Range"] = "bytes=%d-%d" % (start, end - 1)
            limit = self._piece_limit_s(end - start)
            watchdog = None
            try:
                conn = source.connection()
                conn.request("GET", path, headers=headers)
                watchdog = Watchdog(conn.sock, limit)
                with watchdog:
                    response = conn.getresponse()
                    self._check_answer(response, unit, start, end)
                    between()
                    try:
                        offset = self._spliced(conn.sock, response, handle, (start, end), digest, pipeline, throttle)
                    except Interrupted as exc:
                        raise Interrupted("%s, %s piece %d: %s" % (sender, target, index, exc))
                    with BodyReader(conn.sock, response) as body:
                        while offset < end:
                            buffer = pipeline.buffer()
                            between()
                            want = min(len(buffer), end - offset)
                            got = body.readinto(buffer[:want])
                            if got < want:
                                raise Interrupted(
                                    "%s closed the connection with %d bytes of %s piece %d to go"
                                    % (sender, end - offset - got, target, index)
                                )
                            pipeline.submit(digest, handle, buffer[:got], offset)
                            throttle.consume(got)
                            offset += got
            except (OSError, http.client.HTTPException, BadPiece, Interrupted, StagingError) as exc:
                pipeline.settle()
                source.connection(fresh=True)
                if isinstance(exc, (BadPiece, StagingError)):
                    raise
                # The watchdog's shutdown shows as a closed or failed socket: say what really happened.
                if watchdog is not None and watchdog.fired:
                    raise Interrupted("%s: sent piece %d of %s too slowly (%ds)" % (sender, index, target, limit))
                if isinstance(exc, Interrupted):
                    raise
                raise Interrupted("%s: %s" % (sender, exc))
        return _Landing(end - start, digest, pipeline.take(), self.expected[target][index])

    def settle_piece(self, landing):
        """A received piece once its chunks are hashed and written: its byte count; BadPiece or StagingError.

        Only then is the piece in the file in full, and hashed, so no one may read it from here before.
        """
        _Pipeline._results(landing.futures)
        if landing.digest.hexdigest() != landing.expected:
            raise BadPiece(
                "hash to %s %s, expected %s" % (self.piece_hash, landing.digest.hexdigest(), landing.expected)
            )
        return landing.count

    @staticmethod
    def _spliced(sock, response, handle, span, digest, pipeline, throttle):
        """Where the piece's body stands after splicing it into the file and handing it to the hash lane.

        The span's end once it is all in; its start where splice cannot be used; between the two
        where the filesystem refused splice part-way, and the caller receives the rest.

        Files opened for direct I/O take the buffered path: their bytes bypass the pages a splice
        fills, so nothing could be hashed from them. The few body bytes http.client read past the
        headers are written first; the kernel moves the rest.
        """
        start, end = span
        if pipeline.pipe is None or handle.direct_fd is not None:
            return start
        early = response.fp.read1(end - start)
        if not early:
            raise Interrupted("closed the connection with %d bytes to go" % (end - start))
        handle.write_at(memoryview(early), start)
        marks = {"hashed": start, "counted": start}
        grain = pipeline.pipe[2]

        def moved(upto):
            throttle.consume(upto - marks["counted"])
            marks["counted"] = upto
            # A pipeful at a time: hashed right behind its splice, from pages the copy left in cache.
            while upto - marks["hashed"] >= grain or (upto == end and marks["hashed"] < end):
                stop = min(upto, marks["hashed"] + grain)
                pipeline.hash_written(digest, handle, marks["hashed"], stop)
                marks["hashed"] = stop

        moved(start + len(early))
        # Blocking, so each splice waits in the kernel.
        timeout = kernel_timeout(sock)
        try:
            reached = pipeline.splice(sock, handle, start + len(early), end, moved)
        finally:
            sock.settimeout(timeout)
        if marks["hashed"] < reached:
            pipeline.hash_written(digest, handle, marks["hashed"], reached)
        # The body went around http.client: it must count those bytes read, or it would wait for them.
        response.length = end - reached
        if reached == end:
            response.read()
        return reached

    @staticmethod
    def _check_answer(response, unit, start, end):
        if response.status != 206:
            detail = response.read(300).decode("utf-8", "replace")
            raise BadPiece("answered HTTP %d for a piece of %s: %s" % (response.status, unit["target"], detail))
        length = parse_content_length(response.getheader("Content-Length"))
        wanted = "bytes %d-%d/%d" % (start, end - 1, unit["size"])
        if length != end - start or response.chunked or response.getheader("Content-Range") != wanted:
            raise BadPiece(
                "answered a piece of %s with %r bytes and range %r, asked %s"
                % (unit["target"], response.getheader("Content-Length"), response.getheader("Content-Range"), wanted)
            )

    def _received(self, target, count):
        with self.lock:
            self.received[target] = self.received.get(target, 0) + count

    def _verified(self, piece):
        if self.server is not None:
            self.server.verified(piece)

    def _rename_into_place(self, target):
        """Every piece verified: the file is the source's, so it takes its final name."""
        unit = self.units[target]
        handle = self.files.pop(target)
        partial = resolve_under(self.root, partial_name(target, self.layout, unit))
        final = resolve_under(self.root, target)
        direct = handle.direct_fd is not None
        handle.close(sync=True, mode=unit["mode"])
        os.replace(partial, final)
        fsync_dir(os.path.dirname(final))
        if self.server is not None:
            self.server.located(target, final)
        seconds = time.monotonic() - self.started[target]
        plan = self.pending[target]
        with self.lock:
            moved = self.received.get(target, 0)
            self.records.append(
                {
                    "target": target,
                    "action": plan["action"],
                    "reason": plan["reason"],
                    "bytes": moved,
                    "bytes_reused": self.reused.get(target, 0),
                    "bytes_from_peers": self.from_peers.get(target, 0),
                    "seconds": round(seconds, 3),
                    "mb_per_s": round(moved / seconds / 1e6, 1) if seconds > 0 else None,
                    "sha256": unit["sha256"],
                    "piece_hash": self.piece_hash,
                    "interruptions": self.interruptions.get(target, 0),
                    "direct_io": direct,
                }
            )
