"""HTTP clients for the routers seatwright drives (stdlib only: they may run on a node).

One small interface, one implementation per router kind (router/kinds/ describes each kind; CLIENTS
holds its client): register(seat, api_base, alias), set_alias(alias, weights), who_answered(alias),
drain(seat, metrics_url), deregister(seat). Decisions (bodies, parsing, the
admin key scrubbed out) live in module_utils/router/adapter.py. The admin key is sent only in the
Authorization header; every result, error and log line passes through adapter.scrub first.
"""

import http.client
import json
import time
import urllib.parse

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import RouterError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.openai_http import get_text, page_failure
from ansible_collections.seatwright.fleet.plugins.module_utils.router import adapter, deploy, kinds

# A one-token question: enough for the router to pick a seat and say which.
# Largest router answer read: a listing of many workers fits many times over.
MAX_ANSWER_BYTES = 4 * 2**20
# The shortest wait for one read of an engine's running-requests gauge.
MIN_METRICS_READ_S = 2.0
PROBE = {"max_tokens": 1, "messages": [{"role": "user", "content": "which seat answers?"}]}


def _gauge_text(running, page, metrics_url):
    """What the last read of the running-requests gauge said, for a drain that timed out."""
    if running is not None:
        return "still has %s running requests" % running
    why = page_failure(page) or "the page has no running-requests gauge"
    return "gave no running-requests figure at %s (%s)" % (metrics_url, why)


class RouterClient:
    kind = None

    def __init__(self, base_url, admin_key=None, timeout_s=30.0, log=None):
        self.base_url = base_url.rstrip("/")
        self._key = admin_key
        self._hidden = []
        self.timeout_s = timeout_s
        self._log = log

    def hide(self, secret):
        """Keep another secret (a seat's key sent in a body) out of every log line and error."""
        if secret:
            self._hidden.append(secret)

    def _scrub(self, value):
        for secret in [self._key] + self._hidden:
            value = adapter.scrub(value, secret)
        return value

    def log(self, text):
        if self._log is not None:
            self._log(self._scrub(text))

    def call(self, method, path, body=None):
        """(status, [(header, value)], text) of one exchange; RouterError when none could be had."""
        parts = urllib.parse.urlsplit(self.base_url + path)
        headers = {"Content-Type": "application/json"}
        if self._key:
            headers["Authorization"] = "Bearer " + self._key
        try:
            conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=self.timeout_s)
            conn.request(method, parts.path, body=json.dumps(body) if body is not None else None, headers=headers)
            response = conn.getresponse()
            text = response.read(MAX_ANSWER_BYTES).decode("utf-8", "replace")
            result = (response.status, [(k.lower(), v) for k, v in response.getheaders()], text)
            conn.close()
        except (OSError, http.client.HTTPException) as exc:
            raise RouterError(
                self._scrub("%s at %s did not answer %s %s: %s" % (self.kind, self.base_url, method, path, exc))
            )
        self.log("%s %s %s -> %s" % (self.kind, method, path, result[0]))
        return result

    def expect(self, call, method, path, body=None, ok=(200,)):
        status, headers, text = self.call(method, path, body)
        if status not in ok:
            raise RouterError(self._scrub(str(adapter.refused(self.kind, call, status, text))))
        return status, headers, text

    def drain(self, seat, metrics_url, timeout_s=120.0, poll_s=1.0):
        """Stop new traffic to the seat at the router, then wait for its engine's running gauge to
        read 0; returns {"seat", "running", "waited_s"}."""
        self.stop_traffic(seat)
        return self.wait_idle(seat, metrics_url, timeout_s, poll_s)

    def wait_idle(self, seat, metrics_url, timeout_s=120.0, poll_s=1.0):
        """Wait for a seat that gets no new traffic to finish its running requests (gauge at 0)."""
        started = time.monotonic()
        while True:
            # A short drain still gives each read of the gauge time to answer on a loaded host.
            page = get_text(metrics_url, timeout_s=min(10.0, max(timeout_s, MIN_METRICS_READ_S)))
            running = None if page_failure(page) else adapter.running_requests(page["text"])
            waited = round(time.monotonic() - started, 2)
            if running == 0:
                return {"seat": seat, "running": 0, "waited_s": waited}
            if waited >= timeout_s:
                raise RouterError(
                    "seat %s %s after %.0f s of draining: wait longer or stop it by hand"
                    % (seat, _gauge_text(running, page, metrics_url), timeout_s)
                )
            time.sleep(poll_s)


