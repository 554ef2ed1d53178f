"""The router adapter on recorded router exchanges (tests/fixtures/router/, LiteLLM 1.110.2 and smg
1.13.0 in front of two tests/router_backend.py seats): parsing, who answered, refusals, and the
admin key never in a result, an error or a log line."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import RouterError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.router import client as router_client
from ansible_collections.seatwright.fleet.plugins.module_utils.router import adapter
from conftest import FIXTURES

RECORDED = FIXTURES / "router"
KEY = "sk-test-admin-key-5f0c2e9a41"
SEAT_A, SEAT_B = "http://127.0.0.1:18001", "http://127.0.0.1:18002"
SERVED_NAME = "smollm2-135m-instruct"


def recorded(impl, step):
    return json.loads((RECORDED / impl / ("%s.json" % step)).read_text())


class Replay(BaseHTTPRequestHandler):
    """Answers each (method, path) with the recorded response named for it; keeps what it was sent."""

    protocol_version = "HTTP/1.1"
    routes = {}
    seen = []

    def log_message(self, *args):
        pass

    def _answer(self):
        length = int(self.headers.get("Content-Length") or 0)
        body = self.rfile.read(length).decode() if length else None
        Replay.seen.append((self.command, self.path, self.headers.get("Authorization"), body))
        answer = self.routes.get((self.command, self.path))
        if answer is None:
            status, headers, text = 404, [], "not recorded"
        elif callable(answer):
            status, headers, text = answer(self)
        else:
            status, headers, text = answer["status"], answer["headers"], answer["body"]
        data = text.encode()
        self.send_response(status)
        for name, value in headers:
            if name not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(name, value)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    do_GET = do_POST = do_DELETE = do_PATCH = _answer


@pytest.fixture
def replay():
    def serve(impl, steps):
        Replay.routes = {}
        for step in steps:
            if callable(step[1]):
                Replay.routes[step[0]] = step[1]
                continue
            exchange = recorded(impl, step)
            key = (exchange["request"]["method"], exchange["request"]["path"])
            Replay.routes[key] = exchange["response"]
        Replay.seen = []
        server = ThreadingHTTPServer(("127.0.0.1", 0), Replay)
        threading.Thread(target=server.serve_forever, daemon=True).start()
        servers.append(server)
        return "http://127.0.0.1:%d" % server.server_address[1]

    servers = []
    yield serve
    for server in servers:
        server.shutdown()


def metrics(running):
    text = 'vllm:num_requests_running{model_name="lab"} %.1f\n' % running
    return ("GET", "/metrics"), lambda _handler: (200, [("content-type", "text/plain")], text)


# ---------------------------------------------------------------- recorded listings


def test_litellm_listing_names_each_seat_with_its_weight():
    found = adapter.litellm_deployments(recorded("litellm", "01-model-info")["response"]["body"])
    assert found == [
        {"group": "lab", "seat": "seat-a", "api_base": SEAT_A + "/v1", "weight": 9},
        {"group": "lab", "seat": "seat-b", "api_base": SEAT_B + "/v1", "weight": 1},
    ]


@pytest.mark.parametrize(
    "step, expected",
    [
        ("01-workers-two", [(SEAT_A, None, "ready"), (SEAT_B, "lab", "ready")]),
        ("11-workers-after-delete", [(SEAT_A, None, "draining"), (SEAT_B, "lab", "ready")]),
        ("17-workers-two-seats", [(SEAT_A, "lab", "ready"), (SEAT_B, "lab", "ready")]),
    ],
)
def test_smg_listing_names_each_worker(step, expected):
    workers = adapter.smg_workers(recorded("smg", step)["response"]["body"])
    assert [(w["url"], w["model"], w["status"]) for w in workers] == expected
    assert all(w["id"] for w in workers)


def test_smg_alias_is_the_workers_serving_its_name():
    workers = adapter.smg_workers(recorded("smg", "11-workers-after-delete")["response"]["body"])
    assert adapter.smg_alias_targets(workers, "lab") == [SEAT_B]
    assert adapter.smg_alias_targets(workers, "production") == []


@pytest.mark.parametrize("text", ["", "<html>", "[]", '{"data": 3}'])
@pytest.mark.parametrize("parse", [adapter.litellm_deployments, adapter.smg_workers])
def test_a_listing_that_is_not_a_router_s_is_named(parse, text):
    with pytest.raises(RouterError, match="router|LiteLLM|smg"):
        parse(text)


# ---------------------------------------------------------------- decisions


@pytest.mark.parametrize(
    "share, expected",
    [(0, {"old": 100}), (10, {"old": 90, "new": 10}), (50, {"old": 50, "new": 50}), (100, {"new": 100})],
)
def test_canary_weights(share, expected):
    assert adapter.canary_weights("old", "new", share) == expected


@pytest.mark.parametrize("share", [-1, 101, "10", None, True])
def test_canary_share_that_is_not_a_percentage_is_refused(share):
    with pytest.raises(RouterError, match="0 to 100"):
        adapter.canary_weights("old", "new", share)


@pytest.mark.parametrize(
    "recorded_config, weights",
    [("config-weights.yaml", {"seat-a": 9, "seat-b": 1}), ("config-after-move.yaml", {"seat-b": 1})],
)
def test_rendered_litellm_config_is_the_one_the_proxy_ran(recorded_config, weights):
    seats = {"seat-a": SEAT_A + "/v1", "seat-b": SEAT_B + "/v1"}
    # The seats serve a name of their own, as vLLM serves --served-model-name, not the group's.
    models = dict.fromkeys(seats, SERVED_NAME)
    rendered = adapter.litellm_config({"production": "lab"}, {"lab": weights}, seats, models)
    assert rendered == yaml.safe_load((RECORDED / "litellm" / recorded_config).read_text())


def test_the_seats_key_is_named_from_the_environment_never_written_into_the_config():
    rendered = adapter.litellm_config({"production": "lab"}, {"lab": {"seat-a": 1}}, {"seat-a": SEAT_A + "/v1"})
    assert rendered["model_list"][0]["litellm_params"]["api_key"] == "os.environ/" + adapter.SEAT_KEY_ENV
    # Without a served name the group's is sent, as before.
    assert rendered["model_list"][0]["litellm_params"]["model"] == "openai/lab"


def test_a_listing_of_seats_serving_their_own_name_keeps_the_group_rows_and_the_name():
    body = recorded("litellm", "14-model-info-served-name")["response"]["body"]
    found = adapter.litellm_deployments(body)
    assert [(row["group"], row["seat"], row.get("model")) for row in found] == [
        ("lab", "seat-a", SERVED_NAME),
        ("lab", "seat-b", SERVED_NAME),
    ]
    # Through the alias the seat got its own name and the key (the fake seat answers 401/404 otherwise).
    chat = recorded("litellm", "15-chat-production-served-name")["response"]
    assert chat["status"] == 200
    assert adapter.litellm_who_answered(chat["headers"])["seat"] == "seat-a"


def test_litellm_config_refuses_an_alias_without_seats():
    with pytest.raises(RouterError, match="alias production points at lab, which has no seats"):
        adapter.litellm_config({"production": "lab"}, {}, {})


@pytest.mark.parametrize("version", ["1.82.7", "1.82.8"])
def test_compromised_litellm_is_refused(version):
    with pytest.raises(RouterError, match="compromised"):
        adapter.check_version("litellm", version)
    assert adapter.check_version("litellm", adapter.PINNED["litellm"]) == adapter.PINNED["litellm"]


def test_smg_who_answered_is_the_one_seat_whose_count_moved():
    workers = [{"id": "w-a", "url": SEAT_A}, {"id": "w-b", "url": SEAT_B}]
    assert adapter.smg_who_answered(workers, {SEAT_A: 3, SEAT_B: 5}, {SEAT_A: 3, SEAT_B: 6})["seat"] == "w-b"
    assert adapter.smg_who_answered(workers, {SEAT_A: 3, SEAT_B: 5}, {SEAT_A: 4, SEAT_B: 6})["seat"] is None


# ---------------------------------------------------------------- the clients on the recordings


@pytest.mark.parametrize(
    "step, seat",
    [
        ("02-chat-production", "seat-a"),
        ("03-chat-production-stream", "seat-a"),
        ("04-chat-lab", "seat-b"),
        ("12-chat-production-after-restart", "seat-b"),
    ],
)
def test_litellm_says_who_answered(replay, step, seat):
    url = replay("litellm", [step])
    answer = router_client.client_for("litellm", url, KEY).who_answered("production")
    assert answer["seat"] == seat and answer["api_base"].startswith("http://127.0.0.1:1800")
    method, path, authorization, body = Replay.seen[-1]
    assert (method, path, authorization) == ("POST", "/v1/chat/completions", "Bearer " + KEY)
    assert json.loads(body)["model"] == "production"


@pytest.mark.parametrize(
    "step, call",
    [
        ("07-model-new-no-db", lambda c: c.register("seat-c", "http://127.0.0.1:18003/v1", "lab")),
        ("08-model-update-no-db", lambda c: c.set_alias("lab", {"seat-b": 5})),
        ("09-model-delete-no-db", lambda c: c.deregister("seat-a")),
    ],
)
def test_litellm_admin_api_without_a_database_is_refused_saying_what_to_do(replay, step, call):
    url = replay("litellm", [step])
    with pytest.raises(RouterError, match="needs a database") as caught:
        call(router_client.client_for("litellm", url, KEY))
    assert "second proxy" in str(caught.value)


def test_a_router_without_the_key_asks_for_it(replay):
    url = replay("smg", ["06-workers-no-key"])
    with pytest.raises(RouterError, match="admin key"):
        router_client.client_for("smg", url).seats()


def test_smg_register_then_drain_and_deregister(replay):
    listing = recorded("smg", "17-workers-two-seats")
    worker_a = json.loads(listing["response"]["body"])["workers"][0]["id"]
    deleted = dict(recorded("smg", "10-delete-worker")["response"])
    url = replay(
        "smg",
        [
            "16-post-worker-a",
            "17-workers-two-seats",
            (("DELETE", "/workers/" + worker_a), lambda _h: (deleted["status"], deleted["headers"], deleted["body"])),
            metrics(0),
        ],
    )
    smg = router_client.client_for("smg", url, KEY)
    assert smg.register("seat-a", SEAT_A, "lab")["worker_id"] == "01a23468-4de4-7781-bb10-d7afba44efcb"
    assert smg.set_alias("lab", {SEAT_A: 50, SEAT_B: 50})["targets"] == [SEAT_A, SEAT_B]
    drained = smg.drain(SEAT_A, url + "/metrics", timeout_s=5, poll_s=0.01)
    assert drained["running"] == 0
    assert ("DELETE", "/workers/" + worker_a) in [(m, p) for m, p, _a, _b in Replay.seen]


def test_drain_that_never_reaches_zero_says_so(replay):
    url = replay("litellm", ["09-model-delete-no-db", metrics(2)])
    Replay.routes[("POST", "/model/delete")] = {"status": 200, "headers": [], "body": "{}"}
    with pytest.raises(RouterError, match="still has 2.0 running requests"):
        router_client.client_for("litellm", url, KEY).drain("seat-a", url + "/metrics", timeout_s=0.05, poll_s=0.01)


def test_drain_whose_gauge_cannot_be_read_names_the_page(replay):
    url = replay("litellm", ["09-model-delete-no-db"])
    Replay.routes[("POST", "/model/delete")] = {"status": 200, "headers": [], "body": "{}"}
    Replay.routes[("GET", "/metrics")] = {"status": 503, "headers": [], "body": "down"}
    with pytest.raises(RouterError, match=r"gave no running-requests figure at .*/metrics \(HTTP 503\)"):
        router_client.client_for("litellm", url, KEY).drain("seat-a", url + "/metrics", timeout_s=0.05, poll_s=0.01)


# ---------------------------------------------------------------- the admin key stays out


def reflect_key(handler):
    """A router that echoes the caller's Authorization everywhere it can: headers, body, error."""
    authorization = handler.headers.get("Authorization")
    key = authorization.split()[-1]
    return 500, [("x-litellm-model-id", key), ("x-echo", authorization)], json.dumps({"error": "bad key " + key})


