"""Lab verify: gpu_power left each node's emulated GPUs at the inventory's caps, and the boot unit in place.

Expected values come from each host's own inventory (gpu_power_limit_w, overrides, clock lock), so the
same checks hold for node-a (250 W Max-Q) and node-b (325 W workstation).
"""

import json
import re

import pytest

EMULATOR_STATE = "/var/lib/seatwright-lab/nvidia-smi-state.json"
SETTINGS_FILE = "/etc/seatwright/gpu-settings.json"
UNIT = "seatwright-gpu-power.service"
UNIT_FILE = "/etc/systemd/system/" + UNIT
BOOT_BUNDLE = "/usr/local/lib/seatwright/gpu-settings.pyz"


@pytest.fixture
def declared(host):
    variables = host.ansible.get_variables()
    return {
        "name": variables["inventory_hostname"],
        "limit_w": variables["gpu_power_limit_w"],
        "overrides": {int(k): v for k, v in (variables.get("gpu_power_limit_overrides") or {}).items()},
        "clock_lock": variables.get("gpu_power_clock_lock"),
        "profile": variables["seatwright_node_gpu_profile"],
    }


def emulator_gpus(host):
    """The emulator's settable state, in GPU index order (UUIDs are listed by nvidia-smi -L)."""
    state = json.loads(host.file(EMULATOR_STATE).content_string)["gpus"]
    uuids = re.findall(r"\(UUID: (\S+)\)", host.check_output("nvidia-smi -L"))
    return [state[uuid] for uuid in uuids]


def expected_limits(declared, count):
    return [float(declared["overrides"].get(i, declared["limit_w"])) for i in range(count)]


def test_emulated_gpus_hold_the_declared_caps(host, declared):
    gpus = emulator_gpus(host)
    assert len(gpus) == 2
    assert [gpu["power_limit_w"] for gpu in gpus] == expected_limits(declared, len(gpus))
    query = host.check_output("nvidia-smi --query-gpu=index,power.limit --format=csv,noheader,nounits")
    assert [float(line.split(", ")[1]) for line in query.splitlines()] == expected_limits(declared, len(gpus))


def test_persistence_and_clock_lock(host, declared):
    for gpu in emulator_gpus(host):
        assert gpu["persistence_mode"] is True
        assert gpu["clock_lock"] == declared["clock_lock"]


def test_gpu_facts_are_cached_on_the_node(host, declared):
    cached = json.loads(host.file("/var/lib/seatwright/gpu_facts.json").content_string)
    summary = cached["seatwright_gpu_summary"]
    assert (summary["count"], summary["is_sm120"], summary["source"]) == (2, True, "nvidia-smi")
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", cached["read_at"])
    assert {gpu["profile"] for gpu in cached["seatwright_gpus"]} == {declared["profile"]}
    assert [link["link"] for link in summary["links"]] == ["PXB"]


def test_boot_settings_file(host, declared):
    settings = host.file(SETTINGS_FILE)
    assert (settings.user, settings.mode) == ("root", 0o644)
    written = json.loads(settings.content_string)
    assert written["power_limits_w"] == {str(i): w for i, w in enumerate(expected_limits(declared, 2))}
    assert (written["persistence"], written["clock_lock"]) == (True, declared["clock_lock"])


def test_boot_unit_is_a_oneshot_after_persistenced_and_enabled(host):
    unit = host.file(UNIT_FILE).content_string
    for line in (
        "Type=oneshot",
        "RemainAfterExit=yes",
        "After=nvidia-persistenced.service",
        "ExecStart=/usr/bin/python3 %s %s" % (BOOT_BUNDLE, SETTINGS_FILE),
        "WantedBy=multi-user.target",
    ):
        assert line in unit.splitlines()
    assert host.file(BOOT_BUNDLE).mode == 0o644
    wants = host.file("/etc/systemd/system/multi-user.target.wants/" + UNIT)
    assert wants.is_symlink and wants.linked_to == UNIT_FILE
    assert host.check_output("systemctl is-enabled %s" % UNIT) == "enabled"


def test_boot_unit_command_restores_the_caps_after_the_driver_forgets_them(host, declared):
    before = emulator_gpus(host)
    # A reboot or driver reload: the emulator forgets every setting and reports card defaults.
    host.check_output("mv %s %s.saved" % (EMULATOR_STATE, EMULATOR_STATE))
    try:
        assert [gpu["power_limit_w"] for gpu in emulator_gpus_defaults(host)] != expected_limits(declared, 2)
        host.check_output("/usr/bin/python3 %s %s" % (BOOT_BUNDLE, SETTINGS_FILE))
        assert emulator_gpus(host) == before
    finally:
        host.check_output("mv -f %s.saved %s" % (EMULATOR_STATE, EMULATOR_STATE))


def emulator_gpus_defaults(host):
    query = host.check_output("nvidia-smi --query-gpu=power.limit --format=csv,noheader,nounits")
    return [{"power_limit_w": float(line)} for line in query.splitlines()]


def test_a_cap_above_the_card_maximum_is_refused_naming_host_gpu_and_range(host, declared):
    before = emulator_gpus(host)
    # testinfra raises only when the parsed result keeps its "failed" key; read the message either way.
    try:
        result = host.ansible("gpu_settings", "power_limit_w=700 host=%s" % declared["name"], check=False)
    except host.ansible.AnsibleException as refused:
        result = refused.result
    message = result["msg"]
    assert message.startswith("host %s: GPU 0 (" % declared["name"])
    assert "cannot take a power limit of 700 W: this card accepts 150 W to" in message
    assert emulator_gpus(host) == before
