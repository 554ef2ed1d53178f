"""playbooks/promote.yml in the lab (issue 26's lab bar), on what `make lab` left: the router on
node-a (LiteLLM, blue/green behind nginx), the lab seat (the incumbent) and the lab-allcores
candidate, both real vLLM engines, and lab-allcores's own record saying "promote".

Under AIPerf load through the alias (two streams, the lab workload) and a client that reads the
router's header on a request every 0.5 s:
- a forced gate failure rolls back with 0 failed requests in either, its seconds recorded;
- the promotion moves `production` onto lab-allcores with 0 failed requests, and every answer to a
  request sent after the move names lab-allcores;
- `--check` shows the steps and moves nothing.
Each test starts from the lab's own starting point, `production` on the lab seat, and the last
leaves it on lab-allcores, as `make lab` does. Run by `make lab-promote-test` (takes the lab lock).
The figures go to $SEATWRIGHT_ROUTER_RESULTS (bench/results/router/lab-promote.json) when set.
"""

import json
import os
import subprocess
import sys
import threading
import urllib.request
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from ansible_collections.seatwright.fleet.plugins.module_utils.bench import workload  # noqa: E402
from ansible_collections.seatwright.fleet.plugins.module_utils.io.bench import runner  # noqa: E402
from ansible_collections.seatwright.fleet.plugins.module_utils.io.evidence import writer  # noqa: E402
from router_load import Load  # noqa: E402

ALIAS = "production"
INCUMBENT, CANDIDATE = "lab", "lab-allcores"
ROUTER = "http://172.30.99.11:4000"
KEY_FILE = ROOT / ".cache" / "lab" / "router-admin-key"
SERVED = "smollm2-135m-instruct"
HOLD_S = 20
STREAMS = 2
RESULTS_ENV = "SEATWRIGHT_ROUTER_RESULTS"


def _router_up():
    try:
        with urllib.request.urlopen(ROUTER + "/health/liveliness", timeout=5) as response:
            return response.status == 200
    except OSError:
        return False


pytestmark = pytest.mark.skipif(
    os.environ.get("SEATWRIGHT_LAB_PROMOTE") != "1" or not _router_up(),
    reason="needs the lab make lab leaves (router on node-a, lab and lab-allcores up): make lab-promote-test",
)


def playbook(path, *extra):
    env = dict(os.environ, ANSIBLE_NOCOLOR="1")
    argv = [str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", "inventory/lab", str(path)] + list(extra)
    done = subprocess.run(argv, cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=1200)
    return done, done.stdout + done.stderr


def plan_base(seat):
    serve = json.loads((ROOT / ".cache" / "plans" / (seat + ".json")).read_text())["ranks"][0]["serve"]
    return "http://%s/v1" % serve


def put_alias_on_incumbent(tmp_path):
    """The lab's starting point: production on the lab seat alone (the role's apply_targets)."""
    book = ROOT / "playbooks" / ".test-alias-on-lab.yml"
    target = {INCUMBENT: {"api_base": plan_base(INCUMBENT), "weight": 100, "model": SERVED}}
    book.write_text(
        yaml.safe_dump(
            [
                {
                    "name": "Put production on the lab seat",
                    "hosts": "localhost",
                    "connection": "local",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "name": "Apply",
                            "ansible.builtin.include_role": {
                                "name": "seatwright.fleet.router",
                                "tasks_from": "apply_targets",
                            },
                            "vars": {"router_alias": ALIAS, "router_targets": target},
                        }
                    ],
                }
            ]
        )
    )
    try:
        done, out = playbook(book)
    finally:
        book.unlink()
    assert done.returncode == 0, out[-4000:]


class AIPerfLoad:
    """AIPerf through the alias for a fixed time, on its own thread; its per-request records after."""

    def __init__(self, workdir, key, duration_s):
        self.runner = runner.AIPerfRunner(
            runner.aiperf_binary(str(ROOT)),
            ROUTER + "/v1",
            ALIAS,
            str(_tokenizer_dir()),
            str(workdir),
            _lab_load(),
            api_key=key,
            timeout_s=duration_s + 300,
        )
        self.duration_s = duration_s
        base = self.runner.command
        self.runner.command = lambda *a: (
            base(*a)
            + [
                "--benchmark-duration",
                str(duration_s),
                "--benchmark-grace-period",
                "120",
            ]
        )
        self.result, self.error = None, None
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        try:
            self.result = self.runner.run("through-alias", STREAMS, 100000, 7)
        except Exception as exc:  # the test reports it
            self.error = exc

    def failed(self):
        return [r for r in self.result["records"] if not r.get("ok")]


def _lab_load():
    return workload.named_workload("lab")[1]


