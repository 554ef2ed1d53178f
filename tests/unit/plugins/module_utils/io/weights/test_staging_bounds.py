"""Issue 23's staging findings, each played over loopback by a hostile neighbour or a man in the middle.

Every hostile listener here runs on 127.0.0.1 in a daemon thread, sends a bounded amount and stops
by itself; every call under attack runs with a deadline, so a regression fails by assertion
instead of hanging the suite or taking the machine's memory.
"""

import http.client
import os
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import test_staging_attacks as staging_attacks
import yaml
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import StagingError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights import staging_source, transport
from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights.staging_pull import source_ready, stage
from ansible_collections.seatwright.fleet.plugins.module_utils.weights import staging as st
from ansible_collections.seatwright.fleet.plugins.module_utils.weights.staging_auth import authorization, server_name
from checkpoint_cases import RunningSource, write_folder
from conftest import ROOT

SECRET = "b8Kx3mQ1" * 5

MIB = 1024 * 1024


class Running(RunningSource):
    """A real source for the folder checkpoint at `path`, holding this file's secret."""

    def __init__(self, path, state_dir):
        super().__init__(path, state_dir, SECRET, revision=None)


@pytest.fixture
def folder_source(tmp_path):
    running = Running(
        write_folder(tmp_path / "src", {"config.json": b'{"a": 1}\n', "model-00001.bin": b"w" * 4096}),
        str(tmp_path / "src-state"),
    )
    yield running
    running.stop()


def options(tmp_path, url, **changes):
    """The staging options of test_staging_attacks, with the tight bounds these attacks are timed against."""
    bounded = dict(
        dest=str(tmp_path / "dst"), token=SECRET, revision=None, connect_timeout_s=2, io_timeout_s=1, retries=0
    )
    return staging_attacks.options(tmp_path, url, **dict(bounded, **changes))


def with_deadline(call, seconds):
    """(finished, elapsed_s, returned value or raised exception); the call runs in a daemon thread."""
    box = {}

    def run():
        try:
            box["value"] = call()
        except BaseException as exc:  # noqa: BLE001 (the test inspects whatever came out)
            box["value"] = exc

    started = time.monotonic()
    worker = threading.Thread(target=run, daemon=True)
    worker.start()
    worker.join(seconds)
    return not worker.is_alive(), time.monotonic() - started, box.get("value")


def _rss_bytes():
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def peak_growth(call, seconds):
    """(finished, growth of resident memory in bytes at its peak while `call` ran, what it returned)."""
    base, peak, stop = _rss_bytes(), [0], threading.Event()

    def sample():
        while not stop.is_set():
            peak[0] = max(peak[0], _rss_bytes() - base)
            time.sleep(0.005)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    try:
        finished, _elapsed, value = with_deadline(call, seconds)
    finally:
        stop.set()
        sampler.join()
    return finished, peak[0], value


class Hostile:
    """A listener without the secret on 127.0.0.1; `answer(conn)` plays one attack per connection.

    It lives at most `lifetime_s` and closes every connection it holds when it stops.
    """

    def __init__(self, answer, lifetime_s=8):
        self.sock = socket.socket()
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.sock.settimeout(0.1)
        self.port = self.sock.getsockname()[1]
        self.url = "http://127.0.0.1:%d" % self.port
        self.until = time.monotonic() + lifetime_s
        self.answer = answer
        self.stopped = threading.Event()
        threading.Thread(target=self._serve, daemon=True).start()

    def alive(self):
        return not self.stopped.is_set() and time.monotonic() < self.until

    def _serve(self):
        while self.alive():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                continue
            threading.Thread(target=self._one, args=(conn,), daemon=True).start()
        self.sock.close()

    def _one(self, conn):
        try:
            conn.settimeout(2)
            conn.recv(65536)
            self.answer(self, conn)
        except OSError:
            pass
        finally:
            conn.close()

    def stop(self):
        self.stopped.set()


