"""The node and fleet contract: every inventory variable seatwright reads about a node or the fleet.

One table (`VARIABLES`) says, for each variable, whether it is set per host or fleet-wide, whether it
is required, its default, and what is expected of it. The preflight play, the plan, node_base's
local fact and the README's table all read this table; nothing else lists these names.
"""

import ipaddress
import re
from collections import namedtuple

from ansible_collections.seatwright.fleet.plugins.module_utils.addresses import plain_ip
from ansible_collections.seatwright.fleet.plugins.module_utils.defaults import (
    CONFIG_DIR,
    SEAT_NAME_PATTERN,
    STATE_DIR,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.fabric.qos import declared_faults
from ansible_collections.seatwright.fleet.plugins.module_utils.node.hardware import GPU_PROFILES
from ansible_collections.seatwright.fleet.plugins.module_utils.node.kind import KINDS
from ansible_collections.seatwright.fleet.plugins.module_utils.sizes import parse_size

# Names the collectors pass on to the contract (see playbooks/vars/contract.yml); the contract then
# refuses unknown names under the seatwright_node_ and seatwright_fleet_ prefixes as typos.
COLLECT_PATTERN = r"^(seatwright_(node|fleet)_|seatwright_(fabric_subnet|config_dir|state_dir)$|gpu_power_limit_w$)"
_TYPO_PREFIXES = ("seatwright_node_", "seatwright_fleet_")

_IFACE = re.compile(r"^[A-Za-z0-9_.:-]{1,15}$")
_RDMA_DEVICE = re.compile(r"^[A-Za-z0-9_]{1,64}$")
_SEAT = re.compile(SEAT_NAME_PATTERN)
_SERVICE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.@:-]{0,127}$")
COTENANT_KINDS = ("container", "systemd")

# name, scope (host | fleet), required, default, key in the node's local fact (None: not published),
# what is expected (said in every problem), and what the variable is (the README's table).
Variable = namedtuple("Variable", "name scope required default fact expected meaning")

