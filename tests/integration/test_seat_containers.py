"""The containers bring-up starts equal the plan's specs, as the host's Docker engine reports them.

For every rank of the one-node lab seat (seats/lab.yml), the two-node mp seat (seats/lab-tp2.yml)
and the Ray head and worker of the lab's Ray seat (tests/molecule/seat_recipes/lab-ray.yml), the
specs are started through io/seat/engine.py start, the function seat_engine runs, then read back
with `docker container inspect` and compared field by field. A container changed behind
seatwright's back is then named by read-back and replaced by the next start.

The engines cannot run here, so the test image is the lab image with each spec's entrypoint
(python3, ray) standing in as a sleeper; every container field is still the spec's. Containers,
the test image and the checkpoint folders are this test's own (seatwright-test- names) and are
removed afterwards. Runs in about 20 s on two cores.
"""

import os
import shutil
import subprocess
import uuid

import pytest
import yaml
from ansible_collections.seatwright.fleet.plugins.module_utils.io.seat import engine as io_engine
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.container import SPEC_LABEL, docker_run_argv
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.plan import make_plan
from conftest import ROOT

BASE_IMAGE = "seatwright/lab:current"
KEY = "sk-integration-%s" % uuid.uuid4().hex
DOCKER = shutil.which("docker")


def _docker(*args, check=True, input_text=None):
    result = subprocess.run(
        [DOCKER] + list(args), capture_output=True, text=True, timeout=120, check=False, input=input_text
    )
    if check and result.returncode != 0:
        raise AssertionError("docker %s: %s" % (" ".join(args[:3]), result.stderr.strip()))
    return result


def _base_image_present():
    return bool(DOCKER) and _docker("image", "inspect", BASE_IMAGE, check=False).returncode == 0


pytestmark = pytest.mark.skipif(not _base_image_present(), reason="needs Docker and the %s image" % BASE_IMAGE)


def lab_node(host):
    declared = yaml.safe_load((ROOT / "inventory" / "lab" / "host_vars" / ("%s.yml" % host)).read_text())
    node = {key: value for key, value in declared.items() if key.startswith("seatwright_node_")}
    node.update(host=host, in_inventory=True)
    return node


def plan_of(seat, recipe, models_root):
    data = yaml.safe_load(recipe.read_text())
    nodes = [dict(lab_node(host), seat_models_root=str(models_root)) for host in ("node-a", "node-b")]
    return make_plan(data, yaml.safe_load((ROOT / "schemas" / "seat.schema.json").read_text()), seat, nodes, seat)


SEATS = [
    ("lab", ROOT / "seats" / "lab.yml"),
    ("lab-tp2", ROOT / "seats" / "lab-tp2.yml"),
    ("lab-ray", ROOT / "tests" / "molecule" / "seat_recipes" / "lab-ray.yml"),
]


@pytest.fixture(scope="module")
def run_id():
    return "seatwright-test-%s" % uuid.uuid4().hex[:8]


@pytest.fixture(scope="module")
def specs(run_id, tmp_path_factory):
    """Every container spec of the three seats, made this test's own (names, seat label, image)."""
    models_root = tmp_path_factory.mktemp("models")
    image = "%s:engine" % run_id
    out = []
    for seat, recipe in SEATS:
        plan = plan_of(seat, recipe, models_root)
        (models_root / plan["model"]["served_name"]).mkdir(exist_ok=True)
        for rank in plan["ranks"]:
            for spec in (rank["setup_container_spec"], rank["container_spec"]):
                if spec:
                    labels = dict(spec["labels"], **{"io.seatwright.seat": run_id})
                    out.append(dict(spec, name="%s-%s" % (run_id, spec["name"]), image=image, labels=labels))
    entrypoints = sorted({spec["entrypoint"] for spec in out})
    # Each entrypoint the specs name sleeps instead of serving: the container is what is tested.
    dockerfile = "FROM %s\nRUN %s\n" % (
        BASE_IMAGE,
        " && ".join(
            "printf '#!/bin/sh\\nexec sleep 300\\n' > /usr/local/sbin/%s && chmod 755 /usr/local/sbin/%s" % (e, e)
            for e in entrypoints
        ),
    )
    _docker("build", "--quiet", "--tag", image, "-", input_text=dockerfile)
    yield out
    for spec in out:
        _docker("rm", "--force", spec["name"], check=False)
    _docker("image", "rm", "--force", image, check=False)


