"""bench/staging_ram.py: its method names (a base method, then a chunk size, huge pages and a receive, in that
order), and how a whole-file pull's best is taken."""

import pytest
from conftest import load_script

BENCH = load_script("bench/staging_ram.py")


@pytest.mark.parametrize(
    "name, expected",
    [
        ("plain", ("plain", None, 0, False)),
        ("verified", ("verified", None, 0, False)),
        ("whole", ("whole", None, 0, False)),
        ("plain_waitall", ("plain", True, 0, False)),
        ("verified_buffered_readinto", ("verified_buffered", False, 0, False)),
        ("verified_inline_c1024k_waitall", ("verified_inline", True, 1024, False)),
        ("verified_onelane_c2048k", ("verified_onelane", None, 2048, False)),
        ("verified_spliced_mapped", ("verified_spliced_mapped", None, 0, False)),
        ("verified_thp_waitall", ("verified", True, 0, True)),
        ("plain_thp", ("plain", None, 0, True)),
    ],
)
def test_a_method_name_splits_into_its_parts(name, expected):
    assert BENCH.split_kind(name) == expected


@pytest.mark.parametrize("name", ["bogus", "bogus_waitall", "verified_c1024k_readinto_waitall", "verified_cbigk"])
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
