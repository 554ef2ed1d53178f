#!/usr/bin/python3
"""seatwright lab test equipment: an nvidia-smi emulator. NOT NVIDIA software.

Installed as /usr/bin/nvidia-smi inside seatwright's lab containers, which have no GPU. It answers
the subset of nvidia-smi that seatwright's modules and roles use, in nvidia-smi's output formats
(checked against real outputs recorded on an H200 node, tests/fixtures/h200x2/), from a declared
profile of GPUs. Every number it prints comes from that profile or from state it was told to set:
it is never a source of measurements.

Profile: $SEATWRIGHT_EMU_PROFILE, else /etc/seatwright-lab/gpu-profile.json.
Settable state (power limits, persistence, clock locks): $SEATWRIGHT_EMU_STATE, else
/var/lib/seatwright-lab/nvidia-smi-state.json, written atomically.

Standard library only, so that it runs on a bare container's python3.
"""

import json
import os
import sys
import tempfile
import time

BANNER = "seatwright lab nvidia-smi emulator: test equipment, not NVIDIA software, never a measurement"
EMULATOR_VERSION = "1"
DEFAULT_PROFILE = "/etc/seatwright-lab/gpu-profile.json"
DEFAULT_STATE = "/var/lib/seatwright-lab/nvidia-smi-state.json"

# nvidia-smi's documented exit codes.
RC_OK = 0
RC_INVALID_ARGUMENT = 2
RC_NOT_FOUND = 6
RC_DRIVER_NOT_LOADED = 9
RC_OTHER = 255

INVALID_ARGS = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help."
NO_DRIVER = (
    "NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver. "
    "Make sure that the latest NVIDIA driver is installed and running."
)
TOPO_LEGEND = """
Legend:

  X    = Self
  SYS  = Connection traversing PCIe as well as the SMP interconnect between NUMA nodes (e.g., QPI/UPI)
  NODE = Connection traversing PCIe as well as the interconnect between PCIe Host Bridges within a NUMA node
  PHB  = Connection traversing PCIe as well as a PCIe Host Bridge (typically the CPU)
  PXB  = Connection traversing multiple PCIe bridges (without traversing the PCIe Host Bridge)
  PIX  = Connection traversing at most a single PCIe bridge
  NV#  = Connection traversing a bonded set of # NVLinks
"""
HELP = """%s

Emulated subset of nvidia-smi (everything else fails as nvidia-smi does on a bad argument):
    -h, --help                  this text
    --version                   versions (of the emulated driver and of this emulator)
    -L, --list-gpus             one line per GPU with its UUID
    -q, --query                 the GPU report; -d, --display=POWER,MEMORY,CLOCK,TEMPERATURE narrows it
    --query-gpu=FIELDS          with --format=csv[,noheader][,nounits]
    -i, --id=ID                 GPU index, UUID or PCI bus id (comma separated list allowed)
    -pl, --power-limit=W        set the software power limit (range-checked)
    -pm, --persistence-mode=0|1 set persistence mode
    -lgc, --lock-gpu-clocks=MIN,MAX   lock the GPU clock range in MHz
    -rgc, --reset-gpu-clocks    release the clock lock
    topo -m                     the GPU topology matrix

Profile: $SEATWRIGHT_EMU_PROFILE or %s
State:   $SEATWRIGHT_EMU_STATE or %s
""" % (BANNER, DEFAULT_PROFILE, DEFAULT_STATE)

Q_KEY_WIDTH = 55


class Usage(Exception):
    """A bad command line: nvidia-smi's own message and exit code."""

    def __init__(self, message=INVALID_ARGS, rc=RC_INVALID_ARGUMENT):
        super().__init__(message)
        self.message = message
        self.rc = rc


# ---------------------------------------------------------------- profile and state


def load_profile():
    path = os.environ.get("SEATWRIGHT_EMU_PROFILE", DEFAULT_PROFILE)
    try:
        with open(path, encoding="utf-8") as handle:
            profile = json.load(handle)
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise Usage("seatwright lab emulator: cannot read profile %s: %s" % (path, exc), RC_OTHER)
    if not isinstance(profile.get("gpus"), list):
        raise Usage("seatwright lab emulator: profile %s has no 'gpus' list" % path, RC_OTHER)
    return profile


