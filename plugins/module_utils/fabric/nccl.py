"""NCCL decisions: the environment rendered from fabric facts, and all-reduce sweep parsing.

Pure functions only. A node's NCCL/Gloo environment is decided once, by `node_env`/`render_env`:
library/nccl_env_render.py (roles/nccl_env) writes it to the node, and every rank of a multi-node
seat (seat/launch.py) runs with it. library/nccl_bandwidth.py runs the sweep and hands its output
to the parsers here.
"""

import json
import re

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import NcclError
from ansible_collections.seatwright.fleet.plugins.module_utils.fabric.qos import dscp_problem, nccl_dscp, traffic_class
from ansible_collections.seatwright.fleet.plugins.module_utils.node.kind import KINDS, wsl2_nccl_entries
from ansible_collections.seatwright.fleet.plugins.module_utils.node.platform import p2p_redirected

GIB = 1024**3
MIB = 1024**2

# GDR levels NCCL accepts, nearest first; PXB is NCCL's default.
GDR_LEVELS = ("LOC", "PIX", "PXB", "PHB", "SYS")
# Mitigations of the intermittent RDMA fault of field report [002] (a queue-pair error on one
# node's adapter, a remote-access error on the other, one run of several at 16 streams): the
# report names turning off DMA-BUF registration or lowering the GPUDirect level, and had tried
# neither. Off by default: a node declares one (nccl_env_rdma_mitigation) once it has seen the fault.
RDMA_MITIGATIONS = {
    "none": "no mitigation (the default)",
    "dmabuf-off": "NCCL_DMABUF_ENABLE=0: NCCL registers GPU memory with the NIC through nvidia-peermem, not DMA-BUF",
    "lower-gdr-level": "NCCL_NET_GDR_LEVEL one step nearer than it would be (LOC at the floor: no GPUDirect RDMA)",
}
RDMA_MITIGATION_SOURCE = "docs/field.md#rdma-fault (field report [002], mitigations named there, untried)"


def _entry(name, value, reason):
    return {"name": name, "value": str(value), "reason": reason}


def render_env(
    host,
    fabric,
    socket_ifname,
    declared_devices=None,
    ib_dscp=None,
    gdr_level="auto",
    p2p_disable="auto",
    gid_index=None,
    rdma_mitigation="none",
):
    """The NCCL/Gloo environment for one node, as a list of {name, value, reason}.

    `fabric` is the node's fabric facts (library/fabric_facts.py). Explicit arguments override
    what the facts suggest; `auto` means decide from the facts. `rdma_mitigation` is one of
    RDMA_MITIGATIONS, declared per node.
    """
    if rdma_mitigation not in RDMA_MITIGATIONS:
        raise NcclError(
            "host %s: nccl_env_rdma_mitigation is %r; expected one of %s"
            % (host, rdma_mitigation, ", ".join(RDMA_MITIGATIONS))
        )
    if not socket_ifname:
        raise NcclError(
            "host %s: the fabric interface is not set; declare seatwright_node_fabric_iface (e.g. enp65s0f0np0)" % host
        )
    iface = fabric.get("fabric_iface") or {}
    if iface.get("name") == socket_ifname and iface.get("present") is False:
        raise NcclError(
            "host %s: fabric interface %s does not exist on the node; fix "
            "seatwright_node_fabric_iface" % (host, socket_ifname)
        )

    env = [
        _entry(
            "NCCL_SOCKET_IFNAME",
            "=" + socket_ifname,
            "bootstrap and socket traffic on the fabric port only ('=' matches the name exactly)",
        ),
        _entry("GLOO_SOCKET_IFNAME", socket_ifname, "torch.distributed's Gloo groups on the same port as NCCL"),
    ]

    devices = {d["name"]: d for d in fabric.get("rdma_devices") or []}
    wanted = list(declared_devices or []) or sorted(devices)
    missing = [name for name in wanted if name not in devices]
    if missing:
        raise NcclError(
            "host %s: declared RDMA device(s) %s not found on the node (found: %s); "
            "fix seatwright_node_rdma_devices or the NIC driver"
            % (host, ", ".join(missing), ", ".join(sorted(devices)) or "none")
        )
    hcas = []
    for name in wanted:
        for port in devices[name]["ports"]:
            if port["active"]:
                hcas.append((name, port))

    if not hcas and rdma_mitigation != "none":
        raise NcclError(
            "host %s: nccl_env_rdma_mitigation is %s, but the node has no active RDMA port for it to act on; "
            "set it to none" % (host, rdma_mitigation)
        )
    if not hcas:
        reason = "no RDMA device on this node" if not devices else "no active RDMA port among %s" % ", ".join(wanted)
        env.append(_entry("NCCL_IB_DISABLE", 1, reason + "; NCCL uses sockets on the fabric port"))
    else:
        env.append(
            _entry(
                "NCCL_IB_HCA",
                "=" + ",".join(n if p.get("port") is None else "%s:%d" % (n, p["port"]) for n, p in hcas),
                "only these RDMA ports ('=' is an exact match, so mlx5_1 cannot match mlx5_10)",
            )
        )
        env.extend(_gid_entries(host, hcas, gid_index))
        if ib_dscp is not None:
            if dscp_problem(ib_dscp):
                raise NcclError("host %s: ib_dscp is %r; expected %s" % (host, ib_dscp, dscp_problem(ib_dscp)))
            env.append(
                _entry(
                    "NCCL_IB_TC",
                    traffic_class(ib_dscp),
                    "traffic class = DSCP %d x 4, the lossless class on the switch" % ib_dscp,
                )
            )
        env.extend(_gdr_entries(host, fabric, gdr_level))
        env = _mitigated(env, rdma_mitigation)

    env.extend(_p2p_entries(host, fabric, p2p_disable))
    return env