def flood(total_bytes):
    def answer(hostile, conn):
        conn.sendall(b"HTTP/1.1 200 OK\r\nConnection: close\r\n\r\n")
        block = b"[" * MIB
        for _ in range(total_bytes // MIB):
            if not hostile.alive():
                return
            conn.sendall(block)

    return answer


def trickle(head):
    """Headers then one body byte every 0.2 s, or the status line itself a byte at a time."""

    def answer(hostile, conn):
        if head == "body":
            conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: 100000\r\n\r\n")
        while hostile.alive():
            conn.sendall(b"H" if head == "headers" else b"{")
            time.sleep(0.2)

    return answer


def entry_points(tmp_path):
    return {
        "weight_stage": lambda url: stage(options(tmp_path, url)),
        "weight_source_ready": lambda url: source_ready(
            {"source_url": url, "token": SECRET, "timeout_s": 1, "client": "ready-check"}
        ),
    }


# ---- medium 1: the listing is read without bound before its signature is checked -----------------


@pytest.mark.parametrize("entry", ["weight_stage", "weight_source_ready"])
def test_listing_flood_before_auth_is_bounded(tmp_path, entry):
    hostile = Hostile(flood(384 * MIB))
    try:
        finished, growth, outcome = peak_growth(lambda: entry_points(tmp_path)[entry](hostile.url), 10)
    finally:
        hostile.stop()
    assert finished, "%s still reading a flood after 10 s" % entry
    assert growth < 128 * MIB, "%s grew %d MiB reading an unsigned listing" % (entry, growth // MIB)
    assert isinstance(outcome, StagingError), outcome
    assert hostile.url in str(outcome) and "without proving it is this run's weights source" in str(outcome)
    assert "stop it, and run again" in str(outcome)
    assert not (tmp_path / "dst").exists()


@pytest.mark.parametrize("head", ["body", "headers"])
@pytest.mark.parametrize("entry", ["weight_stage", "weight_source_ready"])
def test_trickled_listing_times_out(tmp_path, entry, head):
    hostile = Hostile(trickle(head), lifetime_s=12)
    try:
        finished, elapsed, outcome = with_deadline(lambda: entry_points(tmp_path)[entry](hostile.url), 5)
    finally:
        hostile.stop()
    assert finished and elapsed < 3, "%s still waiting on a trickled listing after %.1f s" % (entry, elapsed)
    assert isinstance(outcome, StagingError), outcome
    assert "did not finish its listing within 1s" in str(outcome) and hostile.url in str(outcome)
    assert not (tmp_path / "dst").exists()


# ---- low: control characters and wide modes in signed listings -----------------------------------


@pytest.mark.parametrize("char", ["\r", "\t", "\x1b", "\x7f", "\x85", "\u202e", "\u2028"])
def test_listing_name_with_control_character_is_refused(tmp_path, folder_source, char):
    name = "conf%sig.json" % char
    folder_source.tamper(lambda listing: listing["files"][0].update(path=name))
    finished, _elapsed, outcome = with_deadline(lambda: stage(options(tmp_path, folder_source.url)), 10)
    assert finished and isinstance(outcome, StagingError), outcome
    assert "lists an unsafe path %r" % name in str(outcome)
    assert not (tmp_path / "dst").exists()


@pytest.mark.parametrize("mode", [0o777, 0o666, 0o664, 0o646, 0o4755, 0o2755, 0o1755, -1], ids=oct)
def test_listing_mode_0777_is_refused(tmp_path, folder_source, mode):
    folder_source.tamper(lambda listing: [entry.update(mode=mode) for entry in listing["files"]])
    finished, _elapsed, outcome = with_deadline(lambda: stage(options(tmp_path, folder_source.url)), 10)
    assert finished and isinstance(outcome, StagingError), outcome
    assert "no write for group or others, no setuid, setgid or sticky bit" in str(outcome)
    assert not (tmp_path / "dst").exists()


def test_group_writable_source_files_are_listed_without_group_or_other_write(tmp_path):
    path = write_folder(tmp_path / "src", {"config.json": b"{}\n", "run.sh": b"#!/bin/sh\n"})
    os.chmod(os.path.join(path, "config.json"), 0o666)
    os.chmod(os.path.join(path, "run.sh"), 0o775)
    listing, _served, _ = staging_source.source_listing(path, None, "m", str(tmp_path / "state"))
    assert {entry["path"]: entry["mode"] for entry in listing["files"]} == {"config.json": 0o644, "run.sh": 0o755}
    assert st.parse_listing(listing, "http://10.0.0.1:8473") is listing


# ---- low: the source's threads for strangers -----------------------------------------------------


def test_unauthenticated_connections_are_bounded(tmp_path, folder_source):
    server = folder_source.server
    server.max_connections, server.unproven_timeout_s = 8, 0.5
    before = threading.active_count()
    strangers = [socket.create_connection(("127.0.0.1", folder_source.port), timeout=3) for _ in range(40)]
    try:
        time.sleep(0.3)
        held = threading.active_count() - before
        assert held <= 8, "the source holds a thread for each of %d silent strangers" % held
        started = time.monotonic()
        for stranger in strangers:
            try:
                assert stranger.recv(1) == b"", "a stranger's connection got bytes"
            except ConnectionResetError:
                pass
            except TimeoutError:
                pytest.fail("a silent stranger's connection was still open after %.1f s" % (time.monotonic() - started))
        assert time.monotonic() - started < 2
    finally:
        for stranger in strangers:
            stranger.close()
    # The strangers' slots come free once their threads have ended; then a destination gets in.
    freed_by = time.monotonic() + 3
    while server.connections and time.monotonic() < freed_by:
        time.sleep(0.05)
    assert server.connections == 0
    conn = http.client.HTTPConnection("127.0.0.1", folder_source.port, timeout=3)
    here = server_name("127.0.0.1", folder_source.port)
    header = authorization(SECRET, "GET", "/listing", "node-b", server=here)[0]
    conn.request("GET", "/listing", headers={"Authorization": header})
    assert conn.getresponse().status == 200
    assert server.refused_connections >= 32


# ---- low: prune through a linked destination -----------------------------------------------------


def test_prune_through_symlinked_destination_is_refused(tmp_path, folder_source):
    elsewhere = tmp_path / "elsewhere"
    precious = elsewhere / "precious.bin"
    elsewhere.mkdir()
    precious.write_bytes(b"not part of any checkpoint\n")
    os.symlink(str(elsewhere), str(tmp_path / "dst"))
    finished, _elapsed, outcome = with_deadline(lambda: stage(options(tmp_path, folder_source.url, prune=True)), 10)
    assert finished and isinstance(outcome, StagingError), outcome
    assert "reached through a link" in str(outcome) and str(elsewhere) in str(outcome)
    assert precious.read_bytes() == b"not part of any checkpoint\n"
    assert sorted(os.listdir(str(elsewhere))) == ["precious.bin"]
    kept = stage(options(tmp_path, folder_source.url))
    assert kept["extra_files"] == ["precious.bin"] and precious.exists()


# ---- low: empty files and the stream's keep-alive connection -------------------------------------


def test_zero_byte_file_keeps_connection_with_no_retries(tmp_path):
    files = {"config.json": b"{}\n", "a/empty-1.txt": b"", "b/empty-2.txt": b"", "empty-3.txt": b""}
    running = Running(write_folder(tmp_path / "src", files), str(tmp_path / "src-state"))
    try:
        finished, _elapsed, outcome = with_deadline(
            lambda: stage(options(tmp_path, running.url, streams=1, retries=0, io_timeout_s=5)), 20
        )
    finally:
        running.stop()
    assert finished and isinstance(outcome, dict), outcome
    assert outcome["files_fetched"] == 4 and outcome["verified"]
    assert sum(record["interruptions"] for record in outcome["transfers"]) == 0
    for rel, payload in files.items():
        assert (tmp_path / "dst" / rel).read_bytes() == payload


# ---- low: a man in the middle rewrites a file's Content-Length -----------------------------------


class Relay:
    """A man in the middle: relays the signed listing from the real source, then rewrites file answers."""

    def __init__(self, upstream_port, content_length):
        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args):
                pass

            def do_GET(self):  # noqa: N802
                if self.path != "/listing":
                    self.send_response(200)
                    self.send_header("Content-Length", content_length)
                    self.send_header("Connection", "close")
                    self.end_headers()
                    self.wfile.write(b"x" * 16)
                    return
                upstream = http.client.HTTPConnection("127.0.0.1", upstream_port, timeout=3)
                upstream.request("GET", self.path, headers={"Authorization": self.headers["Authorization"]})
                answer = upstream.getresponse()
                body = answer.read()
                self.send_response(answer.status)
                for name in ("Content-Type", "X-Seatwright-Signature"):
                    if answer.getheader(name):
                        self.send_header(name, answer.getheader(name))
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def do_POST(self):  # noqa: N802
                self.rfile.read(int(self.headers.get("Content-Length") or 0))
                self.send_response(200)
                self.send_header("Content-Length", "0")
                self.end_headers()

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        self.url = "http://127.0.0.1:%d" % self.server.server_address[1]

    def stop(self):
        self.server.shutdown()
        self.server.server_close()


@pytest.mark.parametrize("content_length", ["abc", "1e3", "0x10", "12 34", "1_000"])
def test_non_numeric_content_length_is_a_clear_error(tmp_path, folder_source, content_length, monkeypatch):
    relay = Relay(folder_source.port, content_length)
    # The relay sits on the path to the source: the destination dials the source's own name.
    source_name = server_name("127.0.0.1", folder_source.port)
    monkeypatch.setattr(transport, "server_name", lambda _host, _port: source_name)
    try:
        finished, _elapsed, outcome = with_deadline(lambda: stage(options(tmp_path, relay.url)), 10)
    finally:
        relay.stop()
    assert finished and isinstance(outcome, StagingError), repr(outcome)
    assert "not a plain byte count" in str(outcome) and "Nothing in place here was replaced" in str(outcome)
    assert not os.path.exists(tmp_path / "dst" / "model-00001.bin")


def test_content_length_parse():
    assert [st.parse_content_length(v) for v in ("0", " 42 ", "9223372036854775807")] == [0, 42, 2**63 - 1]
    assert [st.parse_content_length(v) for v in (None, "", "-1", "+1", "1.0", "\u0661", "9" * 20)] == [None] * 7


# ---- low: the apt key is readable by apt before it is verified -----------------------------------


def _tasks(name):
    with open(os.path.join(ROOT, "roles", "nvidia_driver", "tasks", name)) as handle:
        return yaml.safe_load(handle)


def test_apt_key_verified_before_apt_can_read_it():
    with open(os.path.join(ROOT, "roles", "nvidia_driver", "vars", "main.yml")) as handle:
        role_vars = yaml.safe_load(handle)
    tasks = _tasks("repository.yml")
    verify = next(
        i for i, t in enumerate(tasks) if "verify_keyrings" in (t.get("seatwright.fleet.nvidia_driver_plan") or {})
    )
    writes_before = []
    for task in tasks[:verify]:
        args = task.get("ansible.builtin.get_url") or {}
        files = (task.get("seatwright.fleet.node_files") or {}).get("files", "")
        if "nvidia_driver_keyring_dir" in str(args.get("dest", "")) or "nvidia_driver_keyring_dir" in str(files):
            writes_before.append(task["name"])
    assert writes_before == [], "written where apt reads keys before verification: %s" % writes_before
    keys = role_vars["__nvidia_driver_keys"]
    # What is written and verified is the incoming path, in a root-only folder apt never reads.
    assert "'path': __nvidia_driver_key_incoming_dir" in keys and "'path': __nvidia_driver_cuda_keyring" not in keys
    assert "nvidia_driver_keyring_dir" not in role_vars["__nvidia_driver_key_incoming_dir"]
    downloads = next(t for t in tasks if "ansible.builtin.get_url" in t)["ansible.builtin.get_url"]
    assert downloads["dest"] == "{{ item.path }}" and downloads["mode"] == "0600"
    writes = next(t for t in tasks if "seatwright.fleet.node_files" in t)["seatwright.fleet.node_files"]
    assert {"path": "{{ __nvidia_driver_key_incoming_dir }}", "mode": "0700"} in writes["folders"]
    # The verifying run itself installs each key where apt reads it, once verified (issue 25: no
    # copy task per key); no other task writes there.
    assert "'keyring': __nvidia_driver_cuda_keyring" in keys
    assert tasks[verify]["seatwright.fleet.nvidia_driver_plan"]["verify_keyrings"] == "{{ __nvidia_driver_keys }}"
    assert not [t["name"] for t in tasks if "ansible.builtin.copy" in t]
    # The sources come last, from that same run, once every key is in place.
    assert tasks[verify]["seatwright.fleet.nvidia_driver_plan"]["repositories"] == "{{ __nvidia_driver_repositories }}"
    assert not [t["name"] for t in tasks if "ansible.builtin.deb822_repository" in t]
