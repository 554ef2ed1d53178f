"""Source and destination talking over loopback: the issue's staging behaviours, file by file."""

import errno
import http.client
import json
import os
import threading
import time

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import StagingError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights import staging_pull as staging_pull
from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights import staging_source as staging_source
from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights.checkpoint_scan import scan_checkpoint
from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights.staging_pull import StageLock, stage
from ansible_collections.seatwright.fleet.plugins.module_utils.weights.checkpoint import MANIFEST_NAME
from ansible_collections.seatwright.fleet.plugins.module_utils.weights.staging_auth import authorization, server_name
from checkpoint_cases import (
    OTHER_REVISION,
    REVISION,
    big_shards,
    blob_name,
    blob_path,
    flip_byte,
    truncate,
    write_folder,
    write_hf_entry,
)

TOKEN = "t" * 32
SHARD2 = "model-00002-of-00003.safetensors"


class Source:
    """A running source for one checkpoint on 127.0.0.1, stopped when the test ends."""

    def __init__(self, path, state_dir, revision=REVISION):
        self.path, self.state_dir, self.revision = path, state_dir, revision
        self.server = None

    def start(self):
        listing, served, _ = staging_source.source_listing(self.path, self.revision, "m", self.state_dir)
        self.server = staging_source.bind_server(
            "127.0.0.1", 0, TOKEN, listing, served, 99, os.path.join(self.state_dir, "pid")
        )
        thread = threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05})
        thread.daemon = True
        thread.start()
        return "http://127.0.0.1:%d" % self.server.server_address[1]

    def stop(self):
        if self.server:
            self.server.shutdown()
            self.server.server_close()


@pytest.fixture
def source(tmp_path):
    files = big_shards(3, 2)
    running = Source(write_hf_entry(tmp_path / "src", files), str(tmp_path / "src-state"))
    running.url = running.start()
    running.files = files
    yield running
    running.stop()


def options(tmp_path, url, **changes):
    base = dict(
        dest=str(tmp_path / "dst" / "models--org--model"),
        source_url=url,
        token=TOKEN,
        client="node-b",
        name="m",
        revision=REVISION,
        streams=3,
        verify="full",
        direct_io=True,
        bandwidth_limit_bytes_s=0,
        state_dir=str(tmp_path / "dst-state"),
        connect_timeout_s=3,
        io_timeout_s=5,
        retries=2,
        progress_interval_s=1,
        source_label="node-a:/src",
    )
    base.update(changes)
    return base


def dest_blob(tmp_path, source, name):
    return str(tmp_path / "dst" / "models--org--model" / "blobs" / blob_name(name, source.files[name]))


def test_first_run_stages_everything_and_writes_the_manifest_last(tmp_path, source):
    result = stage(options(tmp_path, source.url))
    assert result["changed"] and result["verified"] and result["manifest_written"]
    assert result["files_fetched"] == 5 and result["bytes_transferred"] == result["bytes_total"]
    report, _ = scan_checkpoint(result["dest"], REVISION, "full")
    assert report["verified"] and report["complete"]
    quick, _ = scan_checkpoint(result["dest"], REVISION, "quick")
    assert quick["verified"] and quick["parity"] == "manifest"
    assert quick["refs"] == {"main": REVISION}
    manifest_time = os.stat(result["manifest"]).st_mtime_ns
    assert all(
        os.stat(os.path.join(result["dest"], t["target"])).st_mtime_ns <= manifest_time for t in result["transfers"]
    )


@pytest.mark.parametrize("verify", ["full", "quick"])
def test_second_run_moves_nothing(tmp_path, source, verify):
    stage(options(tmp_path, source.url))
    before = os.stat(stage(options(tmp_path, source.url))["manifest"]).st_mtime_ns
    again = stage(options(tmp_path, source.url, verify=verify))
    assert not again["changed"] and again["bytes_transferred"] == 0
    assert again["files_skipped"] == 5
    assert os.stat(again["manifest"]).st_mtime_ns == before


def test_corrupt_destination_file_is_the_only_one_restaged(tmp_path, source):
    stage(options(tmp_path, source.url))
    flip_byte(dest_blob(tmp_path, source, SHARD2))
    result = stage(options(tmp_path, source.url))
    assert [t["target"].split("/")[-1] for t in result["transfers"]] == [blob_name(SHARD2, source.files[SHARD2])]
    assert "in place but corrupt" in result["transfers"][0]["reason"]
    assert result["bytes_transferred"] == len(source.files[SHARD2])
    assert scan_checkpoint(result["dest"], REVISION, "full")[0]["verified"]


