"""The issue's "Must show" list on two lab containers, through playbooks/weights.yml.

Creates ckpt-a and ckpt-b (image seatwright/lab:current) on the network ckptnet
(172.30.98.0/24), writes a synthetic cache-entry checkpoint of 4 x 64 MiB shards on ckpt-a,
stages it to ckpt-b, and removes the containers and network at the end. About four minutes on
two cores.

  .venv/bin/python -m pytest tests/integration/staging -v
"""

import json
import os
import subprocess
import sys
import time

import pytest
from conftest import ROOT

DOCKER = "/usr/bin/docker"
IMAGE = os.environ.get("SEATWRIGHT_LAB_IMAGE", "seatwright/lab:current")
NETWORK, SUBNET = "ckptnet", "172.30.98.0/24"
NODES = {"ckpt-a": "172.30.98.11", "ckpt-b": "172.30.98.12"}
INVENTORY = ROOT / "tests" / "integration" / "staging" / "inventory.yml"
CACHE = "/srv/hf"
ENTRY = CACHE + "/models--seatwright--synthetic"
STATE = "/var/lib/seatwright/staging"


def docker(*args, check=True):
    return subprocess.run([DOCKER] + list(args), check=check, capture_output=True, text=True)


def on(node, script, check=True):
    return docker("exec", node, "sh", "-c", script, check=check).stdout


def py(node, code):
    return docker("exec", node, "python3", "-c", code).stdout


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    if not os.path.exists(DOCKER) or docker("image", "inspect", IMAGE, check=False).returncode:
        pytest.fail("needs %s and the image %s (scripts/lab-image builds it)" % (DOCKER, IMAGE))
    for node in NODES:
        docker("rm", "-f", node, check=False)
    docker("network", "rm", NETWORK, check=False)
    docker("network", "create", "--subnet", SUBNET, NETWORK)
    try:
        for node, address in NODES.items():
            docker(
                "run",
                "-d",
                "--name",
                node,
                "--hostname",
                node,
                "--network",
                NETWORK,
                "--ip",
                address,
                IMAGE,
                "sleep",
                "infinity",
            )
        docker("cp", str(ROOT / "bench" / "staging" / "make_checkpoint.py"), "ckpt-a:/usr/local/bin/")
        made = json.loads(
            on(
                "ckpt-a",
                "python3 /usr/local/bin/make_checkpoint.py --out %s --shards 4 "
                "--shard-mib 64 --layout hf-cache" % CACHE,
            )
        )
        extra_vars = tmp_path_factory.mktemp("staging") / "weights.json"
        extra_vars.write_text(
            json.dumps(
                {
                    "weights_checkpoint_name": "synthetic",
                    "weights_checkpoint_revision": made["revision"],
                    "weights_source_host": "ckpt-a",
                    "weights_source_path": made["path"],
                    "weights_source_idle_timeout_s": 20,
                    "weights_transfer_poll_s": 1,
                }
            )
        )
        yield {"made": made, "vars": str(extra_vars)}
    finally:
        for node in NODES:
            docker("rm", "-f", node, check=False)
        docker("network", "rm", NETWORK, check=False)


def playbook_command(lab, *extra, limit="ckpt-b"):
    return [
        str(ROOT / ".venv" / "bin" / "ansible-playbook"),
        "-i",
        str(INVENTORY),
        str(ROOT / "playbooks" / "weights.yml"),
        "-l",
        limit,
        "-e",
        "@" + lab["vars"],
    ] + list(extra)


def playbook_env():
    return dict(os.environ, ANSIBLE_STDOUT_CALLBACK="ansible.posix.json", ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))


def stage(lab, *extra, limit="ckpt-b", node="ckpt-b"):
    """Run the playbook; (return code, `node`'s weight_stage result, every failure message, `node`'s recap)."""
    done = subprocess.run(
        playbook_command(lab, *extra, limit=limit),
        capture_output=True,
        text=True,
        env=playbook_env(),
        cwd=str(ROOT),
        timeout=600,
    )
    report = json.loads(done.stdout[done.stdout.index("{") :])
    results, failures = {}, []
    for task in report["plays"][0]["tasks"]:
        for result in task["hosts"].values():
            if result.get("failed"):
                failures.append(result.get("msg", ""))
        if "stage | Pull" in task["task"]["name"]:
            results = task["hosts"][node]
    return done.returncode, results, failures, report["stats"][node]


def blob_of(lab, shard):
    return "%s/blobs/%s" % (ENTRY, lab["made"]["files"][shard]["sha256"])


def manifest_path(lab):
    return "%s/snapshots/%s/.seatwright-manifest.json" % (ENTRY, lab["made"]["revision"])


def destination_state():
    """Every path under the cache on ckpt-b with its size, mtime and link target, plus file digests."""
    return on(
        "ckpt-b",
        "find %s -printf '%%p %%s %%T@ %%l\\n' 2>/dev/null | sort; "
        "find %s -type f -exec sha256sum {} + 2>/dev/null | sort" % (CACHE, CACHE),
        check=False,
    )


