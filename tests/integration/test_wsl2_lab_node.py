"""Issue 53's WSL2 node, on a lab node: a container of the lab image of its own, started with the lab
nodes' options (molecule/default/molecule.yml), prepared as a lab node (lab/prepare.yml: the nvidia-smi
emulator and the lab marker), declared WSL2 through the labelled test input (lab/node_kind/wsl2.yml,
passed with -e @ as its header says; the inventory's seatwright_node_kind wsl2 must match it), then
converged through the project's own plays.

Why playbooks/nodes.yml and not site.yml: nodes.yml is the part of site.yml that prepares a node
(preflight, node_base, nvidia_driver, gpu_power, rdma_fabric, nccl_env); the rest of site.yml builds an
engine image, stages weights and installs the router and monitoring, none of which WSL2 decides, and the
lab engine image build alone takes longer than this test on the lab's two cores.

Checks: the first converge says the driver is served by the Windows driver and installs no driver
package, that each power setting is not settable on this node kind (the emulator's state stays unset),
that rdma is skipped with its reason, and writes the WSL2 NCCL contract into the node's NCCL env file;
a re-run changes nothing, both through the converge record (the plain re-run operators do) and with
every role run again (seatwright_full_converge), and --check changes nothing. Then playbooks/plan.yml
plans a field seat on the node from its cached facts (the kind the node showed, not the inventory's):
the rank's container takes both GPUs by the quoted device request `--gpus '"device=0,1"'` with
CUDA_VISIBLE_DEVICES=0,1 and the WSL2 NCCL contract.

Does not use the molecule lab (node-a, node-b) nor its lock. Needs Docker and the lab image (make lab-up
builds it); ~4 min on two cores:
  make wsl2-node-test   (SEATWRIGHT_WSL2_NODE=1)
"""

import json
import os
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from ansible_collections.seatwright.fleet.plugins.filter.converge_decisions import FOLDERS
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.files import tree_digests
from ansible_collections.seatwright.fleet.plugins.module_utils.node.converge_record import NO_FACTS
from ansible_collections.seatwright.fleet.plugins.module_utils.node.kind import wsl2_nccl_env
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.container import shown_run

ROOT = Path(__file__).resolve().parents[2]
DOCKER = "/usr/bin/docker"
NODE = "seatwright-wsl2-node-test"
# A field seat of [003], TP=2 on the node's two GPUs (tests/unit/plugins/module_utils/seat/test_plan_wsl2.py plans it on
# inventory/example-wsl2).
SEAT = "laguna-s21"

pytestmark = pytest.mark.skipif(
    os.environ.get("SEATWRIGHT_WSL2_NODE") != "1", reason="make wsl2-node-test runs it (Docker, ~4 min)"
)


def docker(*args, check=True):
    return subprocess.run([DOCKER, *args], capture_output=True, text=True, check=check, timeout=300)


def code_digest():
    """What the converge record's inputs digest reads of the collection (plugins/filter/converge_decisions.py)."""
    return tree_digests(str(ROOT), FOLDERS)


def flat(text):
    # The callback's YAML folds long lines at 80 columns: search with whitespace flattened.
    return " ".join(text.split())


def said(text, phrase):
    """The message (flattened) a role printed around `phrase`: from its "host NODE:" to the task's end."""
    at = text.index(phrase)
    start = text.rfind("host %s:" % NODE, 0, at)
    ends = [end for end in (text.find(" TASK [", at), text.find("' - '", at)) if end > 0]
    return text[start : min(ends)].rstrip(" '\"").replace("''", "'")


def recap(output):
    """changed= of the node and of localhost in the PLAY RECAP, summed."""
    tail = output[output.rindex("PLAY RECAP") :]
    return sum(int(part.split("=")[1]) for part in tail.split() if part.startswith("changed="))