@pytest.mark.parametrize("kind", adapter.KINDS)
@pytest.mark.parametrize("path", ["/model/new", "/workers", "/v1/chat/completions", "/v1/model/info"])
def test_admin_key_is_never_in_errors_or_logs(replay, kind, path):
    url = replay(kind, [])
    for method in ("GET", "POST", "DELETE"):
        Replay.routes[(method, path)] = reflect_key
    lines = []
    router = router_client.client_for(kind, url, KEY, log=lines.append)
    calls = [router.seats, lambda: router.who_answered("production"), lambda: router.register("s", SEAT_A, "lab")]
    for call in calls:
        try:
            result = call()
        except RouterError as exc:
            result = (str(exc), exc.details)
        assert KEY not in repr(result)
    assert lines and KEY not in repr(lines)
    assert all(auth == "Bearer " + KEY for _m, _p, auth, _b in Replay.seen)


def test_admin_key_is_never_in_a_connection_error():
    router = router_client.client_for("litellm", "http://127.0.0.1:9", KEY, timeout_s=1)
    with pytest.raises(RouterError) as caught:
        router.who_answered("production")
    assert KEY not in str(caught.value)


def test_litellm_result_that_reflects_the_key_is_scrubbed(replay):
    url = replay("litellm", [])
    Replay.routes[("POST", "/v1/chat/completions")] = lambda h: (200, reflect_key(h)[1], "{}")
    answer = router_client.client_for("litellm", url, KEY).who_answered("production")
    assert answer["seat"] == "<redacted>"


