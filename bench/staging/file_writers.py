#!/usr/bin/env python3
"""Writers into one file against writers into files of their own: what sharing a file costs a piece stream.

A verified pull writes each piece with pwrite(2) at its offset, from whichever stream fetched it, so
past one stream per file two streams write into one file at once. Linux takes a file's lock for a
buffered write (tmpfs, ext4 and xfs alike), so those writes take turns, and a writer waiting for the
lock may spin on a core meanwhile. This times T threads writing --mib MiB in 4 MiB pwrites, spread
over F files, for each F,T given; median of --passes, with the process's CPU seconds per GB.

A layout ending in `p` runs its writers as processes instead, as a pull's streams are, and one ending
in `t` as processes that take turns at each file first (fcntl(2) record locks, which sleep: the
product's swarm.WRITE_TURNS).

    python3 bench/staging/file_writers.py --dir /dev/shm --layouts 1:1,1:2,2:2,1:4,4:4,1:2p,1:2t --out writers.json

Needs python3 only.
"""

import argparse
import fcntl
import json
import mmap
import os
import resource
import statistics
import sys
import threading
import time

CHUNK = 4 * 1024 * 1024
# The byte whose record lock is a file's write turn: the one swarm.PieceFile.turn takes.
TURN_OFFSET = 1 << 62


def children_cpu_s():
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def run(folder, files, threads, total, how="thread"):
    """(GB/s, CPU seconds per GB) of `threads` writers putting `total` bytes into `files` files.

    how: "thread", "process", or "turns" (processes taking each file's write turn around a pwrite).
    """
    paths = [os.path.join(folder, "writers-%d-%d" % (os.getpid(), i)) for i in range(files)]
    fds = [os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600) for path in paths]
    buffer = memoryview(mmap.mmap(-1, CHUNK))
    buffer[:] = os.urandom(CHUNK)
    # Each writer takes its own span of its file, so writers that share a file never write the same bytes.
    per_writer = total // CHUNK // threads

    def write(fd, start):
        offset = start
        for _ in range(per_writer):
            if how == "turns":
                fcntl.lockf(fd, fcntl.LOCK_EX, 1, TURN_OFFSET)
            os.pwrite(fd, buffer, offset)
            if how == "turns":
                fcntl.lockf(fd, fcntl.LOCK_UN, 1, TURN_OFFSET)
            offset += CHUNK

    spans = [(fds[n % files], (n // files) * per_writer * CHUNK) for n in range(threads)]
    started, cpu = time.perf_counter(), time.process_time() + children_cpu_s()
    if how == "thread":
        workers = [threading.Thread(target=write, args=span) for span in spans]
        for worker in workers:
            worker.start()
        for worker in workers:
            worker.join()
    else:
        pids = []
        for span in spans:
            pid = os.fork()
            if not pid:
                try:
                    write(*span)
                finally:
                    os._exit(0)
            pids.append(pid)
        for pid in pids:
            os.waitpid(pid, 0)
    wall, cpu = time.perf_counter() - started, time.process_time() + children_cpu_s() - cpu
    written = per_writer * threads * CHUNK
    for fd, path in zip(fds, paths):
        os.close(fd)
        os.unlink(path)
    return {
        "files": files,
        "writers": threads,
        "how": how,
        "gb_s": written / wall / 1e9,
        "cpu_s_per_gb": cpu / (written / 1e9),
    }


HOW = {"": "thread", "p": "process", "t": "turns"}


def parse_layouts(text):
    """[(files, writers, how)] from FILES:WRITERS pairs, each perhaps ending in p or t."""
    layouts = []
    for item in text.split(","):
        files, _, threads = item.partition(":")
        how = threads[-1:] if threads[-1:] in ("p", "t") else ""
        threads = threads[: len(threads) - len(how)]
        if not (files.isdigit() and threads.isdigit() and int(files) > 0 and int(threads) > 0):
            raise SystemExit("--layouts takes FILES:WRITERS pairs such as 1:2,2:2,1:2t; got %r" % item)
        layouts.append((int(files), int(threads), HOW[how]))
    return layouts


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/dev/shm", help="folder to write in (its filesystem is what is timed)")
    parser.add_argument("--layouts", default="1:1,1:2,2:2", help="FILES:WRITERS pairs, p: processes, t: taking turns")
    parser.add_argument("--mib", type=int, default=1024, help="MiB written per layout and pass")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    layouts = parse_layouts(args.layouts)
    results = {layout: [] for layout in layouts}
    for index in range(args.passes):
        for files, threads, how in layouts:
            found = run(args.dir, files, threads, args.mib * 1024 * 1024, how)
            results[(files, threads, how)].append(found)
            print(
                "pass %d: %d file(s), %d writer(s) (%s): %.2f GB/s, %.3f CPU-s per GB"
                % (index + 1, files, threads, how, found["gb_s"], found["cpu_s_per_gb"]),
                flush=True,
            )
    rows = []
    for (files, threads, how), passes in results.items():
        rows.append(
            {
                "files": files,
                "writers": threads,
                "how": how,
                "gb_s": round(statistics.median(p["gb_s"] for p in passes), 3),
                "cpu_s_per_gb": round(statistics.median(p["cpu_s_per_gb"] for p in passes), 3),
            }
        )
    print("| files | writers | as | GB/s | CPU-s per GB |\n|---|---|---|---|---|")
    for row in rows:
        print(
            "| %d | %d | %s | %.2f | %.3f |"
            % (row["files"], row["writers"], row["how"], row["gb_s"], row["cpu_s_per_gb"])
        )
    if args.out:
        doc = {"command": "python3 bench/staging/file_writers.py " + " ".join(sys.argv[1:]), "cores": os.cpu_count()}
        doc.update(dir=args.dir, mib=args.mib, passes=args.passes, rows=rows)
        with open(args.out, "w") as handle:
            json.dump(doc, handle, indent=1)


if __name__ == "__main__":
    main()