@pytest.fixture(scope="module")
def node(tmp_path_factory):
    work = tmp_path_factory.mktemp("wsl2-node")
    docker("rm", "-f", "-v", NODE, check=False)
    # The lab nodes' options (molecule/default/molecule.yml): the node runs its own Docker engine.
    # /var/lib/docker is an anonymous volume, removed with the container.
    docker(
        "run", "-d", "--name", NODE, "--hostname", NODE,
        "--cap-add", "SYS_ADMIN", "--cap-add", "NET_ADMIN", "--cap-add", "SYS_PTRACE",
        "--security-opt", "seccomp=unconfined", "--security-opt", "apparmor=unconfined",
        "--cgroupns", "host", "-v", "/sys/fs/cgroup:/sys/fs/cgroup:rw", "-v", "/var/lib/docker",
        "seatwright/lab:current", "/usr/local/sbin/seatwright-lab-init",
    )  # fmt: skip
    address = docker("inspect", "-f", "{{range .NetworkSettings.Networks}}{{.IPAddress}}{{end}}", NODE).stdout.strip()
    subnet = json.loads(docker("network", "inspect", "bridge", "-f", "{{json .IPAM.Config}}").stdout)[0]["Subnet"]
    node_vars = {
        "ansible_host": NODE,
        # [003]'s node as inventory/example-wsl2 declares it: two Max-Q cards, no RDMA device.
        "seatwright_node_kind": "wsl2",
        "seatwright_node_gpu_profile": "rtx-pro-6000-maxq",
        "seatwright_node_gpu_count": 2,
        "seatwright_node_fabric_ip": address,
        "seatwright_node_fabric_iface": "eth0",
        "seatwright_node_rdma_devices": [],
        "seatwright_node_cotenants": [],
        # A cap below the cards' 300 W, which a WSL2 node cannot set from the guest: gpu_power says so.
        "gpu_power_limit_w": 250,
        # Test equipment: the emulated pair lab/prepare.yml installs.
        "lab_gpu_profile": "rtx-pro-6000-maxq-x2",
    }
    inventory = {
        "all": {
            "children": {
                "gpu_nodes": {
                    "hosts": {NODE: node_vars},
                    "vars": {
                        "ansible_connection": "community.docker.docker",
                        "ansible_python_interpreter": "/usr/bin/python3",
                        # The test input is honoured only in the lab (plugins/module_utils/node/kind.py).
                        "seatwright_fleet_name": "lab",
                        "seatwright_fabric_subnet": subnet,
                    },
                }
            }
        }
    }
    (work / "hosts.yml").write_text(yaml.safe_dump(inventory))
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        # A fact cache of its own: plan.yml reads the node's facts from it, and the lab's stays untouched.
        ANSIBLE_CACHE_PLUGIN_CONNECTION=str(work / "facts"),
    )

    def playbook(path, *extra, label=None):
        started = time.monotonic()
        result = subprocess.run(
            [str(ROOT / ".venv/bin/ansible-playbook"), "-i", str(work / "hosts.yml"), str(ROOT / path), *extra],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env=env,
            timeout=900,
            check=False,
        )
        took = time.monotonic() - started
        # Each run's output, kept where SEATWRIGHT_WSL2_NODE_LOGS says (bench/results/wsl2 quotes them).
        logs = Path(os.environ.get("SEATWRIGHT_WSL2_NODE_LOGS") or work / "logs")
        logs.mkdir(parents=True, exist_ok=True)
        name = "%02d-%s.log" % (len(list(logs.iterdir())), Path(path).stem)
        (logs / name).write_text(result.stdout + result.stderr)
        assert result.returncode == 0, result.stdout[-6000:] + result.stderr[-2000:]
        if label:
            print("\n[wsl2-node] %s: %.0f s, changed=%d" % (label, took, recap(result.stdout)))
        return result.stdout

    try:
        # Wait for the init to start dockerd, as molecule's prepare does before lab/prepare.yml.
        playbook("lab/prepare.yml", label="lab/prepare.yml")
        yield {"playbook": playbook, "work": work}
    finally:
        docker("rm", "-f", "-v", NODE, check=False)


@pytest.fixture(scope="module")
def converged(node):
    """The first converge, as the operator runs it: the labelled test input declares the node WSL2."""
    node["code_before"] = code_digest()
    return node["playbook"]("playbooks/nodes.yml", "-e", "@lab/node_kind/wsl2.yml", label="nodes.yml, first")


def test_the_first_converge_says_what_each_role_does_on_wsl2(converged):
    text = flat(converged)
    # node_base: the kind comes from the labelled test input, and says so.
    assert "WSL 2: kernel release 6.6.87.2-microsoft-standard-WSL2 is a WSL 2 kernel" in text
    # (YAML output doubles the apostrophe of "node's"; the rest of the line reads as the role wrote it.)
    assert "readings come from node_base_kind_test_input (lab test equipment), not the node" in text
    # nvidia_driver: the emulator answers as the Windows driver would through /usr/lib/wsl/lib.
    assert "host %s: Windows driver 580.159.04 answers for 2 GPUs; served by the Windows driver" % NODE in text
    # gpu_power: each setting it would change is named and reported as not settable; none is applied.
    assert "GPU 0 power limit 300.0 W -> 250.0 W" in text and "GPU 1 power limit 300.0 W -> 250.0 W" in text
    assert "not settable on this node kind (wsl2)" in text
    assert "no boot unit installed (wsl2)" in text
    # rdma_fabric: skipped, with its reason.
    assert "skipped (wsl2): a WSL2 node is a single-node seat host" in text
    for phrase in ("served by the Windows driver", "GPU 0 power limit", "no boot unit installed", "skipped (wsl2)"):
        print("[wsl2-node] role said: %s" % said(text, phrase))