def test_recorded_fixtures_hold_no_key():
    for path in RECORDED.rglob("*"):
        if path.is_file():
            assert "sk-recording-admin" not in path.read_text(), path


@pytest.mark.parametrize(
    "router, seat, asked, expected",
    [
        (None, "lab", None, []),
        ({"kind": "litellm", "aliases": {"production": "lab"}}, "lab", None, []),
        ({"kind": "litellm", "aliases": {"production": "lab"}}, "lab-fast", "production", []),
        ({"kind": "smg", "aliases": {"production": "lab"}}, "lab", None, ["production"]),
        ({"kind": "smg", "aliases": {"production": "lab"}}, "lab-fast", None, []),
        ({"kind": "smg", "aliases": {"production": "lab"}}, "lab-fast", "production", ["production"]),
        ({"kind": "smg", "aliases": {"production": "lab"}}, "lab", "production", ["production"]),
        ({"kind": "smg", "aliases": {"production": "lab"}}, "lab", "", ["production"]),
    ],
)
def test_the_aliases_a_seat_serves_first(router, seat, asked, expected):
    assert adapter.seat_aliases(router, seat, asked) == expected


@pytest.mark.parametrize(
    "router, seat, asked, message",
    [
        ({"kind": "smg", "aliases": {"production": "lab"}}, "lab", "staging", "seat_alias 'staging' is not in"),
        ({"kind": "litellm", "aliases": {}}, "lab", "production", "declare it there first"),
        ({"kind": "smg", "aliases": {"production": "lab", "staging": "lab"}}, "lab", None, "production, staging"),
        ({"kind": "smg", "aliases": {"production": "lab", "staging": "x"}}, "lab", "staging", "serves one alias"),
        ({"kind": "smg", "aliases": ["production"]}, "lab", None, "must map each alias to a seat"),
    ],
)
def test_an_alias_a_seat_cannot_serve_is_refused_with_what_to_do(router, seat, asked, message):
    with pytest.raises(RouterError, match=message):
        adapter.seat_aliases(router, seat, asked)


