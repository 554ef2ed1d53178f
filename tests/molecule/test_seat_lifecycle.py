"""Lab verify: the seat lifecycle on the molecule lab (node-a, node-b on labfabric).

Under `molecule test` (verify step; SEATWRIGHT_LAB_READY=1) the lab is already up and converged:
each node runs its own Docker engine and holds the lab engine image. On its own (`make
lab-seat-test`) this module brings the lab up first and removes it at the end. Either way it makes
and stages the lab checkpoints and starts the co-tenant container node-a declares (`lab-omni`, in
inventory/lab). Then, in order: the lab seat answers and evicts the co-tenant; a re-run changes
nothing; the teardown restores it; an engine that exits at start fails fast; a hung rendezvous fails
at its timeout with stack dumps; the two-node seat answers with both ranks in one TP group; a Ray
head and worker come up and go down. Run it under the lab lock:

  flock -o /tmp/seatwright-lab.lock make lab-seat-test
"""

import json
import os
import re
import subprocess
import time
import urllib.request
from pathlib import Path

import monitoring_lab
import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.defaults import PLAN_DIR
from ansible_collections.seatwright.fleet.plugins.module_utils.monitoring import dashboards
from ansible_collections.seatwright.fleet.plugins.module_utils.monitoring.targets import seat_file_name
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.container import read_back

# Molecule runs this from its own working folder, so the project root comes from this file.
ROOT = Path(__file__).resolve().parents[2]
DOCKER = "/usr/bin/docker"
ENGINE_IMAGE_REPOSITORY = "seatwright/vllm-cpu"
COTENANT = "lab-omni"
RECIPES = ROOT / "tests" / "molecule" / "seat_recipes"
# Set by molecule.yml for its verify step: the lab is up and converged, and molecule removes it.
LAB_READY = os.environ.get("SEATWRIGHT_LAB_READY") == "1"
LAB_URL = "http://172.30.99.11:8000"
# The lab's router on node-a (inventory/lab/group_vars/all/router.yml).
ROUTER_URL = "http://172.30.99.11:4000"
# The lab's seats serve with a per-checkout key (inventory/lab/group_vars/all/seat_key.yml makes it).
LAB_KEY_FILE = ROOT / ".cache" / "lab" / "seat-api-key"


def lab_key():
    return LAB_KEY_FILE.read_text().strip()


# Molecule's verify step forces colour on; escape codes would break the recap and path matches.
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def env():
    return dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        PATH="%s:/usr/bin:%s" % (ROOT / ".venv" / "bin", os.environ.get("PATH", "")),
    )


def sh(*argv, check=True, timeout=1800, input_text=None):
    done = subprocess.run(
        list(argv), cwd=ROOT, env=env(), capture_output=True, text=True, timeout=timeout, input=input_text
    )
    if check and done.returncode != 0:
        pytest.fail(
            "%s failed (rc %d):\n%s\n%s" % (" ".join(argv), done.returncode, done.stdout[-4000:], done.stderr[-2000:])
        )
    return done


def node(name, *argv, check=True):
    return sh(DOCKER, "exec", name, *argv, check=check)


def playbook(path, *extra, timeout=1200):
    """(rc, stdout, seconds) of one ansible-playbook run against the lab inventory."""
    started = time.monotonic()
    done = sh(
        str(ROOT / ".venv" / "bin" / "ansible-playbook"),
        "-i",
        "inventory/lab",
        path,
        *extra,
        check=False,
        timeout=timeout,
    )
    return done.returncode, ANSI.sub("", done.stdout + done.stderr), time.monotonic() - started


def recap(output, host):
    match = re.search(r"^%s\s*:\s*ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)" % host, output, re.M)
    assert match, output[-3000:]
    return dict(zip(("ok", "changed", "unreachable", "failed"), map(int, match.groups())))


def evidence_dir(output):
    # A failed bring-up names its evidence in the failure message, a served one in its last lines.
    found = re.findall(r"evidence: ([^\s\\'\"]+)", output)
    assert found, output[-3000:]
    return Path(found[-1].rstrip("'\""))


def container(host, name):
    done = node(host, "docker", "container", "inspect", name, check=False)
    if done.returncode != 0:
        return None
    return json.loads(done.stdout)[0]


