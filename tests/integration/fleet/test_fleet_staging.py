"""Peer-assisted staging on the six-node fleet lab: five destinations, every upload capped, one of them
killed mid-run. Needs `make fleet-lab`; skipped otherwise.

The runs are the real weights role (playbooks/weights.yml) with bench/fleet_staging.py's payloads and
settings, so the benchmark and these tests stage the same way.
"""

import importlib.util
import json
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
_spec = importlib.util.spec_from_file_location("fleet_staging", ROOT / "bench" / "fleet_staging.py")
fleet_staging = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fleet_staging)

DESTS = fleet_staging.NODES[1:]

pytestmark = pytest.mark.skipif(not fleet_staging.fleet_up(), reason="the fleet lab is not up (make fleet-lab)")


class Args:
    inventory = str(ROOT / "inventory" / "fleet" / "hosts.yml")
    upload_mb_s = 20.0
    piece_mb = 64
    shards = 6
    shard_mib = 24
    image = "seatwright/lab-base:current"


@pytest.fixture(scope="module")
def payloads():
    with tempfile.TemporaryDirectory() as tmp:
        made = fleet_staging.make_payloads(Args, tmp)
        yield made
    fleet_staging.on(fleet_staging.ORIGIN, "rm -rf %s" % fleet_staging.WORK)
    for node in DESTS:
        fleet_staging.on(node, "rm -rf %s" % fleet_staging.WORK)


def progress(node, name):
    text = fleet_staging.on(node, "cat %s/progress-%s.json 2>/dev/null || true" % (fleet_staging.STATE, name))
    return json.loads(text) if text.strip() else {}


def test_five_destinations_each_verified_most_bytes_from_peers(payloads):
    with tempfile.TemporaryDirectory() as tmp:
        result = fleet_staging.run_once(Args, payloads["checkpoint"], DESTS, True, tmp)
    # run_once exits on a failed play or a destination not done with every byte: each was verified.
    assert set(result["nodes"]) == set(DESTS)
    # Five copies were needed; the source sent well under two of them.
    assert result["source_share"] < 0.4, result


def test_a_destination_killed_mid_run_completes_next_run_and_the_others_do_not_wait(payloads):
    payload = payloads["checkpoint"]
    victim = "fleet-4"
    dest_path = "%s/dst-%s" % (fleet_staging.WORK, payload["name"])
    for node in DESTS:
        fleet_staging.on(node, "rm -rf %s* %s/progress-%s.json" % (dest_path, fleet_staging.STATE, payload["name"]))
    with tempfile.TemporaryDirectory() as tmp:
        command, env = fleet_staging.playbook(Args, payload, DESTS, True, tmp, upload_mb_s=8)
        play = subprocess.Popen(
            command, cwd=str(ROOT), env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
        )
        deadline, seen = time.monotonic() + 240, {}
        while time.monotonic() < deadline:
            seen = progress(victim, payload["name"])
            if seen.get("state") == "running" and seen.get("bytes_done", 0) > 0.3 * seen.get("bytes_total", 1):
                break
            time.sleep(0.5)
        assert seen.get("state") == "running", seen
        fleet_staging.on(victim, "kill -9 %d" % seen["pid"])
        killed_at = time.monotonic()
        out, _ = play.communicate(timeout=600)
        after_kill = time.monotonic() - killed_at
    assert play.returncode != 0, out[-3000:]
    for node in DESTS:
        if node == victim:
            continue
        done = progress(node, payload["name"])
        assert done.get("state") == "done" and done["bytes_done"] == payload["bytes"], (node, done)
    # The others finished their pulls; the play ends once the source's idle timeout (30 s) lets it go.
    assert after_kill < 120, after_kill
    with tempfile.TemporaryDirectory() as tmp:
        again = fleet_staging.run_once(Args, payload, [victim], True, tmp, clean=False)
    resumed = again["nodes"][victim]
    # It kept the pieces that arrived before the kill (the role's closing check verified the whole).
    assert 0 < resumed["bytes_done"] < 0.75 * payload["bytes"], resumed