VARIABLES = (
    Variable(
        "seatwright_node_gpu_profile",
        "host",
        True,
        None,
        "gpu_profile",
        "one of: %s" % ", ".join(sorted(GPU_PROFILES)),
        "the GPU model of the node: %s" % ", ".join("`%s`" % k for k in sorted(GPU_PROFILES)),
    ),
    Variable(
        "seatwright_node_gpu_count",
        "host",
        True,
        None,
        "gpu_count",
        "an integer from 1 to 16 (GPUs in this node)",
        "GPUs in the node",
    ),
    Variable(
        "seatwright_node_fabric_ip",
        "host",
        True,
        None,
        "fabric_ip",
        "the node's IP address on the fabric (e.g. 10.77.0.11)",
        "the node's address on the RoCE fabric",
    ),
    Variable(
        "seatwright_node_fabric_iface",
        "host",
        True,
        None,
        "fabric_iface",
        "the netdev name of the fabric port (e.g. enp65s0f0np0)",
        "the netdev of the fabric port (NCCL/Gloo/Ray bind to it)",
    ),
    Variable(
        "seatwright_node_serve_address",
        "host",
        False,
        None,
        None,
        "an IP address (unset: the fabric address)",
        "the address a seat's OpenAI-compatible API listens on (unset: the fabric address)",
    ),
    Variable(
        "seatwright_node_kind",
        "host",
        False,
        None,
        "kind",
        "linux or wsl2 (unset: what the node shows)",
        "the node's kind: `linux`, or `wsl2` (Linux under Windows' WSL 2 with Docker Desktop: a single-node "
        "seat host whose driver, power and fabric the Windows host owns; docs/node-kinds.md); the node must "
        "show it (node_kind), and the plan uses it where no facts are cached",
    ),
    Variable(
        "seatwright_node_rdma_devices",
        "host",
        False,
        [],
        "rdma_devices",
        "a list of RDMA device names such as [mlx5_0], or [] for none",
        "RDMA devices behind that port, e.g. `[mlx5_0]`",
    ),
    Variable(
        "gpu_power_limit_w",
        "host",
        False,
        None,
        "gpu_power_limit_w",
        "a whole number of watts",
        "the power cap per GPU, in watts (unset: the card's default)",
    ),
    Variable(
        "seatwright_node_cotenants",
        "host",
        False,
        [],
        "cotenants",
        "a list of {name, kind: container|systemd, gpus: [indices] or all, memory: its GPU memory on each "
        "of those GPUs such as '21.6 GiB' (optional), memory_source (optional), router_seat: its seat's "
        "name in the router's listing (optional)}",
        "services on the node a seat may stop while it runs and must restore after, "
        "e.g. `[{name: embedder, kind: container, gpus: [1], memory: 6 GiB}]`; a seat that leaves them "
        "resident takes at most what their memory leaves, and where it is not declared (the variable unset, "
        "or an entry without memory) the share its recipe records (topology.resident_fraction), else it is "
        "refused; set `[]` where none runs",
    ),
    Variable(
        "seatwright_fleet_name",
        "fleet",
        False,
        "unnamed",
        "fleet",
        "a name of letters, digits, '_', '.' or '-'",
        "the fleet's name, written on each node",
    ),
    Variable(
        "seatwright_fabric_subnet",
        "fleet",
        False,
        None,
        None,
        "a network such as 10.77.0.0/24",
        "the fabric network; every fabric address must be in it",
    ),
    Variable(
        "seatwright_config_dir",
        "fleet",
        False,
        CONFIG_DIR,
        "config_dir",
        "an absolute path",
        "seatwright's configuration folder on every node",
    ),
    Variable(
        "seatwright_state_dir",
        "fleet",
        False,
        STATE_DIR,
        "state_dir",
        "an absolute path",
        "seatwright's state folder on every node (cached facts, records)",
    ),
    Variable(
        "seatwright_fleet_incumbents",
        "fleet",
        False,
        [],
        None,
        "a list of seat names (seats/<name>.yml), each once",
        "the seats serving in production now; a candidate is compared with them",
    ),
    Variable(
        "seatwright_fleet_incumbent_max_age_days",
        "fleet",
        False,
        14,
        None,
        "a whole number of days from 1 to 3650",
        "an incumbent's benchmark older than this many days is re-measured before a comparison",
    ),
    Variable(
        "seatwright_fleet_promotion_margin",
        "fleet",
        False,
        0.10,
        None,
        "a fraction from 0 to 1 (0.10: at least 10 % better; less is inside the benchmark's own spread rule)",
        "how much better than the incumbent a candidate must measure to be promoted",
    ),
    Variable(
        "seatwright_fleet_promotion_levels",
        "fleet",
        False,
        [],
        None,
        "a list of concurrency levels (whole numbers from 1 to 4096), each once, such as [1, 4, 16]",
        "the concurrency levels the fleet serves: a candidate not benchmarked at one of them, or whose "
        "every pass there is slower than the incumbent's slowest, is not promoted, whatever its mean over "
        "levels (`[]`: every level both seats measured)",
    ),
    Variable(
        "seatwright_fleet_promotion_ttft_p95_ms",
        "fleet",
        False,
        None,
        None,
        "a number of milliseconds above 0",
        "the TTFT p95 the fleet promises at each of those levels: a candidate over it at any of them is "
        "not promoted (unset: no bound)",
    ),
    Variable(
        "seatwright_fleet_stability_spread",
        "fleet",
        False,
        0.10,
        None,
        "a fraction above 0 and at most 0.5 (0.10: passes within 10 %); above 0.10 only with "
        "seatwright_fleet_stability_reason",
        "the spread across benchmark passes above which a level is flagged unstable, so that its figures "
        "cannot carry a promotion; incumbent and candidate are compared only under the same spread",
    ),
    Variable(
        "seatwright_fleet_stability_reason",
        "fleet",
        False,
        "",
        None,
        "a one-line sentence with the spreads the fleet's own machines measured",
        "why the fleet's benchmarks spread more than 10 % between passes (required with a looser spread)",
    ),
    Variable(
        "seatwright_fleet_turns_alias",
        "fleet",
        False,
        "",
        None,
        "a router alias the inventory declares (router.aliases), on one line, or '' for none",
        "a candidate's benchmark measures the seat this alias serves now in turns with it, level by level "
        "and pass by pass in one run, and the decision judges the per-turn ratios, which the host's drift "
        "between passes does not move; that seat takes the benchmark's load in its turns ('': compare "
        "with the incumbents' latest records)",
    ),
    Variable(
        "seatwright_fleet_transport_required",
        "fleet",
        False,
        "auto",
        None,
        "auto, rdma-gdr, rdma or socket",
        "the transport a multi-node seat's ranks must show in their logs at bring-up; `auto`: the best "
        "the nodes' fabric facts promise, sockets refused; `socket` accepts sockets (with a reason)",
    ),
    Variable(
        "seatwright_fleet_transport_reason",
        "fleet",
        False,
        "",
        None,
        "a one-line sentence saying why the fleet accepts a transport below what its nodes promise",
        "why the fleet declares its transport (required with `seatwright_fleet_transport_required: socket`)",
    ),
    Variable(
        "seatwright_fleet_roce_qos",
        "fleet",
        False,
        None,
        None,
        "a mapping of priority (0-7), dscp (0-63), pfc and ecn (true/false) and trust (dscp or pcp)",
        "the fabric's lossless RoCE class, set on every node's fabric port by roles/rdma_fabric "
        "(docs/fabric.md); unset: the ports' QoS is left alone",
    ),
)
BY_NAME = dict((v.name, v) for v in VARIABLES)
HOST_VARIABLES = tuple(v for v in VARIABLES if v.scope == "host")
FLEET_VARIABLES = tuple(v for v in VARIABLES if v.scope == "fleet")


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value):
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _shown(value):
    return "not set" if value is None else "%r" % (value,)


