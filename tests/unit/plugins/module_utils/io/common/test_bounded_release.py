"""Releasing an exclusive seat on Docker Desktop ([003]): its engine container goes within a bound even when
`docker stop` stays attached, because the stop is bounded and a force-remove follows whatever it did."""

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import ServiceError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common import services


class Engine:
    """A Docker engine whose `docker stop` never returns (rc None: the call overran and was killed)."""

    def __init__(self, rm_rc=0):
        self.present, self.rm_rc, self.calls = True, rm_rc, []

    def __call__(self, *args, **kwargs):
        self.calls.append((args[0], kwargs.get("timeout_s")))
        if args[0] == "stop":
            return None, "", ""
        if args[0] == "rm":
            if self.rm_rc == 0:
                self.present = False
            return self.rm_rc, "", "" if self.rm_rc == 0 else "Error response from daemon: removal in progress"
        raise AssertionError(args)


@pytest.fixture
def engine(monkeypatch):
    fake = Engine()
    monkeypatch.setattr(services, "docker", fake)
    monkeypatch.setattr(services, "container_state", lambda name: {"exists": fake.present})
    return fake


def test_a_stop_left_attached_is_bounded_and_the_container_force_removed(engine):
    assert services.remove_container("seat-laguna-s21-0", 30) is True
    assert engine.calls == [("stop", 40), ("rm", services.CALL_TIMEOUT_S)]
    assert engine.present is False


def test_a_container_that_is_gone_is_not_stopped(engine):
    engine.present = False
    assert services.remove_container("seat-laguna-s21-0", 30) is False
    assert engine.calls == []


def test_a_force_remove_that_fails_is_said_by_name(engine):
    engine.rm_rc = 1
    with pytest.raises(ServiceError, match="could not remove container seat-laguna-s21-0: Error response"):
        services.remove_container("seat-laguna-s21-0", 30)
