"""bench/staging_ram.py: its method names (a base method, then a chunk size, huge pages, write turns, a low-water
mark, lookahead and a receive, in that order), and how a whole-file pull's best is taken."""

import pytest
from conftest import load_script

BENCH = load_script("bench/staging_ram.py")


@pytest.mark.parametrize(
    "name, expected",
    [
        ("plain", ("plain", None, 0, False, None, None, None)),
        ("verified", ("verified", None, 0, False, None, None, None)),
        ("whole", ("whole", None, 0, False, None, None, None)),
        ("plain_waitall", ("plain", True, 0, False, None, None, None)),
        ("verified_buffered_readinto", ("verified_buffered", False, 0, False, None, None, None)),
        ("verified_inline_c1024k_waitall", ("verified_inline", True, 1024, False, None, None, None)),
        ("verified_onelane_c2048k", ("verified_onelane", None, 2048, False, None, None, None)),
        ("verified_spliced_mapped", ("verified_spliced_mapped", None, 0, False, None, None, None)),
        ("verified_thp_waitall", ("verified", True, 0, True, None, None, None)),
        ("plain_thp", ("plain", None, 0, True, None, None, None)),
        ("verified_lowat1024k", ("verified", None, 0, False, 1024, None, None)),
        ("plain_lowat0k", ("plain", None, 0, False, 0, None, None)),
        ("verified_c1024k_thp_lowat512k_waitall", ("verified", True, 1024, True, 512, None, None)),
        ("verified_noturn", ("verified", None, 0, False, None, False, None)),
        ("verified_turn_waitall", ("verified", True, 0, False, None, True, None)),
        ("plain_pieces_buffered_noturn_lowat1024k", ("plain_pieces_buffered", None, 0, False, 1024, False, None)),
        ("verified_noahead", ("verified", None, 0, False, None, None, False)),
        ("verified_noturn_ahead_waitall", ("verified", True, 0, False, None, False, True)),
    ],
)
def test_a_method_name_splits_into_its_parts(name, expected):
    assert BENCH.split_kind(name) == expected


@pytest.mark.parametrize(
    "name",
    [
        "bogus",
        "bogus_waitall",
        "verified_c1024k_readinto_waitall",
        "verified_cbigk",
        "verified_lowat1k_thp",
        "plain_lowatk",
        "verified_lowat1k_noturn",
        "verified_noahead_noturn",
    ],
)
def test_an_unknown_method_is_refused_with_the_known_ones(name):
    with pytest.raises(ValueError, match="unknown method"):
        BENCH.split_kind(name)


def _record(method, streams, seconds):
    return {"method": method, "streams": streams, "seconds": seconds}


def test_whole_file_counts_past_the_shard_count_pool_into_one_pull():
    # 8 shards: 8, 12 and 16 streams are one pull timed three times, so their passes give one median.
    records = [_record("plain", 8, s) for s in (1.0, 1.2, 1.1)]
    records += [_record("plain", 12, s) for s in (0.9, 1.0, 1.3)]
    records += [_record("plain", 16, s) for s in (1.05, 1.15, 1.25)]
    records += [_record("plain", 6, s) for s in (1.4, 1.5, 1.6)]
    records += [_record("verified", 12, 0.5)]
    gb_s, counts = BENCH.whole_file_best(records, "plain", 8, 10**9)
    assert counts == [8, 12, 16]
    assert gb_s == pytest.approx(1 / 1.1)
    # Below the shard count each count is a pull of its own, and the best of them wins where it is faster.
    records += [_record("plain", 4, s) for s in (0.5, 0.6, 0.7)]
    assert BENCH.whole_file_best(records, "plain", 8, 10**9) == (pytest.approx(1 / 0.6), [4])


@pytest.mark.parametrize(
    "files, expected",
    [
        # A namespace's root cgroup (v2): cpu.stat without cpu.max, as on the device machine.
        ({"cpu.stat": "usage_usec 10\nthrottled_usec 2500000\n"}, (None, None, 2.5)),
        ({"cpu.max": "max 100000", "cpu.stat": "throttled_usec 0\n"}, ("max 100000", None, 0.0)),
        ({"cpu.max": "1200000 100000", "cpu.stat": "throttled_usec 7\n"}, ("1200000 100000", 12.0, 7e-6)),
        # v1: the quota and period in files of their own, throttled time in nanoseconds.
        (
            {
                "cpu/cpu.cfs_quota_us": "400000",
                "cpu/cpu.cfs_period_us": "100000",
                "cpu/cpu.stat": "throttled_time 3000000000\n",
            },
            ("400000", 4.0, 3.0),
        ),
        ({"cpu/cpu.cfs_quota_us": "-1", "cpu/cpu.stat": "throttled_time 0\n"}, ("-1", None, 0.0)),
        ({}, (None, None, None)),
    ],
)
def test_the_cgroup_quota_and_its_throttling_are_read_wherever_they_are(tmp_path, files, expected):
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    found = BENCH.cgroup_cpu(str(tmp_path))
    assert (found["cpu_max"], found["quota_cores"]) == expected[:2]
    assert found["throttled_s"] == (pytest.approx(expected[2]) if expected[2] is not None else None)
