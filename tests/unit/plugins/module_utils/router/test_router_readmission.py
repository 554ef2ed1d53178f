"""The router when an exclusive seat's co-tenants come back ([003]'s lifecycle lessons): a router stopped
on purpose is not a live admission plane and is skipped; one expected up that does not answer is a
warning; one that answered as running and then refuses the targets fails closed, naming what it refused."""

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import RouterError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.router import lifecycle as io_lifecycle
from ansible_collections.seatwright.fleet.plugins.module_utils.router import lifecycle

SIDE = {"api_base": "http://127.0.0.1:18011/v1", "weight": 100}
LAB = {"api_base": "http://127.0.0.1:18012/v1", "weight": 100}
REMOVED = {"production": {"side": SIDE}}


class Manager:
    """A router process supervisor without systemd (as in the lab's containers)."""

    def __init__(self, alive):
        self.alive = alive

    def running(self, _spec):
        return self.alive


class Router:
    def __init__(self, alive=True, answers=True, refuses=False):
        self.lay = {"kind": "smg"}
        self.specs = {"smg": {"unit": "seatwright-smg.service"}}
        self.manager = Manager(alive)
        self.answers, self.refuses, self.applied = answers, refuses, []

    def read(self, alias, _aliases):
        if not self.answers:
            raise RouterError("GET /workers: connection refused")
        return {"lab": LAB}

    def apply(self, alias, _aliases, want, _check_mode, _timeout_s):
        if self.refuses:
            raise RouterError("POST /workers answered 401: bad admin key")
        self.applied.append((alias, want))
        return {"targets": want, "changed": True}


def test_an_active_router_that_refuses_the_targets_fails_closed():
    with pytest.raises(RouterError) as refused:
        io_lifecycle.restore(Router(refuses=True), {"production": {}}, "running", REMOVED, False, 5)
    message = str(refused.value)
    assert message.startswith("the router is running and answered, but refused to take back")
    assert "side" in message and "401: bad admin key" in message and "apply_targets" in message


def test_an_active_router_takes_the_targets_back_exactly():
    router = Router()
    result = io_lifecycle.restore(router, {"production": {}}, "running", REMOVED, False, 5)
    assert result["action"] == "reregister" and result["changed"] is True
    assert router.applied == [("production", {"lab": LAB, "side": SIDE})]


def test_a_router_stopped_on_purpose_is_not_readmitted_and_does_not_fail():
    router = Router(alive=False)
    result = io_lifecycle.restore(router, {"production": {}}, "running", REMOVED, False, 5)
    assert (result["state"], result["action"], result["note"]) == ("stopped", "skip", lifecycle.STOPPED_NOTE)
    assert router.applied == [] and "warning" not in result


def test_a_router_up_but_not_answering_is_a_warning():
    result = io_lifecycle.restore(Router(answers=False), {"production": {}}, "running", REMOVED, False, 5)
    assert result["action"] == "warn" and "not re-registered" in result["warning"]


def test_the_refusal_names_the_aliases_already_put_back():
    text = lifecycle.readmission_refused(REMOVED, [{"alias": "batch"}], "timed out")
    assert "aliases put back before it refused: batch" in text and text.endswith(
        "(the co-tenants themselves are restored)"
    )
