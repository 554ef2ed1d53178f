"""The router role's decisions (plugins/module_utils/router/deploy.py), its module's main() and its
wiring: paths, ports, units, the front's text, the alias's config, smg's worker plan, the admin key
kept to its 0600 file, and the contract promote.yml calls (roles/router/meta/argument_specs.yml)."""

import http.server
import json
import os
import stat
import subprocess
import threading
import time

import pytest
import router_control
import yaml
from ansible.module_utils.testing import patch_module_args
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import RouterError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.router import client as router_client
from ansible_collections.seatwright.fleet.plugins.module_utils.router import adapter, deploy
from conftest import FIXTURES, ROOT

KEY = "sk-router-role-key-8d2f0a61c3"
SEAT_A, SEAT_B = "http://127.0.0.1:18001", "http://127.0.0.1:18002"


def recorded(impl, step):
    return json.loads((FIXTURES / "router" / impl / ("%s.json" % step)).read_text())


def lay(kind="litellm", port=4000):
    return deploy.layout(kind, port, "/etc/seatwright", "/var/lib/seatwright")


# ---------------------------------------------------------------- layout, units, front


@pytest.mark.parametrize("port, expected", [(4000, {"blue": 4001, "green": 4002}), (1, {"blue": 2, "green": 3})])
def test_colour_ports_sit_above_the_public_one(port, expected):
    assert deploy.colour_ports(port) == expected


@pytest.mark.parametrize("port", [0, 65534, "4000", True, None])
def test_a_port_that_is_not_one_is_refused(port):
    with pytest.raises(RouterError, match="TCP port"):
        deploy.colour_ports(port)


@pytest.mark.parametrize("active, idle", [(None, "blue"), ("blue", "green"), ("green", "blue")])
def test_a_move_starts_the_idle_colour(active, idle):
    assert deploy.idle_colour(active) == idle


def test_an_unknown_colour_in_the_state_is_named():
    with pytest.raises(RouterError, match="purple"):
        deploy.idle_colour("purple")


@pytest.mark.parametrize(
    "kind, venv, units",
    [
        (
            "litellm",
            "/var/lib/seatwright/router/venv-litellm-" + adapter.PINNED["litellm"],
            ["seatwright-router-litellm-blue.service", "seatwright-router-litellm-green.service"],
        ),
        ("smg", "/var/lib/seatwright/router/venv-smg-" + adapter.PINNED["smg"], ["seatwright-router-smg.service"]),
    ],
)
def test_layout_and_units(kind, venv, units):
    found = lay(kind)
    assert found["venv"] == venv
    assert found["env_file"] == "/etc/seatwright/router/router.env"
    assert found["pip"] == list(deploy.PIP_LOCKED[kind])
    specs = deploy.service_specs(found, "seatwright-router")
    assert sorted(spec["unit"] for spec in specs.values()) == units
    for spec in specs.values():
        text = deploy.unit_text(spec, "router")
        assert "EnvironmentFile=/etc/seatwright/router/router.env" in text
        assert "User=seatwright-router" in text
        assert found["key_env"] not in text.replace("EnvironmentFile", "")


@pytest.mark.parametrize("version", ["1.82.7", "1.82.8"])
def test_a_compromised_litellm_is_refused(version):
    with pytest.raises(RouterError, match="compromised"):
        deploy.layout("litellm", 4000, "/etc/seatwright", "/var/lib/seatwright", version)


def test_litellm_colours_listen_on_localhost_and_the_front_on_the_public_port():
    found = lay()
    specs = deploy.service_specs(found, "u")
    assert specs["blue"]["argv"][-4:] == ["--host", "127.0.0.1", "--port", "4001"]
    assert specs["green"]["argv"][-1] == "4002"
    site = deploy.site_text(found)
    assert "include /etc/seatwright/router/upstream.conf;" in site
    assert "listen 127.0.0.1:4000;" in site and "proxy_pass http://seatwright_router;" in site


@pytest.mark.parametrize("port", [4001, 4002])
def test_the_upstream_file_names_one_colour(port):
    text = deploy.upstream_text(port)
    assert deploy.upstream_port(text) == port
    assert "upstream seatwright_router {" in text