def state_path():
    return os.environ.get("SEATWRIGHT_EMU_STATE", DEFAULT_STATE)


def load_state(profile):
    """Settable values per GPU UUID, defaulting to what the profile says a fresh boot has."""
    try:
        with open(state_path(), encoding="utf-8") as handle:
            saved = json.load(handle)
    except (OSError, ValueError):
        saved = {}
    state = {}
    for gpu in profile["gpus"]:
        entry = {
            "power_limit_w": float(gpu["power"]["default_w"]),
            "persistence_mode": bool(gpu.get("persistence_mode", False)),
            "clock_lock": None,
        }
        entry.update(saved.get("gpus", {}).get(gpu["uuid"], {}))
        state[gpu["uuid"]] = entry
    return state


def save_state(state):
    """Atomic write (stdlib only: this script cannot import seatwright's helpers)."""
    path = state_path()
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    payload = json.dumps({"emulator": BANNER, "gpus": state}, indent=2, sort_keys=True) + "\n"
    fd, tmp = tempfile.mkstemp(prefix=".nvidia-smi-state.", dir=directory)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(payload)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def enforced_limit_w(gpu, entry):
    """What the card enforces: the requested limit, lowered by any limiter the profile declares."""
    external = gpu["power"].get("external_cap_w")
    if external is None:
        return entry["power_limit_w"]
    return min(entry["power_limit_w"], float(external))


# ---------------------------------------------------------------- --query-gpu fields


def _mib(value):
    return ("%d" % value, "MiB")


def _watts(value):
    return ("%.2f" % value, "W")


def _mhz(value):
    return ("%d" % value, "MHz")


def _enabled(flag):
    return ("Enabled" if flag else "Disabled", None)


def _draw_w(gpu, entry):
    return min(float(gpu.get("idle_draw_w", 20.0)), enforced_limit_w(gpu, entry))


FIELDS = {
    "index": lambda p, g, e: (str(g["index"]), None),
    "name": lambda p, g, e: (g["name"], None),
    "uuid": lambda p, g, e: (g["uuid"], None),
    "serial": lambda p, g, e: (g["serial"], None),
    "pci.bus_id": lambda p, g, e: (g["pci_bus_id"], None),
    "compute_cap": lambda p, g, e: (g["compute_cap"], None),
    "driver_version": lambda p, g, e: (p["driver_version"], None),
    "vbios_version": lambda p, g, e: (g.get("vbios_version", "[N/A]"), None),
    "count": lambda p, g, e: (str(len(p["gpus"])), None),
    "persistence_mode": lambda p, g, e: _enabled(e["persistence_mode"]),
    "pstate": lambda p, g, e: ("P8", None),
    "temperature.gpu": lambda p, g, e: ("%d" % g.get("idle_temp_c", 30), None),
    "utilization.gpu": lambda p, g, e: ("0", "%"),
    "memory.total": lambda p, g, e: _mib(g["memory_total_mib"]),
    "memory.reserved": lambda p, g, e: _mib(g.get("memory_reserved_mib", 0)),
    "memory.used": lambda p, g, e: _mib(0),
    "memory.free": lambda p, g, e: _mib(g["memory_total_mib"] - g.get("memory_reserved_mib", 0)),
    "power.management": lambda p, g, e: ("Enabled", None),
    "power.draw": lambda p, g, e: _watts(_draw_w(g, e)),
    "power.draw.instant": lambda p, g, e: _watts(_draw_w(g, e)),
    "power.limit": lambda p, g, e: _watts(e["power_limit_w"]),
    "enforced.power.limit": lambda p, g, e: _watts(enforced_limit_w(g, e)),
    "power.default_limit": lambda p, g, e: _watts(g["power"]["default_w"]),
    "power.min_limit": lambda p, g, e: _watts(g["power"]["min_w"]),
    "power.max_limit": lambda p, g, e: _watts(g["power"]["max_w"]),
    "clocks.sm": lambda p, g, e: _mhz(g["clocks"]["idle_sm_mhz"]),
    "clocks.gr": lambda p, g, e: _mhz(g["clocks"]["idle_sm_mhz"]),
    "clocks.mem": lambda p, g, e: _mhz(g["clocks"]["max_memory_mhz"]),
    "clocks.max.sm": lambda p, g, e: _mhz(g["clocks"]["max_sm_mhz"]),
    "clocks.max.gr": lambda p, g, e: _mhz(g["clocks"]["max_sm_mhz"]),
    "clocks.max.mem": lambda p, g, e: _mhz(g["clocks"]["max_memory_mhz"]),
}
ALIASES = {
    "gpu_name": "name",
    "gpu_uuid": "uuid",
    "gpu_serial": "serial",
    "gpu_bus_id": "pci.bus_id",
    "persistence.mode": "persistence_mode",
    "clocks.current.sm": "clocks.sm",
    "clocks.current.graphics": "clocks.gr",
    "clocks.graphics": "clocks.gr",
    "clocks.current.memory": "clocks.mem",
    "clocks.memory": "clocks.mem",
    "clocks.max.graphics": "clocks.max.gr",
    "clocks.max.memory": "clocks.max.mem",
    "power.draw.average": "power.draw",
}


