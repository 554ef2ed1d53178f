"""Lab verify: each node runs its own Docker engine (not the host's, not a shared one)."""
import json


def test_each_node_runs_its_own_docker_engine(host):
    info = json.loads(host.check_output("docker info --format '{{json .}}'"))
    assert info["Name"] == host.backend.get_hostname()
    assert info["Driver"] == "overlay2"
