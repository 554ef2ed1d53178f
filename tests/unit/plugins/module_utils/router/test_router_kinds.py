"""A router kind is one description (router/kinds/) and one client (io/router/client.py).

A test-only kind, registered here and nowhere else, is planned and rendered by the same code as
LiteLLM and smg: its pins, packages, key variable, units, files, exposure rule, canary steps and
client all come from what it says about itself. And no plugin code names a kind to branch on it.
"""

import re
import subprocess

import pytest
from ansible_collections.seatwright.fleet.plugins.filter.router_kind import router_kind
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import RouterError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.router import client as router_client
from ansible_collections.seatwright.fleet.plugins.module_utils.router import adapter, deploy, kinds, rollout
from conftest import ROOT

TOY = "toyrouter"
KEY = "k" * 32


def _toy_layout(found):
    return {
        "unit": "seatwright-router-toy.service",
        "toy_config": found["config_dir"] + "/toy.toml",
        "router_url": found["front_url"],
    }


def _toy_specs(lay, user):
    return {
        "toy": {
            "unit": lay["unit"],
            "argv": [lay["venv"] + "/bin/toyrouter", "--config", lay["toy_config"], "--port", str(lay["port"])],
            "environment": {"TOY_QUIET": "1"},
            "env_file": lay["env_file"],
            "user": user,
            "log": lay["log_dir"] + "/toy.log",
            "health": lay["router_url"] + "/ready",
            "match": [str(lay["port"])],
        }
    }


def _toy_refusal(bind, seats_keyed, clients_keyed, authenticating_front):
    return "toyrouter never listens on %s" % bind if bind == "0.0.0.0" else None


TOY_KIND = {
    "name": TOY,
    "label": "Toy",
    "pinned": "2.0.0",
    "compromised": ("1.9.9",),
    "pip_spec": "toyrouter=={version}",
    "pip_pinned": ("toyrouter==2.0.0",),
    "pip_locked": ("toyrouter==2.0.0", "toylib==0.1.0"),
    "binary": "toyrouter",
    "key_env": "TOY_ADMIN_KEY",
    "packages": ("python3-venv", "toy-support"),
    "always_fronted": False,
    "runtime": "workers",
    "weights": True,
    "routes_by_first_served_name": False,
    "clients_send_admin_key": False,
    "front": "refuse",
    "exposure_refusal": _toy_refusal,
    "layout": _toy_layout,
    "service_specs": _toy_specs,
    "files": lambda lay: [{"path": lay["toy_config"], "content": "port = %d\n" % lay["port"]}],
    "serving_spec": lambda specs, active: specs["toy"],
    "refusal_hint": lambda call, status, text: "Toy is warming up: retry %s" % call if "warming" in text else None,
}


class ToyClient(router_client.RouterClient):
    kind = TOY

    def seats(self):
        return self._scrub(self.expect("the listing", "GET", "/routes")[2])


@pytest.fixture
def toy():
    kinds.register(TOY_KIND)
    router_client.register_client(ToyClient)
    yield TOY_KIND
    router_client.unregister_client(TOY)
    kinds.unregister(TOY)


def params(kind=TOY, **extra):
    return dict(
        {
            "kind": kind,
            "port": 4200,
            "bind": "127.0.0.1",
            "config_dir": "/etc/seatwright",
            "state_dir": "/var/lib/seatwright",
            "version": None,
            "user": "seatwright-router",
        },
        **extra,
    )


def test_a_third_kind_is_planned_and_rendered_from_its_description(toy):
    found = deploy.plan(params())
    lay = found["layout"]
    assert lay["key_env"] == "TOY_ADMIN_KEY" and lay["version"] == "2.0.0"
    assert lay["pip"] == ["toyrouter==2.0.0", "toylib==0.1.0"]
    assert lay["packages"] == ["python3-venv", "toy-support"] and lay["front"] is False
    assert found["units"] == ["seatwright-router-toy.service"]
    files = {item["path"]: item["content"] for item in found["files"]}
    unit = files["/etc/systemd/system/seatwright-router-toy.service"]
    assert "ExecStart=/var/lib/seatwright/router/venv-toyrouter-2.0.0/bin/toyrouter --config" in unit
    assert "Environment=TOY_QUIET=1" in unit and "EnvironmentFile=/etc/seatwright/router/router.env" in unit
    assert files["/etc/seatwright/router/toy.toml"] == "port = 4200\n"
    assert deploy.env_file_text(TOY, KEY).startswith("TOY_ADMIN_KEY=%s\n" % KEY)
    assert deploy.key_from_env_text(TOY, deploy.env_file_text(TOY, KEY)) == KEY


