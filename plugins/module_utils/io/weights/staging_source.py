"""The staging source: a read-only HTTP server for one checkpoint, bounded in time.

Why HTTP from the stdlib: every node already has python3, a Range request is all that resume
needs, and `socket.sendfile` moves bytes from the page cache to the fabric without passing
through Python, which leaves the source's cores free. The server binds to one address, serves
only the files of its listing, and exits when every destination has said it is done, when idle,
or at its deadline. Every request must be authenticated under the run's secret and the listing
goes out signed (weights/staging_auth.py says how and why); a request that fails the check is
refused and changes nothing: not the idle timer, not the count of destinations done.
"""

import errno
import json
import os
import signal
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import CheckpointError, StagingError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.files import (
    atomic_write_bytes,
    atomic_write_json,
    cache_lookup,
    fingerprint,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights.checkpoint_scan import (
    hash_many,
    piece_hashes_here,
    scan_checkpoint,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights.throttle import Throttle
from ansible_collections.seatwright.fleet.plugins.module_utils.jsondoc import parse_json
from ansible_collections.seatwright.fleet.plugins.module_utils.weights.checkpoint import is_revision, problem_lines
from ansible_collections.seatwright.fleet.plugins.module_utils.weights.pieces import (
    check_piece_bytes,
    parse_range,
    piece_size,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.weights.staging import (
    build_listing,
    check_bind_address,
    fetch_units,
    parse_content_length,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.weights.staging_auth import (
    KEEPALIVE_IDLE_S,
    MIN_SECRET_CHARS,
    SIGNATURE_HEADER,
    check_request,
    listing_signature,
    server_name,
)

# A destination's report of being done is a few hundred bytes; anything far larger is refused.
MAX_REPORT_BYTES = 64 * 1024
# Connections served at once (at least; 16 per destination when that is more): one more is closed at once.
MAX_CONNECTIONS = 256
CONNECTIONS_PER_CLIENT = 16
# Seconds a connection may take to authenticate its first request; a stranger's holds a slot no longer.
UNPROVEN_TIMEOUT_S = 10
# Connections one remote address may hold before their first request authenticates (a destination
# opens one per stream, at most 32, at once); one more ends that address's oldest unproven one, so
# a stranger never holds more than this many slots per address it sends from.
UNPROVEN_PER_ADDRESS = 32
# Bytes sent between two looks at the upload cap: fine enough that a capped rate is smooth.
UPLOAD_SLICE_BYTES = 1024 * 1024


def _hashes_for(path, files, need, state_dir, workers, may_write, piece_bytes=0):
    """Digests ({rel: {sha256, git_sha1?, pieces?}}) of the files in `need`, cached per file identity."""
    # ctime moves with every write and every utime, so a same-size rewrite with its mtime put back still counts.
    # A source that gains the blake3 package hashes again, so its listing then offers BLAKE3 pieces.
    identity = [path, piece_bytes, list(piece_hashes_here()) if piece_bytes else []] + [
        [rel, files[rel]["size"], files[rel]["mtime_ns"]] + _inode(files[rel]["abs"]) for rel in sorted(need)
    ]
    key = fingerprint(identity)
    cache_path = os.path.join(state_dir, "source-hashes-%s.json" % fingerprint([path, piece_bytes])[:16])
    cached = cache_lookup(cache_path, key, None)
    if cached and isinstance(cached.get("digests"), dict):
        return cached["digests"]
    jobs = {rel: (files[rel]["abs"], bool(files[rel]["expect"].get("git_sha1"))) for rel in need}
    digests = hash_many(jobs, workers, piece_bytes)
    if may_write:
        atomic_write_json(cache_path, {"fingerprint": key, "measured_at_epoch": time.time(), "digests": digests})
    return digests


def _inode(path):
    info = os.stat(path)
    return [info.st_ino, info.st_ctime_ns]


def _digest_problems(files, digests):
    """Sentences for files whose bytes on the source do not hash to what the checkpoint says they must."""
    problems = []
    for rel, digest in sorted(digests.items()):
        expect = files[rel]["expect"]
        for algo in ("sha256", "git_sha1"):
            if expect.get(algo) and digest.get(algo) and digest[algo] != expect[algo]:
                problems.append(
                    "%s hashes to %s %s on the source, expected %s" % (rel, algo, digest[algo], expect[algo])
                )
    return problems


def source_listing(path, revision, name, state_dir, workers=4, may_write=True, piece_bytes=0):
    """(listing, {target: absolute path}) for the checkpoint at `path`, damage included as problems.

    With piece_bytes (the largest piece; weights/pieces.py piece_size picks the size), every file
    is read once (cached per identity) for its sha256 and its piece
    digests, and a file whose bytes do not match its expected digest is a problem: pieces are only
    ever listed for bytes that are what the checkpoint says they are.
    """
    report, files = scan_checkpoint(path, revision, mode="quick")
    problems = problem_lines(report) if not report["complete"] else []
    present = {rel: seen for rel, seen in files.items() if not seen["dangling"]}
    if piece_bytes:
        piece_bytes = piece_size(sum(seen["size"] for seen in present.values()), piece_bytes)
        need = list(present)
    else:
        need = [
            rel for rel, seen in present.items() if not (seen["expect"].get("sha256") or seen["expect"].get("git_sha1"))
        ]
    hashes = (
        _hashes_for(path, present, need, state_dir, workers, may_write, piece_bytes) if need and not problems else {}
    )
    problems.extend(_digest_problems(present, hashes))
    entries = {}
    for rel, seen in present.items():
        expect = seen["expect"]
        digest = hashes.get(rel, {})
        entries[rel] = {
            "size": seen["size"],
            "mode": seen["mode"],
            "sha256": expect.get("sha256") or digest.get("sha256"),
            "git_sha1": expect.get("git_sha1"),
            "blob": seen["blob"],
            "pieces": digest.get("pieces"),
            "pieces_blake3": digest.get("pieces_blake3"),
        }
    listing = build_listing(
        name, report["layout"], revision, report.get("refs"), entries, problems, piece_bytes if hashes else None
    )
    by_path = {rel: seen["abs"] for rel, seen in present.items()}
    served = {target: by_path[unit["source_path"]] for target, unit in fetch_units(listing).items()} if entries else {}
    return listing, served, report


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "seatwright-weight-source"

    def log_message(self, *args):
        """Requests are counted in the server's stats, not printed into the module's output."""

    # Every wait for a byte ends; the server also ends a connection that does not authenticate in time.
    timeout = KEEPALIVE_IDLE_S

    def _authenticated(self, body=b""):
        """The client name when this request is authenticated under the run's secret and fresh, else None."""
        checked = check_request(
            self.server.secret, self.command, self.path, self.headers.get("Authorization"), body, self.server.name
        )
        if checked is None or not self.server.fresh_nonce(checked[1]):
            self.server.refused()
            return None
        self.server.proven(self.request)
        return checked

    def _reply(self, code, body, content_type="application/json", headers=None):
        payload = body if isinstance(body, bytes) else json.dumps(body).encode("utf-8")
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(payload)

    def do_GET(self):  # noqa: N802 (the name http.server dispatches to)
        checked = self._authenticated()
        if checked is None:
            self._reply(403, {"error": "request not authenticated for this run"})
            return
        client, nonce = checked
        with self.server.activity():
            if self.path == "/listing":
                body = self.server.listing_bytes
                signature = listing_signature(self.server.secret, nonce, body, self.server.name)
                self._reply(200, body, headers={SIGNATURE_HEADER: signature})
            elif self.path.startswith("/file/"):
                self._send_file(unquote(self.path[len("/file/") :]), client)
            else:
                self._reply(404, {"error": "no such resource"})

    def do_POST(self):  # noqa: N802
        length = _content_length(self.headers.get("Content-Length"))
        if length is None:
            self.close_connection = True
            self._reply(400, {"error": "Content-Length must be a whole number of bytes up to %d" % MAX_REPORT_BYTES})
            return
        body = self.rfile.read(length)
        checked = self._authenticated(body)
        if checked is None:
            self._reply(403, {"error": "request not authenticated for this run"})
            return
        with self.server.activity():
            try:
                report = parse_json(body or b"{}")
            except ValueError:
                report = None
            if self.path != "/done" or not isinstance(report, dict):
                self._reply(404 if self.path != "/done" else 400, {"error": "expected POST /done with a JSON object"})
                return
            self.server.client_done(checked[0], report)
            self._reply(200, {"ok": True})

    def _send_file(self, target, client):
        path = self.server.path_for(target)
        if path is None:
            self._reply(404, {"error": "%s is not part of this checkpoint" % target})
            return
        expected = self.server.sizes[target]
        with open(path, "rb") as handle:
            size = os.fstat(handle.fileno()).st_size
            if size != expected and not self.server.partial_ok(target):
                self._reply(
                    409,
                    {
                        "error": "%s changed on the source since it was listed (%d bytes, listed %d)"
                        % (target, size, expected)
                    },
                )
                return
            span = parse_range(self.headers.get("Range"), expected)
            if span is None or not self.server.may_send(target, span, self.headers.get("Range")):
                self._reply(416, {"error": "unsupported range %s" % self.headers.get("Range")})
                return
            start, end = span
            self.send_response(206 if self.headers.get("Range") else 200)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(end - start))
            if self.headers.get("Range"):
                self.send_header("Content-Range", "bytes %d-%d/%d" % (start, end - 1, expected))
            self.end_headers()
            sent = self.server.send_span(self.connection, handle, start, end)
        self.server.count(client, sent)


def _content_length(header):
    """The body length a POST announces, or None when it is not a plain count within bounds."""
    length = parse_content_length(header or "0")
    return length if length is not None and length <= MAX_REPORT_BYTES else None


class SourceServer(ThreadingHTTPServer):
    daemon_threads = True
    allow_reuse_address = True
    # Every destination opens one connection per stream at once; the default backlog of 5 is too small.
    request_queue_size = 128

    def __init__(self, address, secret, listing, served, clients, upload_limit_bytes_s=0, handler=None):
        self.secret = secret
        # One cap on everything this server sends, however many connections share it.
        self.upload = Throttle(upload_limit_bytes_s)
        self.listing = listing
        self.listing_bytes = json.dumps(listing, sort_keys=True).encode("utf-8")
        self.nonces = set()
        self.refused_requests = 0
        self.handler_errors = 0
        self.served = served
        self.sizes = {unit["target"]: unit["size"] for unit in fetch_units(listing).values()} if served else {}
        self.expected_clients = clients
        self.done_reports = {}
        self.bytes_by_client = {}
        self.active = 0
        self.last_activity = time.monotonic()
        self._lock = threading.Lock()
        # {socket: (when it opened, remote address)} for connections yet to authenticate; proven ones are only counted.
        self.unproven = {}
        self.connections = 0
        self.max_connections = max(MAX_CONNECTIONS, CONNECTIONS_PER_CLIENT * clients)
        self.unproven_timeout_s = UNPROVEN_TIMEOUT_S
        self.unproven_per_address = UNPROVEN_PER_ADDRESS
        self.refused_connections = 0
        # Unproven connections ended to make room for newer ones from the same address.
        self.evicted_connections = 0
        ThreadingHTTPServer.__init__(self, address, handler or _Handler)
        # What every request to this server must be made for, and what its signed answers name.
        self.name = server_name(*self.server_address[:2])

    def path_for(self, target):
        """Where the bytes of `target` are read from, or None when this server does not serve it."""
        return self.served.get(target)

    def partial_ok(self, _target):
        """Whether a file shorter than listed may be read from (a peer's transfer in progress)."""
        return False

    def may_send(self, _target, _span, _header):
        """Whether this server sends that span of `target` (the source sends any range of a listed file)."""
        return True

    def send_span(self, connection, handle, start, end):
        """Bytes [start, end) of `handle` to `connection` by sendfile, in slices when uploads are capped."""
        if not self.upload.rate:
            return connection.sendfile(handle, start, end - start) if end > start else 0
        sent = 0
        while start + sent < end:
            count = min(UPLOAD_SLICE_BYTES, end - start - sent)
            self.upload.consume(count)
            sent += connection.sendfile(handle, start + sent, count)
        return sent

    def process_request(self, request, client_address):
        """A thread per connection, up to max_connections; past that the connection is closed at once.

        Unproven connections have a cap of their own per remote address: one more ends the oldest
        unproven one of that address, so a stranger's idle connections cannot fill the slots the
        destinations need.
        """
        address = client_address[0] if client_address else None
        with self._lock:
            mine = sorted(
                (opened, held)
                for held, (opened, peer) in self.unproven.items()
                if peer == address and held is not request
            )
            evict = mine[0][1] if len(mine) >= self.unproven_per_address else None
            if evict is not None:
                self.evicted_connections += 1
                self.unproven.pop(evict, None)
            full = self.connections >= self.max_connections and evict is None
            if full:
                self.refused_connections += 1
            else:
                self.connections += 1
                self.unproven[request] = (time.monotonic(), address)
        if evict is not None:
            try:
                evict.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        if full:
            self.shutdown_request(request)
            return
        try:
            ThreadingHTTPServer.process_request(self, request, client_address)
        except Exception:
            self._forget(request)
            raise

    def process_request_thread(self, request, client_address):
        try:
            ThreadingHTTPServer.process_request_thread(self, request, client_address)
        finally:
            self._forget(request)

    def _forget(self, request):
        with self._lock:
            self.connections -= 1
            self.unproven.pop(request, None)

    def proven(self, request):
        with self._lock:
            self.unproven.pop(request, None)

    def service_actions(self):
        """Between requests, end the connections that have not authenticated within unproven_timeout_s."""
        cutoff = time.monotonic() - self.unproven_timeout_s
        with self._lock:
            late = [request for request, (opened, _address) in self.unproven.items() if opened < cutoff]
        for request in late:
            try:
                request.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass

    def activity(self):
        server = self

        class _Active:
            def __enter__(self):
                with server._lock:
                    server.active += 1

            def __exit__(self, *exc):
                with server._lock:
                    server.active -= 1
                    server.last_activity = time.monotonic()

        return _Active()

    def fresh_nonce(self, nonce):
        """True the first time a nonce is seen: a captured request cannot be replayed."""
        with self._lock:
            if nonce in self.nonces:
                return False
            self.nonces.add(nonce)
            return True

    def refused(self):
        with self._lock:
            self.refused_requests += 1

    def handle_error(self, request, client_address):
        """A broken request ends its connection; it never prints a traceback into the module's output."""
        with self._lock:
            self.handler_errors += 1

    def count(self, client, sent):
        with self._lock:
            self.bytes_by_client[client] = self.bytes_by_client.get(client, 0) + sent

    def client_done(self, client, report):
        with self._lock:
            self.done_reports[client] = report

    def finished_reason(self, idle_timeout_s, deadline):
        with self._lock:
            if len(self.done_reports) >= self.expected_clients:
                return "every destination reported done"
            if self.active == 0 and time.monotonic() - self.last_activity > idle_timeout_s:
                turned_away = self.refused_connections + self.evicted_connections
                if turned_away:
                    # Not a quiet end: destinations may have been among those turned away.
                    return (
                        "flooded: no destination asked for %ds while %d connections that never authenticated were "
                        "refused or ended (%d of %d destinations reported done)"
                        % (idle_timeout_s, turned_away, len(self.done_reports), self.expected_clients)
                    )
                return "idle for %ds" % idle_timeout_s
        if time.monotonic() > deadline:
            return "reached its lifetime"
        return None


def _stop_stale(pidfile):
    """Stop a server an interrupted run left on our port; only a process that is ours."""
    try:
        with open(pidfile) as handle:
            pid = int(handle.read().split()[0])
        with open("/proc/%d/cmdline" % pid, "rb") as handle:
            cmdline = handle.read()
    except (OSError, ValueError, IndexError):
        return False
    if b"weight_source" not in cmdline:
        return False
    os.kill(pid, signal.SIGTERM)
    for _ in range(50):
        if not os.path.exists("/proc/%d" % pid):
            return True
        time.sleep(0.1)
    return True


class SourceServer6(SourceServer):
    address_family = socket.AF_INET6


def bind_server(address, port, secret, listing, served, clients, pidfile, upload_limit_bytes_s=0):
    """A bound SourceServer; a stale one of ours holding the port is stopped first."""
    server_class = SourceServer6 if ":" in address else SourceServer
    for attempt in (1, 2):
        try:
            return server_class((address, port), secret, listing, served, clients, upload_limit_bytes_s)
        except OSError as exc:
            if exc.errno != errno.EADDRINUSE or attempt == 2 or not _stop_stale(pidfile):
                raise
    raise OSError(errno.EADDRINUSE, "address in use")


def serve_until_done(server, idle_timeout_s, lifetime_s, poll_s=0.2):
    """Serve in a thread; return why serving stopped and what was served."""
    started = time.monotonic()
    worker = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": poll_s})
    worker.daemon = True
    worker.start()
    try:
        while True:
            reason = server.finished_reason(idle_timeout_s, started + lifetime_s)
            if reason:
                break
            time.sleep(poll_s)
    finally:
        server.shutdown()
        server.server_close()
    return {
        "stopped": reason,
        "served_s": round(time.monotonic() - started, 3),
        "bytes_by_client": dict(server.bytes_by_client),
        "done_reports": dict(server.done_reports),
        "refused_requests": server.refused_requests,
        "refused_connections": server.refused_connections,
        "evicted_connections": server.evicted_connections,
        "handler_errors": server.handler_errors,
    }


def run_source(params, check_mode):
    """The weight_source module's run: check the request, list the checkpoint, serve it until done.

    StagingError with the message for people (and the listing summary, once there is one, as a
    detail); the result with the listing summary and the serving statistics otherwise.
    """
    check_source_request(params)
    may_write = not check_mode
    try:
        listing, served, _report = source_listing(
            params["path"],
            params["revision"],
            params["name"],
            params["state_dir"],
            params["hash_workers"],
            may_write,
            int(params.get("piece_mb") or 0) * 1024 * 1024,
        )
    except (CheckpointError, OSError) as exc:
        raise StagingError("cannot list source checkpoint %s: %s" % (params["path"], exc))
    summary = {
        "files": len(listing["files"]),
        "bytes": sum(f["size"] for f in listing["files"]),
        "layout": listing["layout"],
        "revision": listing["revision"],
    }
    pidfile = os.path.join(params["state_dir"], "source-%d.pid" % params["port"])
    try:
        server = bind_server(
            params["bind_address"],
            params["port"],
            params["token"],
            listing,
            served,
            params["clients"],
            pidfile,
            int((params.get("upload_limit_mb_per_s") or 0) * 1e6),
        )
    except OSError as exc:
        raise StagingError(bind_problem(params["bind_address"], params["port"], exc), listing=summary)
    if may_write:
        atomic_write_bytes(pidfile, b"%d\n" % os.getpid())
    try:
        stats = serve_until_done(server, params["idle_timeout_s"], params["lifetime_s"])
    finally:
        if may_write and os.path.exists(pidfile):
            os.unlink(pidfile)
    if listing["problems"]:
        raise StagingError(
            "source checkpoint %s is damaged, nothing was served: %s"
            % (params["path"], "; ".join(listing["problems"])),
            listing=summary,
            **stats,
        )
    return dict(changed=False, listing=summary, **stats)


def check_source_request(params):
    """StagingError naming the first parameter that cannot make a safe source."""
    if params["revision"] is not None and not is_revision(params["revision"]):
        raise StagingError("revision %r is not a pinned 40-hex commit id" % params["revision"])
    if not os.path.isdir(params["path"]):
        raise StagingError(
            "source checkpoint %s is not a directory on this host; check weights_source_path "
            "and weights_source_host" % params["path"]
        )
    if len(params["token"]) < MIN_SECRET_CHARS:
        raise StagingError(
            "token is too short to protect the source (%d characters or more expected)" % MIN_SECRET_CHARS
        )
    address_problem = check_bind_address(params["bind_address"])
    if address_problem:
        raise StagingError("weight_source: %s" % address_problem)
    for field in ("port", "clients", "idle_timeout_s", "lifetime_s", "hash_workers"):
        if params[field] < 1:
            raise StagingError("%s is %d; give 1 or more" % (field, params[field]))
    if (params.get("upload_limit_mb_per_s") or 0) < 0:
        raise StagingError("upload_limit_mb_per_s is %s; give 0 (no cap) or more" % params["upload_limit_mb_per_s"])
    if params.get("piece_mb"):
        problem = check_piece_bytes(params["piece_mb"] * 1024 * 1024)
        if problem:
            raise StagingError("piece_mb is %s: %s; give 0 (whole files) or 1 to 1024" % (params["piece_mb"], problem))


def bind_problem(address, port, exc):
    if exc.errno == errno.EADDRINUSE:
        return (
            "another process already listens on %s:%d, so this run's source cannot: "
            "destinations must not talk to it. Find it (ss -ltnp 'sport = :%d'), stop it or "
            "choose another weights_source_port, and run again." % (address, port, port)
        )
    return "cannot listen on %s:%d (%s): is the address this host's fabric address?" % (address, port, exc)
