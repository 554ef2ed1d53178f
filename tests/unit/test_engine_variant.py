"""bench/engine_variant.py: the copy of a planned seat it starts is the seat's own container, changed
only where asked, with the key kept off the command line."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SPEC = importlib.util.spec_from_file_location("engine_variant", ROOT / "bench" / "engine_variant.py")
variant = importlib.util.module_from_spec(SPEC)
SPEC.loader.exec_module(variant)

LAB_SPEC = {
    "command": ["-m", "vllm.entrypoints.openai.api_server", "--served-model-name", "m", "--port", "8003"],
    "entrypoint": "python3",
    "env": {"HF_HUB_OFFLINE": "1", "VLLM_CPU_NUM_OF_RESERVED_CPU": "0"},
    "image": "seatwright/vllm-cpu:b0c36f84c1f114ba",
    "ipc_mode": "private",
    "mounts": [{"read_only": True, "source": "/var/lib/seatwright/models/m", "target": "/models/m"}],
    "network_mode": "host",
    "secrets": [{"env": "VLLM_API_KEY", "secret": "seat_api_key"}],
    "shm_size_bytes": 2147483648,
}


def test_the_copy_is_the_seats_container_changed_only_where_asked():
    env = {"OMP_WAIT_POLICY": "PASSIVE", "VLLM_CPU_NUM_OF_RESERVED_CPU": "1"}
    argv = variant.docker_argv(LAB_SPEC, "screen", 8004, env, ["--stream-interval", "8"], "/tmp/screen.env")
    assert argv[argv.index("--name") + 1] == "screen" and argv[argv.index("--env-file") + 1] == "/tmp/screen.env"
    assert "/var/lib/seatwright/models/m:/models/m:ro" in argv
    assert "VLLM_CPU_NUM_OF_RESERVED_CPU=1" in argv and "OMP_WAIT_POLICY=PASSIVE" in argv
    assert "VLLM_CPU_NUM_OF_RESERVED_CPU=0" not in argv and "HF_HUB_OFFLINE=1" in argv
    tail = argv[argv.index(LAB_SPEC["image"]) + 1 :]
    assert tail == [
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--served-model-name",
        "m",
        "--port",
        "8004",
        "--stream-interval",
        "8",
    ]
    # The seat's own spec is left as it was, and no key is on the command line.
    assert LAB_SPEC["command"][-1] == "8003"
    assert not any("VLLM_API_KEY" in word for word in argv)
    assert all(isinstance(word, str) for word in argv)