def query_gpu(profile, state, gpus, field_list, format_spec):
    formats = [item.strip() for item in format_spec.split(",") if item.strip()]
    if not formats or formats[0] != "csv" or any(f not in ("csv", "noheader", "nounits") for f in formats):
        raise Usage()
    names = [name.strip() for name in field_list.split(",")]
    canonical = []
    for name in names:
        key = ALIASES.get(name, name)
        if key not in FIELDS:
            raise Usage('Field "%s" is not a valid field to query.\n' % name)
        canonical.append(key)
    lines = []
    rows = [[FIELDS[key](profile, gpu, state[gpu["uuid"]]) for key in canonical] for gpu in gpus]
    if "noheader" not in formats:
        header = []
        for key, sample in zip(canonical, rows[0] if rows else [(None, None)] * len(canonical)):
            unit = sample[1]
            header.append(key if unit is None or "nounits" in formats else "%s [%s]" % (key, unit))
        lines.append(", ".join(header))
    for row in rows:
        cells = []
        for value, unit in row:
            cells.append(value if unit is None or "nounits" in formats else "%s %s" % (value, unit))
        lines.append(", ".join(cells))
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------- -L, topo -m, -q


def list_gpus(gpus):
    return "".join("GPU %d: %s (UUID: %s)\n" % (g["index"], g["name"], g["uuid"]) for g in gpus)


def topo_matrix(profile):
    topology = profile["topology"]
    count = len(profile["gpus"])
    nics = topology.get("nics", [])
    names = ["GPU%d" % i for i in range(count)] + ["NIC%d" % n for n in range(len(nics))]
    columns = names + ["CPU Affinity", "NUMA Affinity", "GPU NUMA ID"]
    lines = ["\t\x1b[4m" + "\t".join(columns) + "\x1b[0m"]
    for i in range(count):
        cells = [" X " if i == j else topology["links"][i][j] for j in range(count)]
        cells += [nic["links"][i] for nic in nics]
        cells += [topology["cpu_affinity"], topology["numa_affinity"], "", topology.get("gpu_numa_id", "N/A")]
        lines.append("GPU%d\t" % i + "\t".join(cells))
    for n, nic in enumerate(nics):
        cells = list(nic["links"]) + [
            " X " if n == m else nic.get("nic_links", {}).get(str(m), "SYS") for m in range(len(nics))
        ]
        lines.append("NIC%d\t" % n + "\t".join(cells) + "\t\t")
    legend = TOPO_LEGEND
    if nics:
        legend += "\nNIC Legend:\n\n" + "".join("  NIC%d: %s\n" % (n, nic["name"]) for n, nic in enumerate(nics))
        legend += "\n"
    return "\n".join(lines) + "\n" + legend


def _q_line(depth, key, value=None):
    label = "    " * depth + key
    if value is None:
        return label
    return "%s: %s" % (label.ljust(Q_KEY_WIDTH), value)


