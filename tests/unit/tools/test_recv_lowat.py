"""bench/staging/recv_lowat.py: its marks, and one small run of every kind of receive."""

import json

import pytest
from conftest import load_script

LOWAT = load_script("bench/staging/recv_lowat.py")


def test_marks_parse_and_bad_ones_are_named():
    assert LOWAT.parse_mark("0") == (0, False)
    assert LOWAT.parse_mark("1024") == (1024 * 1024, False)
    assert LOWAT.parse_mark("w") == (0, True)
    for bad in ("-1", "1kw", "x", ""):
        with pytest.raises(SystemExit, match="a mark is KiB"):
            LOWAT.parse_mark(bad)


def test_every_receive_moves_the_whole_file_and_leaves_nothing_behind(tmp_path):
    out = tmp_path / "lowat.json"
    work = tmp_path / "work"
    work.mkdir()
    argv = ["--dir", str(work), "--mib", "8", "--streams", "1,2", "--marks", "0,1024,w", "--passes", "1"]
    assert LOWAT.main(argv + ["--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["bytes_per_stream"] == 8 * 1024 * 1024
    assert [(row["streams"], row["mark"]) for row in doc["rows"]] == [
        (streams, mark) for streams in (1, 2) for mark in ("0", "1024", "w")
    ]
    for row in doc["rows"]:
        assert row["gb_s"] > 0 and row["recv_calls_per_gb"] > 0
    # A 1 MiB mark takes at least 1 MiB a call, but for a 4 MiB chunk's last part: 5 calls a chunk at most.
    by_mark = {row["mark"]: row for row in doc["rows"] if row["streams"] == 1}
    assert by_mark["1024"]["recv_calls_per_gb"] * 8 * 1024 * 1024 / 1e9 <= 5 * 2 + 0.01
    assert list(work.iterdir()) == []
