"""The attacks and faults of the staging review (issue 10 findings 1-9), each reproduced over loopback.

Every test plays the attack against the real source and destination code and asserts a clear
refusal or a safe result: files outside the destination untouched, no traceback, the run's secret
never in what a listener or the output sees.
"""

import http.client
import json
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import weight_source
import weight_source_ready
from ansible.module_utils.testing import patch_module_args
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import StagingError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights import staging_source
from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights.checkpoint_scan import scan_checkpoint
from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights.staging_pull import stage
from ansible_collections.seatwright.fleet.plugins.module_utils.node.contract import check_node
from ansible_collections.seatwright.fleet.plugins.module_utils.weights import staging as st
from ansible_collections.seatwright.fleet.plugins.module_utils.weights.checkpoint import MANIFEST_NAME, failure_message
from ansible_collections.seatwright.fleet.plugins.module_utils.weights.staging_auth import authorization, server_name
from checkpoint_cases import REVISION, RunningSource, big_shards, blob_name, write_folder, write_hf_entry

SECRET = "q7Rw2pZ9" * 5


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


class Running(RunningSource):
    """A real source for the checkpoint at `path`, holding this file's secret."""

    def __init__(self, path, state_dir, revision=REVISION, clients=99, port=0):
        super().__init__(path, state_dir, SECRET, revision, clients, port)


@pytest.fixture
def hf_source(tmp_path):
    running = Running(write_hf_entry(tmp_path / "src", big_shards(2, 1)), str(tmp_path / "src-state"))
    yield running
    running.stop()


def options(tmp_path, url, **changes):
    base = dict(
        dest=str(tmp_path / "dst" / "models--org--model"),
        source_url=url,
        token=SECRET,
        client="node-b",
        name="m",
        revision=REVISION,
        streams=2,
        verify="full",
        direct_io=False,
        bandwidth_limit_bytes_s=0,
        state_dir=str(tmp_path / "dst-state"),
        connect_timeout_s=3,
        io_timeout_s=5,
        retries=1,
        progress_interval_s=0,
        source_label="node-a:/src",
        prune=False,
    )
    base.update(changes)
    return base


def outside_file(tmp_path, content=b"precious\n"):
    path = tmp_path / "outside" / "precious.txt"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(content)
    return path


# ---- finding 1: listing refs escape the destination --------------------------------------------


@pytest.mark.parametrize(
    "refs",
    [
        {"../../../../escaped": REVISION},
        {"/tmp/seatwright-escaped": REVISION},
        {".git/config": REVISION},
        {"main": "c" * 40},
        {"main": ["not", "text"]},
        ["main"],
    ],
)
def test_finding1_listing_refs_are_validated_before_use(refs):
    doc = st.build_listing(
        "m",
        "hf-cache",
        REVISION,
        {},
        {"a.safetensors": {"size": 1, "mode": 0o644, "sha256": "a" * 64, "blob": "a" * 64}},
        [],
    )
    doc["refs"] = refs
    with pytest.raises(StagingError) as caught:
        st.parse_listing(doc, "http://10.0.0.1:8473")
    assert "ref" in str(caught.value)


def test_finding1_signed_refs_escaping_the_destination_write_nothing(tmp_path, hf_source):
    target = tmp_path / "escaped-ref"
    hf_source.tamper(lambda listing: listing["refs"].update({"../../../../../../../../" + str(target)[1:]: REVISION}))
    with pytest.raises(StagingError, match="unsafe ref name"):
        stage(options(tmp_path, hf_source.url))
    assert not target.exists() and not (tmp_path / "dst").exists()


# ---- finding 2: destinations authenticate the source -------------------------------------------


class Impostor:
    """A process that bound the source's port first and serves its own bytes with matching digests."""

    def __init__(self, port, listing_doc):
        self.requests = []
        impostor = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802
                impostor.requests.append((self.path, dict(self.headers)))
                body = json.dumps(listing_doc).encode()
                self.send_response(200)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            do_POST = do_GET  # noqa: N815

        self.server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


