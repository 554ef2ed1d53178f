"""Staging decisions: the listing a source sends, and what a destination skips, fetches or resumes."""

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import StagingError
from ansible_collections.seatwright.fleet.plugins.module_utils.weights import staging as st
from checkpoint_cases import REVISION

SHA = "a" * 64
GIT = "b" * 40


def _listing(**changes):
    doc = st.build_listing(
        "m",
        "hf-cache",
        REVISION,
        {"main": REVISION, "pr/1": "c" * 40},
        {
            "model-00001-of-00002.safetensors": {"size": 10, "sha256": SHA, "blob": SHA},
            "config.json": {"size": 3, "git_sha1": GIT, "blob": GIT},
            "alias/config.json": {"size": 3, "git_sha1": GIT, "blob": GIT},
        },
        [],
    )
    doc.update(changes)
    return doc


def test_listing_round_trip_keeps_only_refs_to_the_revision():
    doc = st.parse_listing(_listing(), "http://10.0.0.1:8473")
    assert doc["refs"] == {"main": REVISION}
    assert [f["path"] for f in doc["files"]] == ["alias/config.json", "config.json", "model-00001-of-00002.safetensors"]


def _with_file(**entry):
    return _listing(
        files=[dict({"path": "x.safetensors", "size": 1, "mode": 0o644, "sha256": SHA, "blob": SHA}, **entry)]
    )


@pytest.mark.parametrize(
    "doc, words",
    [
        ({"format": "nginx"}, "is another service on that port"),
        (
            _listing(problems=["truncated or malformed: a.safetensors (1 missing)"]),
            "refuses to serve checkpoint m: truncated",
        ),
        (_listing(layout="zip"), "layout 'zip'"),
        (_listing(revision="main"), "without a 40-hex revision"),
        (_listing(files=[]), "lists no files"),
        (_with_file(path="../etc/passwd"), "unsafe path '../etc/passwd'"),
        (_with_file(path="/etc/passwd"), "unsafe path"),
        (_with_file(path="a/./b"), "unsafe path"),
        (_with_file(size=-1), "without a size"),
        (_with_file(sha256=None), "without a sha256 or git blob digest"),
        (_with_file(blob="xyz"), "without a cache blob name"),
    ],
)
def test_bad_listings_are_refused_with_the_reason(doc, words):
    with pytest.raises(StagingError) as caught:
        st.parse_listing(doc, "http://10.0.0.1:8473")
    assert words in str(caught.value)


def test_units_share_one_transfer_per_blob():
    units = st.fetch_units(_listing())
    assert sorted(units) == ["blobs/" + SHA, "blobs/" + GIT]
    assert units["blobs/" + GIT]["paths"] == ["alias/config.json", "config.json"]


def test_folder_units_are_the_files_themselves():
    doc = _listing(layout="folder", files=[{"path": "sub/a.bin", "size": 1, "mode": 0o644, "sha256": SHA}])
    assert list(st.fetch_units(doc)) == ["sub/a.bin"]


@pytest.mark.parametrize(
    "target, layout, unit, name",
    [
        ("blobs/" + SHA, "hf-cache", {"sha256": SHA}, "blobs/" + SHA + ".incomplete"),
        ("sub/a.safetensors", "folder", {"sha256": SHA}, "sub/.a.safetensors.aaaaaaaaaaaa.partial"),
        ("config.json", "folder", {"git_sha1": GIT}, ".config.json.bbbbbbbbbbbb.partial"),
    ],
)
def test_partial_names(target, layout, unit, name):
    assert st.partial_name(target, layout, unit) == name


UNIT = {"target": "blobs/" + SHA, "size": 100, "sha256": SHA, "git_sha1": None, "paths": ["m.safetensors"]}
GOOD = {"sha256": SHA}
BAD = {"sha256": "f" * 64}


@pytest.mark.parametrize(
    "final, digests, partial, action, offset, words",
    [
        (None, None, None, "fetch", 0, "missing"),
        (None, None, 40, "resume", 40, "resuming an interrupted transfer at byte 40"),
        (None, None, 100, "resume", 100, "at byte 100"),
        (None, None, 0, "fetch", 0, "missing"),
        (None, None, 140, "fetch", 0, "missing"),
        ({"size": 100, "mtime_ns": 1}, GOOD, None, "skip", 0, "hashes as expected"),
        ({"size": 100, "mtime_ns": 1}, None, None, "skip", 0, "vouched for"),
        ({"size": 100, "mtime_ns": 1}, BAD, None, "fetch", 0, "in place but corrupt (sha256 ffff"),
        ({"size": 100, "mtime_ns": 1}, BAD, 30, "resume", 30, "corrupt"),
        ({"size": 99, "mtime_ns": 1}, None, None, "fetch", 0, "in place with 99 bytes, the source has 100"),
    ],
)
def test_plan_unit(final, digests, partial, action, offset, words):
    plan = st.plan_unit(UNIT, final, digests, partial)
    assert (plan["action"], plan["offset"]) == (action, offset)
    assert words in plan["reason"]


ENTRY = {"size": 100, "sha256": SHA, "mtime_ns": 7}