def _q_power(gpu, entry):
    power = gpu["power"]
    draw = "%.2f W" % _draw_w(gpu, entry)
    return [
        _q_line(1, "GPU Power Readings"),
        _q_line(2, "Average Power Draw", draw),
        _q_line(2, "Instantaneous Power Draw", draw),
        _q_line(2, "Current Power Limit", "%.2f W" % enforced_limit_w(gpu, entry)),
        _q_line(2, "Requested Power Limit", "%.2f W" % entry["power_limit_w"]),
        _q_line(2, "Default Power Limit", "%.2f W" % power["default_w"]),
        _q_line(2, "Min Power Limit", "%.2f W" % power["min_w"]),
        _q_line(2, "Max Power Limit", "%.2f W" % power["max_w"]),
        _q_line(1, "Module Power Readings"),
        _q_line(2, "Average Power Draw", "N/A"),
        _q_line(2, "Instantaneous Power Draw", "N/A"),
        _q_line(2, "Current Power Limit", "N/A"),
        _q_line(2, "Requested Power Limit", "N/A"),
        _q_line(2, "Default Power Limit", "N/A"),
        _q_line(2, "Min Power Limit", "N/A"),
        _q_line(2, "Max Power Limit", "N/A"),
    ]


def _q_memory(gpu):
    reserved = gpu.get("memory_reserved_mib", 0)
    return [
        _q_line(1, "FB Memory Usage"),
        _q_line(2, "Total", "%d MiB" % gpu["memory_total_mib"]),
        _q_line(2, "Reserved", "%d MiB" % reserved),
        _q_line(2, "Used", "0 MiB"),
        _q_line(2, "Free", "%d MiB" % (gpu["memory_total_mib"] - reserved)),
    ]


def _q_clocks(gpu):
    clocks = gpu["clocks"]
    return [
        _q_line(1, "Clocks"),
        _q_line(2, "Graphics", "%d MHz" % clocks["idle_sm_mhz"]),
        _q_line(2, "SM", "%d MHz" % clocks["idle_sm_mhz"]),
        _q_line(2, "Memory", "%d MHz" % clocks["max_memory_mhz"]),
        _q_line(1, "Max Clocks"),
        _q_line(2, "Graphics", "%d MHz" % clocks["max_sm_mhz"]),
        _q_line(2, "SM", "%d MHz" % clocks["max_sm_mhz"]),
        _q_line(2, "Memory", "%d MHz" % clocks["max_memory_mhz"]),
    ]


def _q_temperature(gpu):
    return [
        _q_line(1, "Temperature"),
        _q_line(2, "GPU Current Temp", "%d C" % gpu.get("idle_temp_c", 30)),
    ]


def _q_identity(gpu, entry):
    bus = gpu["pci_bus_id"]
    domain, bus_no, rest = bus.split(":")
    device = rest.split(".")[0]
    return [
        _q_line(1, "Product Name", gpu["name"]),
        _q_line(1, "Product Brand", gpu.get("brand", "NVIDIA")),
        _q_line(1, "Product Architecture", gpu.get("architecture", "Blackwell")),
        _q_line(1, "Persistence Mode", "Enabled" if entry["persistence_mode"] else "Disabled"),
        _q_line(1, "MIG Mode"),
        _q_line(2, "Current", "Disabled"),
        _q_line(2, "Pending", "Disabled"),
        _q_line(1, "Serial Number", gpu["serial"]),
        _q_line(1, "GPU UUID", gpu["uuid"]),
        _q_line(1, "Minor Number", str(gpu["index"])),
        _q_line(1, "VBIOS Version", gpu.get("vbios_version", "N/A")),
        _q_line(1, "PCI"),
        _q_line(2, "Bus", "0x%s" % bus_no.upper()),
        _q_line(2, "Device", "0x%s" % device.upper()),
        _q_line(2, "Domain", "0x%s" % domain[-4:]),
        _q_line(2, "Device Id", gpu.get("pci_device_id", "N/A")),
        _q_line(2, "Bus Id", bus),
        _q_line(2, "Sub System Id", gpu.get("pci_subsystem_id", "N/A")),
        _q_line(1, "Performance State", "P8"),
    ]


