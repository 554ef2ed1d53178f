"""Every rank's container spec, rendered from the plan, and read-back naming what differs from it."""

import copy
import json
import re

import pytest
import yaml
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError
from ansible_collections.seatwright.fleet.plugins.module_utils.fabric.crossnode import (
    WORKER_IN_CONTAINER,
    container_argv,
    pair_plan,
    worker_argv,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.fabric.crossnode import (
    container_spec as crossnode_spec,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.container import (
    DEFAULT_MODELS_ROOT,
    SPEC_LABEL,
    check_spec,
    docker_run_argv,
    fingerprint,
    read_back,
    redact_argv,
    resolved_command,
    secret_env,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.launch import MODEL_ROOT
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.plan import make_plan, plan_lines
from seat_cases import ROOT, SCHEMA, example_nodes, h200_gpus, seat_data

KEY = "sk-test-0123456789abcdef"
IMAGE_ID = "sha256:" + "ab" * 32
IMAGE_ENV = ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin", "LANG=C.UTF-8"]
RECIPES = ROOT / "tests" / "molecule" / "seat_recipes"
# A lab node's fabric facts: no RDMA, a 10 Gb/s interface.
LAB_FABRIC = {"rdma_devices": [], "fabric_iface": {"name": "eth0", "present": True, "mtu": 1500, "speed_mbps": 10000}}


def lab_node(host):
    declared = yaml.safe_load((ROOT / "inventory" / "lab" / "host_vars" / ("%s.yml" % host)).read_text())
    node = {key: value for key, value in declared.items() if key.startswith("seatwright_node_")}
    node.update(host=host, in_inventory=True)
    return node


def lab_plan(seat, folder=None, **node_vars):
    data = seat_data(seat, folder) if folder else seat_data(seat)
    nodes = [dict(lab_node(host), **node_vars) for host in ("node-a", "node-b")]
    return make_plan(data, SCHEMA, seat, nodes, "seats/%s.yml" % seat)


def h200_plan(seat):
    nodes = [dict(node, seatwright_gpus=h200_gpus()) for node in example_nodes()]
    return make_plan(seat_data(seat), SCHEMA, seat, nodes, "seats/%s.yml" % seat)


def all_specs(plan):
    """(rank, spec) of every container the plan starts, in start order."""
    out = []
    for rank in plan["ranks"]:
        if rank["setup_container_spec"]:
            out.append((rank, rank["setup_container_spec"]))
        out.append((rank, rank["container_spec"]))
    return out


def inspect_of(spec, secrets=None, image_id=IMAGE_ID):
    """What `docker container inspect` reports for a container started from the spec (Docker's layout)."""
    env = dict(spec["env"], **secret_env(spec, secrets))
    command = list(spec["command"])
    for item in spec["secrets"]:
        if "flag" in item and (secrets or {}).get(item["secret"]):
            command += [item["flag"], secrets[item["secret"]]]
    labels = dict(spec["labels"], **{SPEC_LABEL: fingerprint(spec, image_id, secrets)})
    labels["org.opencontainers.image.version"] = "24.04"
    gpus = spec["gpus"]
    return {
        "Name": "/" + spec["name"],
        "Image": image_id,
        "Config": {
            "Image": spec["image"],
            "Entrypoint": [spec["entrypoint"]],
            "Cmd": command,
            "Env": IMAGE_ENV + ["%s=%s" % item for item in env.items()],
            "Labels": labels,
        },
        "HostConfig": {
            "NetworkMode": spec["network_mode"],
            "IpcMode": spec["ipc_mode"],
            "ShmSize": spec["shm_size_bytes"],
            "Ulimits": [{"Name": u["name"], "Soft": u["soft"], "Hard": u["hard"]} for u in spec["ulimits"]] or None,
            "DeviceRequests": (
                [{"Driver": "", "Count": 0, "DeviceIDs": gpus["device_ids"], "Capabilities": gpus["capabilities"]}]
                if gpus
                else None
            ),
            "CapAdd": list(spec["cap_add"]) or None,
            # Docker keeps a --device as given: a folder is one entry, the same path inside.
            "Devices": [{"PathOnHost": d, "PathInContainer": d, "CgroupPermissions": "rwm"} for d in spec["devices"]],
            "Privileged": False,
        },
        "Mounts": [
            {"Type": "bind", "Source": m["source"], "Destination": m["target"], "RW": not m["read_only"]}
            for m in spec["mounts"]
        ]
        + [{"Type": "volume", "Source": "/var/lib/docker/volumes/x", "Destination": "/var/lib/docker", "RW": True}],
    }


LAB_SEATS = {
    "lab": lambda: lab_plan("lab"),
    "lab-tp2": lambda: lab_plan("lab-tp2"),
    "lab-ray": lambda: lab_plan("lab-ray", RECIPES),
}


@pytest.fixture(scope="module")
def plans():
    return {name: make() for name, make in LAB_SEATS.items()}


# ------------------------------------------------------------------ the spec of every rank


@pytest.mark.parametrize(
    "seat,parts",
    [
        ("lab", [("node-a", "engine", "server")]),
        ("lab-tp2", [("node-a", "engine", "server"), ("node-b", "engine", "headless")]),
        (
            "lab-ray",
            [
                ("node-a", "ray-head", "ray-head"),
                ("node-a", "engine", "ray-head+server"),
                ("node-b", "ray-worker", "ray-worker"),
            ],
        ),
    ],
)
def test_every_rank_has_its_whole_container(plans, seat, parts):
    plan = plans[seat]
    specs = all_specs(plan)
    assert [(rank["host"], spec["part"], spec["labels"]["io.seatwright.role"]) for rank, spec in specs] == parts
    served = plan["model"]["served_name"]
    for rank, spec in specs:
        check_spec(spec)
        assert spec["image"] == plan["engine"]["image"]["reference"]
        assert spec["labels"] == {
            "io.seatwright.seat": seat,
            "io.seatwright.rank": str(rank["rank"]),
            "io.seatwright.role": spec["labels"]["io.seatwright.role"],
        }
        assert (spec["network_mode"], spec["ipc_mode"], spec["shm_size_bytes"]) == ("host", "private", 2 * 1024**3)
        assert (spec["gpus"], spec["ulimits"], spec["cap_add"], spec["privileged"]) == (None, [], ["SYS_PTRACE"], False)
        assert spec["mounts"] == [
            {
                "source": "%s/%s" % (DEFAULT_MODELS_ROOT, served),
                "target": "%s/%s" % (MODEL_ROOT, served),
                "read_only": True,
            }
        ]
        if spec["part"] == "ray-head":
            # The head blocks in the foreground (it is PID 1) and is no driver: no RAY_ADDRESS.
            assert [spec["entrypoint"]] + spec["command"] == rank["setup"][0] + ["--block"]
            assert spec["env"] == {k: v for k, v in rank["env"].items() if k != "RAY_ADDRESS"}
            assert spec["name"] == rank["setup_container"]
        else:
            assert [spec["entrypoint"]] + spec["command"] == rank["argv"]
            assert spec["env"] == rank["env"]
            assert spec["name"] == rank["container"]


def test_the_ray_engine_joins_the_head_the_ray_head_does_not(plans):
    head = plans["lab-ray"]["ranks"][0]
    assert head["container_spec"]["env"]["RAY_ADDRESS"] == "172.30.99.11:6379"
    assert "RAY_ADDRESS" not in head["setup_container_spec"]["env"]


def test_gpu_seats_get_their_gpus_host_ipc_and_unlimited_memlock():
    plan = h200_plan("glm53")
    for rank, spec in all_specs(plan):
        assert spec["gpus"] == {"device_ids": [str(g) for g in rank["gpus"]], "capabilities": [["gpu"]]}
        assert (spec["ipc_mode"], spec["shm_size_bytes"]) == ("host", 16 * 1024**3)
        assert spec["ulimits"] == [{"name": "memlock", "soft": -1, "hard": -1}]
        argv = docker_run_argv(spec, "/x.env")
        assert argv[argv.index("--gpus") + 1] == '"device=%s"' % ",".join(str(g) for g in rank["gpus"])
        assert argv[argv.index("--ulimit") + 1] == "memlock=-1:-1"


def test_the_inventory_moves_the_checkpoint_mount_and_adds_site_run_options():
    plan = lab_plan("lab", seat_models_root="/srv/models", seat_engine_run_args=["--pids-limit", 4096])
    spec = plan["ranks"][0]["container_spec"]
    assert spec["mounts"][0]["source"] == "/srv/models/smollm2-135m-instruct"
    assert spec["run_args"] == ["--pids-limit", "4096"]
    argv = docker_run_argv(spec, "/x.env")
    assert argv[argv.index("--pids-limit") + 1] == "4096"
    assert argv.index("--pids-limit") < argv.index("--entrypoint")


@pytest.mark.parametrize(
    "node_vars,fragment",
    [
        ({"seat_models_root": "models"}, "seat_models_root is 'models'; it must be an absolute path"),
        ({"seat_engine_run_args": "--pids-limit 1"}, "seat_engine_run_args is '--pids-limit 1'; it must be a list"),
    ],
)
def test_bad_container_settings_in_the_inventory_are_named(node_vars, fragment):
    with pytest.raises(SeatError, match="node-a: " + fragment.replace("(", r"\(")):
        lab_plan("lab", **node_vars)


def test_the_in_container_model_root_is_spelled_once():
    # /models as a path of its own (not /v1/models): only seat/launch.py may spell it.
    pattern = re.compile(r"(?<![\w/.])/models(?=[/\"':\s]|$)", re.M)
    places = [ROOT / "plugins" / "module_utils" / "seat", ROOT / "roles" / "seat", ROOT / "playbooks"]
    places += list((ROOT / "plugins" / "modules").glob("seat_*.py"))
    files = [f for place in places for f in ([place] if place.is_file() else place.rglob("*")) if f.is_file()]
    # Comments may name the mount for people; code and values may not spell it.
    code = {f: "\n".join(x for x in f.read_text().splitlines() if not x.strip().startswith("#")) for f in files}
    spelled = sorted(str(f.relative_to(ROOT)) for f in files if pattern.search(code[f]))
    assert spelled == ["plugins/module_utils/seat/launch.py"]


# ------------------------------------------------------------------ the API key, per engine


def test_vllm_takes_the_key_from_its_env_on_the_serving_rank_only(plans):
    for seat in ("lab", "lab-tp2"):
        ranks = plans[seat]["ranks"]
        assert ranks[0]["container_spec"]["secrets"] == [{"env": "VLLM_API_KEY", "secret": "seat_api_key"}]
        assert all(rank["container_spec"]["secrets"] == [] for rank in ranks[1:])
    head = plans["lab-ray"]["ranks"][0]
    assert head["setup_container_spec"]["secrets"] == []
    spec = ranks[0]["container_spec"]
    assert secret_env(spec, {"seat_api_key": KEY}) == {"VLLM_API_KEY": KEY}
    assert secret_env(spec, {"seat_api_key": ""}) == {}
    assert KEY not in docker_run_argv(spec, "/x.env", {"seat_api_key": KEY})


def test_sglang_takes_the_key_on_its_command_line_and_the_plan_says_so():
    plan = h200_plan("inkling-small")
    assert plan["engine"]["name"] == "sglang"
    spec = plan["ranks"][0]["container_spec"]
    (item,) = spec["secrets"]
    assert (item["flag"], item["secret"]) == ("--api-key", "seat_api_key")
    assert "process list" in item["note"]
    argv = docker_run_argv(spec, "/x.env", {"seat_api_key": KEY})
    assert argv[-2:] == ["--api-key", KEY]
    assert docker_run_argv(spec, "/x.env", {"seat_api_key": ""})[-1] != "--api-key"
    assert secret_env(spec, {"seat_api_key": KEY}) == {}
    lines = plan_lines(plan)
    assert any(line.startswith("  api key: SGLang takes the API key only as --api-key") for line in lines)
    assert any("--api-key '<secret seat_api_key>'" in line for line in lines)


def test_a_spec_with_a_secret_never_puts_its_env_on_the_command_line(plans):
    # Without an env file (a probe's foreground run) the env goes on the command line, which every
    # local user reads: a spec holding the API key is refused there.
    spec = plans["lab"]["ranks"][0]["container_spec"]
    assert spec["secrets"]
    with pytest.raises(SeatError, match="holds secrets, so its env must come from an env file"):
        docker_run_argv(spec, None, {"seat_api_key": KEY}, detach=False)


def test_the_cross_node_all_reduce_runs_a_whole_spec_through_the_same_renderer():
    plan = pair_plan("node-a", LAB_FABRIC, 1, "node-b", LAB_FABRIC, 1, "172.30.99.11", "gloo")
    inner = worker_argv(plan, "node-a", 29533, [4], 0, 1, 60, "python3", WORKER_IN_CONTAINER)
    spec = crossnode_spec(plan, "node-a", "lab-vllm-cpu", "/w.py", {"NCCL_DEBUG": "INFO"}, inner)
    check_spec(spec)
    argv = container_argv(plan, "node-a", "lab-vllm-cpu", "/w.py", {"NCCL_DEBUG": "INFO"}, inner)
    assert argv == ["docker"] + docker_run_argv(spec, None, detach=False)
    assert argv[1:3] == ["run", "--rm"] and "--detach" not in argv and "--shm-size" not in argv


@pytest.mark.parametrize("seat", ["lab", "lab-tp2", "lab-ray"])
def test_the_plan_holds_secrets_by_name_and_shows_every_container(plans, seat):
    plan = plans[seat]
    text = json.dumps(plan)
    assert KEY not in text and "VLLM_API_KEY=" not in text
    lines = plan_lines(plan)
    for _, spec in all_specs(plan):
        shown = [
            line for line in lines if line.startswith("  container %s (%s): docker run" % (spec["name"], spec["part"]))
        ]
        assert len(shown) == 1
        assert "--entrypoint %s" % spec["entrypoint"] in shown[0]


def test_the_fingerprint_holds_a_hash_of_the_key_never_the_key(plans):
    spec = plans["lab"]["ranks"][0]["container_spec"]
    base = fingerprint(spec, IMAGE_ID, {"seat_api_key": KEY})
    assert base == fingerprint(copy.deepcopy(spec), IMAGE_ID, {"seat_api_key": KEY})
    assert base != fingerprint(spec, IMAGE_ID, {"seat_api_key": KEY + "x"})
    assert base != fingerprint(spec, "sha256:" + "cd" * 32, {"seat_api_key": KEY})
    assert base != fingerprint(dict(spec, shm_size_bytes=1), IMAGE_ID, {"seat_api_key": KEY})
    assert KEY not in base


@pytest.mark.parametrize(
    "spec_change,fragment",
    [
        (lambda s: s.pop("mounts"), "lacks mounts; plan the seat again"),
        (lambda s: s.update(image=None), "names no image; pin engine.image"),
        (lambda s: s.update(secrets=[{"secret": "seat_api_key"}]), "names neither an env variable nor a flag"),
    ],
)
def test_a_broken_spec_is_refused_with_what_to_do(plans, spec_change, fragment):
    spec = copy.deepcopy(plans["lab"]["ranks"][0]["container_spec"])
    spec_change(spec)
    with pytest.raises(SeatError, match=fragment):
        check_spec(spec)


# ------------------------------------------------------------------ read-back


@pytest.mark.parametrize("seat", ["lab", "lab-tp2", "lab-ray"])
def test_a_container_started_from_its_spec_reads_back_equal(plans, seat):
    for _, spec in all_specs(plans[seat]):
        secrets = {"seat_api_key": KEY}
        assert read_back(spec, inspect_of(spec, secrets), IMAGE_ENV, IMAGE_ID, secrets) == []


def _set(path, value):
    def change(inspect):
        target = inspect
        for key in path[:-1]:
            target = target[key]
        target[path[-1]] = value

    return change


DRIFTS = [
    (_set(["Config", "Image"], "seatwright/vllm-cpu:other"), "image: "),
    (_set(["Image"], "sha256:" + "ee" * 32), "image_id: "),
    (_set(["Config", "Entrypoint"], ["/bin/sh"]), "entrypoint: "),
    (lambda i: i["Config"]["Cmd"].__setitem__(3, "other-model"), "command: argument 4 is 'other-model'"),
    (lambda i: i["Config"]["Cmd"].append("--enforce-eager"), "command: argument"),
    (lambda i: i["Config"]["Env"].append("HF_HUB_OFFLINE=0"), "env HF_HUB_OFFLINE: '0', the plan says '1'"),
    (
        lambda i: i["Config"]["Env"].append("EXTRA=1"),
        "env EXTRA: set to '1', which neither the plan nor the image sets",
    ),
    (
        lambda i: i["Config"]["Env"].append("VLLM_API_KEY=stolen"),
        "env VLLM_API_KEY: differs from the secret seat_api_key (value not shown)",
    ),
    (lambda i: i["Config"]["Labels"].update({"io.seatwright.rank": "7"}), "labels: "),
    (_set(["HostConfig", "NetworkMode"], "bridge"), 'network_mode: "bridge", the plan says "host"'),
    (_set(["HostConfig", "IpcMode"], "host"), 'ipc_mode: "host", the plan says "private"'),
    (_set(["HostConfig", "ShmSize"], 67108864), "shm_size_bytes: 67108864, the plan says 2147483648"),
    (_set(["HostConfig", "Ulimits"], [{"Name": "nofile", "Soft": 1024, "Hard": 1024}]), "ulimits: "),
    (_set(["HostConfig", "DeviceRequests"], [{"DeviceIDs": ["0"], "Capabilities": [["gpu"]]}]), "gpus: "),
    (_set(["HostConfig", "CapAdd"], ["SYS_ADMIN"]), 'cap_add: ["SYS_ADMIN"], the plan says ["SYS_PTRACE"]'),
    (_set(["HostConfig", "CapAdd"], None), 'cap_add: [], the plan says ["SYS_PTRACE"]'),
    (_set(["HostConfig", "Privileged"], True), "privileged: true, the plan says false"),
    (lambda i: i["Mounts"][0].update(RW=True), "mounts: "),
    (
        lambda i: i["Mounts"].append({"Type": "bind", "Source": "/etc", "Destination": "/host-etc", "RW": False}),
        "mounts: ",
    ),
]


@pytest.mark.parametrize("change,fragment", DRIFTS)
def test_a_field_changed_behind_seatwrights_back_is_named(plans, change, fragment):
    spec = plans["lab"]["ranks"][0]["container_spec"]
    secrets = {"seat_api_key": KEY}
    inspect = inspect_of(spec, secrets)
    change(inspect)
    problems = read_back(spec, inspect, IMAGE_ENV, IMAGE_ID, secrets)
    assert len(problems) == 1, problems
    assert problems[0].startswith("seatwright-lab-rank0: ")
    assert fragment in problems[0]
    assert KEY not in problems[0] and "stolen" not in problems[0]


def test_an_sglang_key_on_the_command_line_is_compared_by_hash():
    spec = h200_plan("inkling-small")["ranks"][0]["container_spec"]
    secrets = {"seat_api_key": KEY}
    inspect = inspect_of(spec, secrets)
    assert read_back(spec, inspect, IMAGE_ENV, IMAGE_ID, secrets) == []
    inspect["Config"]["Cmd"][-1] = "stolen"
    (problem,) = read_back(spec, inspect, IMAGE_ENV, IMAGE_ID, secrets)
    assert "the value after --api-key differs from the secret seat_api_key (value not shown)" in problem
    assert "stolen" not in problem and KEY not in problem


def test_a_key_set_where_the_plan_sets_none_is_named(plans):
    spec = plans["lab"]["ranks"][0]["container_spec"]
    inspect = inspect_of(spec, {"seat_api_key": KEY})
    (problem,) = read_back(spec, inspect, IMAGE_ENV, IMAGE_ID, {"seat_api_key": ""})
    assert "env VLLM_API_KEY: set, but the secret seat_api_key is empty" in problem


def test_a_process_argv_loses_the_key_and_says_whether_it_matched():
    spec = h200_plan("inkling-small")["ranks"][0]["container_spec"]
    argv = [spec["entrypoint"]] + spec["command"] + ["--api-key", KEY]
    secrets = {"seat_api_key": KEY}
    redacted = redact_argv(argv, spec, secrets)
    assert KEY not in redacted and redacted[-1] == "<secret seat_api_key>"
    assert redact_argv(argv, spec, {"seat_api_key": "other"})[-1] == "<not the secret seat_api_key>"
    # What read-back expects of the process: the same placeholder, only when the key is set.
    assert [spec["entrypoint"]] + resolved_command(spec, secrets, shown=True) == redacted
    assert resolved_command(spec, {"seat_api_key": ""}, shown=True) == spec["command"]


def test_a_lab_seat_behind_an_smg_alias_leads_with_the_alias_and_records_it():
    nodes = [lab_node(host) for host in ("node-a", "node-b")]
    plan = make_plan(seat_data("lab"), SCHEMA, "lab", nodes, "seats/lab.yml", served_aliases=["production"])
    command = plan["ranks"][0]["container_spec"]["command"]
    at = command.index("--served-model-name")
    assert command[at + 1 : at + 3] == ["production", "smollm2-135m-instruct"]
    assert plan["model"]["served_aliases"] == ["production"] and plan["launchable"]
    # Without a router alias the launch is the one the lab runs.
    plain = lab_plan("lab")
    assert plain["model"]["served_aliases"] == []
    at = plain["ranks"][0]["argv"].index("--served-model-name")
    assert plain["ranks"][0]["argv"][at + 2] == "--host"