def _impostor_listing():
    payload = b"evil bytes"
    import hashlib

    sha = hashlib.sha256(payload).hexdigest()
    return st.build_listing(
        "m", "folder", None, {}, {"model.safetensors": {"size": len(payload), "mode": 0o644, "sha256": sha}}, []
    )


def test_finding2_impostor_on_the_port_is_refused_and_never_sees_the_secret(tmp_path):
    port = free_port()
    impostor = Impostor(port, _impostor_listing())
    try:
        with pytest.raises(StagingError) as caught:
            stage(options(tmp_path, "http://127.0.0.1:%d" % port, dest=str(tmp_path / "dst"), revision=None))
    finally:
        impostor.stop()
    assert "did not sign its listing with this run's secret" in str(caught.value)
    assert "Nothing it sent was used" in str(caught.value)
    assert not (tmp_path / "dst").exists()
    seen = json.dumps(impostor.requests)
    assert SECRET not in seen and SECRET not in str(caught.value)
    assert [path for path, _ in impostor.requests] == ["/listing"]  # no /done to a listener never proven


def test_finding2_a_captured_request_cannot_be_replayed_at_the_real_source(tmp_path, hf_source):
    here = server_name("127.0.0.1", hf_source.port)
    header = authorization(SECRET, "GET", "/listing", "node-b", server=here)[0]
    conn = http.client.HTTPConnection("127.0.0.1", hf_source.port, timeout=5)
    conn.request("GET", "/listing", headers={"Authorization": header})
    assert conn.getresponse().read() and True
    replay = http.client.HTTPConnection("127.0.0.1", hf_source.port, timeout=5)
    replay.request("GET", "/listing", headers={"Authorization": header})
    assert replay.getresponse().status == 403
    target = "blobs/" + "0" * 64
    other = http.client.HTTPConnection("127.0.0.1", hf_source.port, timeout=5)
    mismatched = authorization(SECRET, "GET", "/listing", "x", server=here)[0]
    other.request("GET", "/file/" + target, headers={"Authorization": mismatched})
    assert other.getresponse().status == 403


