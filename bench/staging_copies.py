#!/usr/bin/env python3
"""Where verified staging's time goes into RAM: receive paths side by side, with the memory ceiling.

A question for the device machine (issue 25, part 4), not the product's pull: on loopback into
/dev/shm a plain pull already makes three copies of every byte (page cache to socket, socket to the
receive buffer, buffer to the file's pages), so hashing may cost memory traffic more than cores.
This times, in one run, S stream processes pulling the same shards from one sendfile server:

  write         recv_into a 4 MiB buffer, pwrite it (the product's transport, hashing off)
  write_hash    the same with BLAKE3 (or sha256) over the buffer after each receive
  map           recv_into the destination file's own pages (mmap, populated a piece at a time):
                one copy fewer
  map_hash      the same with the hash over the pages just received, while they are in cache
  map_hash_lane the hash on a second thread, a chunk behind the receive

and the machine's memory copy rate on all cores. Medians of --passes, busy cores from /proc/stat.

  python3 bench/staging_copies.py --shards 8 --shard-mib 1024 --streams 8 --passes 3

Recorded in bench/results/staging-ram/device-2026-12-03/ (copies-*.json; the sha256 ones ran before blake3 was
installed there, with the receive buffer pinned at 4 MiB by SO_RCVBUF, since removed).
"""

import argparse
import hashlib
import json
import mmap
import multiprocessing
import os
import socket
import statistics
import sys
import threading
import time

CHUNK = 4 * 1024 * 1024  # --chunk-kib sets it
PIECE = 64 * 1024 * 1024
MADV_POPULATE_WRITE = getattr(mmap, "MADV_POPULATE_WRITE", 23)
MODES = ("write", "write_hash", "map", "map_hash", "map_hash_lane")


def hasher():
    try:
        import blake3

        return blake3.blake3()
    except ImportError:
        return hashlib.sha256()


def busy_jiffies():
    with open("/proc/stat") as handle:
        fields = [int(x) for x in handle.readline().split()[1:]]
    return sum(fields) - fields[3] - fields[4], sum(fields)


def serve(listener, folder):
    def one(conn):
        handles = {}
        with conn, conn.makefile("rb") as lines:
            for line in lines:
                name, start, length = line.decode().split()
                if name not in handles:
                    handles[name] = open(os.path.join(folder, name), "rb")
                conn.sendfile(handles[name], int(start), int(length))

    while True:
        conn, _ = listener.accept()
        threading.Thread(target=one, args=(conn,), daemon=True).start()


def stream(port, jobs, mode, dest, start_at):
    sock = socket.create_connection(("127.0.0.1", port))
    buffer = memoryview(bytearray(CHUNK))
    lane = None
    if mode == "map_hash_lane":
        from concurrent.futures import ThreadPoolExecutor

        lane = ThreadPoolExecutor(max_workers=1)
    maps = {}
    while time.time() < start_at:
        time.sleep(0.001)
    for name, start, length in jobs:
        sock.sendall(("%s %d %d\n" % (name, start, length)).encode())
        digest = hasher() if "hash" in mode else None
        if mode.startswith("map"):
            if name not in maps:
                fd = os.open(os.path.join(dest, name), os.O_RDWR)
                maps[name] = mmap.mmap(fd, os.fstat(fd).st_size)
                os.close(fd)
            region = maps[name]
            try:
                region.madvise(MADV_POPULATE_WRITE, start, length)
            except OSError:
                pass
            view = memoryview(region)[start : start + length]
            got, pending = 0, None
            while got < length:
                end = min(length, got + CHUNK)
                chunk_start = got
                while got < end:
                    count = sock.recv_into(view[got:end])
                    if not count:
                        raise SystemExit("closed")
                    got += count
                if mode == "map_hash":
                    digest.update(view[chunk_start:end])
                elif lane is not None:
                    if pending is not None:
                        pending.result()
                    pending = lane.submit(digest.update, view[chunk_start:end])
            if pending is not None:
                pending.result()
            view.release()
        else:
            fd = os.open(os.path.join(dest, name), os.O_WRONLY)
            got = 0
            while got < length:
                want = min(CHUNK, length - got)
                have = 0
                while have < want:
                    count = sock.recv_into(buffer[have:want])
                    if not count:
                        raise SystemExit("closed")
                    have += count
                if digest is not None:
                    digest.update(buffer[:have])
                os.pwrite(fd, buffer[:have], start + got)
                got += have
            os.close(fd)
        if digest is not None:
            digest.hexdigest()
    for region in maps.values():
        region.close()
    sock.close()