def _mitigated(env, rdma_mitigation):
    """The RDMA entries with the declared fault mitigation applied (RDMA_MITIGATIONS)."""
    why = "declared RDMA fault mitigation %s (%s)" % (rdma_mitigation, RDMA_MITIGATION_SOURCE)
    if rdma_mitigation == "dmabuf-off":
        return env + [_entry("NCCL_DMABUF_ENABLE", 0, why)]
    if rdma_mitigation == "lower-gdr-level":
        rendered = [e for e in env if e["name"] == "NCCL_NET_GDR_LEVEL"]
        current = rendered[0]["value"] if rendered else "PXB"
        lower = GDR_LEVELS[max(GDR_LEVELS.index(current) - 1, 0)]
        kept = [e for e in env if e["name"] != "NCCL_NET_GDR_LEVEL"]
        return kept + [_entry("NCCL_NET_GDR_LEVEL", lower, "%s: one step nearer than %s" % (why, current))]
    return env


def _gid_entries(host, hcas, gid_index):
    if gid_index is not None:
        return [_entry("NCCL_IB_GID_INDEX", gid_index, "declared")]
    roce = [(n, p) for n, p in hcas if p.get("link_layer") == "Ethernet"]
    if not roce:
        return []
    indexes = {p.get("roce_v2_gid_index") for _, p in roce}
    if None in indexes:
        lacking = ", ".join(n for n, p in roce if p.get("roce_v2_gid_index") is None)
        raise NcclError(
            "host %s: RoCE port(s) on %s have no RoCE v2 IPv4 GID; give the fabric "
            "interface its IPv4 address, or declare nccl_env_gid_index" % (host, lacking)
        )
    if len(indexes) > 1:
        return []
    index = indexes.pop()
    return [
        _entry(
            "NCCL_IB_GID_INDEX",
            index,
            "the RoCE v2 IPv4 GID on every port (NCCL >= 2.21 finds it alone; older ones need it)",
        )
    ]


