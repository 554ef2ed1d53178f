"""playbooks/bench.yml (role seat_bench) end to end on the controller itself: telemetry started and
collected on the play's host, the sweep run by tools/seatwright-bench against the test seat, the
record and report written, and the promotion decided against the inventory's incumbents.

The play's only node is localhost (no GPU here: telemetry says why it has no samples).
"""

import json
import os
import subprocess
import sys

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.io.bench.runner import aiperf_binary
from conftest import FIXTURES, ROOT

sys.path.insert(0, str(ROOT / "tests"))
import bench_server  # noqa: E402  pylint: disable=wrong-import-position

pytestmark = pytest.mark.skipif(
    not os.access(aiperf_binary(str(ROOT)), os.X_OK), reason="AIPerf's venv is missing: run scripts/aiperf-venv"
)


def test_bench_playbook_writes_record_report_and_decision(tmp_path):
    inventory = tmp_path / "hosts.yml"
    inventory.write_text(
        "all:\n  children:\n    gpu_nodes:\n      hosts:\n        localhost:\n"
        "          ansible_connection: local\n          ansible_python_interpreter: %s\n"
        "      vars:\n        seatwright_fleet_incumbents: [lab]\n        seatwright_fleet_promotion_margin: 0.1\n"
        % sys.executable
    )
    folder = tmp_path / "evidence" / "lab-candidate" / "20261130T150000Z"
    folder.mkdir(parents=True)
    server, port = bench_server.serve("steady", 0, 0.004, "tiny")
    extra = {
        "seat": "lab-candidate",
        "seat_bench_base_url": "http://127.0.0.1:%d/v1" % port,
        "seat_bench_model": "tiny",
        "seat_bench_tokenizer": str(FIXTURES / "bench" / "tokenizer-tiny"),
        "seat_bench_evidence_dir": str(folder),
        "seat_bench_concurrency": [2],
        "seat_bench_passes": 1,
        "seat_bench_warmup_max": 2,
        "seat_bench_timeout_s": 900,
        "seat_bench_telemetry_interval_s": 0.5,
    }
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    try:
        proc = subprocess.run(
            [
                os.path.join(os.path.dirname(sys.executable), "ansible-playbook"),
                "-i",
                str(inventory),
                str(ROOT / "playbooks" / "bench.yml"),
                "-e",
                json.dumps(extra),
            ],
            capture_output=True,
            text=True,
            timeout=1500,
            cwd=str(ROOT),
            env=env,
            check=False,
        )
    finally:
        server.shutdown()
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    record = json.loads((folder / "record.json").read_text())
    assert record["parts"]["telemetry.json"] is True
    assert record["summary"]["benchmark"] in ("clean", "flagged")
    # No incumbent record exists: nothing is promoted and the incumbent is marked for measurement.
    assert record["promotion"]["decision"] == "do not promote"
    assert record["promotion"]["actions"] == ["re-measure incumbent lab with this harness and workload"]
    assert not (folder / ".telemetry-raw.json").exists()
    report = (folder / "report.md").read_text()
    assert "Against incumbent **lab** (run none) — not comparable, marked for re-measurement" in report