def test_smg_register_sends_the_seat_key_as_recorded(replay):
    # Recorded: smg 1.13.0 took {"url", "api_key"} (202), listed the worker without the key, and sent
    # the key to the seat when the client sent none (200); a worker added without it got 401 from a
    # keyed seat, and so did a request carrying the client's own Authorization (smg passes it through).
    sent = recorded("smg", "18-post-worker-with-seat-key")["request"]["body"]
    assert sorted(sent) == ["api_key", "url"] and sent["api_key"] == "<redacted>"
    listing = recorded("smg", "20-workers-keyed-and-not")["response"]["body"]
    assert "api_key" not in listing and "<redacted>" not in listing
    assert recorded("smg", "21-chat-seat-given-the-key")["response"]["status"] == 200
    assert recorded("smg", "22-chat-seat-not-given-the-key")["response"]["status"] == 401
    passed = recorded("smg", "23-chat-client-key-passed-through")
    assert passed["request"]["headers"].get("Authorization") and passed["response"]["status"] == 401
    url = replay("smg", ["18-post-worker-with-seat-key"])
    seat_key = "sk-seat-0c4e7a19b2d35f86"
    smg = router_client.client_for("smg", url, KEY)
    assert smg.register("seat-a", SEAT_A, "lab", seat_key=seat_key)["accepted"] == 202
    (method, path, auth, body) = Replay.seen[-1]
    assert (method, path, auth) == ("POST", "/workers", "Bearer " + KEY)
    assert json.loads(body) == {"url": SEAT_A, "api_key": seat_key}
