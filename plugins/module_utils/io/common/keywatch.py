"""Where a secret shows up: every process's command line while a command runs, logs, evidence.

tools/seatwright-keywatch drives it. /proc/PID/cmdline is readable by every local user (and the
processes of containers on this host are in the host's /proc), so a key seen there is a key
leaked; the sample log keeps each distinct command line once, in a 0600 file.
"""

import json
import os
import re
import threading
import time
import urllib.parse

# A head or tail of the secret this long or longer is a piece of it (a copy cut before redaction
# left 27 of 40 characters in evidence, issue 50): the redactor's own bound (MIN_FRAGMENT_LEN).
MIN_PIECE = 8


def needles(secret):
    """The byte strings a secret is found by: as is, JSON-escaped and URL-quoted."""
    forms = {secret, json.dumps(secret)[1:-1], urllib.parse.quote(secret, safe="")}
    return sorted({form.encode("utf-8") for form in forms if form})


def pieces(secret, least=MIN_PIECE):
    """One pattern for the secret's heads and tails of `least` characters or more, shorter than it."""
    parts = {secret[:n] for n in range(least, len(secret))} | {secret[-n:] for n in range(least, len(secret))}
    if not parts:
        return None
    return re.compile(b"|".join(re.escape(p.encode("utf-8")) for p in sorted(parts, key=len, reverse=True)))


def pieces_in_bytes(data, forms, pattern):
    """Heads or tails of the secret in `data` outside its whole occurrences (a copy cut at a limit)."""
    if pattern is None:
        return 0
    for form in forms:
        data = data.replace(form, b"\0")
    return len(pattern.findall(data))


def read_cmdlines(proc="/proc"):
    """{pid: argv bytes, NULs as spaces} of every process readable now (vanished ones left out)."""
    found = {}
    try:
        names = os.listdir(proc)
    except OSError:
        return found
    for name in names:
        if not name.isdigit():
            continue
        try:
            with open(os.path.join(proc, name, "cmdline"), "rb") as handle:
                data = handle.read()
        except OSError:
            continue
        if data:
            found[int(name)] = data.replace(b"\0", b" ").strip()
    return found


class CmdlineSampler:
    """Samples every process's command line each `interval_s` in a thread until stopped."""

    def __init__(self, interval_s=0.5, proc="/proc"):
        self.interval_s = interval_s
        self.proc = proc
        self.samples = 0
        self.seen = {}  # (pid, cmdline) -> [first seen s, samples]
        self._stop = threading.Event()
        self._started = None
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def sample_once(self):
        now = time.monotonic() - self._started
        for pid, line in read_cmdlines(self.proc).items():
            entry = self.seen.setdefault((pid, line), [now, 0])
            entry[1] += 1
        self.samples += 1

    def _loop(self):
        while True:
            self.sample_once()
            if self._stop.wait(self.interval_s):
                break

    def start(self):
        self._started = time.monotonic()
        self._thread.start()
        return self

    def stop(self):
        self._stop.set()
        self._thread.join()
        return self

    def write_log(self, path):
        """One line per distinct command line: first seen (s), samples, pid, command line; mode 0600."""
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "wb") as handle:
            for (pid, line), (first, count) in sorted(self.seen.items(), key=lambda item: item[1][0]):
                handle.write(b"%.1f %d %d " % (first, count, pid) + line + b"\n")


def hits_in_bytes(data, forms):
    return sum(data.count(form) for form in forms)


def scan_file(path, forms, cut=None):
    """Occurrences of any form of the secret in one file, or with `cut` (pieces()) the pieces of it
    outside those (0 for what cannot be read)."""
    try:
        with open(path, "rb") as handle:
            data = handle.read()
    except OSError:
        return 0
    return pieces_in_bytes(data, forms, cut) if cut is not None else hits_in_bytes(data, forms)


def scan_tree(root, forms, cut=None):
    """(files read, {relative path: occurrences}) for every file under `root`, links not followed;
    with `cut`, the pieces of the secret instead (scan_file)."""
    count, hits = 0, {}
    for folder, _dirs, files in os.walk(root):
        for name in files:
            path = os.path.join(folder, name)
            if os.path.islink(path):
                continue
            count += 1
            found = scan_file(path, forms, cut)
            if found:
                hits[os.path.relpath(path, root)] = found
    return count, hits


def cmdline_hits(sampler, forms):
    """[(pid, samples, command line with the secret replaced)] of the sampled lines holding it."""
    out = []
    for (pid, line), (_first, count) in sorted(sampler.seen.items()):
        if hits_in_bytes(line, forms):
            shown = line
            for form in forms:
                shown = shown.replace(form, b"<the key>")
            out.append((pid, count, shown.decode("utf-8", "replace")[:300]))
    return out
