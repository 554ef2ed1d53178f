"""playbooks/promote.yml with the REAL roles/router and the real routers (issue 26 item 2), on this
machine, no lab: the router installed and started by the role on localhost (pid-file runner, its
own nginx for LiteLLM, paths under a scratch folder, from the venvs `make router-venvs` builds),
two fake seats (tests/router_backend.py) behind it, and a client sending a request through the
alias every 50 ms throughout. For LiteLLM (blue/green behind nginx) and smg (workers at runtime):

- `--check` shows the steps and changes nothing (targets, configs, processes);
- `-e force_gate_failure=true` rolls back with 0 failed client requests, its seconds recorded;
- a promotion moves the alias with 0 failed client requests, and every answer sent after the
  move returned comes from the candidate (LiteLLM: x-litellm-model-id; smg names no worker, so
  the fake seat's own name in the answer's text);
- the admin key is in no playbook output and no evidence.

The figures go to $SEATWRIGHT_ROUTER_RESULTS (bench/results/router/promote-<kind>.json) when set.
"""

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests"))
from ansible_collections.seatwright.fleet.plugins.module_utils.router import adapter, deploy  # noqa: E402
from promote_setup import GATES, KEY, assert_judged_against_the_incumbent, evidence_folder  # noqa: E402
from router_load import Load  # noqa: E402

ALIAS = "production"
GROUP = "lab"
# LiteLLM routes the alias to a model group and sends each seat the name it serves, as a vLLM seat's
# --served-model-name, with the seats' key (the fake seats answer 404 for another name and 401
# without the key, as vLLM does); smg routes by the served model name, so there both seats serve the
# alias's own name (roles/router/README.md), and smg sends them the key given with each worker.
SERVED = {"litellm": "smollm2-135m-instruct", "smg": ALIAS}
SEAT_KEY = {"litellm": "sk-seat-7d1e0b9c4a2f6e83", "smg": "sk-seat-5c0e2a71b9d4f386"}
# The clients' own key (router_api_key): the front admits the data plane only with it (issue 50).
CLIENT_KEY = "sk-client-3f8a1d6c0b9e2754"
# Long enough for the four answers a verdict needs at a 50 % canary on a quiet host; a loaded one
# (CI on 48d8363 saw three in 10 s) is covered by the hold's overtime (hold.overtime_s).
HOLD_S = 8
# The gates judge the router's moves here, not the seats: a fake seat through LiteLLM on a loaded
# two-core host once streamed 7.2 tok/s against its benchmark's 111 (a real rollback, 0 failed).
REAL_GATES = dict(GATES, min_visible_ratio=0.02)
INTERVAL_S = 0.05
RESULTS_ENV = "SEATWRIGHT_ROUTER_RESULTS"


def ephemeral_floor():
    """The lowest port the kernel hands out to outgoing connections (net.ipv4.ip_local_port_range)."""
    try:
        return int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32768


def free_base_port():
    """A port with the next two free as well (LiteLLM's colours), below the ephemeral range: a colour
    is bound minutes after the pick, and a port the kernel may give an outgoing connection (the load's,
    nginx's to a colour, LiteLLM's to a seat) in the meantime failed a CI run's bind (EADDRINUSE)."""
    floor = ephemeral_floor()
    candidates = list(range(20000, max(20003, floor - 3)))
    random.shuffle(candidates)
    for port in candidates[:400]:
        ok = True
        for extra in (0, 1, 2):
            with socket.socket() as probe:
                try:
                    probe.bind(("127.0.0.1", port + extra))
                except OSError:
                    ok = False
                    break
        if ok:
            return port
    raise RuntimeError("no three free ports in a row between 20000 and %d" % floor)


def needs_root():
    if os.geteuid() != 0:
        pytest.skip(
            "SKIPPED LOUDLY: the router role installs Debian packages and a system user on the router node "
            "(here localhost): run as root, as CI does (.ci/run)"
        )