def _tokenizer_dir():
    found = sorted((ROOT / ".cache" / "tokenizers").glob(SERVED + "-*/tokenizer.json"))
    assert found, "no SmolLM2 tokenizer in .cache/tokenizers: run make lab first"
    return found[-1].parent


def promote(tmp_path, *extra):
    argv = ["-e", "seat=%s" % CANDIDATE, "-e", "alias=%s" % ALIAS, "-e", "promote_hold_s=%d" % HOLD_S]
    return playbook(ROOT / "playbooks" / "promote.yml", *(argv + list(extra)))


def under_load(tmp_path, *extra):
    key = KEY_FILE.read_text().strip()
    aiperf = AIPerfLoad(tmp_path / "aiperf", key, duration_s=4 * HOLD_S + 60)
    aiperf.thread.start()
    with Load("litellm", ROUTER, key=key, model=ALIAS, interval_s=0.5, max_tokens=8) as probe:
        done, out = promote(tmp_path, *extra)
    aiperf.thread.join(aiperf.duration_s + 600)
    assert aiperf.error is None, aiperf.error
    return done, out, aiperf, probe


def latest_rollout():
    _record, folder = writer.latest_record(str(ROOT / "evidence"), CANDIDATE)
    return json.loads(Path(folder, "promotion-rollout.json").read_text()), folder


def note(name, value):
    out = os.environ.get(RESULTS_ENV)
    if out:
        path = Path(out, "lab-promote.json")
        found = json.loads(path.read_text()) if path.exists() else {}
        found[name] = value
        found["command"] = "make lab && %s=%s make lab-promote-test" % (RESULTS_ENV, os.path.relpath(out, ROOT))
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(found, indent=2, sort_keys=True) + "\n")


def test_check_mode_shows_the_steps_and_moves_nothing(tmp_path):
    put_alias_on_incumbent(tmp_path)
    done, out = promote(tmp_path, "--check")
    assert done.returncode == 0, out[-4000:]
    assert "canary 10%" in out and "deregister" in out and "gates from seat lab-allcores's recipe" in out
    probe = Load("litellm", ROUTER, key=KEY_FILE.read_text().strip(), interval_s=0.5, max_tokens=4)
    with probe:
        pass
    assert {r["seat"] for r in probe.records} == {INCUMBENT}


def test_a_forced_gate_failure_rolls_back_under_aiperf_load_with_no_failed_request(tmp_path):
    put_alias_on_incumbent(tmp_path)
    done, out, aiperf, probe = under_load(tmp_path, "-e", "force_gate_failure=true")
    assert done.returncode != 0 and "rolled back" in out, out[-4000:]
    rollout_doc, _folder = latest_rollout()
    assert rollout_doc["outcome"] == "rolled back" and rollout_doc["rollback_s"] is not None
    assert aiperf.failed() == [] and probe.failed() == [], (aiperf.failed()[:3], probe.failed()[:3])
    assert probe.records[-1]["seat"] == INCUMBENT
    note(
        "rollback",
        {
            "rollback_s": rollout_doc["rollback_s"],
            "aiperf_requests": len(aiperf.result["records"]),
            "aiperf_failed": 0,
            "probe_requests": len(probe.records),
            "probe_by_seat": probe.by_seat(),
        },
    )


def test_the_promotion_moves_the_alias_under_aiperf_load_with_no_failed_request(tmp_path):
    put_alias_on_incumbent(tmp_path)
    done, out, aiperf, probe = under_load(tmp_path)
    assert done.returncode == 0, out[-4000:]
    rollout_doc, folder = latest_rollout()
    assert rollout_doc["outcome"] == "moved", rollout_doc
    step_all = next(s for s in rollout_doc["steps"] if s["step"] == "all")
    applied = float(step_all.get("applied_at_epoch") or step_all["started_at_epoch"])
    after = [r for r in probe.records if r["t0"] >= applied + 1.0]
    assert after and {r["seat"] for r in after} == {CANDIDATE}, probe.by_seat()
    assert aiperf.failed() == [] and probe.failed() == [], (aiperf.failed()[:3], probe.failed()[:3])
    assert "## Rollout" in Path(folder, "report.md").read_text()
    note(
        "promotion",
        {
            "aiperf_requests": len(aiperf.result["records"]),
            "aiperf_failed": 0,
            "probe_requests": len(probe.records),
            "probe_after_move": len(after),
            "probe_by_seat": probe.by_seat(),
            "steps": [
                (s["step"], round(s.get("ended_at_epoch", 0) - s.get("started_at_epoch", 0), 2))
                for s in rollout_doc["steps"]
            ],
        },
    )