def test_smg_key_reaches_its_argv_only_inside_the_wrapper():
    found = lay("smg", 4100)
    spec = deploy.service_specs(found, "u")["smg"]
    assert spec["argv"] == ["/bin/sh", "/etc/seatwright/router/smg-start"]
    wrapper = deploy.smg_wrapper_text(found)
    # The key joins smg's arguments inside its process (issue 50): the exec line names the variable only.
    (line,) = [row for row in wrapper.splitlines() if row.startswith("exec ")]
    assert line.startswith("exec /var/lib/seatwright/router/venv-smg-%s/bin/python -c '" % adapter.PINNED["smg"])
    assert 'os.environ["SMG_ADMIN_KEY"]' in line and "${SMG_ADMIN_KEY}" not in line
    assert "--port 4100" in wrapper and wrapper.startswith("#!/bin/sh\n")
    # A load-aware policy: round robin kept feeding a stalled canary half the alias (docs/router.md).
    assert "--policy least_load " in wrapper


# ---------------------------------------------------------------- the admin key


@pytest.mark.parametrize("kind, var", [("litellm", "LITELLM_MASTER_KEY"), ("smg", "SMG_ADMIN_KEY")])
def test_env_file_round_trip(kind, var):
    text = deploy.env_file_text(kind, KEY)
    assert text == "%s=%s\n%s=none\n" % (var, KEY, adapter.SEAT_KEY_ENV)
    assert deploy.key_from_env_text(kind, text) == KEY
    assert deploy.key_from_env_text(kind, "OTHER=x\n") is None
    # The seats' key sits beside it, for the router to send them; never the admin key's place.
    seat_key = "seat-key-0123456789abcdef"
    text = deploy.env_file_text(kind, KEY, seat_key)
    assert "%s=%s\n" % (adapter.SEAT_KEY_ENV, seat_key) in text
    assert deploy.key_from_env_text(kind, text) == KEY


def test_an_unusable_seat_key_is_refused_naming_it_without_repeating_it():
    with pytest.raises(RouterError) as caught:
        deploy.env_file_text("litellm", KEY, "bad key with spaces")
    assert "seat API key" in str(caught.value) and "bad key" not in str(caught.value)


@pytest.mark.parametrize("key", ["short", "has space in it here", "quote'inside-the-key", "new\nline-in-the-key", None])
def test_an_unusable_key_is_refused_without_repeating_it(key):
    with pytest.raises(RouterError) as caught:
        deploy.check_admin_key(key)
    assert "router_admin_key" in str(caught.value)
    assert not key or key not in str(caught.value)


# ---------------------------------------------------------------- targets and configs


@pytest.mark.parametrize(
    "targets, weights",
    [
        ({"a": {"api_base": SEAT_A + "/v1"}}, {"a": 1}),
        (
            {"a": {"api_base": SEAT_A + "/v1", "weight": 90}, "b": {"api_base": SEAT_B + "/v1", "weight": 10}},
            {"a": 90, "b": 10},
        ),
        (
            {"a": {"api_base": SEAT_A + "/v1", "weight": 0}, "b": {"api_base": SEAT_B + "/v1", "weight": 100}},
            {"b": 100},
        ),
    ],
)
def test_weight_zero_is_no_traffic(targets, weights):
    assert deploy.check_targets(targets)[0] == weights


@pytest.mark.parametrize(
    "targets, match",
    [
        ([], "dict"),
        ({"a": {"weight": 1}}, "api_base"),
        ({"a": {"api_base": SEAT_A, "weight": 101}}, "0 to 100"),
        ({"a": {"api_base": SEAT_A, "weight": True}}, "0 to 100"),
    ],
)
def test_bad_targets_are_named(targets, match):
    with pytest.raises(RouterError, match=match):
        deploy.check_targets(targets)


def test_the_rendered_move_is_the_config_the_recorded_proxy_ran():
    """config-after-move.yaml is what LiteLLM 1.110.2 ran when seat-b alone served production."""
    ran = yaml.safe_load((FIXTURES / "router" / "litellm" / "config-after-move.yaml").read_text())
    text = deploy.litellm_config_text(
        {"production": "lab"},
        None,
        "production",
        {"seat-b": {"api_base": SEAT_B + "/v1", "model": "smollm2-135m-instruct"}},
    )
    assert yaml.safe_load(text) == ran
    # The served name survives the next move's re-render from the serving config.
    again = deploy.litellm_config_text(
        {"production": "lab"}, ran, "production", {"seat-b": {"api_base": SEAT_B + "/v1"}}
    )
    assert yaml.safe_load(again) == ran