def flip(node, path):
    py(
        node,
        "import os; p=%r; s=os.stat(p); f=open(p,'r+b'); f.seek(4096); b=f.read(1); f.seek(4096); "
        "f.write(bytes([b[0]^255])); f.close(); os.utime(p, ns=(s.st_atime_ns, s.st_mtime_ns))" % path,
    )


SHARD2 = "model-00002-of-00004.safetensors"
SHARD3 = "model-00003-of-00004.safetensors"


def test_1_stages_with_a_manifest(lab):
    rc, result, failures, recap = stage(lab)
    assert rc == 0, failures
    assert result["changed"] and result["verified"] and result["files_fetched"] == 7
    assert result["bytes_transferred"] == lab["made"]["bytes"]
    manifest = json.loads(on("ckpt-b", "cat " + manifest_path(lab)))
    assert manifest["revision"] == lab["made"]["revision"]
    assert {name: entry["size"] for name, entry in manifest["files"].items()} == {
        name: entry["size"] for name, entry in lab["made"]["files"].items()
    }
    for name, entry in lab["made"]["files"].items():
        if "sha256" in entry:
            assert manifest["files"][name]["sha256"] == entry["sha256"]


def test_2_second_run_moves_zero_bytes(lab):
    rc, result, failures, recap = stage(lab)
    assert rc == 0, failures
    assert result["bytes_transferred"] == 0 and result["files_skipped"] == 7
    assert not result["changed"] and recap["changed"] == 0


def test_3_flipped_byte_restages_only_that_shard(lab):
    flip("ckpt-b", blob_of(lab, SHARD2))
    rc, result, failures, _ = stage(lab)
    assert rc == 0, failures
    assert [t["target"] for t in result["transfers"]] == ["blobs/" + lab["made"]["files"][SHARD2]["sha256"]]
    assert "in place but corrupt" in result["transfers"][0]["reason"]
    assert result["bytes_transferred"] == lab["made"]["files"][SHARD2]["size"]


def test_4_sigkill_midway_then_rerun_resumes(lab):
    on("ckpt-b", "rm -rf %s %s/progress-synthetic.json" % (CACHE, STATE))
    slow = subprocess.Popen(
        playbook_command(lab, "-e", "weights_transfer_bandwidth_limit_mb_per_s=25"),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=playbook_env(),
        cwd=str(ROOT),
    )
    try:
        deadline, progress = time.monotonic() + 180, {}
        while time.monotonic() < deadline:
            text = on("ckpt-b", "cat %s/progress-synthetic.json 2>/dev/null" % STATE, check=False)
            progress = json.loads(text) if text.strip() else {}
            if progress.get("bytes_done", 0) > 0.3 * progress.get("bytes_total", 1):
                break
            time.sleep(0.5)
        assert progress.get("state") == "running", progress
        on("ckpt-b", "kill -9 %d" % progress["pid"])
        time.sleep(1)
        leftovers = on("ckpt-b", "ls %s/blobs" % ENTRY)
        assert ".incomplete" in leftovers
        assert on("ckpt-b", "test -e %s && echo present || echo absent" % manifest_path(lab)).strip() == "absent"
    finally:
        slow.kill()
        slow.wait()
    rc, result, failures, _ = stage(lab)
    assert rc == 0, failures
    assert result["files_resumed"] >= 1 and result["bytes_reused"] > 0
    # Files the killed run finished (small ones finish early: pieces are spread over the files) are skipped.
    finished = sum(
        entry["size"]
        for entry in lab["made"]["files"].values()
        if result["plan"].get("blobs/" + (entry.get("sha256") or entry.get("git-sha1")), {}).get("action") == "skip"
    )
    assert result["bytes_transferred"] + result["bytes_reused"] + finished == lab["made"]["bytes"]
    assert on("ckpt-b", "test -e %s && echo present" % manifest_path(lab)).strip() == "present"
    rc, result, failures, _ = stage(lab, "-e", "weights_final_check_mode=full")
    assert rc == 0 and result["bytes_transferred"] == 0, failures


def test_5_truncated_source_is_refused_and_destination_untouched(lab):
    before = destination_state()
    on("ckpt-a", "cp %s /tmp/shard3.keep && truncate -s -4096 %s" % (blob_of(lab, SHARD3), blob_of(lab, SHARD3)))
    try:
        rc, result, failures, _ = stage(lab)
    finally:
        on("ckpt-a", "cp /tmp/shard3.keep %s" % blob_of(lab, SHARD3))
    assert rc != 0
    assert any(SHARD3 in message and "4096 missing" in message for message in failures), failures
    assert destination_state() == before


