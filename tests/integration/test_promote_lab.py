"""playbooks/promote.yml in the lab (issue 26's lab bar), on what `make lab` left: the router on
node-a (LiteLLM, blue/green behind nginx), the lab seat (the incumbent) and the lab-allcores
candidate, both real vLLM engines, and lab-allcores's own record saying "promote". With
SEATWRIGHT_LAB_ROUTER=smg (`make lab-promote-test-smg`) the same tests run through SGLang's model
gateway on node-b (lab/router/smg.yml), in front of the same seats relaunched to lead with the alias.

Under AIPerf load through the alias (two streams, the lab workload) and a client that reads the
router's header on a request every 0.5 s:
- a forced gate failure rolls back with 0 failed requests in either, its seconds recorded;
- the promotion moves `production` onto lab-allcores with 0 failed requests, and every answer to a
  request sent after the move names lab-allcores (LiteLLM's header; smg names no seat, so there the
  engines' own request counters: the lab seat's stands still from the move on);
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
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from ansible_collections.seatwright.fleet.plugins.module_utils.bench import workload  # noqa: E402
from ansible_collections.seatwright.fleet.plugins.module_utils.bench.counters import parse_exposition  # noqa: E402
from ansible_collections.seatwright.fleet.plugins.module_utils.io.bench import runner  # noqa: E402
from ansible_collections.seatwright.fleet.plugins.module_utils.io.evidence import writer  # noqa: E402
from ansible_collections.seatwright.fleet.plugins.module_utils.router import adapter  # noqa: E402
from router_load import Load  # noqa: E402

ALIAS = "production"
INCUMBENT, CANDIDATE = "lab", "lab-allcores"
KIND = os.environ.get("SEATWRIGHT_LAB_ROUTER", "litellm")
# The router under test: the lab inventory's (LiteLLM on node-a), or smg's vars file over it.
ROUTER_VARS = {"litellm": None, "smg": ROOT / "lab" / "router" / "smg.yml"}.get(KIND)
NODE_IP = {"node-a": "172.30.99.11", "node-b": "172.30.99.12"}
KEY_FILE = ROOT / ".cache" / "lab" / "router-admin-key"
CLIENT_KEY_FILE = ROOT / ".cache" / "lab" / "router-api-key"
SERVED = "smollm2-135m-instruct"
# Under AIPerf's two streams on two cores a 20 s hold (and its overtime) held 10 of the 20 answers
# a verdict needs (2026-12-04); 45 s and its overtime leave room for them.
HOLD_S = 45
STREAMS = 2
RESULTS_ENV = "SEATWRIGHT_ROUTER_RESULTS"


def _router():
    found = yaml.safe_load((ROOT / "inventory" / "lab" / "group_vars" / "all" / "router.yml").read_text())["router"]
    if ROUTER_VARS is not None:
        found = yaml.safe_load(ROUTER_VARS.read_text())["router"]
    return found


ROUTER = "http://%s:%d" % (NODE_IP[_router()["node"]], _router()["port"])
HEALTH = {"litellm": "/health/liveliness", "smg": "/health"}.get(KIND, "/health")


def _router_up():
    try:
        with urllib.request.urlopen(ROUTER + HEALTH, timeout=5) as response:
            return response.status == 200
    except urllib.error.HTTPError as exc:
        # smg's authenticating front asks for the clients' key on every path, its health too: it answers.
        return exc.code == 401
    except OSError:
        return False


pytestmark = pytest.mark.skipif(
    os.environ.get("SEATWRIGHT_LAB_PROMOTE") != "1" or KIND not in ("litellm", "smg") or not _router_up(),
    reason="needs the lab make lab leaves (router on node-a, lab and lab-allcores up): make lab-promote-test "
    "(or make lab-promote-test-smg)",
)


def playbook(path, *extra):
    env = dict(os.environ, ANSIBLE_NOCOLOR="1")
    argv = [str(ROOT / ".venv" / "bin" / "ansible-playbook"), "-i", "inventory/lab", str(path)] + list(extra)
    if ROUTER_VARS is not None:
        argv += ["-e", "@" + str(ROUTER_VARS)]
    done = subprocess.run(argv, cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=1200)
    return done, done.stdout + done.stderr


def plan_base(seat):
    serve = json.loads((ROOT / ".cache" / "plans" / (seat + ".json")).read_text())["ranks"][0]["serve"]
    return "http://%s/v1" % serve


def _metrics(seat):
    url = plan_base(seat)[: -len("/v1")] + "/metrics"
    with urllib.request.urlopen(url, timeout=10) as response:
        return response.read().decode("utf-8", "replace")


def served(seat):
    """Requests the seat's engine has finished (vLLM's request_success_total, every finish reason):
    through smg, which names no seat in its answers, the engines' counters say who answered."""
    samples = parse_exposition(_metrics(seat))
    return sum(value for _labels, value in samples.get("vllm:request_success_total", []))


