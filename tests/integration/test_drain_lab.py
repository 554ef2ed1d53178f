"""The drain before a disruptive change in the lab (issue 52 part 1), on what `make lab` left: the lab seat,
lab-allcores and the two-node lab-tp2 up, LiteLLM on node-a with `production` on lab-allcores.

The change is lab/drain/driver-change.yml's simulated driver change on node-a (test equipment: the lab's
driver is an emulator's; the node records the change's id in place of making it):
- on make lab's own state, the converge is refused before any node is touched, naming the seats (lab-tp2
  on both nodes) and `production` (no other node serves it), and nothing changes; its `--check` with
  seatwright_drain=true drains node-b with node-a, because lab-tp2 spans both;
- with lab-tp2 down, lab-allcores moved to node-b beside the lab seat behind `production` (50/50) and the
  co-tenant lab-omni evicted by the lab seat, `--check` lists the drain step by step and moves nothing;
  `-e seatwright_drain=true` then moves `production` onto lab-allcores, tears the lab seat down
  (lab-omni restored), records the change, brings the seat back and puts `production` back, with 0 failed
  requests through the router (a request every 3 s);
- a second converge changes nothing.
The timings and request counts go to bench/results/drain/lab-drain.json. The last test leaves the lab as
make lab does (lab-allcores on node-a behind `production`). Run by `make lab-drain-test` (lab lock).
"""

import json
import os
import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "integration"))
# The promotion lab test's helpers: the router's address, the clients' key, the playbook runner, the load.
import test_promote_lab as lab  # noqa: E402

SIMULATED = ROOT / "lab" / "drain" / "driver-change.yml"
CHANGE_ID = "lab-driver-590"
MADE = "/var/lib/seatwright/drain/%s.done" % CHANGE_ID
COTENANT = "lab-omni"
SEAT, SECOND, WIDE = lab.INCUMBENT, lab.CANDIDATE, "lab-tp2"
RESULTS = ROOT / "bench" / "results" / "drain" / "lab-drain.json"
COMMAND = "make lab && make lab-drain-test"
# The lab's Prometheus reads its seat targets here, on node-a (inventory/lab/group_vars/all/monitoring.yml).
FILE_SD = "/etc/prometheus/seatwright/file_sd"

pytestmark = pytest.mark.skipif(
    os.environ.get("SEATWRIGHT_LAB_DRAIN") != "1" or lab.KIND != "litellm" or not lab._router_up(),
    reason="needs the lab make lab leaves (router on node-a, lab, lab-allcores and lab-tp2 up): make lab-drain-test",
)


def node(host, *argv):
    return subprocess.run(["/usr/bin/docker", "exec", host] + list(argv), capture_output=True, text=True, timeout=120)


def running(host, container):
    done = node(host, "docker", "inspect", "-f", "{{.State.Running}}", container)
    return done.returncode == 0 and done.stdout.strip() == "true"


def change_made():
    return node("node-a", "test", "-e", MADE).returncode == 0


def labelled():
    """The seats whose scrape targets on the lab's Prometheus node carry the `production` alias label."""
    found = node("node-a", "sh", "-c", "grep -lE '\"alias\": *\"%s\"' %s/seat-*.json || true" % (lab.ALIAS, FILE_SD))
    return {Path(line).name[len("seat-") : -len(".json")] for line in found.stdout.split()}


def undo_change():
    """The simulated change not made yet, so the test runs again: its marker gone from node-a and from
    the controller's cached facts (the converge decides what is pending from them before it reads the node)."""
    node("node-a", "rm", "-f", MADE)
    for cached in (ROOT / ".cache" / "facts").glob("*node-a"):
        stored = json.loads(cached.read_text())
        facts = json.loads(stored["__payload__"]) if isinstance(stored.get("__payload__"), str) else None
        if facts is not None and facts.pop("seatwright_drain_node", None) is not None:
            stored["__payload__"] = json.dumps(facts)
            cached.write_text(json.dumps(stored))


def evidence_folders(seat):
    """The seat's evidence folders (evidence/<seat>/<UTC>/)."""
    top = ROOT / "evidence" / seat
    return [path for path in top.iterdir() if path.is_dir()] if top.is_dir() else []


def converge(*extra):
    """(result, output with its whitespace runs made one space, seconds): the callback's YAML folds
    long lines at 80 columns, so a sentence is searched for in the flattened text."""
    started = time.monotonic()
    done, out = lab.playbook(ROOT / "site.yml", "-l", "gpu_nodes", "-e", "@%s" % SIMULATED, *extra)
    return done, out, round(time.monotonic() - started, 1)


def flat(out):
    return " ".join(out.split())


def recap(out):
    """{host: {ok, changed, failed, ...}} from the PLAY RECAP."""
    return {
        m.group(1): {k: int(v) for k, v in re.findall(r"(\w+)=(\d+)", m.group(2))}
        for m in re.finditer(r"^(\S+)\s+:\s+(ok=\d+.*)$", out, re.M)
    }


