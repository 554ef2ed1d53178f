"""The wire a staging destination speaks, shared by the whole-file pull and the piece swarm.

One home for what both sides of a destination use to talk to a server (the origin or a peer) and
to write what it sends: the authenticated connection and its exchanges, each bounded in bytes and
in time however the other side sends them; the file a transfer writes; the folders it may write
under. staging_pull.py (whole files, the run) and swarm.py (pieces, peers) both import this
module, and neither imports the other back.
"""

import errno
import fcntl
import http.client
import json
import os
import socket
import stat
import struct
import threading
import time

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import StagingError
from ansible_collections.seatwright.fleet.plugins.module_utils.jsondoc import parse_json
from ansible_collections.seatwright.fleet.plugins.module_utils.weights.staging import parse_source_url
from ansible_collections.seatwright.fleet.plugins.module_utils.weights.staging_auth import (
    KEEPALIVE_IDLE_S,
    MAX_LISTING_BYTES,
    SIGNATURE_HEADER,
    authorization,
    listing_signed,
    new_nonce,
    server_name,
)

# Direct I/O's block: offsets and lengths of direct writes are multiples of it.
ALIGN = 4096
# The most bytes read of an answer that carries no data (a report's acknowledgement, an error's detail).
MAX_ANSWER_BYTES = 64 * 1024
# Whether a body is received from its socket a whole chunk per recv(2) (BodyReader) rather than in
# the slices http.client's reads return. Off until a 16-core device run times it beside the old reads
# (bench/staging_ram.py's _waitall methods; bench/results/staging-ram/README.md): no device machine
# could be started when it was written, and a receive path that sets many-core speed waits for one.
WHOLE_CHUNK_RECV = False
# Bytes the kernel gathers in a socket before it wakes the receiving thread (SO_RCVLOWAT), never more
# than the body has left to send. Without it the receiver wakes for each segment batch that lands
# (tens of KiB on loopback), and each wake costs both ends a context switch. 0: the kernel's 1 byte.
RECV_LOWAT_BYTES = 0
# More than the read buffer http.client reads headers through (8 KiB; 128 KiB from Python 3.14), so
# one read1 takes all of the body it holds.
EARLY_MAX_BYTES = 1024 * 1024