def _problem(where, variable, value, expected):
    prefix = "host %s: " % where if where else ""
    return "%s%s is %s; expected %s" % (prefix, variable, _shown(value), expected)


def _absent(value):
    return value is None or value == ""


# ---------------------------------------------------------------- per-variable checks
# Each returns None when the value is sound, else what was expected (overriding the table's text).


def _profile_ok(value, _declared):
    return None if isinstance(value, str) and value in GPU_PROFILES else ""


def _count_ok(value, _declared):
    return None if _is_int(value) and 1 <= value <= 16 else ""


def is_fabric_address(value):
    """True for an address another node can reach this one at: one unicast, routable-on-the-fabric IP.

    0.0.0.0 and :: name every interface, loopback names none another node can reach, and
    link-local, multicast and broadcast addresses are not one node's address on a fabric.
    """
    try:
        parsed = plain_ip(value)
    except ValueError:
        return False
    return not (
        parsed.is_unspecified
        or parsed.is_loopback
        or parsed.is_link_local
        or parsed.is_multicast
        or str(parsed) == "255.255.255.255"
    )


def _ip_ok(value, _declared):
    if is_fabric_address(value):
        return None
    return (
        BY_NAME["seatwright_node_fabric_ip"].expected + ", not a wildcard, loopback, link-local, multicast "
        "or broadcast address"
    )


def _iface_ok(value, _declared):
    if isinstance(value, str) and _IFACE.match(value):
        return None
    return "a netdev name of 1-15 letters, digits, '_', '.', ':' or '-'"


def _kind_ok(value, _declared):
    return None if value in KINDS else ""


def _rdma_ok(value, _declared):
    ok = isinstance(value, list) and all(isinstance(d, str) and _RDMA_DEVICE.match(d) for d in value)
    return None if ok else ""


def power_limit_problem(limit, profile_key):
    """None when `limit` is a sound cap for the profile, else what is expected (one home for this check)."""
    profile = GPU_PROFILES.get(profile_key) if isinstance(profile_key, str) else None
    ceiling = profile["power_max_w"] if profile else None
    if _is_int(limit) and limit > 0 and (ceiling is None or limit <= ceiling):
        return None
    expected = "a whole number of watts"
    if ceiling is not None:
        expected += " no higher than the %s's %d W maximum" % (profile["name"], ceiling)
    return expected


def _power_ok(value, declared):
    return power_limit_problem(value, declared.get("seatwright_node_gpu_profile"))


def _serve_ok(value, _declared):
    try:
        ipaddress.ip_address(str(value))
    except ValueError:
        return ""
    return None


def memory_bytes(value):
    """Bytes of a co-tenant's declared GPU memory (an integer or a size such as '21.6 GiB'), or None."""
    if isinstance(value, bool):
        return None
    try:
        size = parse_size(value)
    except ValueError:
        return None
    return size if isinstance(size, int) and size > 0 else None