def cotenant_running():
    state = container("node-a", COTENANT)
    return bool(state and state["State"]["Running"])


def chat(url, model):
    request = urllib.request.Request(
        url + "/v1/chat/completions",
        method="POST",
        data=json.dumps(
            {
                "model": model,
                "max_tokens": 16,
                "temperature": 0,
                "messages": [{"role": "user", "content": "What is the capital of France?"}],
            }
        ).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer " + lab_key()},
    )
    with urllib.request.urlopen(request, timeout=60) as response:
        return json.loads(response.read())


def recipe_args(name):
    """Plan and bring up a test recipe (seat.yml), without qualifying or benchmarking it."""
    return [
        "-e",
        "seat=%s" % name,
        "-e",
        "seat_recipe=%s" % (RECIPES / ("%s.yml" % name)),
        "-e",
        "seat_measure=false",
        "-e",
        "plan_out=%s" % (ROOT / ".cache" / "plans" / ("%s.json" % name)),
    ]


@pytest.fixture(scope="module")
def lab():
    if not os.path.exists(DOCKER):
        pytest.fail("needs %s" % DOCKER)
    if not LAB_READY:
        sh("molecule", "destroy")
    try:
        if not LAB_READY:
            sh("molecule", "create")
            sh("molecule", "prepare", "--force")
            # Node preparation (each node's rendered NCCL env) and the engine image on both nodes.
            rc, out, _ = playbook("site.yml", "-l", "gpu_nodes", timeout=3600)
            assert rc == 0, out[-3000:]
        sh("bash", "scripts/lab-models")
        for model in ("smollm2-135m-instruct", "tiny-llama"):
            rc, out, _ = playbook("playbooks/weights.yml", "-e", "@lab/weights/%s.yml" % model)
            assert rc == 0, out[-3000:]
        # A co-tenant service on node-a that the exclusive lab seats evict (declared in inventory/lab).
        node("node-a", "docker", "rm", "-f", COTENANT, check=False)
        image = node(
            "node-a", "docker", "images", "--format", "{{.Repository}}:{{.Tag}}", ENGINE_IMAGE_REPOSITORY
        ).stdout.split()[0]
        node("node-a", "docker", "run", "-d", "--init", "--name", COTENANT, "--entrypoint", "sleep", image, "infinity")
        yield
    finally:
        for seat in ("lab", "lab-tp2", "lab-exits", "lab-hang", "lab-ray"):
            playbook("playbooks/teardown.yml", "-e", "seat=%s" % seat)
        node("node-a", "docker", "rm", "-f", COTENANT, check=False)
        if not LAB_READY:
            sh("molecule", "destroy", check=False)


def test_lab_seat_answers_and_evicts_the_cotenant(lab):
    rc, out, seconds = playbook("playbooks/seat.yml", "-e", "seat=lab", "-e", "seat_measure=false")
    assert rc == 0, out[-4000:]
    answer = chat(LAB_URL, "smollm2-135m-instruct")
    assert answer["choices"][0]["message"]["content"].strip()
    assert not cotenant_running()
    evidence = evidence_dir(out)
    bringup = json.loads((evidence / "bringup.json").read_text())
    assert bringup["state"] == "serving" and bringup["ready"]["state"] == "ready"
    rank = json.loads((evidence / "ranks" / "node-a.json").read_text())
    assert rank["argv"][-3:] == ["--enable-auto-tool-choice", "--tool-call-parser", "pythonic"]
    assert rank["container_id"] and rank["image_id"].startswith("sha256:")
    assert (evidence / "plan.json").exists() and list((evidence / "logs").iterdir())