def _gdr_entries(host, fabric, gdr_level):
    if gdr_level not in ("auto",) + GDR_LEVELS:
        raise NcclError(
            "host %s: gdr_level is %r; expected auto or one of %s" % (host, gdr_level, ", ".join(GDR_LEVELS))
        )
    if gdr_level != "auto":
        return [_entry("NCCL_NET_GDR_LEVEL", gdr_level, "declared")]
    gpudirect = fabric.get("gpudirect") or {}
    path = fabric.get("gpu_nic_path")
    if not gpudirect.get("available"):
        return []
    if path in ("PHB", "SYS"):
        return [
            _entry(
                "NCCL_NET_GDR_LEVEL",
                path,
                "GPU and NIC meet only at %s (through the CPU); NCCL's default PXB would "
                "stage through host memory" % path,
            )
        ]
    return []


def _p2p_entries(host, fabric, p2p_disable):
    if p2p_disable not in ("auto", True, False):
        raise NcclError("host %s: p2p_disable is %r; expected auto, true or false" % (host, p2p_disable))
    if p2p_disable is True:
        return [_entry("NCCL_P2P_DISABLE", 1, "declared")]
    if p2p_disable is False:
        return []
    acs = fabric.get("acs") or {}
    if p2p_redirected(acs):
        return [
            _entry(
                "NCCL_P2P_DISABLE",
                1,
                "ACS redirects peer traffic (%s): direct GPU peer copies can hang the first "
                "all-reduce" % ", ".join(acs.get("redirecting") or []),
            )
        ]
    return []


def env_decisions(host, fabric, socket_ifname, **options):
    """The rendered entries plus the reasons for what was left to NCCL's defaults."""
    entries = render_env(host, fabric, socket_ifname, **options)
    names = {e["name"] for e in entries}
    defaults = []
    if "NCCL_NET_GDR_LEVEL" not in names and fabric.get("roce_devices"):
        gpudirect = fabric.get("gpudirect") or {}
        if not gpudirect.get("available"):
            defaults.append(
                "NCCL_NET_GDR_LEVEL left unset: no GPUDirect path (no nvidia-peermem, "
                "no DMA-BUF), NCCL stages through host memory"
            )
        else:
            defaults.append(
                "NCCL_NET_GDR_LEVEL left unset: GPU-NIC path %s is within NCCL's "
                "default PXB" % (fabric.get("gpu_nic_path") or "unknown")
            )
    if "NCCL_P2P_DISABLE" not in names:
        acs = fabric.get("acs") or {}
        defaults.append(
            "NCCL_P2P_DISABLE left unset: ACS %s (%s)"
            % (acs.get("state", "unknown"), acs.get("reason", "not reported"))
        )
    return entries, defaults


P2P_CHOICES = {"auto": "auto", "true": True, "false": False, True: True, False: False}


def node_options(ib_dscp=None, gdr_level=None, p2p_disable=None, gid_index=None, rdma_mitigation=None, roce_qos=None):
    """The nccl_env role's settings of one node (nccl_env_*) as render_env's keyword arguments.

    None means the role's default (auto, none, or not set). p2p_disable may be auto, true/false or a bool.
    `roce_qos` is the fleet's lossless class (seatwright_fleet_roce_qos): its DSCP is NCCL's.
    """
    ib_dscp, problem = nccl_dscp(ib_dscp, roce_qos)
    if problem:
        raise NcclError(problem)
    p2p = (
        "auto"
        if p2p_disable is None
        else P2P_CHOICES.get(p2p_disable.lower() if isinstance(p2p_disable, str) else p2p_disable)
    )
    if p2p is None:
        raise NcclError("nccl_env_p2p_disable is %r; expected auto, true or false" % (p2p_disable,))
    return {
        "ib_dscp": ib_dscp,
        "gdr_level": gdr_level or "auto",
        "p2p_disable": p2p,
        "gid_index": gid_index,
        "rdma_mitigation": rdma_mitigation or "none",
    }