@pytest.mark.parametrize(
    "final, manifest, verify, hashed",
    [
        (None, {}, "full", False),
        ({"size": 5, "mtime_ns": 7}, {}, "full", False),
        ({"size": 100, "mtime_ns": 7}, {"m.safetensors": ENTRY}, "full", True),
        ({"size": 100, "mtime_ns": 7}, {"m.safetensors": ENTRY}, "quick", False),
        ({"size": 100, "mtime_ns": 8}, {"m.safetensors": ENTRY}, "quick", True),
        ({"size": 100, "mtime_ns": 7}, {"m.safetensors": dict(ENTRY, sha256="f" * 64)}, "quick", True),
        ({"size": 100, "mtime_ns": 7}, {}, "quick", True),
    ],
)
def test_needs_hash(final, manifest, verify, hashed):
    assert st.needs_hash(UNIT, final, manifest, verify) is hashed


@pytest.mark.parametrize(
    "unit, digests, words",
    [
        ({"sha256": SHA}, {"sha256": SHA}, None),
        ({"sha256": SHA}, {"sha256": "0" * 64}, "expected " + SHA),
        ({"git_sha1": GIT}, {"sha256": SHA, "git_sha1": GIT}, None),
        ({"git_sha1": GIT}, {"sha256": SHA, "git_sha1": "0" * 40}, "git blob sha1"),
    ],
)
def test_digest_problem(unit, digests, words):
    problem = st.digest_problem(unit, digests)
    assert (problem is None) if words is None else (words in problem)


@pytest.mark.parametrize(
    "rel, target",
    [
        ("config.json", "../../blobs/" + GIT),
        ("tokenizer/vocab.json", "../../../blobs/" + GIT),
    ],
)
def test_snapshot_links_are_relative(rel, target):
    assert st.link_target(rel, GIT) == target


@pytest.mark.parametrize(
    "allowance, idle, count, rate, burst, expected",
    [
        (0.0, 5.0, 10**9, 0, 0, (0.0, 0.0)),  # no cap
        (0.0, 1.0, 100e6, 100e6, 25e6, (-75e6, 0.75)),  # idle for a second earns a quarter second only
        (0.0, 60.0, 25e6, 100e6, 25e6, (0.0, 0.0)),  # a long idle still caps the burst
        (-50e6, 0.0, 50e6, 100e6, 25e6, (-100e6, 1.0)),  # debts add up across threads
        (10e6, 0.0, 5e6, 100e6, 25e6, (5e6, 0.0)),
    ],
)
def test_throttle_step(allowance, idle, count, rate, burst, expected):
    left, delay = st.throttle_step(allowance, idle, count, rate, burst)
    assert (left, delay) == pytest.approx(expected)


def test_throttle_holds_a_shared_rate(monkeypatch):
    """Four threads through one 50 MB/s cap move 20 MB in about 0.4 s, not faster."""
    import threading
    import time

    from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights.throttle import Throttle

    cap = Throttle(50e6)
    time.sleep(1.0)  # an idle start earns no more than the burst

    def send():
        for _ in range(5):
            cap.consume(1e6)

    started = time.monotonic()
    threads = [threading.Thread(target=send) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert time.monotonic() - started >= (20e6 - 50e6 * 0.25) / 50e6 * 0.95


def test_progress_record_estimates_time_left():
    record = st.progress_record("m", 42, "running", 250e6, 1000e6, 0.0, 2.5, {"a": 250e6})
    assert record["percent"] == 25.0
    assert record["rate_mb_per_s"] == 100.0
    assert record["eta_s"] == 7.5


@pytest.mark.parametrize(
    "url, parsed",
    [
        ("http://10.77.0.11:8473", ("10.77.0.11", 8473)),
        ("http://10.77.0.11:8473/", ("10.77.0.11", 8473)),
        ("https://10.77.0.11:8473", None),
        ("http://10.77.0.11:8473/files", None),
        ("10.77.0.11:8473", None),
        ("http://10.77.0.11:99999", None),
        (None, None),
    ],
)
def test_parse_source_url(url, parsed):
    if parsed is None:
        with pytest.raises(StagingError, match="source_url"):
            st.parse_source_url(url)
    else:
        assert st.parse_source_url(url) == parsed


def test_failure_summary_names_each_file_and_what_was_kept():
    text = st.failure_summary("m", {"blobs/x": "source corrupt", "blobs/y": "disk full"})
    assert "2 file(s): blobs/x: source corrupt; blobs/y: disk full" in text
    assert "no parity manifest was written" in text


@pytest.mark.parametrize(
    "streams, shared_files, turns",
    [
        # 8 shards: 6 and 8 streams were level with and without turns, 12 and 16 gained (device run).
        (6, 8, False),
        (8, 8, False),
        (12, 8, True),
        (16, 8, True),
        # One large file: any second stream writes into it with the first.
        (1, 1, False),
        (2, 1, True),
        # Only small files (one piece each): no file is written by two streams.
        (6, 0, False),
        (1, 0, False),
    ],
)
def test_streams_take_turns_only_where_they_outnumber_the_files(streams, shared_files, turns):
    assert st.write_turns(streams, shared_files) is turns
