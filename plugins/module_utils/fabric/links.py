"""Fabric decisions: RDMA facts from a sysfs snapshot, GPU-NIC paths, ACS, and bandwidth probes.

Everything here is pure: callers (library/fabric_facts.py, library/fabric_bandwidth.py) read
sysfs or run the tools and hand the text over; these functions only parse and decide.
"""

import json
import re

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import FabricError
from ansible_collections.seatwright.fleet.plugins.module_utils.node.platform import acs_of_bridges

# PCI class codes (first two bytes of the 24-bit class) of display controllers.
_GPU_CLASSES = ("0x0300", "0x0302")
NVIDIA_VENDOR = "0x10de"

# NCCL's names for how far apart a GPU and a NIC sit, nearest first.
PATH_ORDER = ("PIX", "PXB", "PHB", "SYS")

_IPV4_MAPPED_PREFIX = "0000:0000:0000:0000:0000:ffff:"
_RATE = re.compile(r"^\s*([0-9.]+)\s*Gb/sec")
_OPEN_MODULES = re.compile(r"Open Kernel Module", re.IGNORECASE)
_KERNEL_VERSION = re.compile(r"^(\d+)\.(\d+)")


def _strip(value):
    return value.strip() if isinstance(value, str) else value


def _state_word(value):
    """'4: ACTIVE' -> 'ACTIVE' (sysfs prefixes the numeric state)."""
    value = _strip(value) or ""
    return value.split(":", 1)[1].strip() if ":" in value else value


def parse_rate_gbps(rate_text):
    """'200 Gb/sec (4X HDR)' -> 200.0; None when sysfs gave nothing usable."""
    match = _RATE.match(rate_text or "")
    return float(match.group(1)) if match else None


def gid_to_ipv4(gid):
    """The IPv4 address inside an IPv4-mapped GID, else None."""
    gid = (_strip(gid) or "").lower()
    if not gid.startswith(_IPV4_MAPPED_PREFIX):
        return None
    high, low = gid[len(_IPV4_MAPPED_PREFIX) :].split(":")
    packed = int(high, 16) << 16 | int(low, 16)
    return ".".join(str((packed >> shift) & 0xFF) for shift in (24, 16, 8, 0))


def roce_v2_gid(port, netdev=None, address=None):
    """(index, ipv4, netdev) of the RoCE v2 IPv4 GID to use on a port, or (None, None, None).

    Prefers the entry on the fabric netdev and address when they are given, else the lowest index.
    """
    candidates = []
    for index, gid_type in (port.get("gid_types") or {}).items():
        if _strip(gid_type) != "RoCE v2":
            continue
        ipv4 = gid_to_ipv4((port.get("gids") or {}).get(index))
        if ipv4 is None:
            continue
        ndev = _strip((port.get("gid_ndevs") or {}).get(index))
        score = (0 if address and ipv4 == address else 1, 0 if netdev and ndev == netdev else 1)
        candidates.append((score, int(index), ipv4, ndev))
    if not candidates:
        return None, None, None
    _, index, ipv4, ndev = min(candidates)
    return index, ipv4, ndev


def pci_chain(device_path):
    """'/sys/devices/pci0000:00/0000:00:01.0/0000:01:00.0' -> ['pci0000:00', '0000:00:01.0', ...]."""
    parts = [part for part in (device_path or "").split("/") if part]
    for index, part in enumerate(parts):
        if part.startswith("pci") and ":" in part:
            return [part] + [p for p in parts[index + 1 :] if re.match(r"^[0-9a-f]{4}:", p)]
    return []


def pci_path_type(chain_a, numa_a, chain_b, numa_b):
    """NCCL's distance word between two PCI devices given their chains from the root bus.

    PIX: both behind the same bridge port; PXB: through several bridges but not the host bridge;
    PHB: through the CPU's host bridge (or two root complexes of one NUMA node); SYS: across
    NUMA nodes.
    """
    if not chain_a or not chain_b:
        return None
    if chain_a[0] != chain_b[0]:
        return "PHB" if numa_a == numa_b or None in (numa_a, numa_b) else "SYS"
    common = 0
    for left, right in zip(chain_a, chain_b):
        if left != right:
            break
        common += 1
    if common <= 1:
        return "PHB"
    if chain_a[:-1] == chain_b[:-1]:
        return "PIX"
    return "PXB"


