"""bench/staging/file_writers.py: its layouts and one timed layout, on a small scale."""

import pytest
from conftest import load_script

WRITERS = load_script("bench/staging/file_writers.py")


def test_layouts_parse_and_bad_ones_are_named():
    assert WRITERS.parse_layouts("1:1,1:2,4:4") == [(1, 1), (1, 2), (4, 4)]
    for bad in ("1", "0:2", "a:b", "1:"):
        with pytest.raises(SystemExit, match="FILES:WRITERS"):
            WRITERS.parse_layouts(bad)


def test_two_writers_share_one_file_and_leave_nothing_behind(tmp_path):
    found = WRITERS.run(str(tmp_path), 1, 2, 4 * WRITERS.CHUNK)
    assert found["files"] == 1 and found["writers"] == 2
    assert found["gb_s"] > 0 and found["cpu_s_per_gb"] >= 0
    assert list(tmp_path.iterdir()) == []