def venv_for(kind):
    venv = deploy.router_venv_dir(str(ROOT), kind)
    if not os.path.exists(os.path.join(venv, ".seatwright-complete")):
        pytest.fail(
            "no %s venv at %s: run `make router-venvs` (scripts/router-venvs builds both pinned routers from "
            "the package index; make integration does it first)" % (kind, venv)
        )
    # The role starts the router as its own user (router_user), as on a node: it must enter every folder above.
    shut = [str(folder) for folder in Path(venv).parents if not folder.stat().st_mode & 0o001]
    if shut:
        pytest.fail(
            "the %s venv at %s is out of reach of the router's user: %s let no other user in. Run `make "
            "router-venvs` as root (it builds under %s), or set %s to a folder every user may enter"
            % (kind, venv, ", ".join(shut), deploy.ROUTER_VENVS_SYSTEM_DIR, deploy.ROUTER_VENVS_ENV)
        )
    return venv


def start_seat(name, model, key=None):
    argv = [sys.executable, str(ROOT / "tests" / "router_backend.py"), "--name", name, "--model", model, "--port", "0"]
    env = dict(os.environ)
    if key:
        env["SEAT_KEY"] = key
        argv += ["--key-env", "SEAT_KEY", "--strict-model"]
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, env=env)
    return proc, "http://127.0.0.1:%d/v1" % int(proc.stdout.readline().split()[-1])