def declared_fabric(socket_ifname, rdma_devices):
    """Fabric facts as the inventory declares them, for a node whose facts are not cached yet.

    Each declared RDMA device counts as one active port whose number and link layer are unknown,
    so NCCL_IB_HCA names the device alone and the GID index is left to NCCL (>= 2.21 finds it).
    """
    return {
        "fabric_iface": {"name": socket_ifname},
        "rdma_devices": [
            {"name": name, "ports": [{"port": None, "active": True, "link_layer": None}]} for name in rdma_devices or []
        ],
        "declared_only": True,
    }


def node_env(host, socket_ifname, rdma_devices, fabric=None, options=None):
    """The NCCL/Gloo environment of one node: {'env': {name: value}, 'source': 'facts'|'inventory'}.

    The one decision behind the node's /etc/nccl.conf and env file (roles/nccl_env through
    library/nccl_env_render.py) and every seat rank's launch env (seat/launch.py): from the node's
    cached fabric facts when there are any, else from the inventory's declaration.
    """
    source = "facts" if fabric else "inventory"
    facts = fabric if fabric else declared_fabric(socket_ifname, rdma_devices)
    entries = render_env(host, facts, socket_ifname, declared_devices=rdma_devices, **(options or {}))
    return {"env": {entry["name"]: entry["value"] for entry in entries}, "source": source}


# A multi-node GPU seat's ranks log NCCL's init and network lines: bring-up reads the channel
# transports, the NIC and the GID from them (fabric/transport.py) instead of assuming them.
NCCL_DEBUG_ENV = {"NCCL_DEBUG": "INFO", "NCCL_DEBUG_SUBSYS": "INIT,NET"}


def seat_rank_env(host, socket_ifname, rdma_devices, fabric=None, options=None, device="cuda"):
    """A multi-node seat rank's NCCL/Gloo env: its node's (node_env) plus, on GPUs, NCCL's init and net logging."""
    env = dict(node_env(host, socket_ifname, rdma_devices, fabric, options)["env"])
    if device == "cuda":
        env.update(NCCL_DEBUG_ENV)
    return env


def render_file(entries, banner, names=None):
    """KEY=VALUE lines with a banner; `names` limits which entries are written."""
    lines = ["# %s" % line for line in banner.splitlines()]
    for entry in entries:
        if names is None or entry["name"] in names:
            lines.append("%s=%s" % (entry["name"], entry["value"]))
    return "\n".join(lines) + "\n"


def nccl_conf_names(entries):
    """Entries NCCL itself reads from /etc/nccl.conf (Gloo's are not NCCL's)."""
    return [e["name"] for e in entries if e["name"].startswith("NCCL_")]


NODE_FILES_BANNER = "Written by seatwright (roles/nccl_env) from this node's fabric facts; edits are overwritten."


def wsl2_entries(host, socket_ifname):
    """A WSL2 node's NCCL/Gloo environment: its socket interface and the WSL2 contract (node/kind.py
    WSL2_NCCL), each entry's reason ending with its sources. No RDMA, GPUDirect or ACS decision applies."""
    if not socket_ifname:
        raise NcclError(
            "host %s: the fabric interface is not set; declare seatwright_node_fabric_iface (eth0 in WSL 2)" % host
        )
    entries = [
        _entry("NCCL_SOCKET_IFNAME", "=" + socket_ifname, "bootstrap on the node's interface ('=' matches it exactly)"),
        _entry("GLOO_SOCKET_IFNAME", socket_ifname, "torch.distributed's Gloo groups on the same interface as NCCL"),
    ]
    for item in wsl2_nccl_entries():
        reason = "%s (sources: %s)" % (item["reason"], "; ".join(item["sources"]))
        entries.append(_entry(item["name"], item["value"], reason))
    return entries


