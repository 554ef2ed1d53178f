"""GPU facts and power-limit decisions, as pure functions (no subprocess, no file I/O).

Two readers feed the same intermediate "device" dicts: NVML values (gathered by
gpu_probe.read_nvml) and nvidia-smi text (CSV query, `topo -m`, `-q`). From those devices this file
assembles the facts contract of docs/architecture.md#facts (`seatwright_gpus`, `seatwright_gpu_summary`), reads the
IOMMU/ACS state that decides whether peer-to-peer can hang, and plans power-limit changes.
"""

import re

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import GpuInputError
from ansible_collections.seatwright.fleet.plugins.module_utils.node.hardware import is_sm120, profile_for_name, sm_of
from ansible_collections.seatwright.fleet.plugins.module_utils.node.platform import p2p_redirected

MIB = 1024 * 1024

# What gpu_facts asks nvidia-smi for; power.limit is the requested (software) limit.
SMI_QUERY_FIELDS = (
    "index",
    "name",
    "uuid",
    "pci.bus_id",
    "compute_cap",
    "memory.total",
    "driver_version",
    "power.limit",
    "enforced.power.limit",
    "power.min_limit",
    "power.max_limit",
    "power.default_limit",
    "persistence_mode",
)

PCIE_PATHS = ("PIX", "PXB", "PHB", "NODE", "SYS")
# nvmlGpuTopologyLevel_t -> the code `nvidia-smi topo -m` prints for the same path.
NVML_TOPOLOGY_LEVELS = {0: "INTERNAL", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
NOT_AVAILABLE = ("", "N/A", "[N/A]", "[Not Supported]", "[Unknown Error]", "Unknown Error", "Not Supported")
UNIT_SUFFIX = re.compile(r"\s*(W|MiB|MHz|%|C)$")
ANSI_ESCAPE = re.compile(r"\x1b\[[0-9;]*m")
WATT_TOLERANCE = 0.005


# ---------------------------------------------------------------- nvidia-smi text


def parse_value(raw):
    """'700.00 W' -> 700.0, '143771 MiB' -> 143771.0, '[N/A]' -> None; other text is returned stripped."""
    text = (raw or "").strip()
    if text in NOT_AVAILABLE:
        return None
    number = UNIT_SUFFIX.sub("", text)
    try:
        return float(number)
    except ValueError:
        return text


def _header_name(cell):
    return cell.split(" [", 1)[0].strip()


def parse_query_csv(text, fields=SMI_QUERY_FIELDS):
    """Rows of `--query-gpu=<fields> --format=csv[,noheader][,nounits]` as dicts keyed by field name.

    A header line, when present, must name the fields asked for (with or without units).
    """
    lines = [line for line in text.splitlines() if line.strip()]
    if not lines:
        return []
    first = [cell.strip() for cell in lines[0].split(",")]
    if [_header_name(cell) for cell in first] == list(fields):
        lines = lines[1:]
    rows = []
    for number, line in enumerate(lines, start=1):
        cells = [cell.strip() for cell in line.split(",")]
        if len(cells) != len(fields):
            raise ValueError(
                "nvidia-smi CSV row %d has %d values for %d fields: %r" % (number, len(cells), len(fields), line)
            )
        rows.append(dict(zip(fields, cells)))
    return rows


def _as_int(value):
    return int(value) if isinstance(value, float) else None


def _as_watts(value):
    return round(value, 2) if isinstance(value, float) else None


def _enabled(value):
    if value in ("Enabled", "On", "1"):
        return True
    if value in ("Disabled", "Off", "0"):
        return False
    return None


def devices_from_smi_rows(rows):
    """Normalise parsed CSV rows into device dicts (the shape devices_from_nvml returns).

    A field that was not queried reads as None.
    """
    devices = []
    for row in rows:
        text = {key: (row.get(key) or "").strip() for key in SMI_QUERY_FIELDS}
        values = {key: parse_value(raw) for key, raw in text.items()}
        devices.append(
            {
                "index": _as_int(values["index"]),
                "name": text["name"],
                "uuid": text["uuid"],
                "pci_bus_id": text["pci.bus_id"],
                "compute_capability": text["compute_cap"] if text["compute_cap"] not in NOT_AVAILABLE else None,
                "memory_total_mib": _as_int(values["memory.total"]),
                "power_limit_w": _as_watts(values["power.limit"]),
                "power_enforced_w": _as_watts(values["enforced.power.limit"]),
                "power_min_w": _as_watts(values["power.min_limit"]),
                "power_max_w": _as_watts(values["power.max_limit"]),
                "power_default_w": _as_watts(values["power.default_limit"]),
                "persistence_mode": _enabled(text["persistence_mode"]),
            }
        )
    return devices


def driver_version_from_smi_rows(rows):
    versions = sorted({row["driver_version"].strip() for row in rows})
    return versions[0] if len(versions) == 1 else ", ".join(versions) or None


def link_record(first, second, code, pcie_path=None):
    """One GPU pair's connection, in topo -m's vocabulary: 'NV18' or a PCIe path such as 'PXB'."""
    record = {"gpus": [first, second], "link": code, "nvlink_count": 0, "pcie_path": pcie_path, "kind": "unknown"}
    if code.startswith("NV") and code[2:].isdigit():
        record.update(nvlink_count=int(code[2:]), kind="nvlink")
    elif code in PCIE_PATHS:
        record.update(pcie_path=code, kind="pcie")
    return record


def parse_topo_matrix(text):
    """`nvidia-smi topo -m` -> GPU pairs, GPU-to-NIC paths and CPU/NUMA affinity per GPU."""
    lines = [ANSI_ESCAPE.sub("", line) for line in text.splitlines()]
    header = next((line for line in lines if re.search(r"\bGPU0\b", line)), None)
    if header is None:
        raise ValueError("no GPU0 column in nvidia-smi topo -m output")
    columns = [cell.strip() for cell in header.split("\t") if cell.strip()]
    devices = [name for name in columns if re.fullmatch(r"(GPU|NIC)\d+", name)]
    nic_names = {}
    for line in lines:
        match = re.fullmatch(r"\s*(NIC\d+):\s*(\S+)\s*", line)
        if match:
            nic_names[match.group(1)] = match.group(2)
    rows = {}
    for line in lines:
        cells = line.split("\t")
        if cells and re.fullmatch(r"(GPU|NIC)\d+", cells[0].strip()) and len(cells) > len(devices):
            rows[cells[0].strip()] = [cell.strip() for cell in cells[1:]]
    gpus = [name for name in devices if name.startswith("GPU")]
    links, nic_paths, affinity = [], [], []
    for row_name in gpus:
        cells = rows.get(row_name)
        if cells is None:
            raise ValueError("nvidia-smi topo -m has a %s column but no %s row" % (row_name, row_name))
        index = int(row_name[3:])
        for column, code in zip(devices, cells):
            if column.startswith("GPU") and int(column[3:]) > index:
                links.append(link_record(index, int(column[3:]), code))
            elif column.startswith("NIC"):
                nic_paths.append({"gpu": index, "nic": nic_names.get(column, column), "link": code})
        extra = cells[len(devices) :]
        affinity.append(
            {
                "gpu": index,
                "cpu_affinity": extra[0] if extra else None,
                "numa_affinity": extra[1] if len(extra) > 1 else None,
            }
        )
    return {"links": links, "nic_paths": nic_paths, "affinity": affinity}


def parse_query_report(text):
    """`nvidia-smi -q [-d ...]` -> top-level values and, per GPU bus id, 'Section/Key' -> value."""
    report = {"driver_version": None, "cuda_version": None, "gpus": {}}
    current = None
    sections = []
    for line in text.splitlines():
        if not line.strip() or line.startswith("="):
            continue
        match = re.fullmatch(r"GPU ([0-9A-Fa-f]{4,8}:[0-9A-Fa-f]{2}:[0-9A-Fa-f]{2}\.[0-7])\s*", line)
        if match:
            current = report["gpus"].setdefault(match.group(1), {})
            sections = []
            continue
        depth = (len(line) - len(line.lstrip(" "))) // 4
        key, colon, value = line.strip().partition(":")
        key = key.strip()
        if current is None:
            if key == "Driver Version":
                report["driver_version"] = value.strip()
            elif key == "CUDA Version":
                report["cuda_version"] = value.strip()
            continue
        sections = sections[: max(depth - 1, 0)]
        if not colon:
            sections.append(key)
            continue
        current["/".join(sections + [key])] = value.strip()
    return report


# ---------------------------------------------------------------- NVML values


def _mw_to_w(value):
    return round(value / 1000.0, 2) if isinstance(value, (int, float)) else None


def cuda_version_from_nvml(value):
    """nvmlSystemGetCudaDriverVersion's 13000 -> '13.0'."""
    if not isinstance(value, int) or value <= 0:
        return None
    return "%d.%d" % (value // 1000, (value % 1000) // 10)


def devices_from_nvml(raw_devices):
    """NVML readings (milliwatts, bytes, capability tuples) -> device dicts in watts and MiB."""
    devices = []
    for raw in raw_devices:
        capability = raw.get("cc")
        constraints = raw.get("constraints") or (None, None)
        memory = raw.get("mem")
        devices.append(
            {
                "index": raw["index"],
                "name": raw["name"],
                "uuid": raw["uuid"],
                "pci_bus_id": raw.get("pci_bus_id"),
                "compute_capability": "%d.%d" % tuple(capability) if capability else None,
                "memory_total_mib": memory // MIB if isinstance(memory, int) else None,
                "power_limit_w": _mw_to_w(raw.get("limit")),
                "power_enforced_w": _mw_to_w(raw.get("enforced")),
                "power_min_w": _mw_to_w(constraints[0]),
                "power_max_w": _mw_to_w(constraints[1]),
                "power_default_w": _mw_to_w(raw.get("default")),
                "persistence_mode": None if raw.get("persistence") is None else bool(raw["persistence"]),
            }
        )
    return devices


NVLINK_REMOTE_IBMNPU = 1
NVML_P2P_STATUS_OK = 0


def _nvlink_ends(device, gpu_buses):
    """(links straight to each peer GPU by bus id, links into an NVSwitch fabric) for one device's ports.

    An active port whose far end is not a GPU of this host (nor a CPU) is counted as fabric: behind an
    NVSwitch the far end is the switch, which a VM may not even show.
    """
    direct, fabric = {}, 0
    for port in device.get("nvlinks") or []:
        if not port.get("active"):
            continue
        remote = (port.get("remote_bus_id") or "").lower()
        if remote in gpu_buses:
            direct[remote] = direct.get(remote, 0) + 1
        elif port.get("remote_type") != NVLINK_REMOTE_IBMNPU:
            fabric += 1
    return direct, fabric


def links_from_nvml(raw_devices, raw_pairs):
    """Each GPU pair's NVLink count (direct, or through a shared NVSwitch fabric) and its PCIe path.

    NVLink wins over the PCIe path in the link code, as in topo -m; the PCIe path is kept beside it.
    When no port answers but NVML reports NVLink peer-to-peer between the pair, the link is NVLink of
    unknown width ('NV').
    """
    buses = {d["index"]: (d.get("pci_bus_id") or "").lower() for d in raw_devices}
    ends = {d["index"]: _nvlink_ends(d, set(buses.values())) for d in raw_devices}
    links = []
    for pair in raw_pairs:
        a, b = pair["a"], pair["b"]
        nvlinks = ends[a][0].get(buses[b], 0) + min(ends[a][1], ends[b][1])
        pcie = NVML_TOPOLOGY_LEVELS.get(pair.get("common_ancestor"))
        if nvlinks:
            code = "NV%d" % nvlinks
        elif pair.get("p2p_nvlink") == NVML_P2P_STATUS_OK:
            code = "NV"
        else:
            code = pcie or "unknown"
        record = link_record(a, b, code, pcie_path=pcie)
        if code == "NV":
            record.update(kind="nvlink", nvlink_count=None)
        links.append(record)
    return links


def reading_from_nvml(raw):
    """read_nvml_raw's answer -> devices, versions and links in the shape the nvidia-smi reader returns."""
    return {
        "driver_version": raw["driver_version"],
        "cuda_version": cuda_version_from_nvml(raw.get("cuda_driver_version")),
        "devices": devices_from_nvml(raw["devices"]),
        "links": links_from_nvml(raw["devices"], raw.get("pairs", [])),
        "source": "nvml",
    }


# ---------------------------------------------------------------- IOMMU and ACS


def p2p_assessment(count, links, iommu, acs):
    """Can the first peer-to-peer transfer hang?

    docs/field.md#iommu-and-acs: RTX PRO 6000 with IOMMU/ACS on, NCCL #1999/#2079.
    """
    if count < 2:
        return {"hang_risk": False, "reason": "fewer than two GPUs: no peer-to-peer traffic"}
    if links and all(link["kind"] == "nvlink" for link in links):
        return {"hang_risk": False, "reason": "every GPU pair talks over NVLink"}
    causes = []
    if iommu["state"] == "enabled" and not iommu["passthrough"]:
        causes.append("IOMMU translation is on")
    if p2p_redirected(acs):
        causes.append("ACS redirects peer-to-peer traffic")
    if causes:
        return {
            "hang_risk": True,
            "reason": "%s on a PCIe GPU pair; NCCL_P2P_DISABLE=1 is the fallback" % " and ".join(causes),
        }
    if "unknown" in (iommu["state"], acs["state"]):
        return {"hang_risk": None, "reason": "IOMMU: %s; ACS: %s" % (iommu["reason"], acs["reason"])}
    return {"hang_risk": False, "reason": "IOMMU %s, ACS %s" % (iommu["state"], acs["state"])}


def sysfs_pci_address(bus_id):
    """nvidia-smi's '00000000:06:00.0' -> sysfs's '0000:00:06.0'."""
    domain, _, rest = (bus_id or "").partition(":")
    return ("%s:%s" % (domain[-4:], rest)).lower() if rest else None


# ---------------------------------------------------------------- facts assembly


def assemble_facts(devices, driver_version, cuda_version, links, source, read_at, iommu, acs, iommu_groups=None):
    """The facts contract: (seatwright_gpus, seatwright_gpu_summary)."""
    iommu_groups = iommu_groups or {}
    gpus = []
    for device in sorted(devices, key=lambda d: d["index"]):
        capability = device["compute_capability"]
        gpu = dict(device)
        gpu["sm"] = sm_of(capability) if capability else None
        gpu["profile"] = profile_for_name(device["name"])
        gpu["iommu_group"] = iommu_groups.get(sysfs_pci_address(device["pci_bus_id"]))
        gpus.append(gpu)
    count = len(gpus)
    summary = {
        "count": count,
        "driver_version": driver_version,
        "cuda_version": cuda_version,
        "is_sm120": bool(gpus) and all(g["compute_capability"] and is_sm120(g["compute_capability"]) for g in gpus),
        "compute_capabilities": sorted({g["compute_capability"] for g in gpus if g["compute_capability"]}),
        "total_vram_mib": sum(g["memory_total_mib"] or 0 for g in gpus),
        "source": source,
        "reason": None,
        "read_at": read_at,
        "links": links,
        "nvlink": any(link["kind"] == "nvlink" for link in links),
        "iommu": iommu,
        "acs": acs,
        "p2p": p2p_assessment(count, links, iommu, acs),
    }
    return gpus, summary


def no_gpu_facts(reason, read_at, iommu, acs):
    """Facts for a host where neither NVML nor nvidia-smi answered."""
    gpus, summary = assemble_facts([], None, None, [], "none", read_at, iommu, acs)
    summary["reason"] = reason
    return gpus, summary


# ---------------------------------------------------------------- power limits


def _watts_text(value):
    return "%g W" % value


def normalise_overrides(host, overrides, indexes):
    """{'0': 250} or {0: 250} -> {0: 250.0}; a key that is not one of this host's GPU indexes is an error."""
    result = {}
    for key, watts in (overrides or {}).items():
        try:
            index = int(key)
        except (TypeError, ValueError):
            raise GpuInputError(
                "host %s: power-limit override key %r is not a GPU index; use one of %s."
                % (host, key, ", ".join(str(i) for i in indexes))
            )
        if index not in indexes:
            raise GpuInputError(
                "host %s: power-limit override for GPU %d, but this node has GPUs %s; remove it or fix the index."
                % (host, index, ", ".join(str(i) for i in indexes) or "none")
            )
        try:
            result[index] = float(watts)
        except (TypeError, ValueError):
            raise GpuInputError(
                "host %s: power-limit override for GPU %d is %r, not a number of watts." % (host, index, watts)
            )
    return result


def plan_power_limits(host, devices, state, limit_w=None, overrides=None, selected=None):
    """What each chosen GPU's requested limit is and should become, validated against the card's own range.

    state 'default' restores each card's default; 'present' applies overrides, then limit_w, and falls back
    to the card's default where neither is given. Comparison is with the requested limit, never the enforced one.
    """
    if not devices:
        raise GpuInputError("host %s: no NVIDIA GPU answered, so no power limit can be set." % host)
    by_index = {d["index"]: d for d in devices}
    indexes = sorted(by_index)
    chosen = indexes if not selected else sorted(set(int(i) for i in selected))
    missing = [i for i in chosen if i not in by_index]
    if missing:
        raise GpuInputError(
            "host %s: GPU %s requested, but this node has GPUs %s; fix the gpus list."
            % (host, ", ".join(str(i) for i in missing), ", ".join(str(i) for i in indexes))
        )
    overrides = normalise_overrides(host, overrides, indexes)
    plan = []
    for index in chosen:
        device = by_index[index]
        low, high, default = device["power_min_w"], device["power_max_w"], device["power_default_w"]
        if None in (low, high, default, device["power_limit_w"]):
            raise GpuInputError(
                "host %s: GPU %d (%s) does not report its power limits (min/max/default/current); "
                "power management is not supported on it." % (host, index, device["name"])
            )
        if state == "default":
            target = default
        elif index in overrides:
            target = overrides[index]
        elif limit_w is not None:
            target = float(limit_w)
        else:
            target = default
        if not low - WATT_TOLERANCE <= target <= high + WATT_TOLERANCE:
            raise GpuInputError(
                "host %s: GPU %d (%s) cannot take a power limit of %s: this card accepts %s to %s "
                "(default %s). Choose a value in that range (limit_w/overrides; role variables "
                "gpu_power_limit_w/gpu_power_limit_overrides), or state=default."
                % (
                    host,
                    index,
                    device["name"],
                    _watts_text(target),
                    _watts_text(low),
                    _watts_text(high),
                    _watts_text(default),
                )
            )
        before = device["power_limit_w"]
        plan.append(
            {
                "index": index,
                "name": device["name"],
                "before_w": before,
                "after_w": round(target, 2),
                "enforced_w": device["power_enforced_w"],
                "changed": abs(before - target) > WATT_TOLERANCE,
            }
        )
    return plan


def plan_diff(plan):
    """Ansible --diff payload: requested limit per GPU, before and after."""

    def render(key):
        return "".join("GPU %d (%s): power limit %.2f W\n" % (p["index"], p["name"], p[key]) for p in plan)

    return {
        "before": render("before_w"),
        "after": render("after_w"),
        "before_header": "requested GPU power limits",
        "after_header": "requested GPU power limits",
    }


def readback_failures(host, plan, devices_after):
    """Messages for each GPU whose requested limit, read back after setting, is not the target."""
    by_index = {d["index"]: d for d in devices_after}
    failures = []
    for item in plan:
        if not item["changed"]:
            continue
        now = by_index.get(item["index"], {}).get("power_limit_w")
        if now is None or abs(now - item["after_w"]) > WATT_TOLERANCE:
            failures.append(
                "host %s: GPU %d was asked for a power limit of %.2f W but reads back %s; the driver did not "
                "take it (NVML's set call can report success without applying). Check `nvidia-smi -q -d POWER "
                "-i %d` and the driver log."
                % (host, item["index"], item["after_w"], "nothing" if now is None else "%.2f W" % now, item["index"])
            )
    return failures