def query_report(profile, state, gpus, displays):
    out = [
        "",
        "==============NVSMI LOG==============",
        "",
        _q_line(0, "Timestamp", time.strftime("%a %b %d %H:%M:%S %Y")),
        _q_line(0, "Driver Version", profile["driver_version"]),
        _q_line(0, "CUDA Version", profile["cuda_version"]),
        "",
        _q_line(0, "Attached GPUs", str(len(profile["gpus"]))),
    ]
    for gpu in gpus:
        entry = state[gpu["uuid"]]
        out.append("GPU %s" % gpu["pci_bus_id"])
        if not displays:
            out += _q_identity(gpu, entry) + _q_memory(gpu) + _q_temperature(gpu)
            out += _q_power(gpu, entry) + _q_clocks(gpu)
            out.append(_q_line(1, "Processes", "None"))
        else:
            sections = {
                "POWER": _q_power(gpu, entry),
                "MEMORY": _q_memory(gpu),
                "CLOCK": _q_clocks(gpu),
                "TEMPERATURE": _q_temperature(gpu),
            }
            for display in displays:
                out += sections[display]
        out.append("")
    return "\n".join(out) + "\n"


# ---------------------------------------------------------------- setters


def set_power_limit(profile, state, gpus, raw_value):
    try:
        watts = float(raw_value)
    except ValueError:
        raise Usage()
    for gpu in gpus:
        low, high = float(gpu["power"]["min_w"]), float(gpu["power"]["max_w"])
        if not low <= watts <= high:
            raise Usage(
                "Provided power limit %.2f W is not a valid power limit which should be between %.2f W and "
                "%.2f W for GPU %s\nTerminating early due to previous errors." % (watts, low, high, gpu["pci_bus_id"])
            )
    lines = []
    for gpu in gpus:
        entry = state[gpu["uuid"]]
        before = entry["power_limit_w"]
        # A card that ignores the write models NVML's set call whose return code lies: read back.
        if not gpu["power"].get("ignores_writes", False):
            entry["power_limit_w"] = watts
        lines.append("Power limit for GPU %s was set to %.2f W from %.2f W." % (gpu["pci_bus_id"], watts, before))
    save_state(state)
    return "\n".join(lines) + "\nAll done.\n"


def set_persistence(state, gpus, raw_value):
    if raw_value not in ("0", "1"):
        raise Usage()
    wanted = raw_value == "1"
    word = "Enabled" if wanted else "Disabled"
    lines = []
    for gpu in gpus:
        entry = state[gpu["uuid"]]
        if entry["persistence_mode"] == wanted:
            lines.append("Persistence mode is already %s for GPU %s." % (word, gpu["pci_bus_id"]))
        else:
            entry["persistence_mode"] = wanted
            lines.append("%s persistence mode for GPU %s." % (word, gpu["pci_bus_id"]))
    save_state(state)
    return "\n".join(lines) + "\nAll done.\n"


def lock_clocks(state, gpus, raw_value):
    try:
        low, high = (int(part) for part in raw_value.split(","))
    except ValueError:
        raise Usage()
    if low < 0 or high < low:
        raise Usage()
    lines = []
    for gpu in gpus:
        state[gpu["uuid"]]["clock_lock"] = {"min_mhz": low, "max_mhz": high}
        lines.append('GPU clocks set to "(gpuClkMin %d, gpuClkMax %d)" for GPU %s' % (low, high, gpu["pci_bus_id"]))
    save_state(state)
    return "\n".join(lines) + "\nAll done.\n"


def reset_clocks(state, gpus):
    for gpu in gpus:
        state[gpu["uuid"]]["clock_lock"] = None
    save_state(state)
    return "All done.\n"


# ---------------------------------------------------------------- command line

# option -> (canonical name, takes a value)
OPTIONS = {
    "-h": ("help", False),
    "--help": ("help", False),
    "--version": ("version", False),
    "-L": ("list", False),
    "--list-gpus": ("list", False),
    "-q": ("query", False),
    "--query": ("query", False),
    "-d": ("display", True),
    "--display": ("display", True),
    "--query-gpu": ("query_gpu", True),
    "--format": ("format", True),
    "-i": ("id", True),
    "--id": ("id", True),
    "-pl": ("power_limit", True),
    "--power-limit": ("power_limit", True),
    "-pm": ("persistence", True),
    "--persistence-mode": ("persistence", True),
    "-lgc": ("lock_clocks", True),
    "--lock-gpu-clocks": ("lock_clocks", True),
    "-rgc": ("reset_clocks", False),
    "--reset-gpu-clocks": ("reset_clocks", False),
}
ACTIONS = ("help", "version", "list", "query", "query_gpu", "power_limit", "persistence", "lock_clocks", "reset_clocks")