def node_env_files(
    host,
    fabric,
    socket_ifname,
    rdma_devices=(),
    ib_dscp=None,
    gdr_level="auto",
    p2p_disable="auto",
    gid_index=None,
    rdma_mitigation="none",
    node_kind="linux",
    roce_qos=None,
):
    """What roles/nccl_env writes on a node: each entry with its reason, the defaults left alone,
    /etc/nccl.conf (NCCL's own names) and the env file (all of them). NcclError names what to fix.
    A WSL2 node (`node_kind`) gets the WSL2 contract instead of decisions from fabric facts."""
    if node_kind not in KINDS:
        raise NcclError("host %s: node kind %r is not one of %s" % (host, node_kind, ", ".join(KINDS)))
    if node_kind == "wsl2":
        entries = wsl2_entries(host, socket_ifname)
        defaults = ["WSL2 node: no RDMA, GPUDirect or ACS setting applies (plugins/module_utils/node/kind.py)"]
    else:
        options = node_options(ib_dscp, gdr_level, p2p_disable, gid_index, rdma_mitigation, roce_qos)
        entries, defaults = env_decisions(host, fabric, socket_ifname, declared_devices=list(rdma_devices), **options)
    return {
        "env": entries,
        "variables": {entry["name"]: entry["value"] for entry in entries},
        "defaults": defaults,
        "nccl_conf": render_file(entries, NODE_FILES_BANNER, nccl_conf_names(entries)),
        "env_file": render_file(entries, NODE_FILES_BANNER),
    }


# ---------------------------------------------------------------- all-reduce sweeps

_TORCH_ROW = re.compile(r"size_bytes=(\d+)\s+time_us=([0-9.]+)\s+algbw_GBps=([0-9.]+)\s+busbw_GBps=([0-9.]+)")
_CHANNEL = re.compile(
    r"(?:Channel|Ring) (\d+)(?:/(\d+))? : (\d+)(?:\[([0-9a-fA-Fx]+)\])? -> (\d+)(?:\[([0-9a-fA-Fx]+)\])?"
    r"(?: \[(send|receive)\])? via (\S+)"
)
_NCCL_VERSION = re.compile(r"NCCL version (\S+)")
# NCCL's choice of network plugin and devices: `NET/IB : Using [0]mlx5_0:1/RoCE [RO]; OOB eth0:...`.
# `Using [RO]; OOB ...` with no numbered device is IB finding none: not a NIC in use.
_NET_USING = re.compile(r"NET/(IB|Socket) : Using ((?:\[\d+\]\S+ ?)+)")
_GID_INDEX = re.compile(r"NCCL_IB_GID_INDEX set by environment to (\d+)")
# vLLM's torch.distributed init line: `world_size=2 rank=0 ... backend=gloo`.
_DIST_BACKEND = re.compile(r"\bworld_size=\d+\b.*?\bbackend=([A-Za-z_]+)")
_TEST_ROW_PREFIX = re.compile(r"^(?:\[\d+,\d+\]<stdout>:)?\s*")


def bus_bandwidth(algbw, nranks):
    """All-reduce bus bandwidth: algbw x 2(n-1)/n, NCCL's figure comparable to the link speed."""
    if nranks < 1:
        raise NcclError("nranks must be at least 1, got %r" % nranks)
    return algbw * 2.0 * (nranks - 1) / nranks


def parse_torch_sweep(text):
    """Rows printed by seatwright's torch.distributed sweep (`size_bytes=... busbw_GBps=...`)."""
    rows = []
    for match in _TORCH_ROW.finditer(text or ""):
        rows.append(
            {
                "size_bytes": int(match.group(1)),
                "time_us": float(match.group(2)),
                "algbw_gbps": float(match.group(3)),
                "busbw_gbps": float(match.group(4)),
            }
        )
    return rows