def test_corrupt_source_is_reported_and_replaces_nothing(tmp_path, source):
    stage(options(tmp_path, source.url))
    kept = dest_blob(tmp_path, source, SHARD2)
    flip_byte(kept)
    flip_byte(blob_path(source.path, SHARD2))
    with pytest.raises(StagingError) as caught:
        stage(options(tmp_path, source.url))
    assert "its copy of %s is corrupt" % SHARD2 in str(caught.value)
    assert "no parity manifest was written" in str(caught.value)
    with open(kept, "rb") as handle:
        assert handle.read() != source.files[SHARD2]
    assert not os.path.exists(os.path.join(options(tmp_path, "")["dest"], "snapshots", REVISION, MANIFEST_NAME))
    assert not any(name.endswith(".incomplete") for name in os.listdir(os.path.dirname(kept)))


def test_truncated_source_is_refused_before_anything_is_written(tmp_path, source):
    source.stop()
    truncate(blob_path(source.path, SHARD2), 4096)
    url = source.start()
    with pytest.raises(StagingError) as caught:
        stage(options(tmp_path, url))
    assert "refuses to serve" in str(caught.value) and SHARD2 in str(caught.value)
    assert "4096 missing" in str(caught.value)
    assert not os.path.exists(tmp_path / "dst")


@pytest.mark.parametrize("kept_bytes, good", [(1 << 20, True), (1 << 20, False)])
def test_partial_file_resumes_from_where_it_stopped(tmp_path, source, kept_bytes, good):
    payload = source.files[SHARD2]
    blobs = tmp_path / "dst" / "models--org--model" / "blobs"
    blobs.mkdir(parents=True)
    prefix = payload[:kept_bytes] if good else bytes(kept_bytes)
    (blobs / (blob_name(SHARD2, payload) + ".incomplete")).write_bytes(prefix)
    result = stage(options(tmp_path, source.url))
    resumed = [t for t in result["transfers"] if t["action"] == "resume"]
    assert len(resumed) == 1
    assert resumed[0]["bytes_reused"] == (kept_bytes if good else 0)
    # A bad prefix costs the resumed tail, then the whole file again.
    assert resumed[0]["bytes"] == (len(payload) - kept_bytes if good else 2 * len(payload) - kept_bytes)
    assert scan_checkpoint(result["dest"], REVISION, "full")[0]["verified"]


@pytest.mark.parametrize("direct_io, reused", [(True, 1 << 20), (False, (1 << 20) + 123)])
def test_direct_io_resumes_from_a_block_boundary(tmp_path, source, direct_io, reused):
    payload = source.files[SHARD2]
    blobs = tmp_path / "dst" / "models--org--model" / "blobs"
    blobs.mkdir(parents=True)
    (blobs / (blob_name(SHARD2, payload) + ".incomplete")).write_bytes(payload[: (1 << 20) + 123])
    result = stage(options(tmp_path, source.url, direct_io=direct_io))
    resumed = [t for t in result["transfers"] if t["action"] == "resume"][0]
    assert resumed["bytes_reused"] == reused and resumed["direct_io"] is direct_io
    assert all(t["direct_io"] is direct_io for t in result["transfers"])
    assert scan_checkpoint(result["dest"], REVISION, "full")[0]["verified"]


def test_filesystem_refusing_direct_io_falls_back_to_buffered_writes(tmp_path, source, monkeypatch):
    real_open = os.open

    def no_direct(path, flags, *rest):
        if flags & os.O_DIRECT:
            raise OSError(errno.EINVAL, "Invalid argument")
        return real_open(path, flags, *rest)

    monkeypatch.setattr(staging_pull.os, "open", no_direct)
    result = stage(options(tmp_path, source.url))
    assert not any(t["direct_io"] for t in result["transfers"])
    assert scan_checkpoint(result["dest"], REVISION, "full")[0]["verified"]