def test_the_router_puts_production_on_the_lab_seat_once_it_answers(lab):
    # inventory/lab declares production: lab; seat.yml put the alias on the seat when it answered.
    # The key the router runs with, from its own 0600 file on node-a.
    env_text = node("node-a", "cat", "/etc/seatwright/router/router.env").stdout
    key = dict(line.split("=", 1) for line in env_text.splitlines() if "=" in line)["LITELLM_MASTER_KEY"].strip()
    body = {"model": "production", "max_tokens": 8, "messages": [{"role": "user", "content": "Capital of France?"}]}
    request = urllib.request.Request(
        ROUTER_URL + "/v1/chat/completions",
        method="POST",
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Authorization": "Bearer " + key},
    )
    with urllib.request.urlopen(request, timeout=120) as response:
        answered_by = response.headers.get("x-litellm-model-id")
        answer = json.loads(response.read())
    assert answered_by == "lab" and answer["choices"][0]["message"]["content"].strip()


def spec_differences(host, spec, secrets):
    """read_back of the plan's spec against the container as the node's Docker reports it."""
    inspect = container(host, spec["name"])
    assert inspect is not None, "%s: %s is not there" % (host, spec["name"])
    image_env = json.loads(
        node(host, "docker", "image", "inspect", "--format", "{{json .Config.Env}}", inspect["Image"]).stdout or "null"
    )
    return read_back(spec, inspect, image_env or [], None, secrets)


def test_the_running_lab_seat_is_its_plans_container(lab):
    # The plan bring-up ran from, not the evidence copy: evidence is redacted (addresses replaced).
    plan = ROOT / PLAN_DIR / "lab.json"
    assert plan.is_file(), "no plan of the lab seat at %s" % plan
    spec = json.loads(plan.read_text())["ranks"][0]["container_spec"]
    # The lab serves with its per-checkout key (inventory/lab/group_vars/all/seat_key.yml).
    assert spec_differences("node-a", spec, {"seat_api_key": lab_key()}) == []


def test_prometheus_reports_every_node_the_seat_and_the_router_up(lab):
    # site.yml ran the exporters and Prometheus on node-a (inventory/lab/group_vars/all/monitoring.yml);
    # bring-up put the seat's target in its file_sd folder, with the alias seat.yml placed on it.
    wanted = {
        ("seatwright_nodes", "node-a", ""),
        ("seatwright_nodes", "node-b", ""),
        ("seatwright_seats", "node-a", "lab"),
        ("seatwright_routers", "node-a", "litellm"),
    }

    def all_up():
        found = monitoring_lab.targets()
        return found if all(found.get(target) == "up" for target in wanted) else None

    monitoring_lab.wait_for(all_up, 90, "every node, the lab seat and the router up in Prometheus")
    # Bring-up writes the target, then seat.yml relabels it with the alias: Prometheus swaps the target a
    # discovery refresh later, so the labelled series is waited for, and every series seen is named if it never comes.
    seen = {}

    def labelled():
        found = monitoring_lab.api("/api/v1/query", query='up{job="seatwright_seats", seat="lab"}')["data"]["result"]
        seen["series"] = [series["metric"] for series in found]
        return [labels for labels in seen["series"] if labels.get("alias")]

    try:
        labels = monitoring_lab.wait_for(labelled, 60, "the lab seat's target with its alias label")[0]
    except AssertionError as exc:
        raise AssertionError("%s; the seat's series: %r" % (exc, seen.get("series")))
    assert (labels["engine"], labels["rank"], labels["alias"]) == ("vllm", "0", "production")


def test_every_dashboard_query_returns_series_on_the_lab(lab):
    # TEST INPUT where the lab has no source (GPUs, RDMA ports): the recorded expositions, labelled.
    for host in ("node-a", "node-b"):
        path = "%s/%s" % (monitoring_lab.TEXTFILE_DIR, monitoring_lab.STANDIN_FILE)
        sh(
            DOCKER,
            "exec",
            "-i",
            host,
            "sh",
            "-c",
            "cat > %s.tmp && mv %s.tmp %s" % (path, path, path),
            input_text=monitoring_lab.standin_text(),
        )
    # Counters need two samples in the window for rate(); a few answers give the seat's histograms.
    for _ in range(3):
        chat(LAB_URL, "smollm2-135m-instruct")
    # A panel answers when any of its queries does: one panel reads vLLM's and SGLang's names side by
    # side, and the lab serves vLLM only.
    empty = {}
    try:
        for kind in dashboards.KINDS:
            panels = {}
            for title, expr in dashboards.queries(kind):
                panels.setdefault(title, []).append(expr)
            for title, exprs in panels.items():

                def answered(exprs=exprs):
                    return [r for e in exprs for r in monitoring_lab.api("/api/v1/query", query=e)["data"]["result"]]

                try:
                    monitoring_lab.wait_for(answered, 60, "series")
                except AssertionError:
                    empty.setdefault(kind, []).append(title)
    finally:
        for host in ("node-a", "node-b"):
            node(host, "rm", "-f", "%s/%s" % (monitoring_lab.TEXTFILE_DIR, monitoring_lab.STANDIN_FILE))
    assert empty == {}