def note(name, value):
    found = json.loads(RESULTS.read_text()) if RESULTS.exists() else {}
    found[name] = value
    found["command"] = COMMAND
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(found, indent=2, sort_keys=True) + "\n")


def put_alias(targets):
    """`production` on {seat: weight} (the router role's apply_targets, as the promotion test does)."""
    book = ROOT / "playbooks" / ".test-drain-alias.yml"
    routed = {seat: {"api_base": lab.plan_base(seat), "weight": w, "model": lab.SERVED} for seat, w in targets.items()}
    book.write_text(
        json.dumps(
            [
                {
                    "name": "Put production on the drain test's seats",
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
                            "vars": {"router_alias": lab.ALIAS, "router_targets": routed},
                        }
                    ],
                }
            ]
        )
    )
    try:
        done, out = lab.playbook(book)
    finally:
        book.unlink()
    assert done.returncode == 0, out[-4000:]


def seat_up(*extra):
    done, out = lab.playbook(ROOT / "playbooks" / "seat.yml", "-e", "seat_measure=false", *extra)
    assert done.returncode == 0, out[-4000:]


def teardown(seat, host):
    done, out = lab.playbook(ROOT / "playbooks" / "teardown.yml", "-e", "seat=%s" % seat, "-l", host)
    assert done.returncode == 0, out[-4000:]


class Watch:
    """Samples node-a every 2 s on its own thread: the lab seat's container, the co-tenant and the seats
    that carry the alias label."""

    def __init__(self):
        self.samples, self.stop = [], threading.Event()
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        while not self.stop.is_set():
            self.samples.append(
                {
                    "t": time.time(),
                    "seat": running("node-a", "seatwright-%s-rank0" % SEAT),
                    "cotenant": running("node-a", COTENANT),
                    "labelled": sorted(labelled()),
                }
            )
            self.stop.wait(2.0)

    def __enter__(self):
        self.thread.start()
        return self

    def __exit__(self, *exc):
        self.stop.set()
        self.thread.join(30)

    def seat_down_s(self):
        down = [s["t"] for s in self.samples if not s["seat"]]
        return round(down[-1] - down[0] + 2.0, 1) if down else 0.0


@pytest.fixture(scope="module")
def second_seat():
    """lab-allcores on node-b beside the lab seat, both behind `production`, and lab-omni evicted by the
    lab seat; afterwards lab-allcores back on node-a behind `production` alone, as make lab leaves it."""
    undo_change()
    teardown(SECOND, "node-a")
    teardown(SEAT, "node-a")
    # The two-node seat's engines warm up for minutes on the lab's two shared cores while lab-allcores
    # serves the probe: brought back beside them it overran its bring-up wait. It is drained whole in
    # --check on make lab's own state (the refusal test); here it waits on the side and comes back after.
    teardown(WIDE, "node-a,node-b")
    image = node("node-a", "docker", "images", "--format", "{{.Repository}}:{{.Tag}}", "seatwright/vllm-cpu")
    node("node-a", "docker", "rm", "-f", COTENANT)
    started = node(
        "node-a",
        "docker",
        "run",
        "-d",
        "--init",
        "--name",
        COTENANT,
        "--entrypoint",
        "sleep",
        image.stdout.split()[0],
        "infinity",
    )
    assert started.returncode == 0, started.stderr
    seat_up("-e", "seat=%s" % SEAT)
    assert not running("node-a", COTENANT)
    seat_up("-e", "seat=%s" % SECOND, "-e", "seat_hosts=node-b")
    put_alias({SEAT: 50, SECOND: 50})
    yield
    teardown(SECOND, "node-b")
    seat_up("-e", "seat=%s" % SECOND)
    put_alias({SECOND: 100})
    seat_up("-e", "seat=%s" % WIDE)


def test_a_driver_change_under_serving_seats_is_refused_naming_the_seat_and_the_alias():
    undo_change()
    done, raw, seconds = converge()
    out = flat(raw)
    assert done.returncode != 0, raw[-4000:]
    # Whichever of the two holds production (make lab's promotion may have been refused), both are named,
    # and the alias with the one that serves it: no seat on another node serves it.
    assert "seat %s (on node-a) serves" % SEAT in out and "seat %s (on node-a) serves" % SECOND in out, out[-4000:]
    assert "serves alias %s, which no other running seat serves" % lab.ALIAS in out, out[-4000:]
    assert "seat %s (on node-a, node-b) serves" % WIDE in out, out[-4000:]
    assert not change_made() and running("node-a", "seatwright-%s-rank0" % SEAT)
    note("refused", {"seconds": seconds, "output_from_first_refusal": out[out.find("refused: ") :][:2000]})
    # The two-node seat drains whole: node-b joins node-a's batch, and lab-tp2 goes down and comes back on both.
    done, raw, seconds = converge("-e", "seatwright_drain=true", "--check")
    assert done.returncode == 0, raw[-4000:]
    out = flat(raw)
    for want in (
        "batch 1: node-a, node-b: drain",
        "tear seat %s down on node-a, node-b" % WIDE,
        "bring seat %s back on node-a, node-b from its plan" % WIDE,
    ):
        assert want in out, (want, raw[-6000:])
    assert not change_made()
    start = out.find("batch 1: node-a, node-b: drain")
    note("check_make_lab_state", {"seconds": seconds, "drain": out[start : start + 1500]})