def farthest_path(paths):
    """The farthest of several path words, or None."""
    known = [p for p in paths if p in PATH_ORDER]
    return max(known, key=PATH_ORDER.index) if known else None


def kernel_at_least(release, major, minor):
    match = _KERNEL_VERSION.match(release or "")
    return bool(match) and (int(match.group(1)), int(match.group(2))) >= (major, minor)


def _device_facts(name, raw, netdev, address):
    ports = []
    for port_number in sorted(raw.get("ports") or {}, key=int):
        port = raw["ports"][port_number]
        index, ipv4, gid_ndev = roce_v2_gid(port, netdev, address)
        state = _state_word(port.get("state"))
        ports.append(
            {
                "port": int(port_number),
                "state": state,
                "phys_state": _state_word(port.get("phys_state")),
                "active": state == "ACTIVE",
                "rate": _strip(port.get("rate")),
                "rate_gbps": parse_rate_gbps(port.get("rate")),
                "link_layer": _strip(port.get("link_layer")),
                "roce_v2_gid_index": index,
                "roce_v2_ipv4": ipv4,
                "netdev": gid_ndev or (raw.get("netdevs") or [None])[0],
            }
        )
    chain = pci_chain(raw.get("device_path"))
    return {
        "name": name,
        "fw_ver": _strip(raw.get("fw_ver")),
        "board_id": _strip(raw.get("board_id")),
        "hca_type": _strip(raw.get("hca_type")),
        "pci_address": chain[-1] if len(chain) > 1 else None,
        "numa_node": raw.get("numa_node"),
        "netdevs": sorted(raw.get("netdevs") or []),
        "ports": ports,
    }


def _summary_line(device):
    parts = []
    for port in device["ports"]:
        text = "%s port %d %s" % (device["name"], port["port"], port["state"] or "unknown")
        if port["rate_gbps"]:
            text += " %g Gb/s" % port["rate_gbps"]
        if port["link_layer"]:
            text += " %s" % port["link_layer"]
        if port["roce_v2_gid_index"] is not None:
            text += " RoCE v2 GID %d" % port["roce_v2_gid_index"]
        if port["netdev"]:
            text += " on %s" % port["netdev"]
        parts.append(text)
    return "; ".join(parts) or "%s (no ports)" % device["name"]


def _acs_facts(snapshot, chains):
    """ACS of the bridges between the root bus and each GPU or RDMA device (node/platform.py)."""
    bridges = set()
    for chain in chains:
        bridges.update(chain[1:-1])
    pci = snapshot.get("pci") or {}
    return acs_of_bridges(dict((bdf, (pci.get(bdf) or {}).get("config")) for bdf in bridges), bridges)


