"""bench/engine_variant.py: the copy of a planned seat it starts is the seat's own container, changed
only where asked, started through the same docker run as bring-up, with the key kept off its command line."""

from ansible_collections.seatwright.fleet.plugins.module_utils.seat import container
from conftest import load_script
from test_container import lab_plan

variant = load_script("bench/engine_variant.py")


def test_the_copy_is_the_seats_container_changed_only_where_asked():
    seat = lab_plan("lab-allcores")["ranks"][0]["container_spec"]
    env = {"OMP_WAIT_POLICY": "PASSIVE", "VLLM_CPU_NUM_OF_RESERVED_CPU": "1"}
    spec = variant.variant_spec(seat, "screen", 8004, env, ["--stream-interval", "8"])
    argv = container.docker_run_argv(spec, "/tmp/screen.env", {container.API_KEY_SECRET: "k" * 40})
    assert argv[argv.index("--name") + 1] == "screen" and argv[argv.index("--env-file") + 1] == "/tmp/screen.env"
    assert "/var/lib/seatwright/models/smollm2-135m-instruct:/models/smollm2-135m-instruct:ro" in argv
    assert spec["env"]["VLLM_CPU_NUM_OF_RESERVED_CPU"] == "1" and spec["env"]["OMP_WAIT_POLICY"] == "PASSIVE"
    assert spec["env"]["HF_HUB_OFFLINE"] == "1"
    tail = argv[argv.index(seat["image"]) + 1 :]
    expected = list(seat["command"])
    expected[expected.index("--port") + 1] = "8004"
    assert tail == expected + ["--stream-interval", "8"]
    # No seat label: no lifecycle step takes the copy for the seat.
    assert "--label" not in argv
    # The seat's own spec is left as it was, and no key is on the command line.
    assert seat["command"][seat["command"].index("--port") + 1] == "8003"
    assert not any("k" * 40 in word for word in argv)
    assert all(isinstance(word, str) for word in argv)