def counts_once_idle(seat, timeout_s=60):
    """Both seats' counts once `seat` (the one the alias left) has finished what it had in flight."""
    deadline = time.monotonic() + timeout_s
    while adapter.running_requests(_metrics(seat)) != 0 and time.monotonic() < deadline:
        time.sleep(0.5)
    return {name: served(name) for name in (INCUMBENT, CANDIDATE)}


def client_key():
    """The key a client sends through the alias: the clients' own (router_api_key, which the lab's
    inventory makes in .cache/lab/router-api-key); the router's front checks it (issue 50)."""
    return CLIENT_KEY_FILE.read_text().strip()


def failed(probe):
    """Probe requests that failed: not 200, or (on LiteLLM) with no seat named in the header."""
    return [r for r in probe.records if r["status"] != 200 or (KIND == "litellm" and not r["seat"])]


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


def under_load(tmp_path, idle, *extra):
    key = client_key()
    aiperf = AIPerfLoad(tmp_path / "aiperf", key, duration_s=6 * HOLD_S + 60)
    aiperf.thread.start()
    with Load(KIND, ROUTER, key=key, model=ALIAS, interval_s=0.5, max_tokens=8) as probe:
        done, out = promote(tmp_path, *extra)
        # Once promote.yml returns the move (or the rollback) is done; the seat it left finishes its last.
        counts = counts_once_idle(idle)
    aiperf.thread.join(aiperf.duration_s + 600)
    assert aiperf.error is None, aiperf.error
    counts = {seat: {"at_return": n, "at_end": served(seat)} for seat, n in counts.items()}
    return done, out, aiperf, probe, counts


def latest_rollout():
    _record, folder = writer.latest_record(str(ROOT / "evidence"), CANDIDATE)
    return json.loads(Path(folder, "promotion-rollout.json").read_text()), folder


def holds(rollout_doc):
    """Each held step's verdict, visible tok/s per stream p50 and what it was judged against."""
    found = []
    for step in rollout_doc["steps"]:
        verdict = step.get("verdict") or {}
        figures = verdict.get("figures") or {}
        if verdict and step["step"] != "rollback":
            found.append(
                {
                    "step": step["step"],
                    "verdict": verdict.get("verdict"),
                    "answered_by": figures.get("answered_by"),
                    "visible_tok_s_p50": figures.get("visible_tok_s_p50"),
                    "judged_against": figures.get("expected_visible_tok_s_p50"),
                    "against": figures.get("expected_from"),
                    # A canary on the cores the incumbent computes on: its visible rate is recorded only.
                    "not_judged": figures.get("visible_not_judged"),
                    "synthetic_streams": verdict.get("synthetic_streams"),
                }
            )
    return found


def note(name, value):
    out = os.environ.get(RESULTS_ENV)
    if out:
        path = Path(out, "lab-promote.json" if KIND == "litellm" else "lab-promote-%s.json" % KIND)
        found = json.loads(path.read_text()) if path.exists() else {}
        found[name] = value
        target = "lab-promote-test" if KIND == "litellm" else "lab-promote-test-" + KIND
        found["command"] = "make lab && %s=%s make %s" % (RESULTS_ENV, os.path.relpath(out, ROOT), target)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(found, indent=2, sort_keys=True) + "\n")


def _status(key):
    """The router's HTTP status for a chat request through the alias with `key` (None: no Authorization)."""
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = "Bearer " + key
    body = {"model": ALIAS, "max_tokens": 4, "messages": [{"role": "user", "content": "Capital of France?"}]}
    request = urllib.request.Request(
        ROUTER + "/v1/chat/completions", data=json.dumps(body).encode(), headers=headers, method="POST"
    )
    try:
        with urllib.request.urlopen(request, timeout=120) as response:
            response.read()
            return response.status
    except urllib.error.HTTPError as exc:
        return exc.code