class RealRouter:
    """The role's router on localhost for one kind, with lab (the incumbent) and lab-fast behind it."""

    def __init__(self, kind, work):
        self.kind, self.work = kind, Path(work)
        self.port = free_base_port()
        self.procs, self.bases = [], {}
        for name in ("lab", "lab-fast"):
            proc, base = start_seat(name, SERVED[kind], SEAT_KEY[kind])
            self.procs.append(proc)
            self.bases[name] = base
        self.url = "http://127.0.0.1:%d" % self.port
        self.vars = {
            "router": {"kind": kind, "node": "localhost", "port": self.port, "aliases": {ALIAS: GROUP}},
            "router_admin_key": KEY,
            "router_seat_api_key": SEAT_KEY[kind] or "",
            "router_api_key": CLIENT_KEY,
            "router_bind": "127.0.0.1",
            "router_venv": venv_for(kind),
            "router_nginx_prefix": str(self.work / "nginx"),
            "router_service_manager": "process",
            "seatwright_config_dir": str(self.work / "etc"),
            "seatwright_state_dir": str(self.work / "var"),
        }
        self.lay = deploy.layout(
            kind,
            self.port,
            self.vars["seatwright_config_dir"],
            self.vars["seatwright_state_dir"],
            bind="127.0.0.1",
            venv=self.vars["router_venv"],
            nginx_prefix=self.vars["router_nginx_prefix"],
            clients_keyed=True,
        )
        self.inventory = self.work / "inventory.yml"
        self.inventory.write_text(
            yaml.safe_dump(
                {
                    "all": {
                        "hosts": {
                            "localhost": {
                                "ansible_connection": "local",
                                "ansible_host": "127.0.0.1",
                                "ansible_python_interpreter": sys.executable,
                            }
                        },
                        "children": {"gpu_nodes": {"hosts": {}}},
                        "vars": self.vars,
                    }
                }
            )
        )

    def playbook(self, path, *extra):
        env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
        argv = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(self.inventory), str(path)]
        done = subprocess.run(argv + list(extra), cwd=str(ROOT), env=env, capture_output=True, text=True, timeout=900)
        return done, done.stdout + done.stderr

    def setup(self):
        """The role's install and start, then the alias's first seat (the incumbent)."""
        book = self.work / "router-setup.yml"
        book.write_text(
            yaml.safe_dump(
                [
                    {
                        "name": "Install and start the router, then put the alias on its first seat",
                        "hosts": "localhost",
                        "gather_facts": False,
                        "tasks": [
                            {"name": "Install", "ansible.builtin.include_role": {"name": "seatwright.fleet.router"}},
                            {
                                "name": "First seat",
                                "ansible.builtin.include_role": {
                                    "name": "seatwright.fleet.router",
                                    "tasks_from": "apply_targets",
                                },
                                "vars": {
                                    "router_alias": ALIAS,
                                    "router_targets": {"lab": self.first_target()},
                                },
                            },
                        ],
                    }
                ]
            )
        )
        done, out = self.playbook(book)
        assert done.returncode == 0, out[-6000:]
        return out

    def first_target(self):
        return {"api_base": self.bases["lab"], "weight": 100, "model": SERVED[self.kind]}

    def promote(self, tmp_path, *extra):
        argv = ["-e", "seat=lab-fast", "-e", "alias=%s" % ALIAS, "-e", "evidence_root=%s" % (tmp_path / "evidence")]
        argv += ["-e", "candidate_api_base=%s" % self.bases["lab-fast"], "-e", "promote_shares=50"]
        argv += ["-e", "candidate_model=%s" % SERVED[self.kind]]
        argv += ["-e", "promote_hold_s=%d" % HOLD_S, "-e", json.dumps({"promote_gates": REAL_GATES})]
        return self.playbook(ROOT / "playbooks" / "promote.yml", *(argv + list(extra)))

    def targets(self):
        """The alias's targets as the router lists them, through the module's own read."""
        from ansible_collections.seatwright.fleet.plugins.module_utils.io.router import switch

        params = dict(
            state="read",
            kind=self.kind,
            port=self.port,
            bind="127.0.0.1",
            version=None,
            config_dir=self.vars["seatwright_config_dir"],
            state_dir=self.vars["seatwright_state_dir"],
            user="seatwright-router",
            venv=self.vars["router_venv"],
            nginx_prefix=self.vars["router_nginx_prefix"],
            service_manager="process",
            aliases=self.vars["router"]["aliases"],
            alias=ALIAS,
            targets={},
            seat=None,
            metrics_url=None,
            timeout_s=60.0,
            admin_key=None,
            clients_keyed=True,
            seats_keyed=True,
        )
        return {seat: t["weight"] for seat, t in switch.control(params)["targets"].items()}

    def front_errors(self):
        """The end of nginx's error log (LiteLLM's front), to say why a request failed."""
        log = Path(self.lay.get("nginx_prefix") or "/nonexistent") / "error.log"
        return log.read_text(errors="replace").splitlines()[-10:] if log.exists() else []

    def snapshot(self):
        """What a --check must leave as it is: the router's files and its processes' pids."""
        files = {}
        for top in (self.lay["config_dir"], self.lay["state_dir"], self.lay.get("nginx_prefix")):
            for path in sorted(Path(top).rglob("*")) if top else ():
                if path.is_file() and path.suffix != ".log" and path.name not in ("access.log", "error.log"):
                    files[str(path)] = path.read_bytes()
        return files

    def close(self):
        run = Path(self.lay["state_dir"]) / "run"
        for pidfile in sorted(run.glob("*.pid")) if run.is_dir() else ():
            text = pidfile.read_text().strip()
            if text.isdigit():
                try:
                    os.kill(int(text), signal.SIGTERM)
                except ProcessLookupError:
                    pass
        subprocess.run(self.lay["front_argv"] + ["-s", "quit"], capture_output=True)
        for proc in self.procs:
            proc.terminate()
            proc.wait(timeout=10)


@pytest.fixture(scope="module", params=adapter.KINDS)
def router(request):
    # The router runs as its own system user when the test is root (as CI is): its files must be
    # reachable by it, which pytest's 0700 tmp folder is not.
    needs_root()
    work = tempfile.mkdtemp(prefix="seatwright-router-%s-" % request.param)
    os.chmod(work, 0o755)
    found = RealRouter(request.param, work)
    try:
        started = time.monotonic()
        found.setup()
        found.setup_s = round(time.monotonic() - started, 1)
        yield found
    finally:
        found.close()
        shutil.rmtree(work, ignore_errors=True)


RESULTS = {}