def run_module(capsys, module, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            module.main()
    return json.loads(capsys.readouterr().out)


def test_finding2_role_check_tells_its_source_from_an_impostor(capsys, tmp_path, hf_source):
    good = run_module(capsys, weight_source_ready, {"source_url": hf_source.url, "token": SECRET, "timeout_s": 3})
    assert not good.get("failed") and good["listing"]["revision"] == REVISION
    port = free_port()
    impostor = Impostor(port, _impostor_listing())
    try:
        bad = run_module(
            capsys, weight_source_ready, {"source_url": "http://127.0.0.1:%d" % port, "token": SECRET, "timeout_s": 3}
        )
    finally:
        impostor.stop()
    assert bad["failed"] and "staging stopped before any node connected" in bad["msg"]
    assert "took the port first" in bad["msg"] and SECRET not in json.dumps(bad)


def test_finding2_source_started_after_an_impostor_fails_clearly(capsys, tmp_path):
    port = free_port()
    impostor = Impostor(port, _impostor_listing())
    try:
        result = run_module(
            capsys,
            weight_source,
            dict(
                path=write_hf_entry(tmp_path / "src", big_shards(1, 1)),
                revision=REVISION,
                name="m",
                bind_address="127.0.0.1",
                port=port,
                token=SECRET,
                clients=1,
                idle_timeout_s=5,
                lifetime_s=10,
                state_dir=str(tmp_path / "src-state"),
            ),
        )
    finally:
        impostor.stop()
    assert result["failed"] and "another process already listens on 127.0.0.1:%d" % port in result["msg"]


# ---- finding 3: links out of the checkpoint, and modes -----------------------------------------


def test_finding3_source_refuses_a_link_out_of_the_folder(tmp_path):
    secret_file = outside_file(tmp_path, b"root's private key\n")
    folder = write_folder(tmp_path / "src", {"config.json": b"{}\n"})
    os.symlink(str(secret_file), os.path.join(folder, "tokenizer.json"))
    listing, served, _ = staging_source.source_listing(folder, None, "m", str(tmp_path / "state"))
    assert any("tokenizer.json links outside" in p for p in listing["problems"])
    assert str(secret_file) not in served.values()
    with pytest.raises(StagingError, match="refuses to serve"):
        st.parse_listing(listing, "http://x")


def test_finding3_cache_snapshot_link_outside_blobs_is_refused(tmp_path):
    entry = write_hf_entry(tmp_path / "src", big_shards(1, 1))
    secret_file = outside_file(tmp_path)
    os.symlink(str(secret_file), os.path.join(entry, "snapshots", REVISION, "extra.json"))
    report, _ = scan_checkpoint(entry, REVISION)
    assert not report["complete"] and any("extra.json links outside" in e for e in report["errors"])


def test_finding3_modes_stay_no_wider_than_the_source(tmp_path):
    folder = write_folder(tmp_path / "src", {"config.json": b"{}\n", "key.pem": b"secret\n"})
    os.chmod(os.path.join(folder, "key.pem"), 0o600)
    running = Running(folder, str(tmp_path / "src-state"), revision=None)
    try:
        stage(options(tmp_path, running.url, dest=str(tmp_path / "dst"), revision=None))
        assert os.stat(tmp_path / "dst" / "key.pem").st_mode & 0o777 == 0o600
        os.chmod(tmp_path / "dst" / "key.pem", 0o644)
        again = stage(options(tmp_path, running.url, dest=str(tmp_path / "dst"), revision=None))
    finally:
        running.stop()
    assert again["modes_narrowed"] == ["key.pem"] and again["bytes_transferred"] == 0
    assert os.stat(tmp_path / "dst" / "key.pem").st_mode & 0o777 == 0o600


# ---- finding 4: .git/ and dotfiles -------------------------------------------------------------


def test_finding4_git_folder_and_dotfiles_are_neither_served_nor_staged(tmp_path):
    folder = write_folder(
        tmp_path / "src",
        {
            "config.json": b"{}\n",
            ".git/config": b"[remote]\nurl = https://user:hf_SECRET@hf.co/x\n",
            ".git/lfs/objects/ab/cd": b"x" * 1000,
            ".env": b"HF_TOKEN=hf_SECRET\n",
            "sub/.hidden": b"h",
        },
    )
    listing, served, _ = staging_source.source_listing(folder, None, "m", str(tmp_path / "state"))
    assert [f["path"] for f in listing["files"]] == ["config.json"]
    running = Running(folder, str(tmp_path / "src-state"), revision=None)
    try:
        stage(options(tmp_path, running.url, dest=str(tmp_path / "dst"), revision=None))
    finally:
        running.stop()
    assert sorted(os.listdir(tmp_path / "dst")) == [MANIFEST_NAME, "config.json"]
    with pytest.raises(StagingError, match="unsafe path"):
        st.parse_listing(dict(listing, files=[dict(listing["files"][0], path=".git/config")]), "http://x")


# ---- finding 5: writes through links planted in the destination --------------------------------


def test_finding5_planted_link_at_the_partial_name_is_replaced_not_followed(tmp_path, hf_source):
    victim = outside_file(tmp_path)
    files = big_shards(2, 1)
    blobs = tmp_path / "dst" / "models--org--model" / "blobs"
    blobs.mkdir(parents=True)
    for name, payload in files.items():
        os.symlink(str(victim), str(blobs / (blob_name(name, payload) + ".incomplete")))
    result = stage(options(tmp_path, hf_source.url))
    assert result["verified"] and victim.read_bytes() == b"precious\n"
    assert scan_checkpoint(result["dest"], REVISION, "full")[0]["verified"]


def test_finding5_planted_folder_link_is_refused(tmp_path, hf_source):
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    dest = tmp_path / "dst" / "models--org--model"
    dest.mkdir(parents=True)
    os.symlink(str(elsewhere), str(dest / "blobs"))
    with pytest.raises(StagingError, match="outside the destination"):
        stage(options(tmp_path, hf_source.url))
    assert os.listdir(elsewhere) == []


# ---- finding 6: leftovers wedge verification ---------------------------------------------------


def test_finding6_temp_files_of_a_killed_run_do_not_wedge_verification(tmp_path, hf_source):
    first = stage(options(tmp_path, hf_source.url))
    snapshot = os.path.dirname(first["manifest"])
    with open(os.path.join(snapshot, MANIFEST_NAME + ".k2j9x_"), "w") as handle:
        handle.write("{")
    os.symlink("../../blobs/x", os.path.join(snapshot, ".config.json.seatwright-link"))
    os.symlink("../../blobs/x", os.path.join(snapshot, "config.json.seatwright-link"))
    assert scan_checkpoint(first["dest"], REVISION)[0]["verified"]
    again = stage(options(tmp_path, hf_source.url))
    assert again["changed"] and again["extra_files"] == []
    assert sorted(n for n in os.listdir(snapshot) if "seatwright" in n) == [MANIFEST_NAME]


def test_finding6_earlier_revision_files_are_reported_then_pruned(tmp_path):
    old = write_folder(tmp_path / "src", {"config.json": b"{}\n", "old-00001.bin": b"old"})
    running = Running(old, str(tmp_path / "src-state"), revision=None)
    try:
        stage(options(tmp_path, running.url, dest=str(tmp_path / "dst"), revision=None))
    finally:
        running.stop()
    os.unlink(os.path.join(old, "old-00001.bin"))
    new = Running(old, str(tmp_path / "src-state2"), revision=None)
    try:
        kept = stage(options(tmp_path, new.url, dest=str(tmp_path / "dst"), revision=None))
        report, _ = scan_checkpoint(str(tmp_path / "dst"))
        assert kept["extra_files"] == ["old-00001.bin"] and not report["verified"]
        assert "weights_transfer_prune: true" in failure_message(str(tmp_path / "dst"), report, True)
        pruned = stage(options(tmp_path, new.url, dest=str(tmp_path / "dst"), revision=None, prune=True))
    finally:
        new.stop()
    assert pruned["pruned"] == ["old-00001.bin"] and pruned["changed"]
    assert scan_checkpoint(str(tmp_path / "dst"))[0]["verified"]


# ---- finding 7: tracebacks instead of errors ---------------------------------------------------

DEEP = b"[" * 100000 + b"]" * 100000


def test_finding7_deep_json_in_header_index_and_manifest_is_damage_not_a_crash(tmp_path):
    header = DEEP + b" " * (-len(DEEP) % 8)
    folder = write_folder(
        tmp_path / "ckpt",
        {
            "model.safetensors": len(header).to_bytes(8, "little") + header,
            "model.safetensors.index.json": b'{"weight_map": ' + DEEP + b"}",
            MANIFEST_NAME: b'{"format": ' + DEEP + b"}",
        },
    )
    report, _ = scan_checkpoint(folder)
    assert not report["complete"]
    assert "nested too deeply" in json.dumps(report["files"]) and "nested too deeply" in json.dumps(report["errors"])


def test_finding7_deep_or_mistyped_signed_listings_are_clear_errors(tmp_path, hf_source):
    hf_source.server.listing_bytes = b'{"format": "seatwright-listing/2", "refs": ' + DEEP + b"}"
    with pytest.raises(StagingError, match="not readable JSON.*nested too deeply"):
        stage(options(tmp_path, hf_source.url))
    original = json.dumps(hf_source.server.listing)
    for change, words in (
        (lambda d: d.pop("refs"), "field 'refs' is missing"),
        (lambda d: d.update(files="x"), "lists no files"),
        (lambda d: d.update(name=7), "field 'name' is 7"),
        (lambda d: d["files"][0].update(size="12"), "without a size"),
        (lambda d: d["files"][0].update(sha256=5), "sha256 of type int"),
    ):
        hf_source.server.listing = json.loads(original)
        hf_source.tamper(change)
        with pytest.raises(StagingError, match=words):
            stage(options(tmp_path, hf_source.url))
    assert not (tmp_path / "dst").exists()


@pytest.mark.parametrize("length", ["abc", "-5", "99999999999", "1e3"])
def test_finding7_malformed_content_length_on_done_gets_400_not_a_traceback(capfd, hf_source, length):
    with socket.create_connection(("127.0.0.1", hf_source.port), timeout=5) as conn:
        conn.sendall(b"POST /done HTTP/1.1\r\nHost: x\r\nContent-Length: %s\r\n\r\n" % length.encode())
        answer = conn.recv(4096)
    assert answer.startswith(b"HTTP/1.0 400") or answer.startswith(b"HTTP/1.1 400")
    assert "Traceback" not in capfd.readouterr().err
    assert hf_source.server.done_reports == {}


# ---- finding 8: strangers steer the source's lifetime ------------------------------------------


def test_finding8_unauthenticated_requests_neither_keep_it_alive_nor_finish_it(tmp_path):
    running = Running(write_hf_entry(tmp_path / "src", big_shards(1, 1)), str(tmp_path / "state"), clients=1)
    try:
        started = time.monotonic()
        deadline = started + 60
        while time.monotonic() - started < 1.5:
            conn = http.client.HTTPConnection("127.0.0.1", running.port, timeout=5)
            conn.request("GET", "/listing", headers={"Authorization": "Bearer guess"})
            assert conn.getresponse().status == 403
            body = json.dumps({"client": "node-b", "ok": True}).encode()
            conn = http.client.HTTPConnection("127.0.0.1", running.port, timeout=5)
            conn.request("POST", "/done", body=body)
            assert conn.getresponse().status == 403
        assert running.server.finished_reason(1, deadline) == "idle for 1s"
        assert running.server.done_reports == {} and running.server.refused_requests >= 4
        body = json.dumps({"ok": True}).encode()
        conn = http.client.HTTPConnection("127.0.0.1", running.port, timeout=5)
        conn.request(
            "POST",
            "/done",
            body=body,
            headers={
                "Authorization": authorization(
                    SECRET, "POST", "/done", "node-b", body, server=server_name("127.0.0.1", running.port)
                )[0]
            },
        )
        assert conn.getresponse().status == 200
        assert running.server.finished_reason(600, deadline) == "every destination reported done"
    finally:
        running.stop()


# ---- finding 9: loose addresses ----------------------------------------------------------------


@pytest.mark.parametrize("address", ["0.0.0.0", "::", "", "  ", "node-a.example", "224.0.0.1"])
def test_finding9_source_refuses_wildcard_and_names(capsys, tmp_path, address):
    result = run_module(
        capsys,
        weight_source,
        dict(
            path=write_hf_entry(tmp_path / "src", big_shards(1, 1)),
            revision=REVISION,
            name="m",
            bind_address=address,
            port=free_port(),
            token=SECRET,
            clients=1,
            idle_timeout_s=5,
            lifetime_s=10,
            state_dir=str(tmp_path / "src-state"),
        ),
    )
    assert result["failed"] and "fabric address" in result["msg"]
    assert SECRET not in json.dumps(result)


@pytest.mark.parametrize(
    "address, ok",
    [
        ("0.0.0.0", False),
        ("127.0.0.1", False),
        ("::", False),
        ("::1", False),
        ("169.254.3.4", False),
        ("10.77.0.11", True),
        ("fd00::11", True),
    ],
)
def test_finding9_preflight_refuses_wildcard_and_loopback_fabric_addresses(address, ok):
    declared = {
        "seatwright_node_gpu_profile": "h200",
        "seatwright_node_gpu_count": 2,
        "seatwright_node_fabric_ip": address,
        "seatwright_node_fabric_iface": "eth0",
    }
    problems = [p for p in check_node("node-a", declared) if "fabric_ip" in p]
    assert (problems == []) is ok
