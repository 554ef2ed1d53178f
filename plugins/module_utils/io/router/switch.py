"""The router on its node (stdlib only): start it, move an alias, read an alias, take a seat out.

LiteLLM runs as two colours behind nginx (router/deploy.py says why); a move renders the idle
colour's config, restarts it, waits for its health and for the alias's targets in its own
/v1/model/info, points nginx's upstream at it and reloads nginx (graceful: old workers finish their
requests). The serving colour stays up as the rollback target. smg's workers change at runtime.

Processes run under systemd where it is PID 1, else (the lab's containers) under a pid file, both
from the same spec (deploy.service_specs). The admin key is read from the 0600 env file on the node.
"""

import json
import os
import signal
import subprocess
import time

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import DeadRouter, RouterError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common import services
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.files import (
    atomic_write_bytes,
    atomic_write_json,
    read_json,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.openai_http import get_text
from ansible_collections.seatwright.fleet.plugins.module_utils.io.router import client as router_client
from ansible_collections.seatwright.fleet.plugins.module_utils.router import adapter, deploy, kinds

POLL_S = 0.5


def systemd_running():
    """sd_booted(): systemd is PID 1 when this folder exists."""
    return os.path.isdir("/run/systemd/system")


def read_env_text(lay):
    """The router's env file (the admin key and the seats' key), or a RouterError naming the role."""
    try:
        with open(lay["env_file"]) as handle:
            return handle.read()
    except OSError as exc:
        raise RouterError(
            "cannot read the router's env file %s: %s (run the router role first)" % (lay["env_file"], exc)
        )


def read_key(lay):
    key = deploy.key_from_env_text(lay["kind"], read_env_text(lay))
    if key is None:
        raise RouterError(
            "%s holds no %s: run the router role with router_admin_key" % (lay["env_file"], lay["key_env"])
        )
    return key


def read_seat_key(lay):
    """The key the seats take, from the router's env file (None when they take none)."""
    return deploy.seat_key_from_env_text(read_env_text(lay))


def read_config(path):
    """The serving colour's config as seatwright wrote it (JSON, which LiteLLM reads as YAML)."""
    try:
        return json.loads(read_text(path) or "")
    except ValueError:
        raise RouterError("%s is not the JSON config seatwright writes: run the router role again" % path)


def read_text(path):
    try:
        with open(path) as handle:
            return handle.read()
    except OSError:
        return None


class Systemd:
    """Units written by the role, started and restarted by systemctl."""

    def running(self, spec):
        rc, out, _err = services.systemctl("is-active", spec["unit"])
        return rc == 0 and out.strip() == "active"

    def start(self, spec):
        # The role may just have written or changed the unit.
        self._ok(services.systemctl("daemon-reload"), spec, "reload units before starting")
        self._ok(services.systemctl("enable", "--now", spec["unit"]), spec, "start")

    def restart(self, spec):
        self._ok(services.systemctl("daemon-reload"), spec, "reload units before restarting")
        self._ok(services.systemctl("restart", spec["unit"]), spec, "restart")

    def _ok(self, result, spec, what):
        rc, out, err = result
        if rc != 0:
            raise RouterError("systemctl could not %s %s: %s" % (what, spec["unit"], (err or out).strip()[-300:]))


class Processes:
    """Where systemd is not PID 1 (the lab's containers): the spec's argv detached, with the env
    file read into its environment (never its argv), its pid in a file under the router's state."""

    def __init__(self, run_dir):
        self.run_dir = run_dir

    def _pidfile(self, spec):
        return os.path.join(self.run_dir, spec["unit"] + ".pid")

    def _pid(self, spec):
        text = read_text(self._pidfile(spec))
        if not text or not text.strip().isdigit():
            return None
        pid = int(text.strip())
        stat = read_text("/proc/%d/stat" % pid) or ""
        cmdline = (read_text("/proc/%d/cmdline" % pid) or "").replace("\0", " ").split()
        # A reused pid or a zombie is not the router.
        alive = stat and stat.rsplit(")", 1)[-1].split()[0] != "Z"
        return pid if alive and any(word in cmdline for word in spec["match"]) else None

    def running(self, spec):
        return self._pid(spec) is not None

    def start(self, spec):
        if not self.running(spec):
            self._spawn(spec)

    def restart(self, spec):
        pid = self._pid(spec)
        if pid is not None:
            os.kill(pid, signal.SIGTERM)
            deadline = time.monotonic() + 15
            while self._pid(spec) == pid and time.monotonic() < deadline:
                time.sleep(0.2)
            if self._pid(spec) == pid:
                os.kill(pid, signal.SIGKILL)
                # Its listening socket is freed only once it is gone: a start before that fails to bind.
                deadline = time.monotonic() + 10
                while self._pid(spec) == pid and time.monotonic() < deadline:
                    time.sleep(0.1)
        self._spawn(spec)

    def _spawn(self, spec):
        env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": self.run_dir, "LANG": "C.UTF-8"}
        env.update(spec["environment"])
        for line in (read_text(spec["env_file"]) or "").splitlines():
            name, sep, value = line.partition("=")
            if sep and not name.startswith("#"):
                env[name.strip()] = value.strip()
        os.makedirs(os.path.dirname(spec["log"]), exist_ok=True)
        os.makedirs(self.run_dir, exist_ok=True)
        user = spec["user"] if spec["user"] and os.geteuid() == 0 and spec["user"] != "root" else None
        with open(spec["log"], "ab") as log:
            proc = subprocess.Popen(
                spec["argv"],
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                cwd=self.run_dir,
                user=user,
            )
        atomic_write_bytes(self._pidfile(spec), b"%d\n" % proc.pid)


def nginx_title(pid):
    """An nginx process's title (its /proc cmdline), or None when it has exited."""
    text = read_text("/proc/%d/cmdline" % pid)
    return text.replace("\0", " ").strip() if text else None


def parent_pid(pid):
    """A process's parent pid from /proc, or None when it has exited."""
    stat = read_text("/proc/%d/stat" % pid)
    fields = stat.rsplit(")", 1)[-1].split() if stat else []
    return int(fields[1]) if len(fields) > 1 and fields[1].isdigit() else None


def nginx_workers(master=None):
    """The pids of the nginx workers now serving (not shutting down); of `master` only, when given:
    another nginx on the machine (a container's) has workers of its own that never shut down."""
    found = []
    for name in os.listdir("/proc"):
        title = nginx_title(int(name)) if name.isdigit() else None
        if title and title.startswith("nginx: worker process") and "shutting down" not in title:
            if master is None or parent_pid(int(name)) == master:
                found.append(int(name))
    return found


class Front:
    """nginx in front of the LiteLLM colours: `front_argv` is how nginx is called (plain `nginx`, or
    with -p/-c for a test's own instance)."""

    def __init__(self, front_argv, manager, pid_file=deploy.SYSTEM_NGINX_PID):
        self.argv = list(front_argv)
        self.manager = manager
        self.pid_file = pid_file

    def _run(self, *args):
        rc, out, err = services.run(self.argv + list(args))
        if rc != 0:
            raise RouterError("%s failed: %s" % (" ".join(self.argv + list(args)), (err or out).strip()[-400:]))

    def master(self):
        """This front's own master pid: its pid file names a live nginx master; else None. Any nginx on
        the machine is not enough: a container's (a lab node's) or the system's is another front."""
        text = (read_text(self.pid_file) or "").strip()
        if text.isdigit() and (nginx_title(int(text)) or "").startswith("nginx: master process"):
            return int(text)
        return None

    def running(self):
        return self.master() is not None

    def ensure(self):
        # The system's nginx under systemd; a front of the router's own (nginx -p) is started by hand.
        if isinstance(self.manager, Systemd) and "-p" not in self.argv:
            self.manager.start({"unit": "nginx.service"})
            self._run("-s", "reload")
        elif self.running():
            self._run("-s", "reload")
        else:
            self._run()

    def point(self, lay, port):
        """Point the upstream at a colour's port; the old file is put back if nginx refuses the new."""
        old = read_text(lay["upstream_file"])
        atomic_write_bytes(lay["upstream_file"], deploy.upstream_text(port).encode())
        try:
            self._run("-t", "-q")
        except RouterError:
            if old is not None:
                atomic_write_bytes(lay["upstream_file"], old.encode())
            raise
        master = self.master()
        before = nginx_workers(master) if master else []
        self._run("-s", "reload")
        # Until the master has told the old workers to shut down they still accept connections (to the
        # old colour); an old worker renames itself "... is shutting down" when told.
        wait_until(
            "nginx's old workers did not start shutting down after the reload",
            lambda: all(title is None or "shutting down" in title for title in map(nginx_title, before)) or before,
            30.0,
        )


def manager_name(service_manager):
    """systemd or process: `auto` is systemd where it is PID 1."""
    return service_manager if service_manager != "auto" else ("systemd" if systemd_running() else "process")


def manager_for(lay, service_manager):
    use = manager_name(service_manager)
    return Systemd() if use == "systemd" else Processes(os.path.join(lay["state_dir"], "run"))


def wait_until(what, check, timeout_s):
    deadline = time.monotonic() + timeout_s
    last = None
    while time.monotonic() < deadline:
        try:
            last = check()
        except DeadRouter:
            raise
        except RouterError as exc:
            last = str(exc)
        if last is True:
            return
        time.sleep(POLL_S)
    raise RouterError("%s within %.0f s (last seen: %s)" % (what, timeout_s, str(last)[:300]))


def exit_lines(text, tail=5, errors=3):
    """What says why a process exited, from its log: the last start's error lines (a failed bind is
    logged above the shutdown's tracebacks), then the log's last lines."""
    lines = (text or "").strip().splitlines()
    starts = [at for at, line in enumerate(lines) if "Started server process" in line]
    run = lines[starts[-1] :] if starts else lines
    last = run[-tail:]
    found = [line for line in run[:-tail] if line.startswith("ERROR") or "rror while attempting" in line]
    return found[-errors:] + (["..."] if found else []) + last


def healthy(spec):
    return get_text(spec["health"], timeout_s=5.0)["status"] == 200


def colour_listing(lay, colour, key):
    port = lay["colours"][colour]["port"]
    return router_client.client_for(lay["kind"], "http://127.0.0.1:%d" % port, key, timeout_s=10.0).seats()


class Router:
    """One router on this node: `lay` from deploy.layout, `specs` from deploy.service_specs."""

    def __init__(self, lay, specs, service_manager="auto", front_argv=None, log=None):
        self.lay, self.specs = lay, specs
        # What the kind is: its runtime says how a move changes the targets (colours or workers).
        self.kind = kinds.get(lay["kind"])
        self.manager = manager_for(lay, service_manager)
        self.front = Front(
            front_argv or lay.get("front_argv") or ["nginx"],
            self.manager,
            lay.get("front_pid") or deploy.SYSTEM_NGINX_PID,
        )
        self.log = log or (lambda text: None)

    def wait_healthy(self, spec, what, timeout_s):
        """Wait for a started process's health check; one that has exited fails at once, with its log's end."""

        def check():
            if isinstance(self.manager, Processes) and not self.manager.running(spec):
                key = read_key(self.lay) if os.path.exists(self.lay["env_file"]) else None
                raise DeadRouter(
                    "%s exited before answering its health check; from %s: %s"
                    % (what, spec["log"], adapter.scrub(" | ".join(exit_lines(read_text(spec["log"]))), key)[-900:])
                )
            return healthy(spec)

        wait_until("%s did not answer its health check" % what, check, timeout_s)

    def state(self):
        return read_json(self.lay["state_file"]) or {}

    def client(self, key):
        return router_client.client_for(self.lay["kind"], self.lay["router_url"], key, timeout_s=30.0, log=self.log)

    def _front_up(self, port):
        """The front (smg's, when its clients have a key) pointed at `port` and running."""
        if deploy.upstream_port(read_text(self.lay["upstream_file"])) != port:
            atomic_write_bytes(self.lay["upstream_file"], deploy.upstream_text(port).encode())
        self.front.ensure()

    def _register_workers(self, client, urls, why=""):
        """POST each URL to the workers router's /workers with the key the seats take (kept out of logs)."""
        seat_key = read_seat_key(self.lay) if urls else None
        client.hide(seat_key)
        for url in urls:
            body = deploy.smg_worker_body(url, seat_key)
            what = " ".join(part for part in ("registering", url, why) if part)
            client.expect(what, "POST", "/workers", body, ok=(200, 201, 202))

    def _started_workers(self, check_mode, timeout_s):
        """A workers router (smg) running with the launch the role wrote: started when it is not
        running; restarted when it runs an older launch (its argv changed), with the workers it had
        registered again, since smg keeps its workers in memory and reads its argv only when it starts."""
        spec = self.kind["serving_spec"](self.specs, lambda: None)
        label = self.kind["label"]
        launch = deploy.launch_digest(read_text(self.lay["wrapper"]))
        running = self.manager.running(spec)
        fronted = self.lay["front"]
        front_ok = not fronted or (
            deploy.upstream_port(read_text(self.lay["upstream_file"])) == self.lay["smg_port"] and self.front.running()
        )
        if running and self.state().get("launched") == launch:
            if front_ok:
                return {"changed": False}
            if check_mode:
                return {"changed": True, "front": True}
            self._front_up(self.lay["smg_port"])
            return {"changed": True, "front": True}
        if check_mode:
            return {"changed": True, "restarted" if running else "started": [spec["unit"]]}
        if not running:
            self.manager.start(spec)
            self.wait_healthy(spec, label, timeout_s)
            atomic_write_json(self.lay["state_file"], dict(self.state(), launched=launch))
            if fronted:
                self._front_up(self.lay["smg_port"])
            return {"changed": True, "started": [spec["unit"]]}
        key = read_key(self.lay)
        urls = deploy.smg_reregister(self.client(key).seats())
        self.manager.restart(spec)
        self.wait_healthy(spec, label, timeout_s)
        atomic_write_json(self.lay["state_file"], dict(self.state(), launched=launch))
        client = self.client(key)
        self._register_workers(client, urls, "again after the restart")

        def listed():
            shown = {worker["url"] for worker in client.seats()}
            return True if set(urls) <= shown else "listed %s of %s" % (sorted(shown), urls)

        wait_until("%s did not list its workers again after the restart" % label, listed, timeout_s)
        if fronted:
            self._front_up(self.lay["smg_port"])
        return {"changed": True, "restarted": [spec["unit"]], "registered_again": urls}

    def started(self, check_mode=False, timeout_s=120.0):
        """Start what is not running: smg's unit; or LiteLLM's serving colour (blue, with no seat, on
        first start) and the front. Returns {changed, ...}."""
        if self.kind["runtime"] == "workers":
            return self._started_workers(check_mode, timeout_s)
        active = self.state().get("active")
        colour = active or deploy.COLOURS[0]
        spec, started = self.specs[colour], []
        port = self.lay["colours"][colour]["port"]
        front_ok = deploy.upstream_port(read_text(self.lay["upstream_file"])) == port and self.front.running()
        if self.manager.running(spec) and front_ok and active:
            return {"changed": False, "active": active}
        if check_mode:
            return {"changed": True, "active": colour}
        if active is None and read_text(spec["config"]) is None:
            atomic_write_bytes(spec["config"], deploy.litellm_initial_text().encode(), 0o644)
        if not self.manager.running(spec):
            self.manager.start(spec)
            started.append(spec["unit"])
        self.wait_healthy(spec, "LiteLLM %s" % colour, timeout_s)
        atomic_write_bytes(self.lay["upstream_file"], deploy.upstream_text(port).encode())
        self.front.ensure()
        atomic_write_json(self.lay["state_file"], {"active": colour})
        return {"changed": True, "active": colour, "started": started}

    def read(self, alias, aliases):
        key = read_key(self.lay)
        if self.kind["runtime"] == "workers":
            names = self.state().get("names", {})
            return deploy.smg_targets(self.client(key).seats(), alias, names)
        return deploy.litellm_targets(self.client(key).seats(), aliases[adapter.declared_alias(aliases, alias)])

    def apply(self, alias, aliases, targets, check_mode=False, timeout_s=180.0):
        """Make the alias go only to `targets` with their weights, checked in the router's listing."""
        started = time.monotonic()
        if self.kind["runtime"] == "workers":
            result = self._apply_workers(alias, targets, check_mode, timeout_s)
        else:
            result = self._apply_colours(alias, aliases, targets, check_mode, timeout_s)
        # When the router began serving the targets (the move returned), on the node's clock.
        result.update(alias=alias, seconds=round(time.monotonic() - started, 2), applied_at_epoch=round(time.time(), 3))
        return result

    def _apply_colours(self, alias, aliases, targets, check_mode, timeout_s):
        key = read_key(self.lay)
        want = deploy.wanted(targets)
        group = aliases.get(alias)
        active = self.state().get("active")
        current = read_config(self.specs[active]["config"]) if active else None
        text = deploy.litellm_config_text(aliases, current, alias, targets)
        if active and read_text(self.specs[active]["config"]) == text and self.manager.running(self.specs[active]):
            shown = deploy.litellm_targets(colour_listing(self.lay, active, key), group)
            if deploy.same_targets(shown, want):
                return {"changed": False, "targets": shown, "colour": active, "restarted": False}
        idle = deploy.idle_colour(active)
        spec = self.specs[idle]
        if check_mode:
            return {"changed": True, "targets": want, "colour": idle, "restarted": None}
        # The idle colour already running this very config (the last move's serving side) is the
        # instant rollback: no restart, only the switch.
        reuse = read_text(spec["config"]) == text and self.manager.running(spec) and healthy(spec)
        if not reuse:
            # 0644: the router's own user reads it, and it holds no key (the key is in its environment).
            atomic_write_bytes(spec["config"], text.encode(), 0o644)
            self.manager.restart(spec)
        self.wait_healthy(spec, "LiteLLM %s" % idle, timeout_s)

        def listed():
            shown = deploy.litellm_targets(colour_listing(self.lay, idle, key), group)
            return True if deploy.same_targets(shown, want) else shown

        wait_until("LiteLLM %s did not list %s's targets %s" % (idle, alias, sorted(want)), listed, timeout_s)
        self.front.point(self.lay, self.lay["colours"][idle]["port"])
        atomic_write_json(self.lay["state_file"], {"active": idle, "previous": active})
        # nginx reloads asynchronously: the move is done when the public address lists the new targets.
        front = self.client(key)

        def through_front():
            shown = deploy.litellm_targets(front.seats(), group)
            return True if deploy.same_targets(shown, want) else shown

        wait_until("the front did not list %s's targets after the switch to %s" % (alias, idle), through_front, 30.0)
        shown = deploy.litellm_targets(front.seats(), group)
        return {"changed": True, "targets": shown, "colour": idle, "restarted": not reuse}

    def _apply_workers(self, alias, targets, check_mode, timeout_s):
        key = read_key(self.lay)
        client = self.client(key)
        want = deploy.smg_wanted(targets)
        add, remove = deploy.smg_plan(client.seats(), alias, targets)
        if not add and not remove and deploy.same_targets(self.read(alias, {}), want):
            return {"changed": False, "targets": want, "added": [], "removed": []}
        if check_mode:
            return {"changed": True, "targets": want, "added": add, "removed": remove}
        names = dict(self.state().get("names", {}))
        names.update({target["api_base"]: seat for seat, target in want.items()})
        atomic_write_json(self.lay["state_file"], dict(self.state(), names=names))
        self._register_workers(client, add)
        for worker_id in remove:
            client.expect("removing worker %s" % worker_id, "DELETE", "/workers/%s" % worker_id, ok=(200, 202, 204))

        def listed():
            workers = client.seats()
            shown = deploy.smg_targets(workers, alias, names)
            # A removed worker listed as draining still took new requests (measured): done when it is gone.
            lingering = sorted(w["id"] for w in workers if w["id"] in remove)
            return True if deploy.same_targets(shown, want) and not lingering else dict(shown, draining=lingering)

        wait_until(
            "%s did not list %s's workers %s (a seat must serve the model name %s)"
            % (self.kind["label"], alias, sorted(want), alias),
            listed,
            timeout_s,
        )
        return {"changed": True, "targets": want, "added": add, "removed": remove}

    def deregister(self, alias, aliases, seat, metrics_url, check_mode=False, timeout_s=180.0):
        """Take a seat out: no new traffic (LiteLLM: a move without it; smg: its worker deleted, which
        drains), wait for its engine's running gauge at 0, then forget it."""
        current = self.read(alias, aliases)
        if seat not in current:
            # Already out of the alias (the move to the candidate took it out): still wait for its
            # in-flight requests to finish before saying it is drained.
            drained = None
            if metrics_url and not check_mode:
                drained = self.client(read_key(self.lay)).wait_idle(seat, metrics_url, timeout_s=timeout_s)
            return {"changed": False, "seat": seat, "registered": False, "drained": drained}
        if check_mode:
            return {"changed": True, "seat": seat, "registered": False}
        key = read_key(self.lay)
        client = self.client(key)
        if self.kind["runtime"] == "workers":
            drained = client.drain(current[seat]["api_base"], metrics_url, timeout_s=timeout_s)
            client.deregister(current[seat]["api_base"])
        else:
            rest = {name: target for name, target in current.items() if name != seat}
            self.apply(alias, aliases, rest, timeout_s=timeout_s)
            drained = client.wait_idle(seat, metrics_url, timeout_s=timeout_s)
        return {"changed": True, "seat": seat, "registered": False, "drained": drained}


def _same_private(path, text):
    try:
        return read_text(path) == text and (os.stat(path).st_mode & 0o777) == 0o600
    except OSError:
        return False


def write_key(lay, key, check_mode, seat_key=None, client_key=None, service_manager="auto"):
    """The 0600 env file the router's units read, and the front's 0600 map of the clients' key, root's
    alone; each written only when it differs. A running front reloads to read a new client key."""
    text = deploy.env_file_text(lay["kind"], key, seat_key)
    if lay["clients_keyed"] and not client_key:
        raise RouterError("the router's front asks clients for router_api_key, which is empty: set it (vault)")
    keys = deploy.front_keys_text(lay["kind"], client_key, key, seat_key) if lay["clients_keyed"] else None
    same = _same_private(lay["env_file"], text)
    same_keys = keys is None or _same_private(lay["front_keys_file"], keys)
    if not check_mode:
        if not same:
            atomic_write_bytes(lay["env_file"], text.encode(), 0o600)
        if not same_keys:
            atomic_write_bytes(lay["front_keys_file"], keys.encode(), 0o600)
            front = Front(lay["front_argv"], manager_for(lay, service_manager), lay["front_pid"])
            if front.running():
                front.ensure()
    # Running routers keep the key they started with until their next start.
    return {"changed": not (same and same_keys), "env_file": lay["env_file"]}


def control(params, check_mode=False):
    """router_control's one call: the state asked for, on this node."""
    found = deploy.plan(params, systemd=manager_name(params["service_manager"]) == "systemd")
    if params["state"] == "plan":
        return {"changed": False, "plan": found}
    if params["state"] == "key":
        return write_key(
            found["layout"],
            params["admin_key"],
            check_mode,
            params.get("seat_key"),
            params.get("client_key"),
            params["service_manager"],
        )
    router = Router(found["layout"], found["specs"], params["service_manager"])
    timeout_s, alias, aliases = params["timeout_s"], params["alias"], params["aliases"]
    if params["state"] == "started":
        return router.started(check_mode, timeout_s)
    if not alias:
        raise RouterError("state=%s needs alias (one of router.aliases)" % params["state"])
    if params["state"] == "read":
        return {"changed": False, "alias": alias, "targets": router.read(alias, aliases)}
    if params["state"] == "apply":
        return router.apply(alias, aliases, params["targets"], check_mode, timeout_s)
    if not params["seat"]:
        raise RouterError("state=deregister needs seat (a seat the alias sends traffic to)")
    current = router.read(alias, aliases)
    metrics = params["metrics_url"] or (
        deploy.metrics_url(current[params["seat"]]["api_base"]) if params["seat"] in current else ""
    )
    return router.deregister(alias, aliases, params["seat"], metrics, check_mode, timeout_s)
