#!/usr/bin/env python3
"""Verified staging against a plain pull into RAM over loopback, with the machine's own ceilings.

One run on one machine: the project's weight source (io/weights/staging_source.py) serves N shards
from a folder in RAM (/dev/shm) on 127.0.0.1, and each method pulls them into another RAM folder,
so no disk sets the pace and the price of hashing shows:

  plain     staging_pull.stage of whole files with hashing taken out (hashers that do nothing,
            every digest accepted): the same HTTP client, streams, buffers, writes and renames
  verified  staging_pull.stage as weight_stage runs it: the source lists each file's piece
            digests (--piece-mb), and every piece is hashed and checked on whichever stream got it,
            with the digest the node picks (BLAKE3 where Python has the blake3 package), on the path
            the node picks (weights/staging.py splice_pieces: spliced on few cores, else buffered)
  plain_pieces  the spliced transport (pieces, streams, fetch workers, splices into the file) with
            the hashing taken out
  plain_pieces_buffered  the buffered transport (pieces received into buffers and written), unhashed
  verified_spliced  verified with splice forced on, each pipeful hashed in line (the default on
            every node before issue 49)
  verified_lane  the same with each spliced pipeful hashed on the stream's hash lane, not in line
  verified_buffered  verified with splice forced off: each piece received into buffers, hashed
            there and written (what a file opened for direct I/O gets)
  verified_sha256  the same with sha256 pieces forced: what a node without blake3 does
  verified_serial  verified with the fetch workers started and stopped one after another, every
            stream waiting for the last fork (swarm.STREAMS_AT_ONCE off: the order before issue 49's
            last change)
  verified_merged  verified on the buffered path with each chunk hashed and then written on one
            lane, two busy threads a stream instead of three (receive, hash, write)
  whole     verified staging of whole files (a file's sha256 on the stream that receives it):
            the pipeline before pieces, timed beside them

All run at the stream count the node derives (weights/staging.py stream_count) and at the other
counts given, each pull in a fresh process, methods rotated per pass, median of the passes. The
same run measures the machine's ceilings: sha256 (and BLAKE3) on one core and on all cores (on
in-memory buffers, one thread per core), and loopback TCP at the chosen stream count.

  python3 bench/staging_ram.py --shards 8 --shard-mib 1024 --passes 3 --streams 4,8,16 \
      --out bench/results/staging-ram

Needs python3 only: module_utils is imported through a shim folder (bench/staging/shim.py); the
blake3 package is optional (without it `verified` is sha256 too).
"""

import argparse
import collections
import hashlib
import json
import os
import platform
import re
import resource
import secrets
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "bench" / "staging"))
from shim import link_shim  # noqa: E402  (bench/staging/shim.py)

FIELD_GB_S = (9.97, 11.33)
HASH_BLOCK = 64 * 1024 * 1024
KINDS = (
    "plain",
    "plain_readinto",
    "plain_waitall",
    "plain_pieces",
    "plain_pieces_buffered",
    "verified",
    "verified_lane",
    "verified_spliced",
    "verified_buffered",
    "verified_sha256",
    "verified_serial",
    "verified_merged",
    "verified_readinto",
    "verified_buffered_readinto",
    "verified_waitall",
    "verified_inline",
    "verified_onelane",
    "verified_spliced_mapped",
    "verified_spliced_window",
    "verified_lane_window",
    "whole",
)
# A method may carry suffixes: _c<KiB>k (the piece path's chunk, e.g. verified_inline_c1024k), _thp
# (receive buffers on transparent huge pages), _turn or _noturn (a file's writers always or never take
# turns, swarm.WRITE_TURNS), _lowat<KiB>k (the body's socket low-water mark, 0: off), _ahead or _noahead
# (a stream handed its next piece before the last settles, or one at a time: swarm.LOOKAHEAD), then
# _waitall or _readinto (how a body is received), so variants are timed side by side in one run.
SUFFIX = re.compile(
    r"^(?P<base>[a-z0-9_]+?)(?:_c(?P<chunk>\d+)k)?(?P<thp>_thp)?(?:_(?P<turn>turn|noturn))?(?:_lowat(?P<lowat>\d+)k)?"
    r"(?:_(?P<ahead>ahead|noahead))?(?:_(?P<receive>waitall|readinto))?$"
)
Variant = collections.namedtuple("Variant", "base receive chunk_kib thp lowat_kib turns ahead")


def split_kind(name):
    """A method name's Variant: its base method, whole-chunk receive (None: the default), chunk KiB (0: the
    default), huge-page buffers, low-water mark KiB (None: the default), write turns and lookahead (None:
    the default). ValueError if the base is unknown."""
    if name in KINDS and not name.endswith(("_waitall", "_readinto")):
        return Variant(name, None, 0, False, None, None, None)
    found = SUFFIX.match(name)
    if found is None or found.group("base") not in KINDS:
        raise ValueError(
            "unknown method %r: one of %s, with _c<KiB>k, _thp, _turn / _noturn, _lowat<KiB>k, _ahead / _noahead"
            " and/or _waitall / _readinto" % (name, KINDS)
        )
    receive = {None: None, "waitall": True, "readinto": False}[found.group("receive")]
    lowat = found.group("lowat")
    return Variant(
        found.group("base"),
        receive,
        int(found.group("chunk") or 0),
        bool(found.group("thp")),
        None if lowat is None else int(lowat),
        {None: None, "turn": True, "noturn": False}[found.group("turn")],
        {None: None, "ahead": True, "noahead": False}[found.group("ahead")],
    )