def parse(argv):
    if argv[:1] == ["topo"]:
        if argv[1:] not in (["-m"], ["--matrix"]):
            raise Usage()
        return {"topo": True}
    opts = {}
    position = 0
    while position < len(argv):
        token = argv[position]
        name, _, inline = token.partition("=")
        if name not in OPTIONS:
            raise Usage()
        key, takes_value = OPTIONS[name]
        if takes_value:
            if inline:
                value = inline
            elif position + 1 < len(argv):
                position += 1
                value = argv[position]
            else:
                raise Usage()
        elif inline:
            raise Usage()
        else:
            value = True
        if key in opts:
            raise Usage()
        opts[key] = value
        position += 1
    actions = [key for key in ACTIONS if key in opts]
    if len(actions) > 1:
        raise Usage()
    if "format" in opts and "query_gpu" not in opts:
        raise Usage()
    if "display" in opts and "query" not in opts:
        raise Usage()
    return opts


def select(profile, ident):
    if ident is None:
        return list(profile["gpus"])
    chosen = []
    for part in ident.split(","):
        part = part.strip()
        match = [g for g in profile["gpus"] if part in (str(g["index"]), g["uuid"], g["pci_bus_id"])]
        if not match:
            raise Usage("No devices were found", RC_NOT_FOUND)
        chosen += match
    return chosen


def run(argv):
    opts = parse(argv)
    if opts.get("help"):
        return HELP
    profile = load_profile()
    if opts.get("version"):
        if profile is None:
            raise Usage(NO_DRIVER, RC_DRIVER_NOT_LOADED)
        return (
            "# %s (emulator version %s)\n"
            "NVIDIA-SMI version  : %s\nNVML version        : %s\nDRIVER version      : %s\nCUDA Version        : %s\n"
            % (
                BANNER,
                EMULATOR_VERSION,
                profile["driver_version"],
                profile["driver_version"].rsplit(".", 1)[0],
                profile["driver_version"],
                profile["cuda_version"],
            )
        )
    if profile is None:
        raise Usage(NO_DRIVER, RC_DRIVER_NOT_LOADED)
    if opts.get("topo"):
        return topo_matrix(profile)
    gpus = select(profile, opts.get("id"))
    state = load_state(profile)
    if "query_gpu" in opts:
        if "format" not in opts:
            raise Usage()
        return query_gpu(profile, state, gpus, opts["query_gpu"], opts["format"])
    if opts.get("list"):
        return list_gpus(gpus)
    if opts.get("query"):
        displays = []
        if "display" in opts:
            displays = [d.strip().upper() for d in opts["display"].split(",")]
            if any(d not in ("POWER", "MEMORY", "CLOCK", "TEMPERATURE") for d in displays):
                raise Usage()
        return query_report(profile, state, gpus, displays)
    if "power_limit" in opts:
        return set_power_limit(profile, state, gpus, opts["power_limit"])
    if "persistence" in opts:
        return set_persistence(state, gpus, opts["persistence"])
    if "lock_clocks" in opts:
        return lock_clocks(state, gpus, opts["lock_clocks"])
    if opts.get("reset_clocks"):
        return reset_clocks(state, gpus)
    if opts:
        raise Usage()
    return summary_table(profile, state, gpus)


def summary_table(profile, state, gpus):
    """The bare `nvidia-smi` view, reduced to what identifies the emulated cards."""
    lines = [
        "# " + BANNER,
        "NVIDIA-SMI %s    Driver Version: %s    CUDA Version: %s"
        % (profile["driver_version"], profile["driver_version"], profile["cuda_version"]),
    ]
    for gpu in gpus:
        entry = state[gpu["uuid"]]
        lines.append(
            "GPU %d  %s  Persistence-M %s  Bus-Id %s  %dW / %dW  0MiB / %dMiB"
            % (
                gpu["index"],
                gpu["name"],
                "On" if entry["persistence_mode"] else "Off",
                gpu["pci_bus_id"],
                _draw_w(gpu, entry),
                enforced_limit_w(gpu, entry),
                gpu["memory_total_mib"],
            )
        )
    return "\n".join(lines) + "\n"


def main(argv):
    try:
        sys.stdout.write(run(argv))
    except Usage as problem:
        sys.stdout.write(problem.message if problem.message.endswith("\n") else problem.message + "\n")
        return problem.rc
    return RC_OK


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