def test_a_move_keeps_the_other_groups_and_leaves_out_an_alias_with_no_seat():
    aliases = {"production": "lab", "staging": "lab-next", "empty": "nothing"}
    first = json.loads(deploy.litellm_config_text(aliases, None, "staging", {"n1": {"api_base": SEAT_A + "/v1"}}))
    second = json.loads(
        deploy.litellm_config_text(
            aliases,
            first,
            "production",
            {"s1": {"api_base": SEAT_B + "/v1", "weight": 90}, "s2": {"api_base": SEAT_A + "/v1", "weight": 10}},
        )
    )
    groups, bases = deploy.litellm_state(second)
    assert groups == {"lab": {"s1": 90, "s2": 10}, "lab-next": {"n1": 1}}
    assert second["router_settings"]["model_group_alias"] == {"production": "lab", "staging": "lab-next"}
    assert "api_key" not in json.dumps(second["general_settings"]) and KEY not in json.dumps(second)


def test_an_alias_not_in_the_inventory_is_refused():
    with pytest.raises(RouterError, match="router.aliases"):
        deploy.litellm_config_text({"production": "lab"}, None, "canary", {})


def test_litellm_listing_becomes_the_contract_shape():
    listing = adapter.litellm_deployments(recorded("litellm", "01-model-info")["response"]["body"])
    assert deploy.litellm_targets(listing, "lab") == {
        "seat-a": {"api_base": SEAT_A + "/v1", "weight": 9},
        "seat-b": {"api_base": SEAT_B + "/v1", "weight": 1},
    }
    assert deploy.same_targets(
        deploy.litellm_targets(listing, "lab"),
        deploy.wanted(
            {"seat-a": {"api_base": SEAT_A + "/v1/", "weight": 9}, "seat-b": {"api_base": SEAT_B + "/v1", "weight": 1}}
        ),
    )


@pytest.mark.parametrize(
    "targets, add, removed_urls",
    [
        ({"a": {"api_base": SEAT_A + "/v1"}, "b": {"api_base": SEAT_B + "/v1"}}, [], []),
        ({"b": {"api_base": SEAT_B + "/v1"}}, [], [SEAT_A]),
        ({"a": {"api_base": SEAT_A, "weight": 0}, "b": {"api_base": SEAT_B}}, [], [SEAT_A]),
        ({"c": {"api_base": "http://127.0.0.1:18003/v1"}}, ["http://127.0.0.1:18003"], [SEAT_A, SEAT_B]),
    ],
)
def test_smg_plan_on_the_recorded_workers(targets, add, removed_urls):
    workers = adapter.smg_workers(recorded("smg", "17-workers-two-seats")["response"]["body"])
    ids = {w["url"]: w["id"] for w in workers}
    assert deploy.smg_plan(workers, "lab", targets) == (add, sorted(ids[url] for url in removed_urls))


def test_smg_targets_name_seats_and_skip_draining_workers():
    workers = adapter.smg_workers(recorded("smg", "11-workers-after-delete")["response"]["body"])
    assert deploy.smg_targets(workers, "lab", {SEAT_B: "seat-b"}) == {"seat-b": {"api_base": SEAT_B, "weight": 1}}


# ---------------------------------------------------------------- the module


