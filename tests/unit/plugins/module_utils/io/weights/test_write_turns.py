"""A file's buffered writers take turns under a lock that sleeps (swarm.PieceFile.turn), one per process."""

import errno
import fcntl
import multiprocessing
import os

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights import swarm


def _free(path):
    """Whether another process may take the file's write turn right now (it does not wait for it)."""
    fd = os.open(path, os.O_RDWR)
    try:
        fcntl.lockf(fd, fcntl.LOCK_EX | fcntl.LOCK_NB, 1, swarm.WRITE_TURN_OFFSET)
    except OSError as exc:
        assert exc.errno in (errno.EAGAIN, errno.EACCES)
        return False
    finally:
        os.close(fd)
    return True


def _probe(path, answers):
    answers.put(_free(path))


def _ask_another_process(path):
    answers = multiprocessing.get_context("fork").Queue()
    child = multiprocessing.get_context("fork").Process(target=_probe, args=(path, answers))
    child.start()
    child.join(10)
    return answers.get(timeout=5)


def test_a_turn_keeps_other_processes_out_until_it_ends(tmp_path):
    path = str(tmp_path / "x.partial")
    handle = swarm.PieceFile(path, False, False, turns=True)
    try:
        assert _ask_another_process(path)
        with handle.turn():
            assert not _ask_another_process(path)
        assert _ask_another_process(path)
    finally:
        handle.close(False)


@pytest.mark.parametrize("turns", [True, False])
def test_buffered_writes_take_turns_and_land_whole(tmp_path, monkeypatch, turns):
    taken = []
    real = fcntl.lockf

    def lockf(fd, command, *rest):
        taken.append(command)
        return real(fd, command, *rest)

    monkeypatch.setattr(swarm.fcntl, "lockf", lockf)
    path = str(tmp_path / "x.partial")
    handle = swarm.PieceFile(path, False, False, turns)
    data = os.urandom(3 * 4096 + 17)
    try:
        handle.write_at(memoryview(data[4096:]), 4096)
        handle.write_at(memoryview(data[:4096]), 0)
    finally:
        handle.close(False)
    with open(path, "rb") as written:
        assert written.read() == data
    assert taken == ([fcntl.LOCK_EX, fcntl.LOCK_UN] * 2 if turns else [])


def test_a_filesystem_without_locks_keeps_writing_on_the_kernels_lock(tmp_path, monkeypatch):
    """NFS mounted nolock answers ENOLCK: the write still lands, and the file takes no more turns."""
    asked = []

    def lockf(_fd, command, *_rest):
        asked.append(command)
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(swarm.fcntl, "lockf", lockf)
    path = str(tmp_path / "x.partial")
    handle = swarm.PieceFile(path, False, False, turns=True)
    try:
        handle.write_at(memoryview(b"a" * 4096), 0)
        handle.write_at(memoryview(b"b" * 10), 4096)
    finally:
        handle.close(False)
    with open(path, "rb") as written:
        assert written.read() == b"a" * 4096 + b"b" * 10
    assert asked == [fcntl.LOCK_EX]
    assert handle.turns is False


def test_another_failure_to_take_a_turn_is_not_swallowed(tmp_path, monkeypatch):
    def lockf(_fd, _command, *_rest):
        raise OSError(errno.EBADF, "Bad file descriptor")

    monkeypatch.setattr(swarm.fcntl, "lockf", lockf)
    handle = swarm.PieceFile(str(tmp_path / "x.partial"), False, False, turns=True)
    try:
        with pytest.raises(OSError, match="Bad file"):
            handle.write_at(memoryview(b"a"), 0)
    finally:
        handle.close(False)