def test_the_router_refuses_no_key_and_a_wrong_key_and_serves_the_clients_key():
    # Issue 50 item 1 in the lab, for whichever router runs (LiteLLM on node-a, smg on node-b).
    admin = KEY_FILE.read_text().strip()
    assert admin != client_key()
    statuses = {
        "no key": _status(None),
        "a wrong key": _status("sk-wrong-" + client_key()[::-1]),
        "the clients' key": _status(client_key()),
    }
    note("client_key_statuses", statuses)
    assert statuses == {"no key": 401, "a wrong key": 401, "the clients' key": 200}, statuses


def test_check_mode_shows_the_steps_and_moves_nothing(tmp_path):
    put_alias_on_incumbent(tmp_path)
    done, out = promote(tmp_path, "--check")
    assert done.returncode == 0, out[-4000:]
    # Ansible's YAML output doubles the apostrophe of "lab-allcores's".
    assert "canary 50%" in out and "deregister" in out and "gates from seat lab-allcores'" in out
    before = served(CANDIDATE)
    probe = Load(KIND, ROUTER, key=client_key(), interval_s=0.5, max_tokens=4)
    with probe:
        pass
    assert probe.records and failed(probe) == []
    if KIND == "litellm":
        assert {r["seat"] for r in probe.records} == {INCUMBENT}
    assert served(CANDIDATE) == before


def test_a_forced_gate_failure_rolls_back_under_aiperf_load_with_no_failed_request(tmp_path):
    put_alias_on_incumbent(tmp_path)
    done, out, aiperf, probe, counts = under_load(tmp_path, CANDIDATE, "-e", "force_gate_failure=true")
    assert done.returncode != 0 and "rolled back" in out, out[-4000:]
    rollout_doc, _folder = latest_rollout()
    assert rollout_doc["outcome"] == "rolled back" and rollout_doc["rollback_s"] is not None
    assert aiperf.failed() == [] and failed(probe) == [], (aiperf.failed()[:3], failed(probe)[:3])
    if KIND == "litellm":
        assert probe.records[-1]["seat"] == INCUMBENT
    # After the rollback the candidate answers nothing more; the incumbent takes the rest of the load.
    assert counts[CANDIDATE]["at_end"] == counts[CANDIDATE]["at_return"], counts
    assert counts[INCUMBENT]["at_end"] > counts[INCUMBENT]["at_return"], counts
    note(
        "rollback",
        {
            "rollback_s": rollout_doc["rollback_s"],
            "aiperf_requests": len(aiperf.result["records"]),
            "aiperf_failed": 0,
            "probe_requests": len(probe.records),
            "probe_by_seat": probe.by_seat(),
            "engine_counts": counts,
            "holds": holds(rollout_doc),
        },
    )


def test_the_promotion_moves_the_alias_under_aiperf_load_with_no_failed_request(tmp_path):
    put_alias_on_incumbent(tmp_path)
    done, out, aiperf, probe, counts = under_load(tmp_path, INCUMBENT)
    assert done.returncode == 0, out[-4000:]
    rollout_doc, folder = latest_rollout()
    assert rollout_doc["outcome"] == "moved", rollout_doc
    step_all = next(s for s in rollout_doc["steps"] if s["step"] == "all")
    applied = float(step_all.get("applied_at_epoch") or step_all["started_at_epoch"])
    after = [r for r in probe.records if r["t0"] >= applied + 1.0]
    assert after, probe.by_seat()
    if KIND == "litellm":
        assert {r["seat"] for r in after} == {CANDIDATE}, probe.by_seat()
    # From the move's return on, the lab seat's engine finishes nothing: every answer is lab-allcores'.
    assert counts[INCUMBENT]["at_end"] == counts[INCUMBENT]["at_return"], counts
    assert counts[CANDIDATE]["at_end"] > counts[CANDIDATE]["at_return"], counts
    assert aiperf.failed() == [] and failed(probe) == [], (aiperf.failed()[:3], failed(probe)[:3])
    assert "## Rollout" in Path(folder, "report.md").read_text()
    note(
        "promotion",
        {
            "aiperf_requests": len(aiperf.result["records"]),
            "aiperf_failed": 0,
            "probe_requests": len(probe.records),
            "probe_after_move": len(after),
            "probe_by_seat": probe.by_seat(),
            "engine_counts": counts,
            "holds": holds(rollout_doc),
            "steps": [
                (s["step"], round(s.get("ended_at_epoch", 0) - s.get("started_at_epoch", 0), 2))
                for s in rollout_doc["steps"]
            ],
        },
    )