def run(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            router_control.main()
    return json.loads(capsys.readouterr().out)


def base(tmp_path, **extra):
    return dict(kind="litellm", port=4000, config_dir=str(tmp_path / "etc"), state_dir=str(tmp_path / "var"), **extra)


def test_module_plan_gives_every_file_but_the_key(capsys, tmp_path):
    result = run(capsys, base(tmp_path, service_manager="systemd"))
    paths = [item["path"] for item in result["plan"]["files"]]
    assert paths == [
        "/etc/systemd/system/seatwright-router-litellm-blue.service",
        "/etc/systemd/system/seatwright-router-litellm-green.service",
        "/etc/nginx/conf.d/seatwright-router.conf",
    ]
    assert result["changed"] is False


def test_module_writes_the_key_to_a_0600_file_once_and_never_returns_it(capsys, tmp_path):
    env_file = tmp_path / "etc" / "router" / "router.env"
    dry = run(capsys, base(tmp_path, state="key", admin_key=KEY, _ansible_check_mode=True))
    assert dry["changed"] is True and not env_file.exists()
    first = run(capsys, base(tmp_path, state="key", admin_key=KEY))
    assert first["changed"] is True
    assert stat.S_IMODE(os.stat(env_file).st_mode) == 0o600
    assert env_file.read_text() == "LITELLM_MASTER_KEY=%s\n%s=none\n" % (KEY, adapter.SEAT_KEY_ENV)
    again = run(capsys, base(tmp_path, state="key", admin_key=KEY))
    assert again["changed"] is False
    assert KEY not in json.dumps([dry, first, again])


def test_module_refuses_a_compromised_version_clearly(capsys, tmp_path):
    result = run(capsys, base(tmp_path, version="1.82.8"))
    assert result["failed"] and "compromised" in result["msg"]


# ---------------------------------------------------------------- the real role on one machine (issue 26)


@pytest.mark.parametrize("kind", adapter.KINDS)
def test_the_pinned_package_list_pins_the_pinned_release_and_the_role_installs_it(kind):
    packages = deploy.pip_packages(kind)
    assert "%s==%s" % (kind, adapter.PINNED[kind]) in packages
    assert all(package.count("==") == 1 for package in packages), packages
    assert lay(kind)["pip"] == packages
    # Another release falls back to the package's own extra.
    assert deploy.pip_packages(kind, "9.9.9") == [deploy.PIP_SPEC[kind].format(version="9.9.9")]
    main = (ROOT / "roles" / "router" / "tasks" / "main.yml").read_text()
    assert "router_pip_packages or __router_plan.plan.layout.pip" in main
    assert (
        yaml.safe_load((ROOT / "roles" / "router" / "defaults" / "main.yml").read_text())["router_pip_packages"] == []
    )


def test_litellm_proxy_needs_what_it_stopped_without():
    # LiteLLM 1.110.2's proxy exited at start without websockets (measured with the recorded list).
    names = {package.split("==")[0].lower() for package in deploy.PIP_PINNED["litellm"]}
    assert {"websockets", "orjson", "apscheduler", "uvicorn", "fastapi"} <= names


def test_the_router_test_venvs_are_keyed_by_their_package_list(tmp_path):
    env = {deploy.ROUTER_VENVS_ENV: str(tmp_path)}
    found = deploy.router_venv_dir("/repo", "smg", env)
    assert found.startswith(str(tmp_path) + "/smg-%s-" % adapter.PINNED["smg"])
    assert deploy.router_venv_dir("/repo", "litellm", {}, euid=1000).startswith("/repo/.cache/router-venvs/litellm-")


def test_roots_router_test_venvs_are_where_the_router_user_can_reach_them():
    # The role (so the test) runs as root and starts the router as its own user, which cannot enter a
    # checkout in a 0700 home: root's venvs go to a system folder, outside any checkout.
    found = deploy.router_venv_dir("/home/dev/seatwright", "litellm", {}, euid=0)
    assert found.startswith("/var/cache/seatwright/router-venvs/litellm-%s-" % adapter.PINNED["litellm"])
    assert deploy.router_venv_dir("/repo", "smg", {deploy.ROUTER_VENVS_ENV: "/srv/v"}, euid=0).startswith("/srv/v/")


def test_a_front_of_its_own_needs_no_root_owned_path():
    found = deploy.layout("litellm", 4000, "/w/etc", "/w/var", venv="/v/litellm", nginx_prefix="/w/nginx")
    assert found["venv"] == "/v/litellm"
    assert found["front_argv"] == ["nginx", "-p", "/w/nginx", "-c", "/w/nginx/nginx.conf"]
    plan = deploy.plan(
        dict(
            kind="litellm",
            port=4000,
            config_dir="/w/etc",
            state_dir="/w/var",
            version=None,
            bind="127.0.0.1",
            user="root",
            venv="/v/litellm",
            nginx_prefix="/w/nginx",
        ),
        systemd=False,
    )
    paths = [item["path"] for item in plan["files"]]
    assert paths == ["/w/nginx/seatwright-router.conf", "/w/nginx/nginx.conf"]
    assert all(path.startswith("/w/") for path in paths + [f["path"] for f in plan["folders"]])
    main = next(item["content"] for item in plan["files"] if item["path"].endswith("nginx.conf"))
    assert "pid /w/nginx/nginx.pid;" in main and "include /w/nginx/seatwright-router.conf;" in main
    assert deploy.layout("litellm", 4000, "/e", "/v")["front_argv"] == ["nginx"]


def test_smg_is_found_by_its_process_title_too():
    # smg 1.13.0 renames its process to smg::router (setproctitle), dropping its argv.
    spec = deploy.service_specs(lay("smg", 4100), "seatwright-router")["smg"]
    assert spec["match"] == ["4100", deploy.SMG_TITLE]


@pytest.mark.parametrize("kind", adapter.KINDS)
def test_the_lock_holds_every_top_level_pin_at_its_version_and_names_each_package_once(kind):
    locked = dict(package.split("==") for package in deploy.PIP_LOCKED[kind])
    names = [name.lower().replace("_", "-") for name in locked]
    assert len(names) == len(set(names)), "a package locked twice"
    by_name = {name.lower().replace("_", "-"): version for name, version in locked.items()}
    for pin in deploy.PIP_PINNED[kind]:
        name, version = pin.split("==")
        assert by_name.get(name.lower().replace("_", "-")) == version, pin
    # The installers pip itself brings are not part of a router's closure.
    assert not {"pip", "setuptools", "wheel"} & set(by_name)


def test_a_wheelhouse_is_named_by_its_closure_and_only_the_pinned_release_has_one():
    name = deploy.wheelhouse_name("litellm")
    assert name == os.path.basename(deploy.router_venv_dir("/repo", "litellm", {})) + ".tar"
    assert deploy.wheelhouse_name("smg", "9.9.9") is None
    found = lay("litellm")
    assert found["wheelhouse"] == name
    assert found["wheel_dir"] == "/var/lib/seatwright/router/wheels-litellm-" + adapter.PINNED["litellm"]


def test_the_front_is_running_only_when_its_own_pid_file_names_a_live_nginx_master(tmp_path):
    from ansible_collections.seatwright.fleet.plugins.module_utils.io.router import switch

    pid_file = tmp_path / "nginx.pid"
    front = switch.Front(["nginx", "-p", str(tmp_path)], None, str(pid_file))
    assert not front.running()  # no pid file: another nginx on the machine does not count
    other = subprocess.Popen(["sleep", "30"])
    master = subprocess.Popen(["bash", "-c", 'exec -a "nginx: master process nginx -p x" sleep 30'])
    try:
        pid_file.write_text("%d\n" % other.pid)
        assert not front.running()  # a live pid that is not an nginx master
        pid_file.write_text("%d\n" % master.pid)
        deadline = time.monotonic() + 5
        while not front.running() and time.monotonic() < deadline:
            time.sleep(0.05)
        assert front.running()
    finally:
        other.kill()
        master.kill()
        other.wait()
        master.wait()
    assert not front.running()  # it exited
    assert deploy.layout("litellm", 4000, "/etc/seatwright", "/var/lib/seatwright")["front_pid"] == "/run/nginx.pid"
    own = deploy.layout("litellm", 4000, "/e", "/v", nginx_prefix="/srv/front")
    assert own["front_pid"] == "/srv/front/nginx.pid"


def test_a_reload_waits_only_for_its_own_masters_workers():
    from ansible_collections.seatwright.fleet.plugins.module_utils.io.router import switch

    # A master and a worker of its own, titled as nginx titles them; the worker's parent is the master.
    script = '(exec -a "nginx: worker process" sleep 30) & wait'
    master = subprocess.Popen(["bash", "-c", 'exec -a "nginx: master process nginx -p x" bash -c \'%s\'' % script])
    try:
        deadline = time.monotonic() + 5
        while not switch.nginx_workers(master.pid) and time.monotonic() < deadline:
            time.sleep(0.05)
        mine = switch.nginx_workers(master.pid)
        assert len(mine) == 1 and switch.parent_pid(mine[0]) == master.pid
        # Another master (any other pid) sees none of them.
        assert mine[0] not in switch.nginx_workers(os.getpid())
    finally:
        subprocess.run(["pkill", "-P", str(master.pid)], check=False)
        master.kill()
        master.wait()


# ---------------------------------------------------------------- the seats' key, for smg


@pytest.mark.parametrize(
    "text, expected",
    [
        (deploy.env_file_text("smg", KEY, "seat-key-0123456789abcdef"), "seat-key-0123456789abcdef"),
        (deploy.env_file_text("smg", KEY), None),
        ("SMG_ADMIN_KEY=%s\n" % KEY, None),
        ("%s=\n" % adapter.SEAT_KEY_ENV, None),
        ("", None),
    ],
)
def test_the_seat_key_is_read_back_from_the_env_file(text, expected):
    assert deploy.seat_key_from_env_text(text) == expected


def test_smg_gets_the_seat_key_with_each_worker():
    assert deploy.smg_worker_body("http://10.0.0.5:8000") == {"url": "http://10.0.0.5:8000"}
    body = deploy.smg_worker_body("http://10.0.0.5:8000", "seat-key-0123456789abcdef")
    assert body == {"url": "http://10.0.0.5:8000", "api_key": "seat-key-0123456789abcdef"}
    with pytest.raises(RouterError) as caught:
        deploy.smg_worker_body("http://10.0.0.5:8000", "bad key with spaces")
    assert "seat API key" in str(caught.value) and "bad key" not in str(caught.value)


def test_the_seat_key_sent_to_smg_stays_out_of_logs_and_errors():
    seat_key = "seat-key-0123456789abcdef"
    seen = []

    class Echo(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args):
            pass

        def do_POST(self):  # noqa: N802
            body = self.rfile.read(int(self.headers["Content-Length"]))
            seen.append(json.loads(body))
            # A router that echoes what it refused: the error must still not carry the key.
            data = b'{"error": "refused ' + body.replace(b'"', b"'") + b'"}'
            self.send_response(400)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Echo)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    lines = []
    try:
        client = router_client.client_for("smg", "http://127.0.0.1:%d" % server.server_port, KEY, log=lines.append)
        with pytest.raises(RouterError) as caught:
            client.register("lab", "http://10.0.0.5:8000", "production", seat_key=seat_key)
    finally:
        server.shutdown()
    assert seen == [{"url": "http://10.0.0.5:8000", "api_key": seat_key}]
    assert "HTTP 400" in str(caught.value) or "400" in str(caught.value)
    assert seat_key not in str(caught.value) and all(seat_key not in line for line in lines) and lines