class Source:
    """The HTTP source, one keep-alive connection per thread; every request authenticated."""

    def __init__(self, url, secret, client, io_timeout_s):
        self.url = url
        self.host, self.port = parse_source_url(url)
        # Every request is made for this server alone, and its signed answers must name it.
        self.name = server_name(self.host, self.port)
        self.secret = secret
        self.client = client
        self.io_timeout_s = io_timeout_s
        self.local = threading.local()
        # Set once the listing's signature checked out; nothing is reported to an unproven listener.
        self.proven = False

    def headers(self, method, path, body=b""):
        return {"Authorization": authorization(self.secret, method, path, self.client, body, server=self.name)[0]}

    def connection(self, fresh=False):
        conn = getattr(self.local, "conn", None)
        # The source closes a connection idle for KEEPALIVE_IDLE_S; one idle half that long is replaced first.
        stale = conn is not None and time.monotonic() - self.local.used > KEEPALIVE_IDLE_S / 2
        if conn is None or fresh or stale:
            if conn is not None:
                conn.close()
            conn = http.client.HTTPConnection(self.host, self.port, timeout=self.io_timeout_s)
            self.local.conn = conn
        self.local.used = time.monotonic()
        return conn

    def listing(self, connect_timeout_s):
        """The listing, returned only once its signature shows it comes from this run's source.

        Until then the answer comes from a process that may not hold the secret: one exchange may
        take io_timeout_s in all and MAX_LISTING_BYTES of body, however the bytes arrive.
        """
        deadline = time.monotonic() + connect_timeout_s
        while True:
            nonce = new_nonce()
            try:
                conn = self.connection(fresh=True)
                conn.connect()
            except OSError as exc:
                if time.monotonic() > deadline:
                    raise StagingError(
                        "could not reach the weights source at %s within %ds (%s): is the "
                        "source task running and the fabric address right?" % (self.url, connect_timeout_s, exc)
                    )
                time.sleep(0.5)
                continue
            header = authorization(self.secret, "GET", "/listing", self.client, nonce=nonce, server=self.name)[0]
            with Watchdog(conn.sock, self.io_timeout_s) as watchdog:
                try:
                    conn.request("GET", "/listing", headers={"Authorization": header})
                    response = conn.getresponse()
                    body = bounded_body(response, MAX_LISTING_BYTES)
                    failure = None
                except (OSError, http.client.HTTPException) as exc:
                    failure = exc
            if watchdog.fired:
                conn.close()
                raise StagingError(
                    "the process answering at %s did not finish its listing within %ds: it is not "
                    "answering as this run's weights source does, and nothing it sent was used. Find what "
                    "listens on that port (ss -ltnp), stop it, and run again." % (self.url, self.io_timeout_s)
                )
            if failure is None and body is None:
                conn.close()
                raise StagingError(
                    "the process answering at %s sent more than %d bytes without proving it is this run's "
                    "weights source; nothing it sent was used and nothing was written here. Find what listens "
                    "on that port (ss -ltnp), stop it, and run again." % (self.url, MAX_LISTING_BYTES)
                )
            if failure is None:
                break
            if time.monotonic() > deadline:
                raise StagingError(
                    "could not read a listing from the weights source at %s within %ds (%s): is the "
                    "source task running and the fabric address right?" % (self.url, connect_timeout_s, failure)
                )
            time.sleep(0.5)
        if response.status == 403:
            raise StagingError(
                "the process answering at %s refused this run's credentials: it is not this run's "
                "weights source (another run's, or another process holding the port). Nothing was "
                "written here." % self.url
            )
        if not listing_signed(self.secret, nonce, body, response.getheader(SIGNATURE_HEADER), self.name):
            raise StagingError(
                "the process answering at %s (HTTP %d) did not sign its listing with this run's "
                "secret: it is not this run's weights source, and may be a process that took the "
                "port first. Nothing it sent was used and nothing was written here; find what "
                "listens on that port, stop it, and run again." % (self.url, response.status)
            )
        self.proven = True
        try:
            return parse_json(body)
        except ValueError as exc:
            raise StagingError(
                "the weights source at %s sent a signed listing that is not readable JSON (%s)" % (self.url, exc)
            )

    def done(self, report):
        """Tell the server this node is done; only a server proven this run's, one bounded exchange.

        The answer is a few bytes: at most MAX_ANSWER_BYTES of it are read, within io_timeout_s in
        all, however a squatter at the port sends it. Never raises: a node's files are verified
        whatever the answer.
        """
        if not self.proven:
            return False
        try:
            conn = self.connection(fresh=True)
            payload = json.dumps(dict(report, client=self.client)).encode("utf-8")
            conn.request(
                "POST",
                "/done",
                body=payload,
                headers=dict(self.headers("POST", "/done", payload), **{"Content-Type": "application/json"}),
            )
            with Watchdog(conn.sock, self.io_timeout_s):
                response = conn.getresponse()
                answered = bounded_body(response, MAX_ANSWER_BYTES) is not None and response.status == 200
            conn.close()
            return answered
        except (OSError, http.client.HTTPException, AttributeError):
            self.connection(fresh=True)
            return False


class Watchdog:
    """Ends a socket's exchange at a wall-clock deadline, however slowly the other side trickles bytes.

    A socket timeout bounds each wait for the next byte, not the exchange: one byte every few
    seconds would keep a reader waiting for ever. Shutting the socket down wakes the reader.
    """

    def __init__(self, sock, seconds):
        self.sock, self.fired = sock, False
        self.timer = threading.Timer(seconds, self._fire)
        self.timer.daemon = True

    def _fire(self):
        self.fired = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def __enter__(self):
        self.timer.start()
        return self

    def __exit__(self, *exc):
        self.timer.cancel()