def test_lost_connection_mid_file_resumes_in_the_same_run(tmp_path, source, monkeypatch):
    original = staging_source._Handler._send_file
    cut = {"done": False}

    def flaky(handler, target, client):
        if target.endswith(blob_name(SHARD2, source.files[SHARD2])) and not cut["done"]:
            cut["done"] = True
            size = handler.server.sizes[target]
            handler.send_response(200)
            handler.send_header("Content-Length", str(size))
            handler.end_headers()
            with open(handler.server.served[target], "rb") as handle:
                handler.wfile.write(handle.read(size // 2))
            handler.close_connection = True
            return
        original(handler, target, client)

    monkeypatch.setattr(staging_source._Handler, "_send_file", flaky)
    result = stage(options(tmp_path, source.url))
    record = [t for t in result["transfers"] if t["target"].endswith(blob_name(SHARD2, source.files[SHARD2]))][0]
    assert record["interruptions"] == 1
    assert scan_checkpoint(result["dest"], REVISION, "full")[0]["verified"]


def test_bandwidth_cap_holds_the_average_rate(tmp_path, source):
    rate = 20e6
    result = stage(options(tmp_path, source.url, bandwidth_limit_bytes_s=rate))
    assert result["transfer_s"] >= 0.9 * result["bytes_transferred"] / rate


def test_check_mode_predicts_and_writes_nothing(tmp_path, source):
    result = stage(options(tmp_path, source.url), check_mode=True)
    assert result["changed"] and not result["manifest_written"]
    assert set(p["action"] for p in result["plan"].values()) == {"fetch"}
    assert not os.path.exists(tmp_path / "dst")
    stage(options(tmp_path, source.url))
    assert not stage(options(tmp_path, source.url), check_mode=True)["changed"]


def test_check_mode_sees_a_manifest_that_no_longer_matches(tmp_path, source):
    first = stage(options(tmp_path, source.url))
    blob = dest_blob(tmp_path, source, SHARD2)
    os.utime(blob, ns=(os.stat(blob).st_atime_ns, os.stat(blob).st_mtime_ns + 10**9))
    with open(first["manifest"], "rb") as handle:
        before = handle.read()
    predicted = stage(options(tmp_path, source.url), check_mode=True)
    assert predicted["changed"] and not predicted["manifest_written"] and predicted["bytes_transferred"] == 0
    assert predicted["diff"]["before"] and predicted["diff"]["after"]
    with open(first["manifest"], "rb") as handle:
        assert handle.read() == before
    assert stage(options(tmp_path, source.url))["manifest_written"]


def test_progress_file_ends_done(tmp_path, source):
    stage(options(tmp_path, source.url))
    with open(tmp_path / "dst-state" / "progress-m.json") as handle:
        record = json.load(handle)
    assert record["state"] == "done" and record["bytes_done"] == record["bytes_total"] > 0


def test_pinned_revision_must_match_the_source(tmp_path, source):
    with pytest.raises(StagingError, match="serves revision %s" % REVISION):
        stage(options(tmp_path, source.url, revision=OTHER_REVISION))
    assert not os.path.exists(tmp_path / "dst")


def test_wrong_token_is_refused(tmp_path, source):
    with pytest.raises(StagingError, match="refused this run's credentials: it is not this run's weights source"):
        stage(options(tmp_path, source.url, token="x" * 32))


def test_unreachable_source_says_where_it_looked(tmp_path):
    with pytest.raises(StagingError, match="could not reach the weights source at http://127.0.0.1:9"):
        stage(options(tmp_path, "http://127.0.0.1:9", connect_timeout_s=1))


def test_one_run_at_a_time_per_destination(tmp_path, source):
    opts = options(tmp_path, source.url)
    with StageLock(opts["state_dir"], opts["dest"]):
        with pytest.raises(StagingError, match=r"another staging run \(pid %d\)" % os.getpid()):
            stage(opts)


def test_folder_source_without_digests_is_hashed_once(tmp_path):
    files = big_shards(2, 1)
    running = Source(write_folder(tmp_path / "src", files), str(tmp_path / "src-state"), revision=None)
    url = running.start()
    try:
        result = stage(options(tmp_path, url, dest=str(tmp_path / "dst"), revision=None))
        assert result["layout"] == "folder" and result["files_fetched"] == 4
        cache = [n for n in os.listdir(tmp_path / "src-state") if n.startswith("source-hashes-")]
        assert len(cache) == 1
        started = time.monotonic()
        staging_source.source_listing(running.path, None, "m", running.state_dir)
        assert time.monotonic() - started < 5
    finally:
        running.stop()
    report, _ = scan_checkpoint(str(tmp_path / "dst"), None, "full")
    assert report["complete"] and report["parity"] == "hashed"
    assert scan_checkpoint(str(tmp_path / "dst"))[0]["verified"]


def test_source_serves_only_listed_files_with_ranges(tmp_path, source):
    host, port = source.url[len("http://") :].split(":")
    target = "blobs/" + blob_name(SHARD2, source.files[SHARD2])

    def get(path, **headers):
        conn = http.client.HTTPConnection(host, int(port), timeout=5)
        auth = authorization(TOKEN, "GET", path, "test", server=server_name(host, port))[0]
        conn.request("GET", path, headers=dict({"Authorization": auth}, **headers))
        response = conn.getresponse()
        return response.status, response.read()

    assert get("/file/" + target, Range="bytes=100-") == (206, source.files[SHARD2][100:])
    assert get("/file/../../etc/passwd")[0] == 404
    # A closed range is a piece (peer-assisted staging); suffix, reversed and overlong ranges are refused.
    assert get("/file/" + target, Range="bytes=0-10") == (206, source.files[SHARD2][:11])
    for bad in ("bytes=-10", "bytes=10-5", "bytes=0-%d" % len(source.files[SHARD2]), "bytes=1-2,4-5", "items=0-"):
        assert get("/file/" + target, Range=bad)[0] == 416, bad
    assert get("/listing", Authorization="Bearer " + TOKEN)[0] == 403


@pytest.fixture
def small_chunks(monkeypatch):
    """64 KiB chunks: a 2 MiB shard is 32 of them, so the two buffers take turns many times per file."""
    monkeypatch.setattr(staging_pull, "CHUNK", 64 * 1024)
    return 64 * 1024


@pytest.mark.parametrize("direct_io", [True, False])
def test_chunks_are_hashed_and_written_in_arrival_order_across_buffer_turns(tmp_path, source, small_chunks, direct_io):
    result = stage(options(tmp_path, source.url, direct_io=direct_io))
    assert result["verified"] and result["files_fetched"] == 5
    for name, payload in source.files.items():
        if name.endswith(".safetensors"):
            assert len(payload) > 16 * small_chunks
            with open(dest_blob(tmp_path, source, name), "rb") as handle:
                assert handle.read() == payload
    assert scan_checkpoint(result["dest"], REVISION, "full")[0]["verified"]


@pytest.mark.parametrize("offset", [-100, -(64 * 1024 + 7), 5 * 64 * 1024 + 3])
def test_corrupt_byte_in_a_late_chunk_fails_the_file_and_its_partial_is_never_renamed(
    tmp_path, source, small_chunks, monkeypatch, offset
):
    flip_byte(blob_path(source.path, SHARD2), offset)
    renamed = []
    real_replace = os.replace

    def replace(src, dst, *rest, **kw):
        renamed.append(os.path.basename(str(dst)))
        return real_replace(src, dst, *rest, **kw)

    monkeypatch.setattr(staging_pull.os, "replace", replace)
    with pytest.raises(StagingError) as caught:
        stage(options(tmp_path, source.url))
    assert "its copy of %s is corrupt" % SHARD2 in str(caught.value)
    bad = dest_blob(tmp_path, source, SHARD2)
    assert os.path.basename(bad) not in renamed and not os.path.exists(bad)
    assert not [n for n in os.listdir(os.path.dirname(bad)) if n.endswith((".incomplete", ".partial"))]
    # The other files still arrived whole and verified.
    assert os.path.exists(dest_blob(tmp_path, source, "model-00001-of-00003.safetensors"))


def test_failed_write_stops_the_file_with_no_chunk_written_past_the_gap(tmp_path, source, small_chunks, monkeypatch):
    real_write = staging_pull.PartialFile.write
    calls = {"n": 0}

    def write(handle, view):
        calls["n"] += 1
        if calls["n"] == 4:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real_write(handle, view)

    monkeypatch.setattr(staging_pull.PartialFile, "write", write)
    opts = options(tmp_path, source.url, streams=1, retries=0)
    with pytest.raises(StagingError) as caught:
        stage(opts)
    # Only that file failed: the stream's next file got a fresh connection, not the unread rest of this one.
    assert "failed for 1 file(s)" in str(caught.value) and "No space left on device" in str(caught.value)
    blobs = tmp_path / "dst" / "models--org--model" / "blobs"
    partials = [p for p in blobs.iterdir() if p.name.endswith(".incomplete")]
    # The file stops at the failed chunk: three chunks kept, none after the gap, not renamed.
    assert len(partials) == 1 and partials[0].stat().st_size == 3 * small_chunks
    assert not (blobs / partials[0].name[: -len(".incomplete")]).exists()
    assert len(list(blobs.iterdir())) == 5
    # The partial holds the source's first three chunks, so the next run resumes from it.
    payload = [b for n, b in source.files.items() if partials[0].name.startswith(blob_name(n, b))][0]
    assert partials[0].read_bytes() == payload[: 3 * small_chunks]
    monkeypatch.setattr(staging_pull.PartialFile, "write", real_write)
    result = stage(opts)
    assert [t["bytes_reused"] for t in result["transfers"] if t["action"] == "resume"] == [3 * small_chunks]
    assert scan_checkpoint(result["dest"], REVISION, "full")[0]["verified"]


def test_lost_connection_after_many_chunks_resumes_from_what_was_written(tmp_path, source, small_chunks, monkeypatch):
    test_lost_connection_mid_file_resumes_in_the_same_run(tmp_path, source, monkeypatch)