def parse_all_reduce_perf(text):
    """Rows of nccl-tests' all_reduce_perf table (out-of-place and in-place per size).

    Accepts mpirun's `[1,0]<stdout>:` prefixes. busbw of a row is the better of the two columns.
    """
    rows = []
    for raw in (text or "").splitlines():
        line = _TEST_ROW_PREFIX.sub("", raw, count=1)
        if line.startswith("#"):
            continue
        fields = line.split()
        if len(fields) < 9 or not fields[0].isdigit() or not fields[1].isdigit():
            continue
        try:
            out_of_place = [float(fields[5]), float(fields[6]), float(fields[7])]
        except ValueError:
            continue
        row = {
            "size_bytes": int(fields[0]),
            "type": fields[2],
            "redop": fields[3],
            "time_us": out_of_place[0],
            "algbw_gbps": out_of_place[1],
            "busbw_gbps": out_of_place[2],
            "wrong": _wrong(fields[8]),
        }
        if len(fields) >= 13:
            try:
                in_place = [float(fields[9]), float(fields[10]), float(fields[11])]
            except ValueError:
                in_place = None
            if in_place:
                row["in_place_busbw_gbps"] = in_place[2]
                row["busbw_gbps"] = max(row["busbw_gbps"], in_place[2])
                row["wrong"] = (row["wrong"] or 0) + (_wrong(fields[12]) or 0)
        rows.append(row)
    return rows


def _wrong(field):
    try:
        return int(float(field))
    except ValueError:
        return None


def parse_all_reduce_perf_json(text):
    """Rows from the file nccl-tests writes with `-J` (src/util.cu's writer)."""
    try:
        data = json.loads(text)
    except ValueError:
        raise NcclError("all_reduce_perf -J output is not JSON: %r" % (text or "")[:200])
    if not isinstance(data, dict) or not isinstance(data.get("results"), list):
        raise NcclError("all_reduce_perf JSON has no results list")
    rows = []
    for result in data["results"]:
        out_of_place = result.get("out_of_place") or {}
        in_place = result.get("in_place") or {}
        best = max(_number(out_of_place.get("bus_bw")), _number(in_place.get("bus_bw")))
        rows.append(
            {
                "size_bytes": int(result["size"]),
                "type": result.get("type"),
                "redop": result.get("redop"),
                "time_us": _number(out_of_place.get("time", in_place.get("time"))),
                "algbw_gbps": _number(out_of_place.get("alg_bw", in_place.get("alg_bw"))),
                "busbw_gbps": best,
                "wrong": int(_number(out_of_place.get("nwrong")) + _number(in_place.get("nwrong"))),
            }
        )
    return rows


def _number(value):
    try:
        number = float(value)
    except (TypeError, ValueError):
        return 0.0
    return 0.0 if number != number else number


def parse_channels(text):
    """Every NCCL channel connection line: which ranks, which transport, GPUDirect or not."""
    channels = []
    for line in (text or "").splitlines():
        match = _CHANNEL.search(line)
        if not match:
            continue
        via = match.group(8)
        channels.append(
            {
                "channel": int(match.group(1)),
                "src_rank": int(match.group(3)),
                "dst_rank": int(match.group(5)),
                "direction": match.group(7),
                "via": via,
                "transport": transport_class(via),
                "gdrdma": "/GDRDMA" in via,
            }
        )
    return channels


def transport_class(via):
    """'P2P/CUMEM/read' -> 'P2P'; 'NET/IB/0/GDRDMA' -> 'NET/IB'; 'SHM/direct/direct' -> 'SHM'."""
    parts = via.split("/")
    if parts[0] == "NET" and len(parts) > 1:
        return "NET/%s" % parts[1]
    return parts[0]


def summarise_transports(channels):
    """Counts per transport, the transports seen, and whether any channel proved GPUDirect RDMA."""
    counts = {}
    for channel in channels:
        counts[channel["via"]] = counts.get(channel["via"], 0) + 1
    return {
        "channels": len(channels),
        "counts": counts,
        "transports": sorted({c["transport"] for c in channels}),
        "gdrdma": any(c["gdrdma"] for c in channels),
    }


def distributed_backend(text):
    """The torch.distributed backend a rank's log names (vLLM's `world_size=... backend=gloo`), else None."""
    match = _DIST_BACKEND.search(text or "")
    return match.group(1).lower() if match else None


def net_devices(text):
    """(the NICs NCCL's network plugins said they use, the GID index set by the env or None)."""
    nics = []
    for line in (text or "").splitlines():
        match = _NET_USING.search(line)
        if match:
            used = "%s %s" % (match.group(1), match.group(2).strip())
            if used not in nics:
                nics.append(used)
    gid = _GID_INDEX.search(text or "")
    return nics, int(gid.group(1)) if gid else None


