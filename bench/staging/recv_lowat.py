#!/usr/bin/env python3
"""What a socket low-water mark (SO_RCVLOWAT) saves a loopback transfer: GB/s and CPU seconds per GB.

S connections on 127.0.0.1 each carry the same file by sendfile(2), as the weight source sends, into
a 4 MiB buffer of the receiver's, as a staging destination receives; nothing is hashed or written.
Each mark is timed in every pass, in a rotated order, and the CPU is the whole process's (sender and
receiver both), so the figure is what the transfer itself costs. A mark in KiB is read as the product
reads with one (transport.BodyReader): wait in poll(2) until that much is in, then one recv(2); mark 0
is the kernel's default of one byte; `w` is a blocking recv(2) with MSG_WAITALL (WHOLE_CHUNK_RECV).

  python3 bench/staging/recv_lowat.py --dir /dev/shm --mib 2048 --streams 1,8 --marks 0,512,1024,w \
      --passes 3 --out lowat.json
"""

import argparse
import json
import os
import resource
import socket
import statistics
import sys
import threading
import time

CHUNK = 4 * 1024 * 1024


def parse_mark(text):
    """(low-water mark in bytes, MSG_WAITALL) from '1024' (KiB) or 'w'."""
    if text == "w":
        return 0, True
    if not text.isdigit():
        raise SystemExit("a mark is KiB (0 or more) or w: %r" % text)
    return int(text) * 1024, False


def cpu_s():
    used = resource.getrusage(resource.RUSAGE_SELF)
    return used.ru_utime + used.ru_stime


def receive(sock, size, lowat, waitall):
    """Read `size` bytes into one buffer; the recv(2) calls it took."""
    buffer = memoryview(bytearray(CHUNK))
    got = calls = 0
    mark = 1
    # A timeout makes Python poll before each recv; blocking, MSG_WAITALL waits in the kernel instead.
    sock.settimeout(None if waitall else 60)
    flags = socket.MSG_WAITALL if waitall else 0
    while got < size:
        want = min(CHUNK, size - got)
        wanted_mark = max(1, min(lowat, want)) if lowat else 1
        if wanted_mark != mark:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVLOWAT, wanted_mark)
            mark = wanted_mark
        count = sock.recv_into(buffer[:want], want, flags)
        calls += 1
        if not count:
            raise ConnectionError("the sender stopped %d bytes short" % (size - got))
        got += count
    return calls


def one_pass(path, streams, lowat, waitall):
    """(seconds, CPU seconds, recv calls) of `streams` connections each moving the whole file."""
    size = os.path.getsize(path)
    listener = socket.create_server(("127.0.0.1", 0), backlog=streams)
    calls = []

    def send():
        conn, _ = listener.accept()
        with conn, open(path, "rb") as handle:
            conn.sendfile(handle, 0, size)

    def pull():
        with socket.create_connection(listener.getsockname()) as sock:
            calls.append(receive(sock, size, lowat, waitall))

    threads = [threading.Thread(target=send) for _ in range(streams)]
    threads += [threading.Thread(target=pull) for _ in range(streams)]
    started_cpu, started = cpu_s(), time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    seconds, spent = time.perf_counter() - started, cpu_s() - started_cpu
    listener.close()
    if len(calls) != streams:
        raise SystemExit("a connection failed; see above")
    return seconds, spent, sum(calls)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/dev/shm", help="where the file to send is made (RAM, so no disk is timed)")
    parser.add_argument("--mib", type=int, default=2048, help="the file each connection carries")
    parser.add_argument("--streams", default="1", help="connection counts, comma-separated")
    parser.add_argument("--marks", default="0,1024", help="low-water marks in KiB, w: with MSG_WAITALL")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--out", help="JSON report")
    args = parser.parse_args(argv)
    marks = [(text, *parse_mark(text)) for text in args.marks.split(",")]
    counts = [int(count) for count in args.streams.split(",")]
    path = os.path.join(args.dir, "recv-lowat-%d.bin" % os.getpid())
    block = os.urandom(CHUNK)
    with open(path, "wb") as handle:
        for _ in range(args.mib * 1024 * 1024 // CHUNK):
            handle.write(block)
    size = os.path.getsize(path)
    rows = []
    try:
        for streams in counts:
            runs = {text: [] for text, _, _ in marks}
            for index in range(args.passes):
                shift = index % len(marks)
                for text, lowat, waitall in marks[shift:] + marks[:shift]:
                    seconds, spent, calls = one_pass(path, streams, lowat, waitall)
                    runs[text].append((seconds, spent, calls))
                    gb = streams * size / 1e9
                    print(
                        "streams %d mark %s pass %d: %.2f GB/s, %.3f CPU-s per GB, %d recv calls"
                        % (streams, text, index + 1, gb / seconds, spent / gb, calls),
                        flush=True,
                    )
            for text, _, _ in marks:
                gb = streams * size / 1e9
                rows.append(
                    {
                        "streams": streams,
                        "mark": text,
                        "gb_s": round(statistics.median(gb / run[0] for run in runs[text]), 3),
                        "cpu_s_per_gb": round(statistics.median(run[1] / gb for run in runs[text]), 4),
                        "recv_calls_per_gb": round(statistics.median(run[2] / gb for run in runs[text]), 1),
                    }
                )
    finally:
        os.unlink(path)
    doc = {
        "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
        "cores": os.cpu_count(),
        "bytes_per_stream": size,
        "passes": args.passes,
        "rows": rows,
    }
    for row in rows:
        print(
            "| %d | %s | %.2f | %.3f | %.0f |"
            % (row["streams"], row["mark"], row["gb_s"], row["cpu_s_per_gb"], row["recv_calls_per_gb"])
        )
    if args.out:
        with open(args.out + ".tmp", "w") as handle:
            json.dump(doc, handle, indent=1)
        os.replace(args.out + ".tmp", args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
