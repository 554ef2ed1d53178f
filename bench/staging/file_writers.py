#!/usr/bin/env python3
"""Writers into one file against writers into files of their own: what sharing a file costs a piece stream.

A verified pull writes each piece with pwrite(2) at its offset, from whichever stream fetched it, so
past one stream per file two streams write into one file at once. Linux takes a file's lock for a
buffered write (tmpfs, ext4 and xfs alike), so those writes take turns, and a writer waiting for the
lock may spin on a core meanwhile. This times T threads writing --mib MiB in 4 MiB pwrites, spread
over F files, for each F,T given; median of --passes, with the process's CPU seconds per GB.

    python3 bench/staging/file_writers.py --dir /dev/shm --layouts 1:1,1:2,2:2,1:4,4:4 --out writers.json

Needs python3 only.
"""

import argparse
import json
import mmap
import os
import statistics
import sys
import threading
import time

CHUNK = 4 * 1024 * 1024


def run(folder, files, threads, total):
    """(GB/s, CPU seconds per GB) of `threads` writers putting `total` bytes into `files` files."""
    paths = [os.path.join(folder, "writers-%d-%d" % (os.getpid(), i)) for i in range(files)]
    fds = [os.open(path, os.O_RDWR | os.O_CREAT | os.O_TRUNC, 0o600) for path in paths]
    buffer = memoryview(mmap.mmap(-1, CHUNK))
    buffer[:] = os.urandom(CHUNK)
    # Each writer takes its own span of its file, so writers that share a file never write the same bytes.
    per_writer = total // CHUNK // threads

    def write(fd, start):
        offset = start
        for _ in range(per_writer):
            os.pwrite(fd, buffer, offset)
            offset += CHUNK

    workers = [
        threading.Thread(target=write, args=(fds[n % files], (n // files) * per_writer * CHUNK)) for n in range(threads)
    ]
    started, cpu = time.perf_counter(), time.process_time()
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    written = per_writer * threads * CHUNK
    for fd, path in zip(fds, paths):
        os.close(fd)
        os.unlink(path)
    return {
        "files": files,
        "writers": threads,
        "gb_s": written / wall / 1e9,
        "cpu_s_per_gb": cpu / (written / 1e9),
    }


def parse_layouts(text):
    layouts = []
    for item in text.split(","):
        files, _, threads = item.partition(":")
        if not (files.isdigit() and threads.isdigit() and int(files) > 0 and int(threads) > 0):
            raise SystemExit("--layouts takes FILES:WRITERS pairs such as 1:2,2:2; got %r" % item)
        layouts.append((int(files), int(threads)))
    return layouts


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dir", default="/dev/shm", help="folder to write in (its filesystem is what is timed)")
    parser.add_argument("--layouts", default="1:1,1:2,2:2", help="FILES:WRITERS pairs")
    parser.add_argument("--mib", type=int, default=1024, help="MiB written per layout and pass")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--out", default="")
    args = parser.parse_args()
    layouts = parse_layouts(args.layouts)
    results = {layout: [] for layout in layouts}
    for index in range(args.passes):
        for files, threads in layouts:
            found = run(args.dir, files, threads, args.mib * 1024 * 1024)
            results[(files, threads)].append(found)
            print(
                "pass %d: %d file(s), %d writer(s): %.2f GB/s, %.3f CPU-s per GB"
                % (index + 1, files, threads, found["gb_s"], found["cpu_s_per_gb"]),
                flush=True,
            )
    rows = []
    for (files, threads), passes in results.items():
        rows.append(
            {
                "files": files,
                "writers": threads,
                "gb_s": round(statistics.median(p["gb_s"] for p in passes), 3),
                "cpu_s_per_gb": round(statistics.median(p["cpu_s_per_gb"] for p in passes), 3),
            }
        )
    print("| files | writers | GB/s | CPU-s per GB |\n|---|---|---|---|")
    for row in rows:
        print("| %d | %d | %.2f | %.3f |" % (row["files"], row["writers"], row["gb_s"], row["cpu_s_per_gb"]))
    if args.out:
        doc = {"command": "python3 bench/staging/file_writers.py " + " ".join(sys.argv[1:]), "cores": os.cpu_count()}
        doc.update(dir=args.dir, mib=args.mib, passes=args.passes, rows=rows)
        with open(args.out, "w") as handle:
            json.dump(doc, handle, indent=1)


if __name__ == "__main__":
    main()
