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