def pull(port, names, size, streams, mode, dest):
    for name in names:
        path = os.path.join(dest, name)
        with open(path, "wb") as handle:
            handle.truncate(size)
    pieces = [(name, start, min(PIECE, size - start)) for name in names for start in range(0, size, PIECE)]
    jobs = [pieces[i::streams] for i in range(streams)]
    start_at = time.time() + 0.3
    procs = [multiprocessing.Process(target=stream, args=(port, j, mode, dest, start_at)) for j in jobs]
    for proc in procs:
        proc.start()
    while time.time() < start_at:
        time.sleep(0.0005)
    busy0, total0 = busy_jiffies()
    began = time.monotonic()
    for proc in procs:
        proc.join()
    wall = time.monotonic() - began
    busy1, total1 = busy_jiffies()
    cores = os.cpu_count() * (busy1 - busy0) / max(1, total1 - total0)
    for name in names:
        os.unlink(os.path.join(dest, name))
    return wall, cores


def copier(size, rounds, out):
    src, dst = bytearray(os.urandom(1024)) * (size // 1024), bytearray(size)
    began = time.monotonic()
    for _ in range(rounds):
        dst[:] = src
    out.put(size * rounds / (time.monotonic() - began))


def memcpy_ceiling(procs, size=256 * 1024 * 1024, rounds=8):
    queue = multiprocessing.Queue()
    workers = [multiprocessing.Process(target=copier, args=(size, rounds, queue)) for _ in range(procs)]
    for worker in workers:
        worker.start()
    rates = [queue.get() for _ in workers]
    for worker in workers:
        worker.join()
    return sum(rates)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--shard-mib", type=int, default=1024)
    parser.add_argument("--streams", default="8")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--chunk-kib", type=int, default=4096)
    parser.add_argument("--modes", default=",".join(MODES))
    parser.add_argument("--work", default="/dev/shm/sw-copies")
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    global CHUNK
    CHUNK = args.chunk_kib * 1024
    src, dest = os.path.join(args.work, "src"), os.path.join(args.work, "dest")
    os.makedirs(src, exist_ok=True)
    os.makedirs(dest, exist_ok=True)
    size = args.shard_mib * 1024 * 1024
    names = ["shard-%02d" % i for i in range(args.shards)]
    block = os.urandom(CHUNK)
    for name in names:
        with open(os.path.join(src, name), "wb") as handle:
            for _ in range(size // CHUNK):
                handle.write(block)
    listener = socket.create_server(("127.0.0.1", 0), backlog=64)
    server = multiprocessing.Process(target=serve, args=(listener, src), daemon=True)
    server.start()
    port = listener.getsockname()[1]
    result = {"cpus": os.cpu_count(), "bytes": size * len(names), "hash": type(hasher()).__name__}
    result["memcpy_all_cores_gb_s"] = round(memcpy_ceiling(os.cpu_count()) / 1e9, 2)
    result["memcpy_one_core_gb_s"] = round(memcpy_ceiling(1) / 1e9, 2)
    print(json.dumps(result), flush=True)
    modes = args.modes.split(",")
    rows = []
    for streams in [int(s) for s in args.streams.split(",")]:
        times = {mode: [] for mode in modes}
        for number in range(args.passes):
            order = modes[number % len(modes) :] + modes[: number % len(modes)]
            for mode in order:
                wall, cores = pull(port, names, size, streams, mode, dest)
                times[mode].append((wall, cores))
                print(
                    "streams %d pass %d %-14s %6.2f GB/s  %4.1f cores"
                    % (streams, number + 1, mode, size * len(names) / wall / 1e9, cores),
                    flush=True,
                )
        for mode in modes:
            wall = statistics.median(w for w, _ in times[mode])
            cores = statistics.median(c for _, c in times[mode])
            rows.append(
                {
                    "streams": streams,
                    "mode": mode,
                    "gb_s": round(size * len(names) / wall / 1e9, 2),
                    "cores": round(cores, 1),
                }
            )
    base = {row["streams"]: row["gb_s"] for row in rows if row["mode"] == "write"}
    for row in rows:
        row["vs_write"] = round(row["gb_s"] / base[row["streams"]], 3) if row["streams"] in base else None
        print(json.dumps(row), flush=True)
    result["rows"] = rows
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(result, handle, indent=1)
    server.terminate()
    listener.close()
    for name in names:
        os.unlink(os.path.join(src, name))
    return 0


if __name__ == "__main__":
    sys.exit(main())
