#!/usr/bin/env python3
"""The benchmark's plain copy: the same HTTP pull as weight_stage, with no hashing at all.

Same source, same number of streams, same chunk size, same double-buffered writer, same fsync
per file; only verification, temporary names and resume are missing. The gap between this and
weight_stage is the price of verification. --direct writes with O_DIRECT as weight_stage does,
so the comparison can be made with and without the page cache. Standard library only (it runs on
the lab nodes); the chunk size and the request authentication come from the project's
staging_auth.py, copied beside this file on a node (or read from the repository).

plain_pull.py --url http://172.30.98.11:8473 --token-file /run/token --dest /srv/plain --streams
4 [--direct]"""

import argparse
import fcntl
import http.client
import importlib.util
import json
import mmap
import os
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from urllib.parse import quote, urlsplit


def _load_staging_auth():
    here = Path(__file__).resolve().parent
    for candidate in (here / "staging_auth.py", here.parents[1] / "plugins/module_utils/weights/staging_auth.py"):
        if candidate.exists():
            spec = importlib.util.spec_from_file_location("staging_auth", candidate)
            module = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(module)
            return module
    raise SystemExit("staging_auth.py not found beside %s or in the repository" % __file__)


staging_auth = _load_staging_auth()
CHUNK = staging_auth.CHUNK_BYTES


def write_all(fd, chunk, direct):
    if direct and len(chunk) % 4096:
        fcntl.fcntl(fd, fcntl.F_SETFL, fcntl.fcntl(fd, fcntl.F_GETFL) & ~os.O_DIRECT)
    while chunk:
        chunk = chunk[os.write(fd, chunk) :]


def auth(secret, path, host, port):
    server = staging_auth.server_name(host, port)
    return {"Authorization": staging_auth.authorization(secret, "GET", path, "plain", server=server)[0]}


def fetch(host, port, secret, target, dest_path, direct):
    """One file, with weight_stage's pipeline: two buffers, the next received while the last is written."""
    conn = http.client.HTTPConnection(host, port, timeout=60)
    path = "/file/" + quote(target, safe="/")
    conn.request("GET", path, headers=auth(secret, path, host, port))
    response = conn.getresponse()
    if response.status != 200:
        raise SystemExit("HTTP %d for %s" % (response.status, target))
    remaining = int(response.getheader("Content-Length"))
    buffers = [memoryview(mmap.mmap(-1, CHUNK)) for _ in range(2)]
    os.makedirs(os.path.dirname(dest_path), exist_ok=True)
    fd = os.open(dest_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | (os.O_DIRECT if direct else 0), 0o644)
    writer, pending, turn = ThreadPoolExecutor(max_workers=1), None, 0
    try:
        while remaining:
            want, count = min(CHUNK, remaining), 0
            view, turn = buffers[turn], 1 - turn
            while count < want:
                got = response.readinto(view[count:want])
                if not got:
                    raise SystemExit("connection closed early for %s" % target)
                count += got
            if pending is not None:
                pending.result()
            pending = writer.submit(write_all, fd, view[:count], direct)
            remaining -= count
        if pending is not None:
            pending.result()
        os.fsync(fd)
    finally:
        writer.shutdown()
        os.close(fd)
        conn.close()


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--url", required=True)
    parser.add_argument("--token-file", required=True)
    parser.add_argument("--dest", required=True)
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--direct", action="store_true", help="write with O_DIRECT")
    args = parser.parse_args(argv)
    parts = urlsplit(args.url)
    with open(args.token_file) as handle:
        secret = handle.read().strip()
    started = time.monotonic()
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    conn.request("GET", "/listing", headers=auth(secret, "/listing", parts.hostname, parts.port))
    listing = json.loads(conn.getresponse().read().decode("utf-8"))
    conn.close()
    jobs = {}
    for entry in listing["files"]:
        target = "blobs/" + entry["blob"] if listing["layout"] == "hf-cache" else entry["path"]
        jobs[target] = (entry["size"], os.path.join(args.dest, entry["path"]))
    order = sorted(jobs, key=lambda t: -jobs[t][0])
    with ThreadPoolExecutor(max_workers=args.streams) as pool:
        for future in [
            pool.submit(fetch, parts.hostname, parts.port, secret, t, jobs[t][1], args.direct) for t in order
        ]:
            future.result()
    seconds = time.monotonic() - started
    total = sum(size for size, _ in jobs.values())
    json.dump({"bytes": total, "seconds": round(seconds, 3)}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