def test_nothing_of_a_linux_driver_is_installed_and_no_gpu_setting_is_set(converged):
    packages = docker("exec", NODE, "dpkg-query", "-W", "-f", "${Package}\\n").stdout.split()
    assert not [name for name in packages if "nvidia" in name or name.startswith("cuda")], packages
    sources = docker("exec", NODE, "sh", "-c", "ls /etc/apt/sources.list.d /etc/apt/preferences.d").stdout
    assert "nvidia" not in sources.lower() and "cuda" not in sources.lower(), sources
    assert docker("exec", NODE, "test", "-e", "/etc/systemd/system/nvidia-persistenced.service", check=False).returncode
    # The emulator writes its state only when a setting is applied (lab/nvidia_smi_emu.py).
    state = docker("exec", NODE, "test", "-e", "/var/lib/seatwright-lab/nvidia-smi-state.json", check=False)
    assert state.returncode != 0, "a WSL2 node's GPU settings were set"


def test_the_wsl2_nccl_contract_is_in_the_nodes_nccl_env_file(converged):
    written = docker("exec", NODE, "cat", "/etc/seatwright/nccl.env").stdout
    for name, value in wsl2_nccl_env().items():
        assert "%s=%s" % (name, value) in written.splitlines(), (name, written)
    conf = docker("exec", NODE, "cat", "/etc/nccl.conf").stdout
    assert "NCCL_P2P_DISABLE=1" in conf and "NCCL_IB_DISABLE=1" in conf


def test_a_rerun_and_check_change_nothing(node, converged):
    playbook = node["playbook"]
    # The plain re-run: the converge record holds and every role is skipped. A WSL2 node gathers no
    # fabric facts, and before issue 53's fix it never skipped ("no cached facts"). On a shared tree
    # another engineer's edit of the collection's roles, plugins or plays moves the inputs digest, and
    # the roles run again (changing nothing, writing a new record): such a run is accepted only when the
    # code did move since the run before began, and a skip must come within three re-runs.
    since, skipped = node["code_before"], False
    for attempt in range(1, 4):
        began = code_digest()
        again = playbook("playbooks/nodes.yml", "-e", "@lab/node_kind/wsl2.yml", label="nodes.yml, re-run %d" % attempt)
        why = flat(again).split("roles skipped: ", 1)[1].split(" TASK ", 1)[0].replace("''", "'")
        print("[wsl2-node] re-run %d: roles skipped: %s" % (attempt, why))
        assert recap(again) == 0 and NO_FACTS not in why
        if why.startswith(NODE):
            skipped = True
            break
        assert "the roles, modules, plays or this node's variables changed" in why and since != code_digest(), why
        since = began
    assert skipped, "the converge record never held: other engineers kept editing the collection"
    # Every role run again: each is idempotent on a WSL2 node, and says the same.
    full = ("-e", "@lab/node_kind/wsl2.yml", "-e", "seatwright_full_converge=true")
    rerun = playbook("playbooks/nodes.yml", *full, label="nodes.yml, every role again")
    assert recap(rerun) == 0
    assert "served by the Windows driver" in flat(rerun) and "not settable on this node kind" in flat(rerun)
    checked = playbook("playbooks/nodes.yml", *full, "--check", label="nodes.yml --check, every role")
    assert recap(checked) == 0


def test_the_seat_plan_renders_the_quoted_device_request_on_the_node(node, converged):
    plan_out = node["work"] / ("%s.json" % SEAT)
    shown = node["playbook"](
        "playbooks/plan.yml", "-e", "seat=%s" % SEAT, "-e", "seat_hosts=%s" % NODE, "-e", "plan_out=%s" % plan_out,
        label="plan.yml -e seat=%s" % SEAT,
    )  # fmt: skip
    plan = json.loads(plan_out.read_text())
    (host,) = plan["hosts"]
    # The kind the node showed through node_base (cached facts), not the inventory's declaration.
    assert (host["host"], host["kind"], host["kind_source"]) == (NODE, "wsl2", "facts")
    (rank,) = plan["ranks"]
    assert rank["container_spec"]["gpus"]["device_ids"] == ["0", "1"]
    argv = shown_run(rank["container_spec"])
    assert argv[argv.index("--gpus") + 1] == '"device=0,1"'
    assert rank["env"]["CUDA_VISIBLE_DEVICES"] == "0,1"
    assert {name: rank["env"][name] for name in wsl2_nccl_env()} == wsl2_nccl_env()
    # What the operator reads: the launch line, shell-quoted.
    line = next(line for line in shown.splitlines() if "container %s" % rank["container_spec"]["name"] in line)
    assert "--gpus '\"device=0,1\"'" in line, line
    print(
        "[wsl2-node] plan %s: verdict %s, kind %s from %s" % (SEAT, plan["verdict"], host["kind"], host["kind_source"])
    )
    print("[wsl2-node] %s" % line.strip())
    print(
        "[wsl2-node] rank env: CUDA_VISIBLE_DEVICES=%s %s"
        % (rank["env"]["CUDA_VISIBLE_DEVICES"], " ".join("%s=%s" % item for item in sorted(wsl2_nccl_env().items())))
    )