def huge_page_buffers(*modules):
    """Every anonymous map these modules make (their receive buffers) asks for transparent huge pages."""
    import mmap as real

    class Maps:
        def __getattr__(self, name):
            return getattr(real, name)

        @staticmethod
        def mmap(fileno, length, *given, **named):
            made = real.mmap(fileno, length, *given, **named)
            if fileno == -1 and hasattr(real, "MADV_HUGEPAGE"):
                made.madvise(real.MADV_HUGEPAGE)
            return made

    for module in modules:
        module.mmap = Maps()


def kind_choice(name):
    try:
        split_kind(name)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc))
    return name


# /proc/stat's clock ticks per second (USER_HZ).
TICKS = os.sysconf("SC_CLK_TCK")


def machine_ticks():
    """{field: ticks} of /proc/stat's cpu line: every core's time, whichever process or interrupt spent it."""
    with open("/proc/stat") as handle:
        values = [int(v) for v in handle.readline().split()[1:9]]
    return dict(zip(("user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"), values))


def log(text):
    print("[%s] %s" % (time.strftime("%H:%M:%S"), text), flush=True)


def cgroup_cpu(root="/sys/fs/cgroup"):
    """{'cpu_max': the cgroup's CPU quota as written, 'quota_cores': cores it allows or None, 'throttled_s'}.

    A container's quota caps the CPU its processes get however many cores /proc/stat and the affinity show;
    the time it held them back shows only in the cgroup's cpu.stat (v2) or cpu.stat of the cpu controller (v1).
    """
    found = {"cpu_max": None, "quota_cores": None, "throttled_s": None}
    for limit, stat in (
        (root + "/cpu.max", root + "/cpu.stat"),
        (root + "/cpu/cpu.cfs_quota_us", root + "/cpu/cpu.stat"),
    ):
        # Either file may be missing on its own: a namespace's root cgroup has cpu.stat but no cpu.max.
        if not (os.path.exists(limit) or os.path.exists(stat)):
            continue
        try:
            with open(limit) as handle:
                found["cpu_max"] = handle.read().strip()
            parts = found["cpu_max"].split()
            if parts[0] not in ("max", "-1"):
                period = int(parts[1]) if len(parts) > 1 else _v1_period(root)
                found["quota_cores"] = round(int(parts[0]) / period, 2) if period else None
        except (OSError, ValueError, IndexError):
            pass
        try:
            with open(stat) as handle:
                fields = dict(line.split() for line in handle if len(line.split()) == 2)
            if "throttled_usec" in fields:
                found["throttled_s"] = int(fields["throttled_usec"]) / 1e6
            elif "throttled_time" in fields:
                found["throttled_s"] = int(fields["throttled_time"]) / 1e9
        except (OSError, ValueError):
            pass
        break
    return found


def _v1_period(root):
    try:
        with open(root + "/cpu/cpu.cfs_period_us") as handle:
            return int(handle.read())
    except (OSError, ValueError):
        return 0


def spin_cores(seconds=2.0):
    """CPU seconds per second that os.cpu_count() spinning processes get together: the cores really given."""
    read_end, write_end = os.pipe()
    children, started = [], time.perf_counter()
    for _ in range(os.cpu_count()):
        pid = os.fork()
        if pid == 0:
            os.close(read_end)
            end = time.perf_counter() + seconds
            while time.perf_counter() < end:
                pass
            os.write(write_end, b"%.6f\n" % time.process_time())
            os._exit(0)
        children.append(pid)
    os.close(write_end)
    for pid in children:
        os.waitpid(pid, 0)
    wall = time.perf_counter() - started
    with os.fdopen(read_end) as handle:
        return sum(float(line) for line in handle) / wall


def hash_rate(threads, make=hashlib.sha256, seconds=2.0):
    """Bytes per second hashed by `threads` threads, each on a buffer of its own (both hashers let go of the GIL)."""
    buffers = [os.urandom(HASH_BLOCK) for _ in range(threads)]
    deadline = time.perf_counter() + seconds

    def work(buffer):
        hasher, done = make(), 0
        while time.perf_counter() < deadline:
            hasher.update(buffer)
            done += len(buffer)
        return done

    started = time.perf_counter()
    with ThreadPoolExecutor(max_workers=threads) as pool:
        total = sum(pool.map(work, buffers))
    return total / (time.perf_counter() - started)


def make_checkpoint(out, shards, shard_mib):
    """Write a synthetic checkpoint with bench/staging/make_checkpoint.py; its summary (path, revision, bytes)."""
    command = [sys.executable, str(ROOT / "bench" / "staging" / "make_checkpoint.py"), "--out", str(out)]
    command += ["--shards", str(shards), "--shard-mib", str(shard_mib)]
    return json.loads(subprocess.run(command, check=True, capture_output=True, text=True).stdout)


def serve_source(staging_source, made, work, kind, secret, piece_bytes):
    """(server, listing): the project's weight source for `made` on 127.0.0.1, serving in a thread."""
    listing, served, _ = staging_source.source_listing(
        made["path"], made["revision"], "ram", str(work / "state-src"), os.cpu_count(), True, piece_bytes
    )
    server = staging_source.bind_server("127.0.0.1", 0, secret, listing, served, 10**6, str(work / ("pid-" + kind)))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, listing


def pull_command(kind, streams, shim, url, work, dest, revision, state, tuning):
    """The argv of one pull in a fresh process (this script's --pull mode), reading the token in `work`."""
    return [
        sys.executable,
        str(Path(__file__).resolve()),
        "--pull",
        kind,
        "--pull-streams",
        str(streams),
        "--shim",
        str(shim),
        "--url",
        url,
        "--token-file",
        str(work / "token"),
        "--dest",
        str(dest / "models--seatwright--synthetic"),
        "--revision",
        revision,
        "--state",
        str(state),
    ] + tuning