# ---------------------------------------------------------------- smg launched as the role wrote it


class FakeManager:
    """The process manager as Router uses it: what runs, and each start and restart."""

    def __init__(self, running):
        self.up, self.calls = running, []

    def running(self, spec):
        return self.up

    def start(self, spec):
        self.calls.append("start")
        self.up = True

    def restart(self, spec):
        self.calls.append("restart")
        self.up = True


class FakeSmg:
    """smg's worker listing, emptied by a restart as the real one is (it keeps workers in memory)."""

    def __init__(self, manager, workers):
        self.manager, self.workers, self.posted = manager, list(workers), []

    def seats(self):
        if self.manager.calls and self.manager.calls[-1] == "restart" and not self.posted:
            return []
        return self.workers

    def hide(self, *secrets):
        pass

    def expect(self, what, method, path, body=None, ok=(200,)):
        self.posted.append(body)
        return 202, {}, "{}"


def smg_router(tmp_path, monkeypatch, running, workers=(), launched=None, wrapper="exec smg --policy round_robin\n"):
    from ansible_collections.seatwright.fleet.plugins.module_utils.io.router import switch

    found = deploy.layout("smg", 4100, str(tmp_path / "etc"), str(tmp_path / "var"))
    os.makedirs(os.path.dirname(found["wrapper"]))
    os.makedirs(found["state_dir"])
    open(found["wrapper"], "w").write(wrapper)
    open(found["env_file"], "w").write(deploy.env_file_text("smg", "sk-admin-0123456789abcdef"))
    if launched is not None:
        json.dump({"names": {"http://10.0.0.1:8000": "lab"}, "launched": launched}, open(found["state_file"], "w"))
    router = switch.Router(found, deploy.service_specs(found, "seatwright-router"), "processes")
    router.manager = FakeManager(running)
    smg = FakeSmg(router.manager, workers)
    monkeypatch.setattr(router, "client", lambda key: smg)
    monkeypatch.setattr(router, "wait_healthy", lambda spec, what, timeout_s: None)
    return router, smg, found


