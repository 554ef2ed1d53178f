"""Catalogue of the GPU models seatwright knows, as declared in inventories.

Inventories name a profile key (`seatwright_node_gpu_profile`); facts read from the node name the
marketing string. Both resolve here, so plans made before a node is reachable use the same numbers
that the node's own facts will report.
"""

GPU_PROFILES = {
    "rtx-pro-6000-maxq": {
        "name": "NVIDIA RTX PRO 6000 Blackwell Max-Q Workstation Edition",
        "memory_mib": 97887,
        "compute_capability": "12.0",
        "power_default_w": 300,
        "power_max_w": 300,
    },
    "rtx-pro-6000-ws": {
        "name": "NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
        "memory_mib": 97887,
        "compute_capability": "12.0",
        "power_default_w": 600,
        "power_max_w": 600,
    },
    "h200": {
        "name": "NVIDIA H200",
        "memory_mib": 143771,
        "compute_capability": "9.0",
        "power_default_w": 700,
        "power_max_w": 700,
    },
}

MIB = 1024 * 1024


def sm_of(compute_capability):
    """'12.0' -> 'sm_120'."""
    major, _, minor = str(compute_capability).partition(".")
    return "sm_%d%d" % (int(major), int(minor or 0))


def is_sm120(compute_capability):
    """True for the consumer/workstation Blackwell family (12.x), whose kernels differ from SM100."""
    return str(compute_capability).split(".")[0] == "12"


def profile_for_name(name):
    """The profile key whose marketing name matches `name`, or None."""
    for key, profile in GPU_PROFILES.items():
        if profile["name"] == name:
            return key
    return None
