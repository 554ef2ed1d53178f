"""Secrets handed to a controller tool in a file: the one way the seat's API key reaches
tools/seatwright-qualify and tools/seatwright-bench from a role.

A file keeps the key off every command line (`ps` shows argv to every local user) and out of
Ansible's `environment:` (which Ansible writes into the `/bin/sh -c` line it runs and -vvv prints).
The file must be a regular file only its owner can read; one trailing newline is dropped.
"""

import os
import stat

# Longest key accepted: a bearer token, not a document.
MAX_SECRET_BYTES = 4096


def secret_file_problem(st_mode, size):
    """None when a file of this mode and size may hold a secret, else what is wrong with it."""
    if not stat.S_ISREG(st_mode):
        return "is not a regular file"
    if stat.S_IMODE(st_mode) & 0o077:
        return "is readable by others (mode %04o); chmod 600 it" % stat.S_IMODE(st_mode)
    if size > MAX_SECRET_BYTES:
        return "holds %d bytes, more than a key (%d at most)" % (size, MAX_SECRET_BYTES)
    return None


def read_secret_file(path, option):
    """The secret in `path`; ValueError naming `option` and what to do when it cannot be used."""
    try:
        # O_NOFOLLOW: a link planted where the file should be is refused, not followed.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NOFOLLOW", 0))
    except OSError as exc:
        raise ValueError("%s %s: cannot open it: %s" % (option, path, exc.strerror))
    try:
        info = os.fstat(fd)
        problem = secret_file_problem(info.st_mode, info.st_size)
        if problem:
            raise ValueError("%s %s %s" % (option, path, problem))
        data = os.read(fd, MAX_SECRET_BYTES + 1)
    finally:
        os.close(fd)
    text = data.decode("utf-8", "replace")
    text = text[:-1] if text.endswith("\n") else text
    if not text or any(c in text for c in "\r\n\0"):
        raise ValueError("%s %s: the file must hold the key alone on one line" % (option, path))
    return text