LISTED = [
    {"id": "w1", "url": "http://10.0.0.1:8000", "status": "ready"},
    {"id": "w2", "url": "http://10.0.0.1:8003", "status": "draining"},
]


def test_smg_running_the_launch_the_role_wrote_is_left_alone(tmp_path, monkeypatch):
    digest = deploy.launch_digest("exec smg --policy round_robin\n")
    router, smg, _found = smg_router(tmp_path, monkeypatch, True, LISTED, launched=digest)
    assert router.started() == {"changed": False}
    assert router.manager.calls == [] and smg.posted == []


@pytest.mark.parametrize("launched", [None, deploy.launch_digest("exec smg --policy cache_aware\n")])
def test_smg_running_an_older_launch_is_restarted_and_gets_its_workers_back(tmp_path, monkeypatch, launched):
    router, smg, found = smg_router(tmp_path, monkeypatch, True, LISTED, launched=launched)
    result = router.started()
    assert router.manager.calls == ["restart"]
    # The draining worker was on its way out: only the serving one is registered again.
    assert result == {"changed": True, "restarted": [found["unit"]], "registered_again": ["http://10.0.0.1:8000"]}
    assert [body["url"] for body in smg.posted] == ["http://10.0.0.1:8000"]
    state = json.load(open(found["state_file"]))
    assert state["launched"] == deploy.launch_digest("exec smg --policy round_robin\n")
    if launched is not None:
        assert state["names"] == {"http://10.0.0.1:8000": "lab"}