def note(router, name, value):
    RESULTS.setdefault(router.kind, {"kind": router.kind, "version": adapter.PINNED[router.kind]})[name] = value
    out = os.environ.get(RESULTS_ENV)
    if out:
        os.makedirs(out, exist_ok=True)
        document = dict(RESULTS[router.kind], setup_s=getattr(router, "setup_s", None), interval_ms=1000 * INTERVAL_S)
        document["command"] = "make router-venvs && %s=%s .venv/bin/python -m pytest %s -v" % (
            RESULTS_ENV,
            os.path.relpath(out, ROOT),
            os.path.relpath(__file__, ROOT),
        )
        Path(out, "promote-%s.json" % router.kind).write_text(json.dumps(document, indent=2, sort_keys=True) + "\n")


def evidence_text(folder):
    return "".join(p.read_text(errors="replace") for p in Path(folder).rglob("*") if p.is_file())


def rollout_of(folder):
    return json.loads((Path(folder) / "promotion-rollout.json").read_text())


def ask(router, key):
    """(status, body) of one chat request through the alias with `key` in Authorization (None: no header)."""
    body = {"model": ALIAS, "max_tokens": 4, "messages": [{"role": "user", "content": "hi"}]}
    headers = {"Content-Type": "application/json"}
    if key is not None:
        headers["Authorization"] = "Bearer " + key
    request = urllib.request.Request(router.url + "/v1/chat/completions", json.dumps(body).encode(), headers)
    try:
        with urllib.request.urlopen(request, timeout=60) as response:
            return response.status, response.read().decode("utf-8", "replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode("utf-8", "replace")


def test_an_api_user_without_the_client_key_is_refused_by_the_router(router):
    # Issue 50 item 1: the seats take a key, and the router sends it to them; a caller of the router's
    # port without the clients' key (none, or a wrong one) gets nothing from them.
    assert CLIENT_KEY != KEY
    refused = {name: ask(router, key) for name, key in (("no key", None), ("a wrong key", "sk-wrong-0000000000000000"))}
    served = ask(router, CLIENT_KEY)
    note(router, "client_key", {name: status for name, (status, _b) in dict(refused, client=served).items()})
    for name, (status, text) in refused.items():
        assert status == 401, "%s: %s %s" % (name, status, text[:300])
        assert "answered by" not in text
    assert served[0] == 200 and "answered by lab" in served[1], served
    # No process's command line, which every local user reads, holds a key (smg's launch put its
    # admin key there; issue 50).
    held = [
        pid
        for pid, line in command_lines()
        if any(k.encode() in line for k in (KEY, CLIENT_KEY, SEAT_KEY[router.kind]))
    ]
    assert held == [], held


def test_the_routers_metrics_answer_where_its_kind_says_with_the_clients_key_only_for_litellm(router):
    # Issue 51: Prometheus scrapes LiteLLM's prometheus callback through the front with the clients'
    # key (never the admin key); smg's metrics port takes none. An answer after a served request names
    # the router's own request counter.
    from ansible_collections.seatwright.fleet.plugins.module_utils.router import kinds

    metrics = kinds.get(router.kind)["metrics"]
    assert ask(router, CLIENT_KEY)[0] == 200
    base = router.url if metrics["port"] is None else "http://127.0.0.1:%d" % metrics["port"]

    def scrape(key):
        headers = {"Authorization": "Bearer " + key} if key else {}
        request = urllib.request.Request(base + metrics["path"], headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=30) as response:
                return response.status, response.read().decode("utf-8", "replace")
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode("utf-8", "replace")

    status, text = scrape(CLIENT_KEY if metrics["key"] == "clients" else None)
    assert status == 200, (status, text[:300])
    families = {line.split()[2] for line in text.splitlines() if line.startswith("# TYPE ")}
    note(router, "metrics", {"status": status, "families": len(families)})
    assert families, text[:300]
    if metrics["key"] == "clients":
        assert any(name.startswith("litellm_") for name in families), sorted(families)[:20]
        assert scrape(None)[0] in (401, 403)
        assert scrape("sk-wrong-0000000000000000")[0] in (401, 403)


def command_lines():
    """(pid, /proc/PID/cmdline) of every process now."""
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open("/proc/%s/cmdline" % entry, "rb") as handle:
                    yield entry, handle.read()
            except OSError:
                continue


def test_check_mode_shows_the_steps_and_changes_nothing(router, tmp_path):
    folder = evidence_folder(tmp_path)
    assert router.targets() == {"lab": 1 if router.kind == "smg" else 100}
    before, targets = router.snapshot(), router.targets()
    done, out = router.promote(tmp_path, "--check")
    assert done.returncode == 0, out[-6000:]
    flat = " ".join(out.split())
    assert "1. register: register lab-fast" in flat and "5. drain: drain lab" in flat, out[-3000:]
    assert router.targets() == targets
    assert router.snapshot() == before
    assert not (Path(folder) / "promotion-rollout.json").exists()
    assert KEY not in out


def test_a_forced_gate_failure_rolls_back_with_no_failed_request(router, tmp_path):
    folder = evidence_folder(tmp_path)
    with Load(router.kind, router.url, key=CLIENT_KEY) as load:
        done, out = router.promote(tmp_path, "-e", "force_gate_failure=true")
    assert done.returncode != 0 and "rolled back" in out and "Traceback" not in out, out[-6000:]
    document = rollout_of(folder)
    note(
        router,
        "rollback",
        {
            "requests": len(load.records),
            "failed": len(load.failed()),
            "answered_by": load.by_seat(),
            "rollback_s": document["rollback_s"],
            "steps": [{k: s.get(k) for k in ("step", "apply_s", "rollback_s")} for s in document["steps"]],
        },
    )
    assert load.records and load.failed() == [], load.failed()[:5]
    assert document["outcome"] == "rolled back" and 0 < document["rollback_s"] < 120
    assert document["steps"][-1]["step"] == "rollback" and document["steps"][-1]["failed_step"] == "canary 50%"
    assert router.targets() == {"lab": 1 if router.kind == "smg" else 100}
    back = document["steps"][-1]["ended_at_epoch"]
    assert {r["seat"] for r in load.after(back)} == {"lab"}
    assert KEY not in out and KEY not in evidence_text(folder)
    assert not SEAT_KEY[router.kind] or (SEAT_KEY[router.kind] not in out + evidence_text(folder))


def test_a_promotion_moves_the_alias_with_no_failed_request(router, tmp_path):
    folder = evidence_folder(tmp_path)
    with Load(router.kind, router.url, key=CLIENT_KEY) as load:
        done, out = router.promote(tmp_path)
    assert done.returncode == 0, out[-6000:]
    document = rollout_of(folder)
    assert document["outcome"] == "moved" and document["rollback_s"] is None
    steps = ["register", "baseline", "canary 50%", "all", "drain", "deregister"]
    assert [s["step"] for s in document["steps"]] == steps
    assert_judged_against_the_incumbent(document, named=router.kind == "litellm")
    moved = next(s for s in document["steps"] if s["step"] == "all")
    # When the role's move returned: the router lists only the candidate from then on.
    moved_at = float(moved["applied_at_epoch"])
    after = load.after(moved_at)
    note(
        router,
        "promotion",
        {
            "requests": len(load.records),
            "failed": len(load.failed()),
            "answered_by": load.by_seat(),
            "after_the_move": len(after),
            "after_the_move_not_from_the_candidate": len([r for r in after if r["seat"] != "lab-fast"]),
            "steps": [{k: s.get(k) for k in ("step", "apply_s", "applied_at_epoch")} for s in document["steps"]],
            "failures": [{k: r[k] for k in ("t0", "status", "error")} for r in load.failed()[:10]],
            "front_errors": router.front_errors(),
        },
    )
    assert load.records and load.failed() == [], load.failed()[:5]
    assert len(after) > 20 and {r["seat"] for r in after} == {"lab-fast"}
    assert {r["seat"] for r in load.records} == {"lab", "lab-fast"}
    assert router.targets() == {"lab-fast": 1 if router.kind == "smg" else 100}
    assert [s["verdict"]["verdict"] for s in document["steps"] if s.get("verdict")] == ["pass"] * 3
    assert KEY not in out and KEY not in evidence_text(folder)
    assert not SEAT_KEY[router.kind] or (SEAT_KEY[router.kind] not in out + evidence_text(folder))