def blake3_module():
    """The blake3 package, or None where this Python lacks it."""
    try:
        import blake3
    except ImportError:
        return None
    return blake3


def loopback_rate(streams, total_bytes):
    """Bytes per second over `streams` TCP connections on 127.0.0.1, memory to memory."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(streams)
    per_stream = total_bytes // streams
    payload = memoryview(os.urandom(4 * 1024 * 1024))

    def send():
        conn, _ = listener.accept()
        with conn:
            left = per_stream
            while left:
                left -= conn.send(payload[: min(len(payload), left)])

    def receive():
        sock = socket.create_connection(listener.getsockname())
        buffer, left = memoryview(bytearray(4 * 1024 * 1024)), per_stream
        with sock:
            while left:
                got = sock.recv_into(buffer[: min(len(buffer), left)])
                if not got:
                    break
                left -= got
        return per_stream - left

    with ThreadPoolExecutor(max_workers=2 * streams) as pool:
        senders = [pool.submit(send) for _ in range(streams)]
        started = time.perf_counter()
        moved = sum(f.result() for f in [pool.submit(receive) for _ in range(streams)])
        seconds = time.perf_counter() - started
        for future in senders:
            future.result()
    listener.close()
    return moved / seconds


def pull_once(args):
    """The child process: one pull with staging_pull.stage, plain or verified; prints a JSON line."""
    sys.path.insert(0, args.shim)
    from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights import staging_pull, swarm, transport

    if args.depth:
        swarm._Pipeline.DEPTH = args.depth
    if args.switch_us:
        sys.setswitchinterval(args.switch_us / 1e6)

    class Nothing:
        def update(self, _chunk):
            pass

        def hexdigest(self):
            return "0" * 64

    # Any method with _readinto appended: the same, with the body as http.client's reads return it;
    # with _waitall, received a whole chunk per recv(2) (transport.BodyReader), whichever is the default.
    method, receive, chunk_kib, thp, lowat_kib, turns, ahead = split_kind(args.pull)
    if thp:
        huge_page_buffers(swarm, staging_pull)
    # The method's own chunk (its _c<KiB>k) over the run's --chunk-kib.
    if chunk_kib or args.chunk_kib:
        swarm.PIECE_CHUNK_BYTES = (chunk_kib or args.chunk_kib) * 1024
    if receive is not None:
        transport.WHOLE_CHUNK_RECV = receive
    if lowat_kib is not None:
        transport.RECV_LOWAT_BYTES = lowat_kib * 1024
    if turns is not None:
        swarm.WRITE_TURNS = turns
    if ahead is not None:
        swarm.LOOKAHEAD = ahead
    if method == "plain":
        staging_pull.new_hashers = lambda _git, _size: {"sha256": Nothing()}
        staging_pull.digest_problem = lambda _unit, _digests: None
    if args.pipe_kib or args.hash_lane:
        swarm.SPLICE_PIPE_BYTES = (args.pipe_kib * 1024) or swarm.SPLICE_PIPE_BYTES
        swarm.HASH_IN_LINE = not args.hash_lane
    if method == "verified_lane":
        swarm.HASH_IN_LINE = False
    if method in ("verified_spliced", "verified_lane", "plain_pieces"):
        swarm.SPLICE = True
    if method in ("verified_buffered", "plain_pieces_buffered"):
        swarm.SPLICE = False
    if method in ("plain_pieces", "plain_pieces_buffered"):
        # The verified path's own transport (pieces, streams, workers, splices) with its hashing taken out.
        swarm.piece_hasher = lambda _algo: Nothing()
        swarm._hash_range = lambda *_given: None
        made = swarm.Swarm.__init__

        def unhashed(self, *given):
            made(self, *given)
            self.expected = {target: ["0" * 64] * count for target, count in self.counts.items()}

        swarm.Swarm.__init__ = unhashed
    if method == "verified_merged":
        # Each chunk hashed, then written, on one lane: two busy threads a stream instead of three.
        swarm.SPLICE = False

        def hash_then_write(digest, handle, view, offset):
            digest.update(view)
            handle.write_at(view, offset)

        def submit(self, digest, handle, view, offset):
            self.busy[self.current] = (self.write_lane.submit(hash_then_write, digest, handle, view, offset),)

        swarm._Pipeline.submit = submit
    if method == "verified_inline":
        # Each chunk hashed on the thread that received it, then written on the lane: receive and hash in turn.
        swarm.SPLICE = False

        def hash_in_line(self, digest, handle, view, offset):
            digest.update(view)
            self.busy[self.current] = (self.write_lane.submit(handle.write_at, view, offset),)

        swarm._Pipeline.submit = hash_in_line
    if method == "verified_onelane":
        # Receive, hash and write in turn on the stream's own thread: one busy thread a stream, each
        # chunk hashed and written while the receive has just left it in the core's cache.
        swarm.SPLICE = False

        def all_in_line(self, digest, handle, view, offset):
            digest.update(view)
            handle.write_at(view, offset)

        swarm._Pipeline.submit = all_in_line
    if method == "verified_spliced_mapped":
        # The spliced path, each pipeful hashed through one read-only mapping of the file per worker,
        # grown as pieces land, instead of a mapping made, populated and dropped per pipeful.
        import mmap as maps

        swarm.SPLICE = True
        mapped = {}

        def hash_mapped(digest, fd, start, end):
            pages, view = mapped.get(fd, (None, None))
            if pages is None or len(pages) < end:
                if view is not None:
                    view.release()
                    pages.close()
                pages = maps.mmap(fd, os.fstat(fd).st_size, flags=maps.MAP_SHARED, prot=maps.PROT_READ)
                view = memoryview(pages)
                mapped[fd] = (pages, view)
            digest.update(view[start:end])

        swarm._hash_range = hash_mapped
    if method in ("verified_spliced_window", "verified_lane_window"):
        # The spliced path, hashing through one read-only mapping per 64 MiB window of the file (a piece),
        # its pages filled a pipeful at a time by MADV_POPULATE_READ, instead of a mapping made, populated
        # and dropped (one TLB flush) per pipeful; the file is sized in full first so a window never
        # passes its end. In line, or on the stream's hash lane.
        import mmap as maps

        swarm.SPLICE = True
        swarm.HASH_IN_LINE = method == "verified_spliced_window"
        window = {"fd": None, "base": 0, "size": 0, "pages": None, "view": None}
        span = 64 << 20
        opened = swarm.Swarm._open_units

        def sized_in_full(self):
            opened(self)
            for target, handle in self.files.items():
                if handle.size() < self.units[target]["size"]:
                    os.ftruncate(handle.fd, self.units[target]["size"])

        def hash_windowed(digest, fd, start, end):
            if window["fd"] != fd or start < window["base"] or end > window["base"] + window["size"]:
                if window["pages"] is not None:
                    window["view"].release()
                    window["pages"].close()
                base = start - start % span
                size = min(max(span, end - base), os.fstat(fd).st_size - base)
                window["pages"] = maps.mmap(fd, size, flags=maps.MAP_SHARED, prot=maps.PROT_READ, offset=base)
                window.update(fd=fd, base=base, size=size, view=memoryview(window["pages"]))
            low = start - window["base"]
            aligned = low - low % maps.PAGESIZE
            try:
                window["pages"].madvise(
                    getattr(maps, "MADV_POPULATE_READ", 22), aligned, end - window["base"] - aligned
                )
            except OSError:
                pass
            digest.update(window["view"][low : end - window["base"]])

        swarm.Swarm._open_units = sized_in_full
        swarm._hash_range = hash_windowed
    if method == "verified_serial":
        swarm.STREAMS_AT_ONCE = False

        def one_by_one(workers):
            for worker in workers:
                worker.close()

        swarm._close_workers = one_by_one
    marks = timeline_marks() if method not in ("plain", "whole") else None
    forced = "sha256" if method == "verified_sha256" else None
    with open(args.token_file) as handle:
        secret = handle.read().strip()
    ticks, started = machine_ticks(), time.perf_counter()
    result = staging_pull.stage(
        dict(
            dest=args.dest,
            source_url=args.url,
            token=secret,
            client="ram",
            name="bench-ram",
            revision=args.revision,
            streams=args.pull_streams,
            verify="full",
            direct_io=False,
            bandwidth_limit_bytes_s=0,
            state_dir=args.state,
            connect_timeout_s=30,
            io_timeout_s=60,
            retries=0,
            progress_interval_s=0,
            source_label="bench",
            prune=False,
            piece_hash=forced,
        )
    )
    wall, spent = time.perf_counter() - started, machine_ticks()
    spent = {field: (spent[field] - ticks[field]) / TICKS / wall for field in ticks}
    # The pull's own CPU and that of the fetch workers it ran (joined children).
    usage, workers = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    print(
        json.dumps(
            {
                "seconds": result["transfer_s"],
                "bytes": result["bytes_transferred"],
                "streams": result["streams"],
                "pull_cpu_s": round(usage.ru_utime + usage.ru_stime + workers.ru_utime + workers.ru_stime, 3),
                "piece_hash": result.get("piece_hash"),
                # Every core of the machine while the pull ran: busy (not idle, not waiting on I/O),
                # and the parts of it spent on interrupts and taken by the hypervisor.
                "machine_busy_cores": round(sum(spent.values()) - spent["idle"] - spent["iowait"], 2),
                "machine_softirq_cores": round(spent["softirq"] + spent["irq"], 2),
                "machine_steal_cores": round(spent["steal"], 2),
                "timeline": timeline_summary(marks, started) if marks else None,
            }
        )
    )


def timeline_marks():
    """Record when the swarm's run began and ended, each worker was forked, and each stream's pieces ran.

    Where a piece pull's seconds go besides moving bytes: forking the workers before every stream
    runs, and the tail, where streams that have no piece left wait for the last ones.
    """
    from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights import swarm

    marks = {"run": None, "end": None, "forked": [], "first": {}, "last": {}, "pieces": {}}
    run, stream_on, fork = swarm.Swarm.run, swarm.Swarm._stream_on, swarm._FetchWorker.__init__
    hear = swarm._FetchWorker.hear

    def timed_run(self):
        marks["run"] = time.perf_counter()
        try:
            return run(self)
        finally:
            marks["end"] = time.perf_counter()

    def timed_stream(self, worker):
        marks["first"].setdefault(id(worker), time.perf_counter())
        return stream_on(self, worker)

    def counted_hear(self, limit_s):
        # A stream's last piece ends at its last answer: a stream out of pieces waits for the others' to settle.
        heard = hear(self, limit_s)
        if heard != swarm.RECEIVED:
            marks["last"][id(self)] = time.perf_counter()
            marks["pieces"][id(self)] = marks["pieces"].get(id(self), 0) + (heard[0] == "ok")
        return heard

    def timed_fork(self, *given):
        fork(self, *given)
        marks["forked"].append(time.perf_counter())

    swarm.Swarm.run, swarm.Swarm._stream_on, swarm._FetchWorker.__init__ = timed_run, timed_stream, timed_fork
    swarm._FetchWorker.hear = counted_hear
    return marks


def timeline_summary(marks, started):
    """Seconds of the pull outside the streams' work: before the run, forking, the tail, after the run."""
    if marks["run"] is None or not marks["last"]:
        return None
    run, end = marks["run"], marks["end"]
    firsts, lasts = sorted(marks["first"].values()), sorted(marks["last"].values())
    span = end - run
    busy = sum(marks["last"].get(k, marks["first"][k]) - marks["first"][k] for k in marks["first"])
    return {
        "before_run_s": round(run - started, 4),
        "forks_s": round(marks["forked"][-1] - run, 4) if marks["forked"] else None,
        "last_stream_start_s": round(firsts[-1] - run, 4),
        # From the first stream out of pieces to the last piece's end: streams idle at the end.
        "tail_s": round(lasts[-1] - lasts[0], 4),
        "after_last_piece_s": round(end - lasts[-1], 4),
        "run_s": round(span, 4),
        "stream_busy_share": round(busy / (span * len(marks["first"])), 3),
        "pieces_per_stream": sorted(marks["pieces"].values()),
    }


