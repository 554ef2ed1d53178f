"""Issue 50 item 1: a router must not be an open door to keyed seats, and no client holds its admin
key. smg sends the seats' key with every request (tests/fixtures/router/smg/21-chat-seat-given-the-key),
so smg on every interface is an open seat unless its clients need a key of their own; LiteLLM without
a database has one key, its master key, so its clients get their own and the front trades it on the
data plane only. The refusals are in router/deploy.py (pure); the front's text is nginx's."""

import re

import pytest
import yaml
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import RouterError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.router import switch
from ansible_collections.seatwright.fleet.plugins.module_utils.router import deploy
from conftest import ROOT

ADMIN = "sk-router-admin-5e1f0c9a7b3d2468"
CLIENT = "sk-router-client-0a9b8c7d6e5f4321"
SEAT = "sk-seat-key-13579bdf02468ace"


def params(kind="smg", bind="0.0.0.0", tmp="/w", **extra):
    found = dict(
        state="plan",
        kind=kind,
        port=4000,
        bind=bind,
        version=None,
        config_dir=tmp + "/etc",
        state_dir=tmp + "/var",
        user="root",
        venv=None,
        nginx_prefix=tmp + "/nginx",
        service_manager="process",
        seats_keyed=True,
    )
    found.update(extra)
    return found


def test_an_open_smg_port_in_front_of_keyed_seats_is_refused():
    with pytest.raises(RouterError) as caught:
        deploy.plan(params("smg", "0.0.0.0"))
    message = str(caught.value)
    assert "router_api_key" in message and "fabric address" in message and "router_authenticating_front" in message
    for wildcard in ("::", "[::]", ""):
        with pytest.raises(RouterError):
            deploy.plan(params("smg", wildcard))


@pytest.mark.parametrize(
    "extra",
    [{"clients_keyed": True}, {"authenticating_front": True}, {"seats_keyed": False}],
    ids=["clients keyed", "a front of the operator's", "seats without a key"],
)
def test_an_smg_wildcard_bind_stands_with_a_credential_or_a_front(extra):
    assert deploy.plan(params("smg", "0.0.0.0", **extra))["layout"]["bind"] == "0.0.0.0"


def test_the_role_binds_the_router_nodes_fabric_address_by_default():
    defaults = yaml.safe_load((ROOT / "roles" / "router" / "defaults" / "main.yml").read_text())
    assert "seatwright_node_fabric_ip" in defaults["router_bind"] and "0.0.0.0" not in defaults["router_bind"]
    assert defaults["router_api_key"] == "" and defaults["router_authenticating_front"] is False


def test_an_smg_client_without_the_client_key_is_turned_away_by_the_front():
    found = deploy.plan(params("smg", "0.0.0.0", clients_keyed=True))
    lay = found["layout"]
    # smg itself listens on this node only, behind the front; the controller talks to it there.
    assert lay.get("front") and lay["smg_host"] == "127.0.0.1" and lay["smg_port"] == 4001
    assert lay["router_url"] == "http://127.0.0.1:4001"
    wrapper = next(f["content"] for f in found["files"] if f["path"] == lay["wrapper"])
    assert "--host 127.0.0.1 --port 4001" in wrapper
    site = next(f["content"] for f in found["files"] if f["path"] == lay["site_file"])
    assert "listen 0.0.0.0:4000;" in site and "include %s;" % lay["front_keys_file"] in site
    assert "return 401" in site and 'proxy_set_header Authorization "";' in site
    assert "nginx-light" in lay["packages"]
    keys = deploy.front_keys_text("smg", CLIENT, ADMIN, SEAT)
    assert "Bearer sk-router-client-0a9b8c7d6e5f4321$" in keys and ADMIN not in keys and SEAT not in keys


def test_a_litellm_client_never_holds_the_master_key():
    # LiteLLM beyond this node without a key of the clients' own would hand them the master key.
    with pytest.raises(RouterError) as caught:
        deploy.plan(params("litellm", "10.77.0.11", seats_keyed=False))
    assert "router_api_key" in str(caught.value)
    found = deploy.plan(params("litellm", "10.77.0.11", seats_keyed=False, clients_keyed=True))
    site = next(f["content"] for f in found["files"] if f["path"] == found["layout"]["site_file"])
    # The trade happens on the data plane's paths and the metrics path only (issue 51: Prometheus scrapes
    # with the clients' key): a client key sent to /model/new stays itself.
    assert "location ~ %s {" % deploy.DATA_PLANE_PATHS in site and "location ~ ^/metrics/?$ {" in site
    assert site.count("proxy_set_header Authorization") == 2
    traded = re.findall(r"location ~ (\S+) \{", site)
    for path in ("/model/new", "/key/generate", "/metricsx", "/v1/metrics"):
        assert not any(re.search(pattern, path) for pattern in traded), path
    assert all(any(re.search(p, path) for p in traded) for path in ("/metrics/", "/metrics", "/v1/chat/completions"))
    keys = deploy.front_keys_text("litellm", CLIENT, ADMIN)
    # Any other header reaches LiteLLM as none at all: it answers 401 (a wrong key was a 400 "No connected db").
    assert 'default "";' in keys and keys.count('"Bearer %s";' % ADMIN) == 2


def test_a_key_with_regex_characters_matches_only_itself():
    keys = deploy.front_keys_text("smg", "a.b+c=d/e:f~g-h_0123456789", ADMIN)
    assert '"~^Bearer a[.]b[+]c=d/e:f~g-h_0123456789$"' in keys


@pytest.mark.parametrize("client, why", [(ADMIN, "router_admin_key"), (SEAT, "seat")])
def test_the_client_key_is_neither_the_admin_key_nor_the_seat_key(tmp_path, client, why):
    asked = params("smg", "0.0.0.0", tmp=str(tmp_path), clients_keyed=True, state="key")
    asked.update(admin_key=ADMIN, seat_key=SEAT, client_key=client)
    with pytest.raises(RouterError) as caught:
        switch.control(asked, check_mode=True)
    assert why in str(caught.value) and client not in str(caught.value)


def test_the_front_keys_file_is_private(tmp_path):
    asked = params("smg", "0.0.0.0", tmp=str(tmp_path), clients_keyed=True, state="key")
    asked.update(admin_key=ADMIN, seat_key=SEAT, client_key=CLIENT)
    (tmp_path / "etc" / "router").mkdir(parents=True)
    assert switch.control(asked)["changed"] is True
    path = tmp_path / "etc" / "router" / "front-keys.conf"
    assert oct(path.stat().st_mode & 0o777) == "0o600" and CLIENT in path.read_text()
    assert switch.control(asked)["changed"] is False
