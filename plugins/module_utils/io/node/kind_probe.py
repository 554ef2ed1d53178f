"""Reading what tells a node's kind: the kernel release, WSL 2's GPU device and driver folder, and
the Docker engine's own description of itself (GET /info, what `docker info` prints). Raw readings
only; node/kind.py decides.
"""

import json
import os

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import ImageError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.docker_api import DEFAULT_SOCKET, DockerEngine
from ansible_collections.seatwright.fleet.plugins.module_utils.node.cpu import parse_cpuinfo
from ansible_collections.seatwright.fleet.plugins.module_utils.node.kind import DXG_DEVICE, WSL_LIB_DIR

# Docker Desktop can be slow to answer while its VM starts; a node's kind must not wait on it long.
DOCKER_INFO_TIMEOUT_S = 10


def kernel_release():
    """The running kernel's release (what `uname -r` prints)."""
    try:
        with open("/proc/sys/kernel/osrelease", encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return os.uname().release


def docker_info(socket_path=DEFAULT_SOCKET):
    """(the engine's /info as a dict, None) or (None, why no engine answered)."""
    if not os.path.exists(socket_path):
        return None, "no Docker engine socket at %s" % socket_path
    try:
        _, data = DockerEngine(socket_path, DOCKER_INFO_TIMEOUT_S)._call("GET", "/info")
        return json.loads(data.decode("utf-8")), None
    except (ImageError, ValueError) as exc:
        return None, str(exc)


def cpuinfo_text(path="/proc/cpuinfo"):
    """/proc/cpuinfo's text, or None where it cannot be read (node/cpu.py parses it)."""
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return handle.read()
    except OSError:
        return None


def read_cpu(path="/proc/cpuinfo"):
    """The node's processor as node/cpu.py reads it (None where /proc/cpuinfo is unreadable or empty)."""
    return parse_cpuinfo(cpuinfo_text(path))


def read_kind(socket_path=DEFAULT_SOCKET):
    """The readings node/kind.py decides from, and why docker info is missing where it is."""
    info, why = docker_info(socket_path)
    readings = {
        "kernel_release": kernel_release(),
        "dxg": os.path.exists(DXG_DEVICE),
        "wsl_lib": os.path.isdir(WSL_LIB_DIR),
        "docker_info": info,
    }
    return readings, why