def test_smg_restart_in_check_mode_is_shown_and_nothing_moves(tmp_path, monkeypatch):
    router, smg, found = smg_router(tmp_path, monkeypatch, True, LISTED, launched="0" * 16)
    assert router.started(check_mode=True) == {"changed": True, "restarted": [found["unit"]]}
    assert (
        router.manager.calls == [] and smg.posted == [] and json.load(open(found["state_file"]))["launched"] == "0" * 16
    )


def test_smg_not_running_is_started_and_its_launch_recorded(tmp_path, monkeypatch):
    router, _smg, found = smg_router(tmp_path, monkeypatch, False)
    assert router.started() == {"changed": True, "started": [found["unit"]]}
    assert router.manager.calls == ["start"]
    assert json.load(open(found["state_file"]))["launched"] == deploy.launch_digest("exec smg --policy round_robin\n")


@pytest.mark.parametrize(
    "workers, expected",
    [
        ([], []),
        (LISTED, ["http://10.0.0.1:8000"]),
        (
            [{"url": "http://b:1", "status": "ready"}, {"url": "http://a:1", "status": "pending"}],
            ["http://a:1", "http://b:1"],
        ),
    ],
)
def test_smg_reregisters_what_it_served(workers, expected):
    assert deploy.smg_reregister(workers) == expected


BIND_FAILED = """INFO:     Started server process [100]
INFO:     Application startup complete.
INFO:     Shutting down
INFO:     Finished server process [100]
INFO:     Started server process [200]
INFO:     Waiting for application startup.
INFO:     Application startup complete.
ERROR:    [Errno 98] error while attempting to bind on address ('127.0.0.1', 39208): address already in use
INFO:     Waiting for application shutdown.
Traceback (most recent call last):
  File "uvloop/loop.pyx", line 2638, in sock_connect
  File "uvloop/loop.pyx", line 1526, in getaddrinfo
asyncio.exceptions.CancelledError
INFO:     Application shutdown complete.
"""


@pytest.mark.parametrize(
    "text, first, last",
    [
        # The bind error sits above the shutdown's tracebacks: it leads, the log's end follows.
        (BIND_FAILED, "ERROR:    [Errno 98] error while attempting", "INFO:     Application shutdown complete."),
        # An earlier start's lines never explain this one.
        ("ERROR: old\nINFO:     Started server process [3]\nboom", "INFO:     Started server process [3]", "boom"),
        ("", None, None),
    ],
)
def test_a_dead_colour_is_explained_by_its_last_start(text, first, last):
    from ansible_collections.seatwright.fleet.plugins.module_utils.io.router.switch import exit_lines

    lines = exit_lines(text)
    assert (lines[0][: len(first)] if lines else None, lines[-1] if lines else None) == (first, last)
    assert "ERROR: old" not in lines