def test_check_lists_the_drain_node_by_node_and_moves_nothing(second_seat):
    done, raw, seconds = converge("-e", "seatwright_drain=true", "--check")
    assert done.returncode == 0, raw[-4000:]
    out = flat(raw)
    order = [
        "batch 1: node-a: drain",
        "1. move alias production from lab to lab-allcores",
        "tear seat lab down on node-a, restoring co-tenants lab-omni on node-a",
        "make the changes: node-a: driver",
        "check node-a",
        "bring seat lab back on node-a from its plan",
        "put alias production back",
    ]
    positions = [out.find(want) for want in order]
    assert -1 not in positions and positions == sorted(positions), (order, positions, raw[-6000:])
    assert not change_made() and running("node-a", "seatwright-%s-rank0" % SEAT)
    start = out.find(order[0])
    note("check", {"seconds": seconds, "drain": out[start : out.find("put alias production back", start) + 80]})


def test_the_drain_moves_the_alias_restores_the_cotenant_and_brings_the_seat_back_with_no_failed_request(
    second_seat,
):
    key = lab.client_key()
    with (
        Watch() as watch,
        # Every 3 s, not 0.5: lab-allcores computes on both of the lab's cores, and kept busy without a
        # pause it starved the lab seat's warm-up on core 0 past its bring-up wait (twice, 2026-12-06).
        lab.Load(lab.KIND, lab.ROUTER, key=key, model=lab.ALIAS, interval_s=3.0, max_tokens=8) as probe,
    ):
        before = set(evidence_folders(SEAT))
        done, raw, seconds = converge("-e", "seatwright_drain=true")
        returned = time.time()
        time.sleep(20)
    assert done.returncode == 0, raw[-4000:]
    out = flat(raw)
    assert lab.failed(probe) == [], lab.failed(probe)[:3]
    assert change_made()
    assert "restarted %s" % COTENANT in out and any(s["cotenant"] for s in watch.samples), watch.samples[-3:]
    assert running("node-a", "seatwright-%s-rank0" % SEAT) and not running("node-a", COTENANT)
    assert watch.seat_down_s() > 0, "the lab seat never went down: nothing was drained"
    # While the lab seat was down every answer came from lab-allcores; once back it shares the alias again.
    down = [s["t"] for s in watch.samples if not s["seat"]]
    during = [r for r in probe.records if down[0] <= r["t0"] <= down[-1]]
    assert during and {r["seat"] for r in during} == {SECOND}, probe.by_seat()
    assert SEAT in {r["seat"] for r in probe.after(returned)}, probe.by_seat()
    # The alias label followed the alias: on lab-allcores alone while the lab seat was down, on both after.
    assert {tuple(s["labelled"]) for s in watch.samples if not s["seat"]} == {(SECOND,)}, watch.samples
    assert labelled() == {SEAT, SECOND}
    # The bring-back left the evidence a bring-up does: a new folder with the plan, the rank and bringup.json.
    new = sorted(set(evidence_folders(SEAT)) - before)
    assert len(new) == 1, new
    record = json.loads((new[0] / "bringup.json").read_text())
    assert record["state"] == "serving" and record["first_answer"], record
    assert (new[0] / "plan.json").is_file() and (new[0] / "ranks" / "node-a.json").is_file()
    assert "evidence: %s" % new[0] in out
    note(
        "drain",
        {
            "converge_s": seconds,
            "lab_seat_down_s": watch.seat_down_s(),
            "cotenant_seen_running": True,
            "probe_requests": len(probe.records),
            "probe_failed": 0,
            "probe_by_seat": probe.by_seat(),
            "probe_while_seat_down": len(during),
            "alias_label_while_seat_down": [SECOND],
            "bringback_evidence": str(new[0].relative_to(ROOT)),
            "recap": recap(raw),
        },
    )


def test_a_second_converge_changes_nothing(second_seat):
    done, out, seconds = converge("-e", "seatwright_drain=true")
    assert done.returncode == 0, out[-4000:]
    found = recap(out)
    assert found["node-a"]["changed"] == 0 and found["node-b"]["changed"] == 0, found
    assert "batch 1:" not in out
    note("second_converge", {"seconds": seconds, "recap": found})
