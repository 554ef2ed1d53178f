"""Lab verify: the router role left LiteLLM serving on its node (node-a), installed from the pinned
closure with no package index, its keys in 0600 files and nowhere else, its public port on the node's
fabric address asking clients for their key, and nothing on the others.
"""

import json

import pytest

ENV_FILE = "/etc/seatwright/router/router.env"


@pytest.fixture
def declared(host):
    variables = host.ansible.get_variables()
    return {
        "name": variables["inventory_hostname"],
        "router": variables.get("router") or {},
        "enabled": variables.get("seatwright_router_enabled"),
        # The public port listens on the node's fabric address (router_bind's default, issue 50).
        "address": variables.get("seatwright_node_fabric_ip") or "127.0.0.1",
    }


def on_router_node(declared):
    if not (declared["enabled"] and declared["router"].get("node") == declared["name"]):
        pytest.skip("%s is not the router's node" % declared["name"])


def test_the_keys_are_in_a_root_only_file(host, declared):
    on_router_node(declared)
    env = host.file(ENV_FILE)
    assert env.exists and env.user == "root" and env.mode == 0o600
    names = {line.split("=", 1)[0] for line in env.content_string.splitlines() if "=" in line}
    assert names == {"LITELLM_MASTER_KEY", "SEATWRIGHT_SEAT_API_KEY"}
    front = host.file("/etc/seatwright/router/front-keys.conf")
    assert front.exists and front.user == "root" and front.mode == 0o600
    # The config the serving colour runs names the keys from its environment, never holds them.
    for config in host.file("/etc/seatwright/router").listdir():
        if config.startswith("litellm-"):
            text = host.file("/etc/seatwright/router/" + config).content_string
            assert "os.environ/LITELLM_MASTER_KEY" in text
            for line in env.content_string.splitlines():
                assert line.split("=", 1)[1] not in text


def test_the_pinned_router_answers_through_its_public_port(host, declared):
    on_router_node(declared)
    port = declared["router"]["port"]
    url = "http://%s:%d" % (declared["address"], port)
    status = host.check_output("curl -s -o /dev/null -w '%%{http_code}' %s/health/liveliness" % url)
    assert status == "200"
    # The data plane asks for the clients' key: none is refused (the key itself is not read here).
    refused = host.check_output("curl -s -o /dev/null -w '%%{http_code}' %s/v1/models" % url)
    assert refused == "401"
    frozen = host.check_output("/var/lib/seatwright/router/venv-litellm-*/bin/pip freeze --disable-pip-version-check")
    assert "litellm==1.110.2" in frozen.split()
    # Installed from the wheelhouse the controller sent: its manifest is there, whole.
    manifests = host.check_output("ls /var/lib/seatwright/router/wheels-litellm-*/MANIFEST")
    assert manifests.strip()


def test_the_routers_state_names_its_serving_colour(host, declared):
    on_router_node(declared)
    state = json.loads(host.file("/var/lib/seatwright/router/state.json").content_string)
    assert state.get("active") in ("blue", "green"), state
