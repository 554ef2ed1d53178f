"""Lab verify: each node runs its own Docker engine, and both hold the same lab engine image.

The image is found by its labels (org.seatwright.image, org.seatwright.inputs), so the check does
not repeat the content tag; the facts are the ones engine_image_facts cached on the builder.
"""

import json

import pytest
import testinfra

IMAGE = "lab-vllm-cpu"
FACTS_DIR = "/var/lib/seatwright/images/facts"


def images(host):
    """[(created, reference, id)] of the lab engine image's builds in this node's own Docker engine, newest first."""
    listing = host.check_output(
        "docker images --no-trunc --filter label=org.seatwright.image=%s "
        "--format '{{.Repository}}:{{.Tag}} {{.ID}}'" % IMAGE
    )
    found = []
    for line in listing.splitlines():
        if line.strip():
            reference, image_id = line.split()
            found.append(
                (host.check_output("docker image inspect -f '{{.Created}}' %s" % reference), reference, image_id)
            )
    return sorted(found, reverse=True)


def planned(host):
    """(reference, id) of the build the last converge planned: the newest (a load keeps the builder's time)."""
    _, reference, image_id = images(host)[0]
    return reference, image_id


def in_use(host):
    """Ids of the images this node's containers, running or stopped, were made from."""
    containers = host.check_output("docker ps -aq --no-trunc").split()
    if not containers:
        return set()
    return set(host.check_output("docker inspect -f '{{.Image}}' %s" % " ".join(containers)).split())


def test_each_node_runs_its_own_docker_engine(host):
    info = json.loads(host.check_output("docker info --format '{{json .}}'"))
    assert info["Name"] == host.backend.get_hostname()
    assert info["Driver"] == "overlay2"


def test_both_nodes_hold_the_image_with_the_same_id(host):
    here = planned(host)
    other = "node-b" if host.backend.get_hostname() == "node-a" else "node-a"
    assert here == planned(testinfra.get_host("ansible://" + other, ansible_inventory=host.backend.ansible_inventory))


def test_every_earlier_build_left_is_one_a_container_uses(host):
    # The lab keeps no superseded build (engine_image_keep_previous: 0) unless a container was made from it.
    earlier = {image_id for _, reference, image_id in images(host)[1:]}
    assert earlier <= in_use(host), "superseded %s builds nobody uses on %s" % (IMAGE, host.backend.get_hostname())


def test_no_transfer_or_context_files_are_left(host):
    for folder in ("/var/lib/seatwright/images/transfer", "/var/lib/seatwright/images/context"):
        leftovers = host.run("find %s -type f 2>/dev/null" % folder).stdout.split()
        assert leftovers == []


@pytest.fixture
def facts(host):
    if host.backend.get_hostname() != "node-a":
        pytest.skip("the facts are read once, on the builder (node-a)")
    _, image_id = planned(host)
    return json.loads(host.file("%s/%s.json" % (FACTS_DIR, image_id.replace("sha256:", ""))).content_string)


def test_image_facts_read_the_real_versions(facts):
    assert facts["engine"] == {"name": "vllm", "version": "0.32.0+cpu"}
    assert (facts["torch"], facts["ray"], facts["py_spy"]) == ("2.13.0+cpu", "2.60.0", "0.4.3")
    assert facts["versions"]["vllm-cpu"] == "0.32.0"
    assert facts["flashinfer"] is None
    # The facts probe ran `vllm serve --help=all` through the CLI: the dist-info fix works.
    assert facts["flag_count"] > 300
    for flag in ("--headless", "--tensor-parallel-size", "--distributed-executor-backend"):
        assert flag in facts["flags"]


def test_the_engine_cli_and_py_spy_run_in_the_image(host):
    if host.backend.get_hostname() != "node-b":
        pytest.skip("run once, on the node that received the image")
    reference, _ = planned(host)
    run = "docker run --rm --network none %s " % reference
    assert host.check_output(run + "py-spy --version").strip() == "py-spy 0.4.3"
    version = host.check_output(run + "python -c 'import importlib.metadata as m; print(m.version(\"vllm\"))'")
    assert version.strip() == "0.32.0+cpu"