def fabric_facts(snapshot, fabric_iface=None, fabric_ip=None):
    """Fabric facts from a sysfs snapshot (see library/fabric_facts.py for its shape)."""
    devices = [
        _device_facts(name, raw, fabric_iface, fabric_ip)
        for name, raw in sorted((snapshot.get("infiniband") or {}).items())
    ]
    pci = snapshot.get("pci") or {}
    gpus = sorted(
        bdf
        for bdf, info in pci.items()
        if info.get("vendor") == NVIDIA_VENDOR and str(info.get("class", "")).startswith(_GPU_CLASSES)
    )
    gpu_nic_paths = []
    chains = [pci_chain(pci[bdf].get("path")) for bdf in gpus]
    for device in devices:
        nic_chain = pci_chain((snapshot["infiniband"][device["name"]]).get("device_path"))
        chains.append(nic_chain)
        for bdf in gpus:
            gpu_nic_paths.append(
                {
                    "gpu": bdf,
                    "nic": device["name"],
                    "path": pci_path_type(
                        pci_chain(pci[bdf].get("path")), pci[bdf].get("numa_node"), nic_chain, device["numa_node"]
                    ),
                }
            )

    modules = snapshot.get("modules") or {}
    nvidia_version_text = snapshot.get("nvidia_version_text") or ""
    open_modules = bool(_OPEN_MODULES.search(nvidia_version_text))
    kernel = snapshot.get("kernel_release")
    dmabuf = open_modules and kernel_at_least(kernel, 5, 12)
    memory_peers = sorted(snapshot.get("memory_peers") or [])
    peermem = bool(modules.get("nvidia_peermem")) or bool(set(memory_peers) & {"nv_mem", "nv_mem_nc"})
    if peermem:
        via = "peermem"
    elif dmabuf:
        via = "dmabuf"
    else:
        via = None

    iface = (snapshot.get("net") or {}).get(fabric_iface) if fabric_iface else None
    active_ethernet = [
        device
        for device in devices
        if any(port["active"] and port["link_layer"] == "Ethernet" for port in device["ports"])
    ]
    return {
        "has_rdma": bool(devices),
        "rdma_devices": devices,
        "rdma_summary": "; ".join(_summary_line(d) for d in devices) or "no RDMA devices",
        "roce_devices": [device["name"] for device in active_ethernet],
        "fabric_iface": {
            "name": fabric_iface,
            "present": iface is not None,
            "mtu": _int_or_none((iface or {}).get("mtu")),
            "speed_mbps": _positive_or_none((iface or {}).get("speed")),
        },
        "gpudirect": {
            "available": via is not None,
            "via": via,
            "peermem_loaded": bool(modules.get("nvidia_peermem")),
            "memory_peers": memory_peers,
            "open_kernel_modules": open_modules,
            "dmabuf_capable": dmabuf,
            "proven": False,
        },
        "acs": _acs_facts(snapshot, [c for c in chains if c]),
        "iommu": {
            "groups": int(snapshot.get("iommu_groups") or 0),
            "enabled": int(snapshot.get("iommu_groups") or 0) > 0,
        },
        "gpus_on_pci": gpus,
        "gpu_nic_paths": gpu_nic_paths,
        "gpu_nic_path": farthest_path(p["path"] for p in gpu_nic_paths),
        "nvidia_driver_version": _strip(modules.get("nvidia")) or None,
        "kernel_release": kernel,
    }


def _int_or_none(value):
    try:
        return int(str(value).strip())
    except (TypeError, ValueError):
        return None


def _positive_or_none(value):
    number = _int_or_none(value)
    return number if number and number > 0 else None


# ---------------------------------------------------------------- bandwidth probes


def probe_plan(local_name, local, peer_name, peer, method="auto", line_rate_gbps=None, use_cuda=None):
    """What a pairwise probe will run and what it will be judged against.

    `local` and `peer` are both hosts' fabric facts. RDMA is used when both ends have an active
    RoCE/IB port, else TCP. The line rate is the slower end's port rate (RDMA) or interface speed
    (TCP), else the declared `line_rate_gbps`.
    """
    local_port, peer_port = _first_active_port(local), _first_active_port(peer)
    if method == "auto":
        method = "rdma" if local_port and peer_port else "tcp"
    if method == "rdma" and not (local_port and peer_port):
        missing = local_name if not local_port else peer_name
        raise FabricError(
            "pair %s<->%s: method rdma was asked for, but %s has no active RDMA port; use method "
            "tcp or bring the port up (see its rdma_summary fact)" % (local_name, peer_name, missing)
        )
    if use_cuda is not None and method != "rdma":
        raise FabricError(
            "pair %s<->%s: use_cuda needs an RDMA path (ib_write_bw --use_cuda); this pair has "
            "none, so GPU-memory bandwidth cannot be probed" % (local_name, peer_name)
        )

    if method == "rdma":
        rates = [local_port[1].get("rate_gbps"), peer_port[1].get("rate_gbps")]
        source = "RDMA port rate (sysfs)"
    else:
        speeds = [(f.get("fabric_iface") or {}).get("speed_mbps") for f in (local, peer)]
        rates = [s / 1000.0 if s else None for s in speeds]
        source = "interface speed (sysfs)"
    if all(rates):
        line_rate = min(rates)
    elif line_rate_gbps:
        line_rate, source = float(line_rate_gbps), "declared line_rate_gbps"
    else:
        raise FabricError(
            "pair %s<->%s: no line rate is known (sysfs gave none for the %s path); declare "
            "line_rate_gbps (e.g. 200 for 200 GbE)" % (local_name, peer_name, method)
        )

    plan = {"method": method, "line_rate_gbps": line_rate, "line_rate_source": source, "use_cuda": use_cuda}
    if method == "rdma":
        plan.update(
            {
                "device": local_port[0]["name"],
                "ib_port": local_port[1]["port"],
                "gid_index": local_port[1]["roce_v2_gid_index"],
                "peer_device": peer_port[0]["name"],
                "peer_ib_port": peer_port[1]["port"],
                "peer_gid_index": peer_port[1]["roce_v2_gid_index"],
            }
        )
    return plan