def nccl_version(text):
    match = _NCCL_VERSION.search(text or "")
    return match.group(1) if match else None


def judge_sweep(rows, threshold_gbps=None, judge_min_bytes=64 * MIB):
    """Peak busbw overall and over large sizes only (small sizes measure latency, not bandwidth)."""
    if not rows:
        raise NcclError("the sweep produced no result rows; see the tool output for the error")
    peak = max(rows, key=lambda r: r["busbw_gbps"])
    large = [r for r in rows if r["size_bytes"] >= judge_min_bytes]
    judged = max(large, key=lambda r: r["busbw_gbps"]) if large else peak
    wrong = sum(r.get("wrong") or 0 for r in rows)
    result = {
        "max_busbw_gbps": peak["busbw_gbps"],
        "max_busbw_at_bytes": peak["size_bytes"],
        "judged_busbw_gbps": judged["busbw_gbps"],
        "judged_over_bytes": judge_min_bytes if large else peak["size_bytes"],
        "wrong_elements": wrong,
        "threshold_gbps": threshold_gbps,
        "passed": wrong == 0 and (threshold_gbps is None or judged["busbw_gbps"] >= threshold_gbps),
    }
    return result


def verdict_message(label, result, transports):
    text = "%s: all-reduce busbw %.1f GB/s at sizes >= %d MiB (peak %.1f GB/s at %d MiB), transports %s%s" % (
        label,
        result["judged_busbw_gbps"],
        result["judged_over_bytes"] // MIB,
        result["max_busbw_gbps"],
        result["max_busbw_at_bytes"] // MIB,
        ", ".join(transports["transports"]) or "not logged",
        ", GPUDirect RDMA on %d channel(s)" % sum(n for via, n in transports["counts"].items() if "/GDRDMA" in via)
        if transports["gdrdma"]
        else ", no GPUDirect RDMA channel",
    )
    if result["wrong_elements"]:
        return "%s; %d wrong elements: the collective returned wrong sums" % (text, result["wrong_elements"])
    if result["threshold_gbps"] is not None and not result["passed"]:
        return "%s; below the %.1f GB/s threshold" % (text, result["threshold_gbps"])
    return text


def engine_transports(log_text, multi_node, roce):
    """What a serving engine's NCCL_DEBUG=INFO log says about its channels, and whether to flag it.

    A multi-node seat on RoCE whose inter-node (NET) channels do not all show GDRDMA is flagged:
    the collectives then stage through host memory (the field's good runs logged GDRDMA on every
    channel). The channel lines are kept as they were, for the evidence.
    """
    lines = [line.rstrip() for line in (log_text or "").splitlines() if _CHANNEL.search(line)]
    channels = parse_channels("\n".join(lines))
    summary = summarise_transports(channels)
    net = [c for c in channels if c["transport"].startswith("NET")]
    flag = None
    if multi_node and roce:
        if not channels:
            flag = (
                "no NCCL channel lines in the engine log; set NCCL_DEBUG=INFO to see whether the "
                "collectives use GPUDirect RDMA"
            )
        elif not net:
            flag = "no inter-node (NET) channel in the engine log, though the seat spans nodes over RoCE"
        elif not all(c["gdrdma"] for c in net):
            plain = sorted({c["via"] for c in net if not c["gdrdma"]})
            flag = (
                "%d of %d inter-node channels run without GPUDirect RDMA (%s): collectives stage "
                "through host memory" % (sum(1 for c in net if not c["gdrdma"]), len(net), ", ".join(plain))
            )
    nics, gid_index = net_devices(log_text)
    return dict(
        summary,
        version=nccl_version(log_text),
        nics=nics,
        gid_index=gid_index,
        net_channels=len(net),
        net_gdrdma=bool(net) and all(c["gdrdma"] for c in net),
        flag=flag,
        lines=lines,
    )