class LiteLLMClient(RouterClient):
    """LiteLLM proxy: seats are deployments (model_info.id = seat name) in a model group; aliases are
    model_group_alias; weights are deployment `weight`. Its admin API needs a database (recorded)."""

    kind = "litellm"

    def seats(self):
        text = self.expect("the deployment listing", "GET", "/v1/model/info")[2]
        return self._scrub(adapter.litellm_deployments(text))

    def register(self, seat, api_base, alias, weight=1):
        body = adapter.litellm_deployment(alias, seat, api_base, weight)
        self.expect("registering seat %s" % seat, "POST", "/model/new", body)
        return {"seat": seat, "api_base": api_base, "group": alias, "weight": weight}

    def set_alias(self, alias, weights):
        for seat, weight in sorted(weights.items()):
            body = {"model_name": alias, "litellm_params": {"weight": weight}, "model_info": {"id": seat}}
            self.expect("setting %s's weight on %s" % (seat, alias), "POST", "/model/update", body)
        return {"alias": alias, "weights": dict(weights)}

    def stop_traffic(self, seat):
        self.deregister(seat)

    def deregister(self, seat):
        self.expect("removing seat %s" % seat, "POST", "/model/delete", {"id": seat})
        return {"seat": seat, "registered": False}

    def who_answered(self, alias):
        status, headers, _text = self.expect(
            "a request through %s" % alias, "POST", "/v1/chat/completions", dict(PROBE, model=alias)
        )
        return self._scrub(dict(adapter.litellm_who_answered(headers), status=status))


class SmgClient(RouterClient):
    """SGLang's model gateway: seats are workers added and removed at runtime; it routes by each
    worker's served model name, so an alias's seats are the workers serving the alias name."""

    kind = "smg"

    def seats(self):
        return self._scrub(adapter.smg_workers(self.expect("the worker listing", "GET", "/workers")[2]))

    def register(self, seat, api_base, alias, weight=1, seat_key=None):
        self.hide(seat_key)
        status, _headers, text = self.expect(
            "registering seat %s" % seat,
            "POST",
            "/workers",
            deploy.smg_worker_body(api_base, seat_key),
            ok=(200, 201, 202),
        )
        answer = json.loads(text) if text.startswith("{") else {}
        return {"seat": seat, "api_base": api_base, "worker_id": answer.get("worker_id"), "accepted": status}

    def set_alias(self, alias, weights):
        """smg has no per-alias weights: the alias's targets are the workers serving it; a seat given
        weight 0 (or left out) is removed, the rest stay (round robin among them)."""
        targets = adapter.smg_alias_targets(self.seats(), alias)
        return {"alias": alias, "targets": targets, "weights": dict(weights)}

    def _worker(self, seat_url):
        worker = adapter.smg_worker_for(self.seats(), seat_url)
        if worker is None:
            raise RouterError("smg at %s has no worker at %s: register it first" % (self.base_url, seat_url))
        return worker

    def stop_traffic(self, seat_url):
        worker = self._worker(seat_url)
        # smg's DELETE marks the worker draining: no new requests, in-flight ones finish (recorded).
        self.expect("removing worker %s" % seat_url, "DELETE", "/workers/%s" % worker["id"], ok=(200, 202, 204))

    def deregister(self, seat_url):
        worker = adapter.smg_worker_for(self.seats(), seat_url)
        if worker is not None:
            self.expect("removing worker %s" % seat_url, "DELETE", "/workers/%s" % worker["id"], ok=(200, 202, 204))
        return {"seat": seat_url, "registered": False}

    def who_answered(self, alias):
        status, headers, _text = self.expect(
            "a request through %s" % alias, "POST", "/v1/chat/completions", dict(PROBE, model=alias)
        )
        # smg forwards no header naming the worker (recorded); the engines' counters say who answered.
        return {"seat": None, "api_base": None, "status": status}


# One client per kind, keyed by the kind's name (its description is router/kinds/<name>.py).
CLIENTS = {}


def register_client(client_class):
    """Add the client of a described kind (router/kinds/); the kind must be registered first."""
    CLIENTS[kinds.get(client_class.kind)["name"]] = client_class
    return client_class


def unregister_client(kind):
    """Forget a kind's client (a test's own, once the test is done)."""
    CLIENTS.pop(kind, None)


def client_for(kind, base_url, admin_key=None, timeout_s=30.0, log=None):
    kinds.get(kind)
    if kind not in CLIENTS:
        raise RouterError("router kind %s has a description but no client: add one to io/router/client.py" % kind)
    return CLIENTS[kind](base_url, admin_key=admin_key, timeout_s=timeout_s, log=log)


register_client(LiteLLMClient)
register_client(SmgClient)
