"""bench/staging_ram.py's method names: a base method, then a chunk size and a receive, in that order."""

import importlib.util

import pytest
from conftest import ROOT


def _bench():
    spec = importlib.util.spec_from_file_location("staging_ram", ROOT / "bench" / "staging_ram.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


BENCH = _bench()


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