def _cotenants_ok(value, declared):
    expected = BY_NAME["seatwright_node_cotenants"].expected
    if not isinstance(value, list):
        return expected
    count = declared.get("seatwright_node_gpu_count")
    seen = set()
    for position, entry in enumerate(value):
        where = "entry %d" % position
        if not isinstance(entry, dict) or set(entry) - {"name", "kind", "gpus", "memory", "memory_source"}:
            return "%s (%s has other keys)" % (expected, where) if isinstance(entry, dict) else expected
        name = entry.get("name")
        if not isinstance(name, str) or not _SERVICE.match(name):
            return "%s (%s: name must be a container or unit name)" % (expected, where)
        if name in seen:
            return "%s (%s: %s is listed twice)" % (expected, where, name)
        seen.add(name)
        if entry.get("kind") not in COTENANT_KINDS:
            return "%s (%s: kind must be container or systemd)" % (expected, name)
        if entry.get("memory") is not None and memory_bytes(entry["memory"]) is None:
            return "%s (%s: memory must be a size such as '21.6 GiB')" % (expected, name)
        gpus = entry.get("gpus", "all")
        if gpus == "all":
            continue
        if not isinstance(gpus, list) or not gpus or not all(_is_int(g) and g >= 0 for g in gpus):
            return "%s (%s: gpus must be a list of GPU indices or all)" % (expected, name)
        if _is_int(count) and any(g >= count for g in gpus):
            return "%s (%s: GPU %d does not exist on a %d-GPU node)" % (expected, name, max(gpus), count)
    return None


def _fleet_name_ok(value, _declared):
    return None if isinstance(value, str) and re.match(r"^[A-Za-z0-9_.-]{1,64}$", value) else ""


def _subnet_ok(value, _declared):
    try:
        ipaddress.ip_network(str(value), strict=False)
    except ValueError:
        return ""
    return None


def _abs_path_ok(value, _declared):
    ok = isinstance(value, str) and value.startswith("/") and len(value) > 1 and "\n" not in value
    return None if ok else ""


def _incumbents_ok(value, _declared):
    ok = (
        isinstance(value, list)
        and all(isinstance(s, str) and _SEAT.match(s) for s in value)
        and len(set(value)) == len(value)
    )
    return None if ok else ""


def _max_age_ok(value, _declared):
    return None if _is_int(value) and 1 <= value <= 3650 else ""


def _margin_ok(value, _declared):
    return None if _is_number(value) and 0 <= value < 1 else ""


def _levels_ok(value, _declared):
    ok = isinstance(value, list) and all(_is_int(c) and 1 <= c <= 4096 for c in value) and len(set(value)) == len(value)
    return None if ok else ""


def _ttft_bound_ok(value, _declared):
    return None if _is_number(value) and 0 < value < 3.6e6 else ""


def stability_spread_problem(spread, reason):
    """What is wrong with a stability spread and its reason (None: they hold); the one rule the
    contract and tools/seatwright-bench both apply."""
    if not (_is_number(spread) and 0 < spread <= 0.5):
        return ""
    default = BY_NAME["seatwright_fleet_stability_spread"].default
    if spread > default and not str(reason or "").strip():
        return "above %g only with seatwright_fleet_stability_reason giving the spreads measured" % default
    return None


def _stability_spread_ok(value, declared):
    return stability_spread_problem(value, declared.get("seatwright_fleet_stability_reason"))


def _transport_ok(value, declared):
    if value not in ("auto", "rdma-gdr", "rdma", "socket"):
        return ""
    if value == "socket" and not str(declared.get("seatwright_fleet_transport_reason") or "").strip():
        return "socket only with seatwright_fleet_transport_reason saying why sockets are acceptable"
    return None


def _roce_qos_ok(value, _declared):
    faults = declared_faults(value)
    return "; ".join("%s %s" % (key, expected) for key, _value, expected in faults if key) or ("" if faults else None)


def _one_line_ok(value, _declared):
    return None if isinstance(value, str) and "\n" not in value else ""


CHECKS = {
    "seatwright_node_gpu_profile": _profile_ok,
    "seatwright_node_gpu_count": _count_ok,
    "seatwright_node_fabric_ip": _ip_ok,
    "seatwright_node_fabric_iface": _iface_ok,
    "seatwright_node_serve_address": _serve_ok,
    "seatwright_node_kind": _kind_ok,
    "seatwright_node_rdma_devices": _rdma_ok,
    "gpu_power_limit_w": _power_ok,
    "seatwright_node_cotenants": _cotenants_ok,
    "seatwright_fleet_name": _fleet_name_ok,
    "seatwright_fabric_subnet": _subnet_ok,
    "seatwright_config_dir": _abs_path_ok,
    "seatwright_state_dir": _abs_path_ok,
    "seatwright_fleet_incumbents": _incumbents_ok,
    "seatwright_fleet_incumbent_max_age_days": _max_age_ok,
    "seatwright_fleet_promotion_margin": _margin_ok,
    "seatwright_fleet_promotion_levels": _levels_ok,
    "seatwright_fleet_promotion_ttft_p95_ms": _ttft_bound_ok,
    "seatwright_fleet_stability_spread": _stability_spread_ok,
    "seatwright_fleet_stability_reason": _one_line_ok,
    "seatwright_fleet_turns_alias": _one_line_ok,
    "seatwright_fleet_transport_required": _transport_ok,
    "seatwright_fleet_transport_reason": _one_line_ok,
    "seatwright_fleet_roce_qos": _roce_qos_ok,
}


