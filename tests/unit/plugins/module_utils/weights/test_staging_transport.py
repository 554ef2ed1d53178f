"""Issue 49: one transport module under io/weights, the staging options converted once, no dead piece size."""

import ast

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import StagingError
from ansible_collections.seatwright.fleet.plugins.module_utils.weights import pieces
from ansible_collections.seatwright.fleet.plugins.module_utils.weights import staging as st
from conftest import ROOT

PACKAGE = "ansible_collections.seatwright.fleet.plugins.module_utils.io.weights"
FOLDER = ROOT / "plugins" / "module_utils" / "io" / "weights"


def imports_within(path):
    """The io/weights modules `path` imports, at its top or inside any function."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            if node.module == PACKAGE:
                found.update(alias.name for alias in node.names)
            elif node.module.startswith(PACKAGE + "."):
                found.add(node.module[len(PACKAGE) + 1 :].split(".")[0])
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith(PACKAGE + "."):
                    found.add(alias.name[len(PACKAGE) + 1 :].split(".")[0])
    return found - {path.stem}


def test_no_module_of_io_weights_imports_one_that_imports_it_back():
    graph = {path.stem: imports_within(path) for path in FOLDER.glob("*.py") if path.stem != "__init__"}
    circles = []

    def walk(name, trail):
        for other in sorted(graph.get(name, ())):
            if other in trail:
                circles.append(" -> ".join(trail[trail.index(other) :] + [other]))
            else:
                walk(other, trail + [other])

    for name in sorted(graph):
        walk(name, [name])
    assert not circles, "io/weights imports in a circle: %s" % "; ".join(sorted(set(circles)))


def test_the_whole_file_pull_and_the_swarm_share_one_transport():
    graph = {path.stem: imports_within(path) for path in FOLDER.glob("*.py")}
    assert "transport" in graph["staging_pull"] and "transport" in graph["swarm"]
    assert "staging_pull" not in graph["swarm"]


def test_the_dead_default_piece_size_is_gone():
    assert not hasattr(pieces, "PIECE_BYTES")


def params(**changes):
    base = dict(
        streams=0,
        connect_timeout_s=30,
        io_timeout_s=60,
        retries=3,
        progress_interval_s=5,
        bandwidth_limit_mb_per_s=12.5,
        nic_mb_per_s=0,
        upload_limit_mb_per_s=100,
        linger_s=15,
    )
    base.update(changes)
    return base


def test_stage_options_convert_megabytes_and_derive_the_stream_count_once():
    options = st.stage_options(params(), 16)
    assert options["bandwidth_limit_bytes_s"] == 12_500_000 and options["upload_limit_bytes_s"] == 100_000_000
    assert options["streams"] == 6 and options["nic_bytes_s"] == 0
    assert st.stage_options(params(streams=3, nic_mb_per_s=125), 2)["streams"] == 3
    assert st.stage_options(params(nic_mb_per_s=125), 2)["nic_bytes_s"] == 125_000_000


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("streams", -1),
        ("io_timeout_s", 0),
        ("connect_timeout_s", 0),
        ("retries", -1),
        ("bandwidth_limit_mb_per_s", -1),
        ("nic_mb_per_s", -5),
        ("upload_limit_mb_per_s", -1),
        ("linger_s", -1),
    ],
)
def test_stage_options_name_the_first_number_that_cannot_make_a_run(field, value):
    with pytest.raises(StagingError) as caught:
        st.stage_options(params(**{field: value}), 16)
    assert field in str(caught.value)


def test_the_options_are_converted_in_one_place():
    """Neither the pull nor the swarm converts a rate or range-checks an option of its own."""
    for name in ("staging_pull.py", "swarm.py"):
        text = (FOLDER / name).read_text()
        assert "_mb_per_s\"] * 1e6" not in text and "mb_per_s\") or 0) * 1e6" not in text, name