def _first_active_port(facts):
    for device in (facts or {}).get("rdma_devices") or []:
        for port in device["ports"]:
            if port["active"]:
                return device, port
    return None


def bandwidth_inputs(local_name, local, peer_name, peer, plan, duration_s):
    """What a measurement depends on, ordered so that both ends compute the same fingerprint."""
    ends = {}
    for name, facts in ((local_name, local), (peer_name, peer)):
        ends[name] = {
            "devices": [
                [d["name"], d.get("fw_ver"), [p.get("rate_gbps") for p in d["ports"]]]
                for d in (facts or {}).get("rdma_devices") or []
            ],
            "mtu": ((facts or {}).get("fabric_iface") or {}).get("mtu"),
            "driver": (facts or {}).get("nvidia_driver_version"),
        }
    return {
        "pair": sorted([local_name, peer_name]),
        "ends": ends,
        "method": plan["method"],
        "line_rate_gbps": plan["line_rate_gbps"],
        "use_cuda": plan.get("use_cuda"),
        "duration_s": duration_s,
    }


def pair_label(local_name, peer_name):
    return "%s<->%s" % tuple(sorted([local_name, peer_name]))


def judge(record, threshold):
    """(passed, message) for a measurement against `threshold` (a fraction of line rate)."""
    fraction = record["fraction"]
    text = "%s: %.2f Gb/s over %s = %.0f %% of the %.1f Gb/s line rate (threshold %.0f %%)" % (
        record["pair"],
        record["rate_gbps"],
        record["method"],
        fraction * 100,
        record["line_rate_gbps"],
        threshold * 100,
    )
    if fraction >= threshold:
        return True, text
    hint = (
        "check MTU, PFC/ECN and the RoCE GID on both ends"
        if record["method"] == "rdma"
        else "check the interface speed, MTU and CPU load on both ends"
    )
    return False, "fabric below threshold: %s; %s" % (text, hint)


def parse_iperf3_json(text):
    """Received Gb/s from `iperf3 -J` client output."""
    try:
        data = json.loads(text)
    except ValueError:
        raise FabricError("iperf3 did not print JSON (was -J passed?): %r" % (text or "")[:200])
    if data.get("error"):
        raise FabricError("iperf3 failed: %s" % data["error"])
    end = data.get("end") or {}
    for key in ("sum_received", "sum"):
        total = end.get(key)
        if isinstance(total, dict) and total.get("bits_per_second"):
            return float(total["bits_per_second"]) / 1e9
    raise FabricError("iperf3 JSON has no end.sum_received.bits_per_second")


# ib_write_bw prints bandwidth in the unit of its header: Gb/sec with --report_gbits, else
# MB/sec (older) or MiB/sec (newer); both of the latter are 2^20 bytes.
_IB_UNIT_TO_GBPS = {"Gb/sec": 1.0, "MB/sec": 8 * 2**20 / 1e9, "MiB/sec": 8 * 2**20 / 1e9}
_IB_HEADER = re.compile(r"#bytes\s+#iterations\s+BW peak\[([^\]]+)\]\s+BW average\[([^\]]+)\]")