def test_a_frozen_engine_fires_the_stall_alert_and_its_thaw_clears_it(lab):
    # The field's deadlock that printed nothing ([000]): the engine core frozen under load while the API
    # server keeps answering /metrics. The windows are the lab inventory's (20 s + 10 s, scrapes of 5 s).
    out = ROOT / ".cache" / "monitoring" / "lab-stall.json"
    out.parent.mkdir(parents=True, exist_ok=True)
    command = [
        str(ROOT / ".venv" / "bin" / "python"), str(ROOT / "bench" / "monitoring_stall.py"),
        "--url", LAB_URL, "--model", "smollm2-135m-instruct", "--seat", "lab",
        "--key-file", str(LAB_KEY_FILE), "--prometheus", monitoring_lab.PROMETHEUS,
        "--window-s", "20", "--for-s", "10", "--scrape-s", "5", "--streams", "2", "--max-tokens", "256",
        "--freeze", "%s exec node-a pkill -STOP -f VLLM::EngineCore" % DOCKER,
        "--thaw", "%s exec node-a pkill -CONT -f VLLM::EngineCore" % DOCKER,
        "--out", str(out),
    ]  # fmt: skip
    done = sh(*command, check=False, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    result = json.loads(out.read_text())
    assert result["state_before"] == "inactive" and result["running_before"] > 0
    # Fires a scrape early at most, and within a scrape and two evaluations of late; clears within a minute.
    assert 30 - 5 <= result["fired_s"] <= 30 + 3 * 5, result
    assert result["cleared_s"] <= 60, result
    # The engine answers again once thawed.
    assert chat(LAB_URL, "smollm2-135m-instruct")["choices"][0]["message"]["content"].strip()


def test_no_key_reaches_prometheus_config_targets_page_or_logs(lab):
    secrets = {"the seat key": lab_key()}
    for name in ("router-admin-key", "router-api-key"):
        path = ROOT / ".cache" / "lab" / name
        if path.exists():
            secrets[name] = path.read_text().strip()
    shown = {
        "config": json.dumps(monitoring_lab.api("/api/v1/status/config")),
        # What the targets page shows (Debian's package serves the API, not the web UI's pages).
        "targets": json.dumps(monitoring_lab.api("/api/v1/targets")),
        "prometheus.yml": node("node-a", "cat", "/etc/prometheus/prometheus.yml").stdout,
        "log": node("node-a", "sh", "-c", "cat /var/log/prometheus/*.log 2>/dev/null; true").stdout,
    }
    leaks = [(what, name) for what, text in shown.items() for name, key in secrets.items() if key in text]
    assert leaks == []
    assert "credentials_file" in shown["config"]


def test_rerun_changes_nothing_and_keeps_the_container(lab):
    before = container("node-a", "seatwright-lab-rank0")["Id"]
    rc, out, _ = playbook("playbooks/seat.yml", "-e", "seat=lab", "-e", "seat_measure=false")
    assert rc == 0, out[-4000:]
    assert recap(out, "node-a")["changed"] == 0
    assert container("node-a", "seatwright-lab-rank0")["Id"] == before


def test_teardown_removes_the_seat_and_restores_the_cotenant(lab):
    rc, out, _ = playbook("playbooks/teardown.yml", "-e", "seat=lab")
    assert rc == 0, out[-4000:]
    assert container("node-a", "seatwright-lab-rank0") is None
    assert cotenant_running()


def test_teardown_took_the_seats_target_away(lab):
    def gone():
        return not [target for target in monitoring_lab.targets() if target[:3:2] == ("seatwright_seats", "lab")]

    monitoring_lab.wait_for(gone, 60, "the lab seat's target gone from Prometheus after teardown")
    files = node("node-a", "ls", "/etc/prometheus/seatwright/file_sd").stdout.split()
    assert seat_file_name("lab") not in files, files


def test_engine_that_exits_at_start_fails_fast_with_its_last_lines(lab):
    rc, out, _ = playbook("playbooks/seat.yml", *recipe_args("lab-exits"), "-l", "node-a,localhost")
    assert rc != 0
    assert "is not running (exit code" in out
    assert "max_model_len" in out or "max-model-len" in out
    elapsed = [float(x) for x in re.findall(r"is not running \(exit code \d+\) after (\d+) s", out)]
    # Fast means far inside the recipe's 360 s startup timeout. The engine itself takes 20-32 s to
    # fail on the two-core host (32 s on 2026-12-03, the host at a third of its usual speed).
    assert elapsed and elapsed[0] <= 90, out[-3000:]
    assert cotenant_running()
    assert container("node-a", "seatwright-lab-exits-rank0") is None


def test_hung_engine_fails_at_its_timeout_with_stack_dumps(lab):
    # The two-node recipe on node-a alone: rank 0 waits at the rendezvous for rank 1 forever.
    started = time.monotonic()
    rc, out, _ = playbook("playbooks/seat.yml", *recipe_args("lab-hang"), "-l", "node-a,localhost")
    assert rc != 0
    assert "not ready after" in out and "startup timeout 45 s" in out
    assert time.monotonic() - started < 45 + 240
    stacks = list((evidence_dir(out) / "stacks").glob("node-a-*.txt"))
    assert stacks, out[-3000:]
    text = stacks[0].read_text()
    assert "py-spy dump --pid" in text and "Thread" in text, text[:2000]
    assert cotenant_running()
    assert container("node-a", "seatwright-lab-hang-rank0") is None


def test_two_node_seat_answers_with_one_tp_group_over_both_nodes(lab):
    rc, out, _ = playbook("playbooks/seat.yml", "-e", "seat=lab-tp2", "-e", "seat_measure=false")
    assert rc == 0, out[-4000:]
    assert chat("http://172.30.99.11:8001", "tiny-llama")["choices"]
    logs = evidence_dir(out) / "logs"
    for host in ("node-a", "node-b"):
        text = (logs / ("%s-seatwright-lab-tp2-rank%d.log" % (host, 0 if host == "node-a" else 1))).read_text()
        assert re.search(r"world_size=2", text), text[-2000:]
    # The transport as the ranks' own logs named it (vLLM's `... backend=gloo` line), not a constant,
    # and accepted only because inventory/lab declares sockets acceptable for its CPU fleet.
    transport = json.loads((evidence_dir(out) / "bringup.json").read_text())["transport"]
    assert (transport["kind"], transport["backend"]) == ("socket", "gloo"), transport
    assert transport["source"] == "rank logs (torch.distributed backend line)", transport
    assert (transport["required"], transport["required_source"]) == ("socket", "fleet declaration"), transport
    head = [rank for rank in transport["ranks"] if rank["host"] == "node-a"]
    assert head and head[0]["backend"] == "gloo" and head[0]["problem"] is None, transport
    rc, out, _ = playbook("playbooks/teardown.yml", "-e", "seat=lab-tp2")
    assert rc == 0, out[-3000:]


def test_ray_head_and_worker_come_up_alive_and_go_down(lab):
    rc, out, _ = playbook("playbooks/seat.yml", *recipe_args("lab-ray"), "-e", "seat_bringup_until=cluster")
    assert rc == 0, out[-4000:]
    assert "Ray cluster whole after" in out
    assert container("node-a", "seatwright-lab-ray-rank0-ray-head")["State"]["Running"]
    assert container("node-b", "seatwright-lab-ray-rank1")["State"]["Running"]
    rc, out, _ = playbook("playbooks/teardown.yml", "-e", "seat=lab-ray")
    assert rc == 0, out[-3000:]
    assert container("node-a", "seatwright-lab-ray-rank0-ray-head") is None
    assert container("node-b", "seatwright-lab-ray-rank1") is None
