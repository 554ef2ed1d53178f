"""Validation of what each inventory host declares, before any role touches a node.

Every later decision (fit, launch, NCCL env, power caps) reads these values, so a wrong one is
caught here with the host, the variable and what is expected, instead of failing deep in a role.
"""
import ipaddress
import re

from ansible.module_utils.seatwright.node.hardware import GPU_PROFILES

# Linux netdev names: at most 15 bytes, no slash or whitespace.
_IFACE = re.compile(r"^[A-Za-z0-9_.:-]{1,15}$")
_RDMA_DEVICE = re.compile(r"^[A-Za-z0-9_]{1,64}$")

# Variables each gpu_nodes host must declare, with what is expected of each.
REQUIRED = {
    "seatwright_node_gpu_profile": "one of: %s" % ", ".join(sorted(GPU_PROFILES)),
    "seatwright_node_gpu_count": "an integer from 1 to 16 (GPUs in this node)",
    "seatwright_node_fabric_ip": "the node's IP address on the fabric (e.g. 10.77.0.11)",
    "seatwright_node_fabric_iface": "the netdev name of the fabric port (e.g. enp65s0f0np0)",
}


def _problem(host, variable, value, expected):
    shown = "not set" if value is None else "%r" % (value,)
    return "host %s: %s is %s; expected %s" % (host, variable, shown, expected)


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def is_fabric_address(value):
    """True for an address another node can reach this one at: one unicast, routable-on-the-fabric IP.

    0.0.0.0 and :: name every interface, loopback names none another node can reach, and
    link-local, multicast and broadcast addresses are not one node's address on a fabric.
    """
    try:
        parsed = ipaddress.ip_address(str(value).strip())
    except ValueError:
        return False
    return not (parsed.is_unspecified or parsed.is_loopback or parsed.is_link_local or parsed.is_multicast
                or str(parsed) == "255.255.255.255")


def check_node(host, declared):
    """Problems (strings) with one host's declaration; empty when it is sound."""
    problems = []
    for variable, expected in REQUIRED.items():
        if declared.get(variable) in (None, ""):
            problems.append(_problem(host, variable, None, expected))

    profile_key = declared.get("seatwright_node_gpu_profile")
    profile = GPU_PROFILES.get(profile_key) if isinstance(profile_key, str) else None
    if profile_key not in (None, "") and profile is None:
        problems.append(_problem(host, "seatwright_node_gpu_profile", profile_key,
                                 REQUIRED["seatwright_node_gpu_profile"]))

    count = declared.get("seatwright_node_gpu_count")
    if count is not None and not (_is_int(count) and 1 <= count <= 16):
        problems.append(_problem(host, "seatwright_node_gpu_count", count,
                                 REQUIRED["seatwright_node_gpu_count"]))

    address = declared.get("seatwright_node_fabric_ip")
    if address not in (None, "") and not is_fabric_address(address):
        problems.append(_problem(host, "seatwright_node_fabric_ip", address,
                                 REQUIRED["seatwright_node_fabric_ip"] + ", not a wildcard, loopback, "
                                 "link-local, multicast or broadcast address"))

    iface = declared.get("seatwright_node_fabric_iface")
    if iface not in (None, "") and not (isinstance(iface, str) and _IFACE.match(iface)):
        problems.append(_problem(host, "seatwright_node_fabric_iface", iface,
                                 "a netdev name of 1-15 letters, digits, '_', '.', ':' or '-'"))

    devices = declared.get("seatwright_node_rdma_devices")
    if devices is not None:
        if not isinstance(devices, list) or not all(
                isinstance(d, str) and _RDMA_DEVICE.match(d) for d in devices):
            problems.append(_problem(host, "seatwright_node_rdma_devices", devices,
                                     "a list of RDMA device names such as [mlx5_0], or [] for none"))

    limit = declared.get("gpu_power_limit_w")
    if limit is not None:
        ceiling = profile["power_max_w"] if profile else None
        if not _is_int(limit) or limit <= 0 or (ceiling is not None and limit > ceiling):
            expected = "a whole number of watts"
            if ceiling is not None:
                expected += " no higher than the %s's %d W maximum" % (profile["name"], ceiling)
            problems.append(_problem(host, "gpu_power_limit_w", limit, expected))
    return problems


def check_fleet(nodes, fabric_subnet=None):
    """Problems across the fleet: each node's own, then duplicates and subnet membership.

    `nodes` maps host name to its declared variables.
    """
    problems = []
    if not nodes:
        return ["the inventory has no hosts in group gpu_nodes; add at least one node"]
    network = None
    if fabric_subnet not in (None, ""):
        try:
            network = ipaddress.ip_network(str(fabric_subnet), strict=False)
        except ValueError:
            problems.append("seatwright_fabric_subnet is %r; expected a network such as "
                            "10.77.0.0/24" % (fabric_subnet,))
    owners = {}
    for host in sorted(nodes):
        declared = nodes[host] if isinstance(nodes[host], dict) else {}
        problems.extend(check_node(host, declared))
        address = declared.get("seatwright_node_fabric_ip")
        try:
            parsed = ipaddress.ip_address(str(address)) if address else None
        except ValueError:
            parsed = None
        if parsed is None:
            continue
        if parsed in owners:
            problems.append("host %s: seatwright_node_fabric_ip %s is also declared by %s; each node "
                            "needs its own fabric address" % (host, parsed, owners[parsed]))
        owners.setdefault(parsed, host)
        if network is not None and parsed not in network:
            problems.append("host %s: seatwright_node_fabric_ip %s is outside seatwright_fabric_subnet "
                            "%s; fix the address or the subnet" % (host, parsed, network))
    return problems