def parse_ib_write_bw(text):
    """{'msg_size', 'iterations', 'peak_gbps', 'average_gbps', 'unit'} from ib_write_bw's table.

    The last result row after the header counts; lines that are not rows (warnings such as
    'Conflicting CPU frequency values') are skipped.
    """
    unit, result = None, None
    for line in (text or "").splitlines():
        header = _IB_HEADER.search(line)
        if header:
            unit = header.group(2)
            continue
        fields = line.split()
        if unit and len(fields) >= 4 and fields[0].isdigit() and fields[1].isdigit():
            try:
                peak, average = float(fields[2]), float(fields[3])
            except ValueError:
                continue
            result = {"msg_size": int(fields[0]), "iterations": int(fields[1]), "peak": peak, "average": average}
    if unit is None or result is None:
        raise FabricError("ib_write_bw output has no result table (did the run connect?)")
    if unit not in _IB_UNIT_TO_GBPS:
        raise FabricError("ib_write_bw reported an unknown unit %r" % unit)
    factor = _IB_UNIT_TO_GBPS[unit]
    return {
        "msg_size": result["msg_size"],
        "iterations": result["iterations"],
        "peak_gbps": result["peak"] * factor,
        "average_gbps": result["average"] * factor,
        "unit": unit,
    }


def parse_ib_write_bw_json(text, unit="Gb/sec"):
    """The same fields from `--out_json` output; the file carries no unit, so the caller says it."""
    try:
        data = json.loads(text)
    except ValueError:
        raise FabricError("ib_write_bw JSON output is not JSON: %r" % (text or "")[:200])
    results = data.get("results") if isinstance(data, dict) else None
    if not isinstance(results, dict) or "BW_average" not in results:
        raise FabricError("ib_write_bw JSON output has no results.BW_average")
    if unit not in _IB_UNIT_TO_GBPS:
        raise FabricError("unknown ib_write_bw unit %r" % unit)
    factor = _IB_UNIT_TO_GBPS[unit]
    return {
        "msg_size": int(results.get("MsgSize", 0)),
        "iterations": int(results.get("n_iterations", 0)),
        "peak_gbps": float(results.get("BW_peak", 0.0)) * factor,
        "average_gbps": float(results["BW_average"]) * factor,
        "unit": unit,
        "device": (data.get("test_info") or {}).get("Device"),
        "link_type": (data.get("test_info") or {}).get("Link_type"),
    }


def ib_write_bw_argv(plan, duration_s, qps, tcp_port, server_address=None, json_file=None, binary="ib_write_bw"):
    """argv of one side of an ib_write_bw run (server when server_address is None)."""
    is_client = server_address is not None
    device = plan["device"] if is_client else plan["peer_device"]
    ib_port = plan["ib_port"] if is_client else plan["peer_ib_port"]
    gid = plan["gid_index"] if is_client else plan["peer_gid_index"]
    argv = [
        binary,
        "-d",
        device,
        "-i",
        str(ib_port),
        "-D",
        str(duration_s),
        "-q",
        str(qps),
        "-p",
        str(tcp_port),
        "-F",
        "--report_gbits",
    ]
    if gid is not None:
        argv += ["-x", str(gid)]
    if plan.get("use_cuda") is not None:
        argv.append("--use_cuda=%d" % int(plan["use_cuda"]))
    if json_file:
        argv += ["--out_json", "--out_json_file=%s" % json_file]
    if is_client:
        argv.append(server_address)
    return argv


def iperf3_argv(duration_s, tcp_port, server_address=None, streams=1, binary="iperf3"):
    """argv of one side of an iperf3 run; the server serves exactly one client."""
    if server_address is None:
        return [binary, "-s", "-1", "-p", str(tcp_port)]
    return [binary, "-c", server_address, "-p", str(tcp_port), "-t", str(duration_s), "-P", str(streams), "-J"]