def table_from_log(path, total_bytes):
    """Medians from a run's log lines where its JSON never came (a run cut off at a time limit).

    Each row: the stream count, then per method GB/s, the ratio to plain at that count and the passes seen.
    """
    pattern = re.compile(r"pass (\d+) (\S+)\s+(\d+) streams\s+([\d.]+) s")
    seen = {}
    with open(path) as handle:
        for line in handle:
            found = pattern.search(line)
            if found:
                seen.setdefault((found.group(2), int(found.group(3))), []).append(float(found.group(4)))
    named = {kind for kind, _ in seen}
    kinds = [k for k in KINDS if k in named] + sorted(named - set(KINDS))
    lines = ["| streams | " + " | ".join(kinds) + " |", "|" + "---|" * (len(kinds) + 1)]
    for count in sorted({c for _, c in seen}):
        plain = statistics.median(seen[("plain", count)]) if ("plain", count) in seen else None
        cells = []
        for kind in kinds:
            mine = seen.get((kind, count))
            if not mine:
                cells.append("-")
                continue
            seconds = statistics.median(mine)
            ratio = " (%.3f)" % (plain / seconds) if plain else ""
            cells.append("%.2f%s n=%d" % (total_bytes / seconds / 1e9, ratio, len(mine)))
        lines.append("| %d | %s |" % (count, " | ".join(cells)))
    return "\n".join(lines)