def _unknown(where, declared):
    problems = []
    for name in sorted(declared):
        if name.startswith(_TYPO_PREFIXES) and name not in BY_NAME:
            close = [v.name for v in VARIABLES if v.name.startswith(name[: len("seatwright_node_") + 3])]
            hint = " (did you mean %s?)" % close[0] if close else ""
            problems.append(
                "%s%s is not a seatwright variable%s; remove or rename it"
                % ("host %s: " % where if where else "", name, hint)
            )
    return problems


def check_variables(where, declared, variables):
    """Problems with `variables` (table rows) as declared; `where` is the host name or None (fleet)."""
    problems = []
    for variable in variables:
        value = declared.get(variable.name)
        if _absent(value):
            if variable.required:
                problems.append(_problem(where, variable.name, None, variable.expected))
            continue
        expected = CHECKS[variable.name](value, declared)
        if expected is not None:
            problems.append(_problem(where, variable.name, value, expected or variable.expected))
    return problems


def check_node(host, declared):
    """Problems (strings) with one host's own variables; empty when they are sound."""
    declared = declared if isinstance(declared, dict) else {}
    return _unknown(host, declared) + check_variables(host, declared, HOST_VARIABLES)


def normalised(declared, variables):
    """The contract's variables with their defaults filled in (values assumed checked)."""
    return dict((v.name, v.default if _absent(declared.get(v.name)) else declared.get(v.name)) for v in variables)


def local_fact(host, declared):
    """What node_base publishes as ansible_local.seatwright: the node's and the fleet's declaration."""
    values = normalised(declared, VARIABLES)
    fact = {"node": host}
    for variable in VARIABLES:
        if variable.fact:
            fact[variable.fact] = values[variable.name]
    return fact


def check_fleet(nodes):
    """Problems across the fleet: each host's own, fleet variables, then what must hold between hosts.

    `nodes` maps host name to the contract variables visible on that host (its own and the
    fleet's). Fleet variables must agree on every host.
    """
    if not nodes:
        return ["the inventory has no hosts in group gpu_nodes; add at least one node"]
    problems = []
    hosts = sorted(nodes)
    declared = dict((host, nodes[host] if isinstance(nodes[host], dict) else {}) for host in hosts)
    for host in hosts:
        problems.extend(check_node(host, declared[host]))

    first = declared[hosts[0]]
    for variable in FLEET_VARIABLES:
        values = dict((host, declared[host].get(variable.name)) for host in hosts)
        differing = sorted(h for h in hosts if values[h] != values[hosts[0]])
        if differing:
            problems.append(
                "%s differs between hosts (%s has %s, %s has %s); set it once for group "
                "gpu_nodes"
                % (variable.name, hosts[0], _shown(values[hosts[0]]), differing[0], _shown(values[differing[0]]))
            )
    problems.extend(check_variables(None, first, FLEET_VARIABLES))

    network = None
    if not _absent(first.get("seatwright_fabric_subnet")) and _subnet_ok(first["seatwright_fabric_subnet"], {}) is None:
        network = ipaddress.ip_network(str(first["seatwright_fabric_subnet"]), strict=False)
    owners = {}
    for host in hosts:
        address = declared[host].get("seatwright_node_fabric_ip")
        try:
            parsed = ipaddress.ip_address(str(address)) if address else None
        except ValueError:
            parsed = None
        if parsed is None:
            continue
        if parsed in owners:
            problems.append(
                "host %s: seatwright_node_fabric_ip %s is also declared by %s; each node "
                "needs its own fabric address" % (host, parsed, owners[parsed])
            )
        owners.setdefault(parsed, host)
        if network is not None and parsed not in network:
            problems.append(
                "host %s: seatwright_node_fabric_ip %s is outside seatwright_fabric_subnet "
                "%s; fix the address or the subnet" % (host, parsed, network)
            )
    return problems