def test_a_third_kind_with_clients_keyed_gets_the_front_it_asks_for(toy):
    found = deploy.plan(params(clients_keyed=True))
    lay = found["layout"]
    assert lay["front"] and lay["packages"][-1] == deploy.NGINX_PACKAGE
    site = {item["path"]: item["content"] for item in found["files"]}[lay["site_file"]]
    # front "refuse": a request without the clients' key is answered by the front, as smg's is.
    assert "return 401" in site
    keys = deploy.front_keys_text(TOY, "c" * 32, KEY)
    assert "$seatwright_router_client" in keys and KEY not in keys


def test_a_third_kind_brings_its_own_rules(toy):
    with pytest.raises(RouterError, match="toyrouter never listens on 0.0.0.0"):
        deploy.plan(params(bind="0.0.0.0"))
    with pytest.raises(RouterError, match="compromised"):
        deploy.plan(params(version="1.9.9"))
    assert str(adapter.refused(TOY, "a listing", 503, "warming up")) == "Toy is warming up: retry a listing"
    # Weights: a canary gets the share asked for, as on LiteLLM.
    steps = rollout.rollout_steps(TOY, "production", "lab", "lab-b", shares=(5, 25))
    assert [step["step"] for step in steps if step["action"] == "set_alias"] == ["canary 5%", "canary 25%", "all"]
    assert adapter.seat_aliases({"kind": TOY, "aliases": {"production": "lab"}}, "lab") == []
    assert rollout.smg_alias_refusal(TOY, "production", "lab-b", None) is None


def test_a_third_kind_has_its_client_and_plays_see_it(toy):
    client = router_client.client_for(TOY, "http://127.0.0.1:4200", KEY)
    assert isinstance(client, ToyClient) and client.kind == TOY
    seen = router_kind(TOY)
    assert seen["known"] and seen["key_env"] == "TOY_ADMIN_KEY" and TOY in seen["kinds"]
    assert "layout" not in seen  # only plain facts reach a play


def test_a_kind_forgotten_is_unknown_again(toy):
    kinds.unregister(TOY)
    with pytest.raises(RouterError, match="router kind 'toyrouter' is not known: use one of litellm, smg"):
        deploy.plan(params())
    assert router_kind(TOY)["known"] is False


def test_a_description_without_a_client_is_named(toy):
    router_client.unregister_client(TOY)
    with pytest.raises(RouterError, match="no client"):
        router_client.client_for(TOY, "http://127.0.0.1:4200")


def test_a_description_missing_fields_is_refused_by_name():
    with pytest.raises(RouterError, match="lacks .*exposure_refusal"):
        kinds.register({key: value for key, value in TOY_KIND.items() if key != "exposure_refusal"})
    with pytest.raises(RouterError, match="runtime must be one of colours, workers"):
        kinds.register(dict(TOY_KIND, runtime="restart-everything"))
    assert TOY not in kinds.names()


@pytest.mark.parametrize("name", kinds.names())
def test_the_shipped_kinds_describe_themselves_fully(name):
    described = kinds.get(name)
    assert set(kinds.FIELDS) <= set(described)
    assert described["pinned"] in " ".join(described["pip_locked"])
    assert router_client.CLIENTS[name].kind == name


def test_no_plugin_code_branches_on_a_kind_name():
    """What a kind is lives in its description; code asks it (issue 54)."""
    found = subprocess.run(
        ["git", "grep", "-nE", r'[!=]= *"(smg|litellm)"', "--", "plugins"], cwd=ROOT, capture_output=True, text=True
    )
    assert found.returncode == 1 and not found.stdout, found.stdout


def test_the_role_and_fragment_choices_are_the_kinds():
    """tools/render_defaults.py writes them; this says they are current."""
    text = (ROOT / "roles" / "router" / "meta" / "argument_specs.yml").read_text()
    listed = set(re.findall(r"router_kind:\n(?:.*\n)*?\s+choices: \[(.*)\]", text))
    assert listed == {", ".join(kinds.names())}
    fragment = (ROOT / "plugins" / "doc_fragments" / "router.py").read_text()
    assert "choices: [%s]" % ", ".join(kinds.names()) in fragment