def whole_file_best(records, kind, shards, total_bytes):
    """(GB/s, stream counts) of a whole-file method's best configuration, where its counts of `shards` or
    more are one configuration.

    The whole-file path runs one stream per file, largest first, so at any count from the shard count up
    the same pull runs: every shard at once. Its medians at 8, 12 and 16 streams are three timings of one
    pull, and the highest of three is its noise, not a faster count; pooled, their passes give one median.
    """
    groups = {}
    for record in records:
        if record["method"] == kind:
            groups.setdefault(min(record["streams"], shards), []).append(record)
    best = None
    for mine in groups.values():
        gb_s = total_bytes / statistics.median(r["seconds"] for r in mine) / 1e9
        if best is None or gb_s > best[0]:
            best = (gb_s, sorted({r["streams"] for r in mine}))
    return best


def machine():
    cgroup = cgroup_cpu()
    cpu = "?"
    flags = ""
    with open("/proc/cpuinfo") as handle:
        for line in handle:
            if line.startswith("model name") and cpu == "?":
                cpu = line.split(":", 1)[1].strip()
            if line.startswith("flags") and not flags:
                flags = line
    return {
        "cores": os.cpu_count(),
        "cpu": cpu,
        "sha_ni": " sha_ni" in flags,
        "kernel": platform.release(),
        "python": platform.python_version(),
        "loadavg_start": [round(x, 2) for x in os.getloadavg()],
        "cgroup_cpu_max": cgroup["cpu_max"],
        "cgroup_quota_cores": cgroup["quota_cores"],
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--shard-mib", type=int, default=1024)
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--piece-mb", type=int, default=64, help="largest piece the source lists (verified)")
    parser.add_argument(
        "--chunk-kib", type=int, default=0, help="bytes a verified stream reads at a time (default: swarm.py's)"
    )
    parser.add_argument(
        "--depth", type=int, default=0, help="chunks a verified stream's worker keeps in flight (default: swarm.py's)"
    )
    parser.add_argument(
        "--pipe-kib",
        type=int,
        default=0,
        help="bytes of a spliced stream's pipe, and of each hash (default: swarm.py's)",
    )
    parser.add_argument(
        "--hash-lane", action="store_true", help="hash each spliced pipeful on the stream's hash lane, not in line"
    )
    parser.add_argument(
        "--switch-us",
        type=int,
        default=0,
        help="the pull's interpreter switch interval in microseconds (default: Python's 5000)",
    )
    parser.add_argument(
        "--methods", default=",".join(KINDS), help="methods to time (plain and verified always are); default: all"
    )
    parser.add_argument("--streams", default="4,8,16", help="other stream counts to time beside the derived one")
    parser.add_argument(
        "--split",
        action="store_true",
        help="source on half the cores, pulls on the other half (a source on another machine)",
    )
    parser.add_argument("--work", default=None, help="RAM folder to work in (default: a fresh one under /dev/shm)")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "staging-ram"))
    parser.add_argument("--label", default="", help="appended to the result file names")
    parser.add_argument("--note", default="", help="one sentence recorded with the result (the machine's role)")
    parser.add_argument(
        "--from-log",
        metavar="LOG",
        help="print the medians of a cut-off run's log (GB/s, ratio to plain, passes) for --shards x --shard-mib",
    )
    # The child process's arguments (one pull).
    parser.add_argument("--pull", type=kind_choice, help=argparse.SUPPRESS)
    for name in ("--shim", "--url", "--token-file", "--dest", "--revision", "--state"):
        parser.add_argument(name, help=argparse.SUPPRESS)
    parser.add_argument("--pull-streams", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--total-bytes", type=int, default=0, help="with --from-log: the checkpoint's bytes")
    args = parser.parse_args(argv)
    if args.pull:
        pull_once(args)
        return
    if args.from_log:
        # make_checkpoint.py's shards plus its small files (8,589,944,251 bytes for 8 x 1024 MiB).
        print(table_from_log(args.from_log, args.total_bytes or args.shards * args.shard_mib * 1024 * 1024))
        return
    work = Path(args.work or tempfile.mkdtemp(prefix="sw-ram-", dir="/dev/shm"))
    need = 2 * args.shards * args.shard_mib * 1024 * 1024 + (64 << 20)
    free = shutil.disk_usage(str(work.parent if args.work else work)).free
    if free < need:
        raise SystemExit(
            "%s has %d bytes free; the run needs %d (source and destination). Give --work on a larger "
            "RAM folder or fewer shards." % (work, free, need)
        )
    work.mkdir(parents=True, exist_ok=True)
    shim = link_shim(work / "shim", ROOT)
    sys.path.insert(0, str(shim))
    from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights import staging_source
    from ansible_collections.seatwright.fleet.plugins.module_utils.weights.staging import stream_count

    cores = sorted(os.sched_getaffinity(0))
    # --split: the source on the first half of the cores, the pulls on the other, as a source on
    # another machine would be; the destination then is a node of half the cores.
    source_cores, pull_cores = (cores[: len(cores) // 2], cores[len(cores) // 2 :]) if args.split else (cores, cores)
    chosen = stream_count(len(pull_cores))
    counts = sorted(set([chosen] + [int(c) for c in args.streams.split(",") if c]))
    info = machine()
    info["split"] = {"source_cores": len(source_cores), "pull_cores": len(pull_cores)} if args.split else None
    log(
        "machine: %s, %d cores, sha_ni %s; derived stream count %d%s"
        % (
            info["cpu"],
            info["cores"],
            info["sha_ni"],
            chosen,
            " (split: source on %d cores, pulls on %d)" % (len(source_cores), len(pull_cores)) if args.split else "",
        )
    )
    try:
        log("writing %d x %d MiB shards into %s" % (args.shards, args.shard_mib, work / "src"))
        made = make_checkpoint(work / "src", args.shards, args.shard_mib)
        log("ceilings: sha256 and BLAKE3 on one core, on all %d" % os.cpu_count())
        ceilings = {
            # The cores the machine really gives a CPU-bound load, whatever it shows.
            "spin_all_cores": round(spin_cores(), 2),
            "sha256_one_core_gb_s": round(hash_rate(1) / 1e9, 3),
            "sha256_all_cores_gb_s": round(hash_rate(os.cpu_count()) / 1e9, 3),
        }
        blake3 = blake3_module()
        if blake3 is not None:
            ceilings["blake3_one_core_gb_s"] = round(hash_rate(1, blake3.blake3) / 1e9, 3)
            ceilings["blake3_all_cores_gb_s"] = round(hash_rate(os.cpu_count(), blake3.blake3) / 1e9, 3)
        loop_bytes = min(made["bytes"], 4 << 30)
        for count in counts:
            ceilings["loopback_tcp_%d_streams_gb_s" % count] = round(loopback_rate(count, loop_bytes) / 1e9, 3)
        log("ceilings: %s" % ceilings)
        if args.split:
            # The source's serving threads start after this and keep its cores.
            os.sched_setaffinity(0, source_cores)
        secret = secrets.token_hex(20)
        (work / "token").write_text(secret)
        log("source: listings of whole files and of %d MiB pieces (hashing the source shards once)" % args.piece_mb)
        urls, servers = {}, []
        for kind, piece_bytes in (("whole", 0), ("verified", args.piece_mb << 20)):
            server, listing = serve_source(staging_source, made, work, kind, secret, piece_bytes)
            if piece_bytes:
                listed_piece_mib = listing["piece_bytes"] >> 20
            servers.append(server)
            urls[kind] = "http://127.0.0.1:%d" % server.server_address[1]
        urls["plain"] = urls["plain_readinto"] = urls["plain_waitall"] = urls["whole"]
        urls["verified_sha256"] = urls["verified"]
        asked = [kind_choice(name) for name in args.methods.split(",")]
        kinds = [k for k in KINDS if k in ("plain", "verified") or k in asked]
        kinds += [name for name in asked if name not in kinds]
        for kind in kinds:
            urls.setdefault(kind, urls.get(split_kind(kind).base, urls["verified"]))
        methods = [(kind, count) for count in counts for kind in kinds]
        # The child's tuning flags, as given here.
        tuning = ["--chunk-kib", str(args.chunk_kib), "--switch-us", str(args.switch_us), "--depth", str(args.depth)]
        tuning += ["--pipe-kib", str(args.pipe_kib)] + (["--hash-lane"] if args.hash_lane else [])
        records = []
        for index in range(1, args.passes + 1):
            shift = (index - 1) % len(methods)
            for kind, count in methods[shift:] + methods[:shift]:
                dest = work / "dst"
                shutil.rmtree(str(dest), ignore_errors=True)
                command = pull_command(
                    kind,
                    count,
                    shim,
                    urls[kind],
                    work,
                    dest,
                    made["revision"],
                    work / "state",
                    tuning,
                )
                load = os.getloadavg()[0]
                held = cgroup_cpu()["throttled_s"]
                before = resource.getrusage(resource.RUSAGE_SELF)
                ran = subprocess.run(
                    command,
                    check=False,
                    capture_output=True,
                    text=True,
                    preexec_fn=(lambda: os.sched_setaffinity(0, pull_cores)) if args.split else None,
                )
                if ran.returncode:
                    # What the pull said is the only clue to why it failed: show its end, then stop.
                    sys.stderr.write(ran.stderr[-4000:])
                    raise SystemExit("the %s pull at %d streams failed (exit %d)" % (kind, count, ran.returncode))
                inner = json.loads(ran.stdout)
                after = resource.getrusage(resource.RUSAGE_SELF)
                # The source serves from this process: its CPU time during the pull is this process's.
                inner["source_cpu_s"] = round(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime, 3)
                # Seconds the cgroup's quota held this cgroup's threads back during the pull (None: no cgroup stat).
                now_held = cgroup_cpu()["throttled_s"]
                inner["cgroup_throttled_s"] = round(now_held - held, 3) if held is not None else None
                gb_s = inner["bytes"] / inner["seconds"] / 1e9
                records.append(
                    dict(inner, gb_s=round(gb_s, 3), method=kind, streams=count, loadavg_1m_before=round(load, 2))
                )
                records[-1]["pass"] = index
                log(
                    "pass %d %-8s %2d streams %6.3f s %6.2f GB/s, cpu pull %.1f s source %.1f s%s"
                    % (
                        index,
                        kind,
                        count,
                        inner["seconds"],
                        gb_s,
                        inner["pull_cpu_s"],
                        inner["source_cpu_s"],
                        ", timeline %s" % json.dumps(inner["timeline"]) if inner.get("timeline") else "",
                    )
                )
                # Every pull so far, kept where a run cut off at a time limit still leaves it.
                partial = Path(args.out) / ("staging-ram%s.records.json" % ("-" + args.label if args.label else ""))
                partial.parent.mkdir(parents=True, exist_ok=True)
                partial.write_text(json.dumps({"machine": info, "ceilings": ceilings, "records": records}) + "\n")
        for server in servers:
            server.shutdown()
    finally:
        shutil.rmtree(str(work), ignore_errors=True)
    table = []
    for count in counts:
        row = {"streams": count, "chosen": count == chosen}
        for kind in kinds:
            mine = [r for r in records if r["method"] == kind and r["streams"] == count]
            seconds = statistics.median(r["seconds"] for r in mine)
            row["%s_s" % kind] = seconds
            row["%s_gb_s" % kind] = round(made["bytes"] / seconds / 1e9, 3)
            row["%s_cpu_s" % kind] = statistics.median(r["pull_cpu_s"] + r["source_cpu_s"] for r in mine)
            row["%s_cores_busy" % kind] = round(row["%s_cpu_s" % kind] / seconds, 1)
            row["%s_machine_busy_cores" % kind] = statistics.median(r["machine_busy_cores"] for r in mine)
        for kind in kinds[1:]:
            row["ratio_%s" % kind] = round(row["plain_s"] / row["%s_s" % kind], 3)
        row["ratio"] = row["ratio_verified"]
        if "plain_pieces" in kinds:
            # The price of hashing alone: verified against its own transport with the hashing taken out.
            row["ratio_pieces"] = round(row["plain_pieces_s"] / row["verified_s"], 3)
        checked = [r["piece_hash"] for r in records if r["method"] == "verified" and r["streams"] == count]
        row["piece_hash"] = checked[0]
        # The most verified / plain this machine allows: verified needs plain's CPU plus one hash of
        # every byte at the one-core rate of the digest it checked, and has os.cpu_count() cores to spend it on.
        needed = row["plain_cpu_s"] + made["bytes"] / (ceilings["%s_one_core_gb_s" % row["piece_hash"]] * 1e9)
        row["cpu_bound_ratio"] = round(min(1.0, row["plain_s"] / (needed / len(cores))), 3)
        table.append(row)
    figure = next(r for r in table if r["chosen"])
    pooled_plain, pooled_counts = whole_file_best(records, "plain", args.shards, made["bytes"])
    doc = {
        "command": "python3 bench/staging_ram.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "note": args.note,
        "machine": info,
        "checkpoint": {
            "bytes": made["bytes"],
            "files": len(made["files"]),
            "shards": args.shards,
            "shard_mib": args.shard_mib,
            "piece_mib": listed_piece_mib,
        },
        "chosen_streams": chosen,
        "ceilings": ceilings,
        "field_gb_s": FIELD_GB_S,
        "methods": kinds,
        "ratio_at_chosen": figure["ratio"],
        # The best the node's verified path did at any stream count against the best plain pull.
        "best_verified_over_best_plain": round(
            max(r["verified_gb_s"] for r in table) / max(r["plain_gb_s"] for r in table), 3
        ),
        # The same against plain's best configuration, its counts past the shard count pooled (whole_file_best).
        "best_plain_pooled": {"gb_s": round(pooled_plain, 3), "streams": pooled_counts},
        "best_verified_over_best_plain_pooled": round(max(r["verified_gb_s"] for r in table) / pooled_plain, 3),
        "target": 0.9,
        "table": table,
        "records": records,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "staging-ram" + ("-" + args.label if args.label else "")
    (out / (stem + ".json")).write_text(json.dumps(doc, indent=2) + "\n")
    (out / (stem + ".md")).write_text(markdown(doc))
    (out / (stem + ".records.json")).unlink()
    log("verified / plain at the chosen %d streams: %.3f (target >= 0.9)" % (chosen, figure["ratio"]))
    print(markdown(doc))


def markdown(doc):
    m, c = doc["machine"], doc["checkpoint"]
    lines = [
        "# Verified staging against a plain pull, into RAM over loopback",
        "",
        "Command: `%s`" % doc["command"],
        "",
    ]
    if doc["note"]:
        lines += [doc["note"], ""]
    split = m.get("split")
    lines += [
        "Machine: %s, %d cores (sha_ni %s), kernel %s, Python %s, load %s at the start.%s"
        % (
            m["cpu"],
            m["cores"],
            m["sha_ni"],
            m["kernel"],
            m["python"],
            m["loadavg_start"],
            " Split: the source on %d cores, the pulls on the other %d (a destination of %d cores)."
            % (split["source_cores"], split["pull_cores"], split["pull_cores"])
            if split
            else "",
        ),
        "Checkpoint: %d shards of %d MiB (%d files, %d bytes), served by the project's weight source from /dev/shm "
        "on 127.0.0.1 and pulled into /dev/shm (buffered writes); each pull in a fresh process, median of %d passes."
        % (c["shards"], c["shard_mib"], c["files"], c["bytes"], max(r["pass"] for r in doc["records"])),
        "",
        "Methods: %s. Each GB/s is the median pass; each ratio is plain's seconds over the method's; cores busy are "
        "the pull's and the source's CPU seconds over the wall seconds, and in brackets every core of the machine "
        "busy while the pull ran (/proc/stat)." % ", ".join(doc["methods"]),
        "",
    ]
    kinds = doc["methods"]
    head = ["streams"] + ["%s GB/s" % k for k in kinds] + ["%s / plain" % k for k in kinds[1:]]
    head += ["verified / plain by piece"] if "plain_pieces" in kinds else []
    head += ["cores busy (machine): %s" % ", ".join(kinds), "CPU bound on verified / plain"]
    lines += ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for r in doc["table"]:
        cells = ["%d%s" % (r["streams"], " (derived)" if r["chosen"] else "")]
        cells += ["%.2f%s" % (r["%s_gb_s" % k], " (%s)" % r["piece_hash"] if k == "verified" else "") for k in kinds]
        cells += ["**%.3f**" % r["ratio"] if k == "verified" else "%.3f" % r["ratio_%s" % k] for k in kinds[1:]]
        cells += ["%.3f" % r["ratio_pieces"]] if "plain_pieces" in kinds else []
        cells.append(", ".join("%.1f (%.1f)" % (r["%s_cores_busy" % k], r["%s_machine_busy_cores" % k]) for k in kinds))
        cells.append("%.3f" % r["cpu_bound_ratio"])
        lines.append("| " + " | ".join(cells) + " |")
    lines += ["", "Ceilings measured in the same run:", ""]
    lines += ["- %s: %.2f GB/s" % (k, v) for k, v in doc["ceilings"].items()]
    lines += [
        "",
        "verified / plain at the derived stream count (%d): **%.3f** (target >= %.1f). The field staged with parity "
        "at %.2f-%.2f GB/s; on loopback the source shares the cores, so these absolute figures are a floor."
        % (doc["chosen_streams"], doc["ratio_at_chosen"], doc["target"], doc["field_gb_s"][0], doc["field_gb_s"][1]),
        "",
        "Best verified at any stream count over the best plain pull: **%.3f** (%.2f against %.2f GB/s)."
        % (
            doc["best_verified_over_best_plain"],
            max(r["verified_gb_s"] for r in doc["table"]),
            max(r["plain_gb_s"] for r in doc["table"]),
        ),
        "",
        "The same against the plain pull's best configuration, where its stream counts of %d (the shard count) or "
        "more are one pull (every shard at once, one stream each): **%.3f** (plain %.2f GB/s, the median of "
        "every pass at %s streams)."
        % (
            c["shards"],
            doc["best_verified_over_best_plain_pooled"],
            doc["best_plain_pooled"]["gb_s"],
            ", ".join(str(n) for n in doc["best_plain_pooled"]["streams"]),
        ),
        "",
        "CPU bound: verified staging needs the plain pull's CPU (pull and source, measured) plus one hash of every "
        "byte at the measured one-core rate of the digest it checked; spread over every core, that allows at most "
        "the ratio in the last column. Cores busy = CPU seconds of the pull and the source / wall seconds.",
        "",
    ]
    lines += timeline_table(doc["records"])
    return "\n".join(lines)


def timeline_table(records):
    """Markdown lines: per piece method and stream count, the medians of where a pull's seconds went."""
    fields = ("before_run_s", "forks_s", "last_stream_start_s", "tail_s", "after_last_piece_s", "run_s")
    groups = {}
    for record in records:
        if record.get("timeline"):
            groups.setdefault((record["method"], record["streams"]), []).append(record["timeline"])
    if not groups:
        return []
    head = ["method", "streams"] + list(fields) + ["stream busy share", "pull s"]
    lines = [
        "Where a piece pull's seconds went (medians): before the swarm ran (listing, plans, opening files), forking",
        "the fetch workers, until the last stream began, the tail (the first stream out of pieces to the last",
        "piece's end), after the last piece (closing workers and files), the swarm's run, and the share of the",
        "run each stream spent on pieces.",
        "",
        "| " + " | ".join(head) + " |",
        "|" + "---|" * len(head),
    ]
    seconds = {}
    for record in records:
        seconds.setdefault((record["method"], record["streams"]), []).append(record["seconds"])
    for (method, streams), marks in sorted(groups.items(), key=lambda item: (item[0][1], item[0][0])):
        cells = [method, str(streams)]
        for field in fields:
            values = [m[field] for m in marks if m.get(field) is not None]
            cells.append("%.3f" % statistics.median(values) if values else "-")
        cells.append("%.3f" % statistics.median(m["stream_busy_share"] for m in marks))
        cells.append("%.3f" % statistics.median(seconds[(method, streams)]))
        lines.append("| " + " | ".join(cells) + " |")
    return lines + [""]


if __name__ == "__main__":
    main()
