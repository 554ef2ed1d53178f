"""bench/staging/file_writers.py: its layouts and one timed layout, on a small scale."""

import pytest
from conftest import load_script

WRITERS = load_script("bench/staging/file_writers.py")


def test_layouts_parse_and_bad_ones_are_named():
    assert WRITERS.parse_layouts("1:1,1:2,4:4") == [(1, 1, "thread"), (1, 2, "thread"), (4, 4, "thread")]
    assert WRITERS.parse_layouts("1:2p,8:16t") == [(1, 2, "process"), (8, 16, "turns")]
    for bad in ("1", "0:2", "a:b", "1:", "1:t", "1:2x", "1p:2"):
        with pytest.raises(SystemExit, match="FILES:WRITERS"):
            WRITERS.parse_layouts(bad)


def test_two_writers_share_one_file_and_leave_nothing_behind(tmp_path):
    found = WRITERS.run(str(tmp_path), 1, 2, 4 * WRITERS.CHUNK)
    assert found["files"] == 1 and found["writers"] == 2
    assert found["gb_s"] > 0 and found["cpu_s_per_gb"] >= 0
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("how", ["process", "turns"])
def test_writer_processes_write_every_byte_and_leave_nothing_behind(tmp_path, how):
    found = WRITERS.run(str(tmp_path), 1, 2, 4 * WRITERS.CHUNK, how)
    assert found["how"] == how and found["gb_s"] > 0
    # Their CPU is counted (children's), not left out as the parent's idle wait.
    assert found["cpu_s_per_gb"] > 0
    assert list(tmp_path.iterdir()) == []


def test_the_bench_takes_the_products_write_turn():
    """The bench stands alone (python3 only), so it keeps the byte of its own: the same one."""
    from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights import swarm

    assert WRITERS.TURN_OFFSET == swarm.WRITE_TURN_OFFSET