def test_6_corrupt_source_replaces_nothing(lab):
    flip("ckpt-b", blob_of(lab, SHARD2))
    kept = on("ckpt-b", "sha256sum " + blob_of(lab, SHARD2))
    flip("ckpt-a", blob_of(lab, SHARD2))
    rc, result, failures, _ = stage(lab)
    assert rc != 0
    # The source reads every file once for its piece digests, so it refuses before any node connects.
    assert any("refuses to serve" in message and "%s hashes to sha256" % SHARD2 in message for message in failures), (
        failures
    )
    assert on("ckpt-b", "sha256sum " + blob_of(lab, SHARD2)) == kept
    assert ".incomplete" not in on("ckpt-b", "ls %s/blobs" % ENTRY)


def test_7_whole_group_verifies_the_source_in_place(lab):
    """With the source node in the play it checks its own copy; a corrupt one fails there too."""
    rc, source_node, failures, _ = stage(lab, limit="ckpt-a,ckpt-b", node="ckpt-a")
    assert rc != 0 and any(SHARD2 in message for message in failures), failures
    flip("ckpt-a", blob_of(lab, SHARD2))  # the same flip again restores the byte
    rc, source_node, failures, _ = stage(lab, limit="ckpt-a,ckpt-b", node="ckpt-a")
    assert rc == 0, failures
    assert source_node["bytes_transferred"] == 0 and source_node["manifest_written"]
    rc, result, failures, recap = stage(lab, limit="ckpt-a,ckpt-b", node="ckpt-b")
    assert rc == 0 and result["bytes_transferred"] == 0 and recap["changed"] == 0, failures


def test_8_source_on_the_controller(lab, tmp_path):
    made = json.loads(
        subprocess.run(
            [
                sys.executable,
                str(ROOT / "bench" / "staging" / "make_checkpoint.py"),
                "--out",
                str(tmp_path),
                "--shards",
                "2",
                "--shard-mib",
                "8",
                "--repo",
                "seatwright/controller",
                "--seed",
                "7",
            ],
            check=True,
            capture_output=True,
            text=True,
        ).stdout
    )
    gateway = SUBNET.rsplit(".", 1)[0] + ".1"
    overrides = [
        "-e",
        json.dumps(
            {
                "weights_checkpoint_name": "controller",
                "weights_checkpoint_revision": made["revision"],
                "weights_source_host": "localhost",
                "weights_source_path": made["path"],
                "weights_source_address": gateway,
                "weights_source_port": 8474,
                "weights_source_state_dir": str(tmp_path / "state"),
                "weights_dest_path": "/srv/ctl/models--x",
            }
        ),
    ]
    rc, result, failures, _ = stage(lab, *overrides)
    assert rc == 0, failures
    assert result["verified"] and result["bytes_transferred"] == made["bytes"]
    rc, result, failures, _ = stage(lab, *overrides)
    assert rc == 0 and result["bytes_transferred"] == 0 and not result["changed"], failures


IMPOSTOR = r"""
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer
listing = json.dumps({"format": "seatwright-listing/2", "name": "synthetic", "layout": "folder", "revision": None,
                      "refs": {}, "problems": [], "files": [{"path": "model.safetensors", "size": 4, "mode": 420,
                      "sha256": "88d4266fd4e6338d13b845fcf289579d209c897823b9217da3e161936f031589"}]}).encode()
class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        with open("/tmp/impostor.log", "a") as log:
            log.write("%s %s\n" % (self.path, self.headers.get("Authorization")))
        self.send_response(200)
        self.send_header("Content-Length", str(len(listing)))
        self.end_headers()
        self.wfile.write(listing)
    do_POST = do_GET
HTTPServer(("172.30.98.11", 8473), Handler).serve_forever()
"""


def test_9_impostor_on_the_source_port_stops_staging_before_any_node_connects(lab):
    """A process bound to the source's port before the real source starts is detected; nothing is written."""
    before = destination_state()
    on(
        "ckpt-a",
        "rm -f /tmp/impostor.log; cat > /tmp/impostor.py <<'EOF'\n%s\nEOF\n"
        "nohup python3 /tmp/impostor.py >/dev/null 2>&1 & echo $! > /tmp/impostor.pid" % IMPOSTOR,
    )
    try:
        for _ in range(50):
            if (
                on(
                    "ckpt-a",
                    "python3 -c \"import socket; socket.create_connection(('172.30.98.11', 8473), 1)\" && echo up",
                    check=False,
                ).strip()
                == "up"
            ):
                break
            time.sleep(0.1)
        rc, result, failures, recap = stage(lab)
        log = on("ckpt-a", "cat /tmp/impostor.log 2>/dev/null", check=False)
    finally:
        on("ckpt-a", "kill $(cat /tmp/impostor.pid)", check=False)
    assert rc != 0
    assert any(
        "staging stopped before any node connected" in m and "did not sign its listing" in m for m in failures
    ), failures
    assert not result, "weight_stage ran on ckpt-b although the source was not confirmed"
    assert destination_state() == before
    # The impostor saw single-use MACs only, never a bearer token it could reuse.
    assert log.count("/listing") >= 1 and "Bearer" not in log and "Seatwright-HMAC" in log