def kernel_timeout(sock):
    """Make `sock` blocking, its per-wait timeout kept by the kernel (SO_RCVTIMEO); the old timeout.

    A Python-level timeout makes the socket non-blocking, and then neither splice(2) nor MSG_WAITALL
    waits in the kernel. A wait that outlasts the timeout fails with EAGAIN (BlockingIOError).
    """
    timeout = sock.gettimeout()
    sock.settimeout(None)
    if timeout:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVTIMEO, struct.pack("ll", int(timeout), int(timeout % 1 * 1e6)))
    return timeout


class BodyReader:
    """A response body of known length, read into the caller's buffers a whole chunk per call.

    http.client returns a body in the slices the kernel holds (tens of KiB on loopback), and every
    call takes back the interpreter lock that the stream's hash and write lanes also need. Straight
    from the socket, one recv(2) either fills a chunk (MSG_WAITALL, waiting in the kernel) or takes
    at least RECV_LOWAT_BYTES once poll(2) says they are in. The mark is kept to poll: a blocking
    recv that has taken some bytes still waits for a whole mark more, which the body's end may never
    bring. Bytes http.client read past the headers come first; on leaving, the mark is back at one
    byte for the next answer's headers, and the response is marked read up to where this reader
    stopped, so the connection can serve the next request once the body is all in.
    """

    def __init__(self, sock, response):
        self.sock, self.response = sock, response
        self.left = response.length
        self.mark = RECV_LOWAT_BYTES if RECV_LOWAT_BYTES > 1 else 0
        self.direct = bool(WHOLE_CHUNK_RECV or self.mark) and self.left is not None and not response.chunked
        self.timeout = None
        self.started = self.blocking = False
        self.early = memoryview(b"")
        self.lowat = 1

    def __enter__(self):
        return self

    def readinto(self, view):
        """Fill `view` from the body; the count, short only where the body or the connection ended."""
        if not self.direct:
            return _fill(self.response, view)
        view = view[: self.left]
        if not self.started:
            # All http.client buffered past the headers (or one ordinary read), before the socket is read directly.
            self.early = memoryview(self.response.fp.read1(min(self.left, EARLY_MAX_BYTES)))
            self.started = True
            if not self.mark:
                self.timeout, self.blocking = kernel_timeout(self.sock), True
        got = min(len(self.early), len(view))
        view[:got], self.early = self.early[:got], self.early[got:]
        while got < len(view):
            if self.mark:
                # Never more than the body still owes: nothing past it is coming.
                self._set_lowat(min(self.mark, len(view) - got))
            try:
                count = self.sock.recv_into(view[got:], len(view) - got, socket.MSG_WAITALL if self.blocking else 0)
            except BlockingIOError:
                raise TimeoutError("sent nothing for %ss" % self.timeout)
            if not count:
                break
            got += count
        self.left -= got
        return got

    def _set_lowat(self, count):
        count = max(1, count)
        if count != self.lowat:
            self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, count)
            self.lowat = count

    def __exit__(self, *exc):
        try:
            self._set_lowat(1)
        except OSError:
            pass  # a connection that failed is replaced, never asked for another answer
        if self.blocking:
            self.sock.settimeout(self.timeout)
        if self.direct:
            # The body went around http.client: it must count those bytes read, or it would wait for them.
            self.response.length = self.left
            if not self.left and exc[0] is None:
                self.response.read()


def _fill(response, view):
    """Read until `view` is full or the body ends, as http.client hands it over; the byte count."""
    got = 0
    while got < len(view):
        count = response.readinto(view[got:])
        if not count:
            break
        got += count
    return got


def bounded_body(response, limit):
    """The response's body, or None once it passes `limit` bytes (announced or sent): the rest is never read."""
    if response.length is not None and response.length > limit:
        return None
    parts, total = [], 0
    while True:
        part = response.read(min(64 * 1024, limit + 1 - total))
        if not part:
            return b"".join(parts)
        parts.append(part)
        total += len(part)
        if total > limit:
            return None