def start(spec, state_dir, secrets):
    """seat_engine state=started, as bring-up calls it, with the node's NCCL env file rendered from the spec."""
    nccl_file = state_dir / ("%s-nccl.env" % spec["name"])
    nccl_file.write_text("".join("%s=%s\n" % kv for kv in spec["env"].items() if kv[0].startswith(("NCCL_", "GLOO_"))))
    params = {
        "spec": spec,
        "secrets": secrets,
        "image_id": None,
        "multi_node": True,
        "nccl_env_file": str(nccl_file),
        "host_name": "node-a",
        "env_dir": str(state_dir),
        "stop_timeout_s": 5,
    }
    return io_engine.start(params)


def test_started_containers_equal_their_specs_then_drift_is_named(specs, tmp_path):
    secrets = {"seat_api_key": KEY}
    parts = sorted({(spec["labels"]["io.seatwright.role"], spec["part"]) for spec in specs})
    assert ("ray-head", "ray-head") in parts and ("ray-worker", "ray-worker") in parts
    assert ("headless", "engine") in parts and ("server", "engine") in parts
    for spec in specs:
        result = start(spec, tmp_path, secrets)
        assert (result["action"], result["changed"]) == ("started", True), spec["name"]
    for spec in specs:
        state = io_engine.container_state(spec["name"])
        assert state["running"], "%s exited: %s" % (spec["name"], io_engine.logs(spec["name"])[-400:])
        # Field by field, as Docker reports the container after start; the key by hash only.
        assert io_engine.read_back_spec(spec, secrets) == [], spec["name"]
        env_file = tmp_path / (spec["name"] + ".env")
        assert oct(os.stat(env_file).st_mode & 0o777) == "0o600"
    serving = [s for s in specs if s["secrets"]]
    assert serving and all(s["secrets"][0]["env"] == "VLLM_API_KEY" for s in serving)
    assert io_engine.read_back_spec(serving[0], {"seat_api_key": "another"}) == [
        "%s: env VLLM_API_KEY: differs from the secret seat_api_key (value not shown)" % serving[0]["name"]
    ]
    # A second bring-up keeps what runs to spec.
    assert start(specs[0], tmp_path, secrets)["action"] == "kept"

    # Behind seatwright's back: the same container, started by hand with one env value and /dev/shm changed.
    victim = specs[0]
    mark = io_engine.container_state(victim["name"])["labels"][SPEC_LABEL]
    _docker("rm", "--force", victim["name"])
    marked = dict(victim, labels=dict(victim["labels"], **{SPEC_LABEL: mark}))
    argv = docker_run_argv(marked, str(tmp_path / (victim["name"] + ".env")), secrets)
    where = argv.index("--entrypoint")
    argv[where:where] = ["--env", "HF_HUB_OFFLINE=0", "--shm-size", "64m"]
    _docker(*argv)
    named = io_engine.read_back_spec(victim, secrets)
    assert named == [
        "%s: shm_size_bytes: 67108864, the plan says 2147483648" % victim["name"],
        "%s: env HF_HUB_OFFLINE: '0', the plan says '1'" % victim["name"],
    ]
    assert all(KEY not in line for line in named)
    # The label still says the spec, so only read-back can tell; the next start replaces it.
    again = start(victim, tmp_path, secrets)
    assert (again["action"], again["drift"]) == ("replaced", named)
    assert io_engine.read_back_spec(victim, secrets) == []