def usable_cores():
    """The cores this process may run on (its affinity: a container's or a pinned job's share), else the machine's."""
    try:
        return len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def resolve_under(root, rel):
    """The absolute path of `rel` under `root` once links are resolved; StagingError when it leaves `root`.

    `root` is resolved by the caller (the destination may itself live behind a link); every
    folder on the way to `rel` must be a real folder inside it.
    """
    candidate = os.path.join(root, rel)
    parent = os.path.realpath(os.path.dirname(candidate))
    if not (parent == root or parent.startswith(root + os.sep)):
        raise StagingError(
            "%s resolves to %s, outside the destination %s: a link in the destination points "
            "elsewhere. Nothing was written there; remove the link and run again." % (candidate, parent, root)
        )
    return os.path.join(parent, os.path.basename(candidate))


class PartialFile:
    """The file a transfer writes, with O_DIRECT where the filesystem allows it.

    Direct writes skip the page cache: staging hundreds of GB through it evicts the weights other
    services keep cached, and in the lab's VM the cache's allocation and writeback cost more CPU
    than hashing. Direct I/O needs block-aligned offsets and lengths, so every chunk but the last is
    a multiple of ALIGN and the tail is written after switching back to buffered writes.
    """

    def __init__(self, path, direct, resume):
        self.direct = self.opened_direct = False
        self.fd = None
        if resume:
            self.fd = self._open_existing(path, direct)
        if self.fd is None:
            # A leftover (or a planted link) under the predictable name is removed, never followed.
            if os.path.lexists(path):
                os.unlink(path)
            self.fd = self._open(path, os.O_RDWR | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, direct)

    def _open(self, path, flags, direct):
        if direct:
            try:
                fd = os.open(path, flags | os.O_DIRECT, 0o600)
                self.direct = self.opened_direct = True
                return fd
            except OSError as exc:
                if exc.errno != errno.EINVAL:
                    raise
        return os.open(path, flags, 0o600)

    def _open_existing(self, path, direct):
        """The interrupted transfer's file, only when it is a plain file of ours with one name."""
        try:
            fd = self._open(path, os.O_RDWR | os.O_NOFOLLOW, direct)
        except OSError:
            self.direct = self.opened_direct = False
            return None
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode) or info.st_nlink != 1 or info.st_uid != os.geteuid():
            os.close(fd)
            self.direct = self.opened_direct = False
            return None
        return fd

    def buffered(self):
        if self.direct:
            fcntl.fcntl(self.fd, fcntl.F_SETFL, fcntl.fcntl(self.fd, fcntl.F_GETFL) & ~os.O_DIRECT)
            self.direct = False

    def usable_prefix(self, size):
        """How much of what is on disk a resume can keep: all of it, or down to a block boundary."""
        return size - size % ALIGN if self.direct else size

    def read_into(self, view):
        return os.readv(self.fd, [view])

    def write(self, view):
        if self.direct and len(view) % ALIGN:
            self.buffered()
        while view:
            try:
                written = os.write(self.fd, view)
            except OSError as exc:
                if not self.direct or exc.errno != errno.EINVAL:
                    raise
                self.buffered()
                continue
            view = view[written:]

    def close(self, sync, mode=None):
        try:
            if mode is not None:
                os.fchmod(self.fd, mode)
            if sync:
                os.fsync(self.fd)
        finally:
            os.close(self.fd)


def fsync_dir(path):
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def make_dirs_under(root, rel_dir):
    """Create `rel_dir` under `root` one folder at a time, refusing any part that is a link or a file."""
    current = root
    for part in [p for p in rel_dir.split("/") if p]:
        current = os.path.join(current, part)
        if os.path.islink(current) or (os.path.exists(current) and not os.path.isdir(current)):
            raise StagingError(
                "%s is a link or a file where the destination needs a folder; nothing was written "
                "through it. Remove it and run again." % current
            )
        try:
            os.mkdir(current, 0o755)
        except FileExistsError:
            # Another stream made it meanwhile; it must still be a real folder.
            if os.path.islink(current) or not os.path.isdir(current):
                raise StagingError("%s is a link or a file where the destination needs a folder" % current)
    return current
