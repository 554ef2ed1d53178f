"""Reading and setting GPUs on the node: NVML first, nvidia-smi as the fallback.

The I/O half of gpu.py, shared by the gpu_facts and gpu_settings modules. It returns raw readings;
every interpretation lives in gpu.py.
"""

import os
import stat
import sys
import time

from ansible_collections.seatwright.fleet.plugins.module_utils.bench.telemetry import (
    SMI_TELEMETRY_FIELDS,
    gpu_from_nvml,
    gpus_from_smi_csv,
    is_emulated,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import GpuInputError, ProbeUnavailable
from ansible_collections.seatwright.fleet.plugins.module_utils.node.gpu import (
    SMI_QUERY_FIELDS,
    devices_from_smi_rows,
    driver_version_from_smi_rows,
    parse_query_csv,
    parse_query_report,
    parse_topo_matrix,
    reading_from_nvml,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.node.kind import WSL_LIB_DIR

try:
    import pynvml
except ImportError:  # nvidia-ml-py is optional on a node: nvidia-smi answers without it
    pynvml = None

NVML_P2P_CAPS_INDEX_NVLINK = 2
# Beside PATH: on a WSL2 node the Windows driver's nvidia-smi lies here, off root's PATH (node/kind.py).
SMI_DIRS = [WSL_LIB_DIR]


def _text(value):
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else value


def _nvml():
    if pynvml is None:
        raise ProbeUnavailable("nvidia-ml-py (pynvml) is not installed for %s" % sys.executable)
    return pynvml


def _nvlink_ports(pynvml, handle):
    """Every NVLink port of one GPU: whether it is up, what is at the far end and its PCI bus id."""
    ports = []
    for link in range(getattr(pynvml, "NVML_NVLINK_MAX_LINKS", 18)):
        port = {"link": link, "active": None, "remote_type": None, "remote_bus_id": None, "error": None}
        try:
            port["active"] = pynvml.nvmlDeviceGetNvLinkState(handle, link) == pynvml.NVML_FEATURE_ENABLED
        except pynvml.NVMLError as exc:
            port["error"] = str(exc)
            ports.append(port)
            continue
        if port["active"]:
            port["remote_type"] = _optional(pynvml.nvmlDeviceGetNvLinkRemoteDeviceType, handle, link)
            remote = _optional(pynvml.nvmlDeviceGetNvLinkRemotePciInfo, handle, link)
            port["remote_bus_id"] = _text(remote.busId) if remote is not None else None
        ports.append(port)
    return ports


def _optional(call, *args):
    """An NVML reading, or None where the device does not support it."""
    try:
        return call(*args)
    except Exception:  # pylint: disable=broad-except
        return None


def read_nvml_raw(with_links=True):
    """What NVML answers, untouched: driver, CUDA version, one dict per device and the GPU pairs."""
    pynvml = _nvml()
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise ProbeUnavailable("NVML could not start: %s" % exc)
    try:
        driver = _text(pynvml.nvmlSystemGetDriverVersion())
        cuda = _optional(pynvml.nvmlSystemGetCudaDriverVersion)
        handles, raw = [], []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            handles.append(handle)
            raw.append(
                {
                    "index": index,
                    "name": _text(pynvml.nvmlDeviceGetName(handle)),
                    "uuid": _text(pynvml.nvmlDeviceGetUUID(handle)),
                    "pci_bus_id": _text(pynvml.nvmlDeviceGetPciInfo(handle).busId),
                    "cc": _optional(pynvml.nvmlDeviceGetCudaComputeCapability, handle),
                    "mem": _optional(lambda h: pynvml.nvmlDeviceGetMemoryInfo(h).total, handle),
                    "limit": _optional(pynvml.nvmlDeviceGetPowerManagementLimit, handle),
                    "enforced": _optional(pynvml.nvmlDeviceGetEnforcedPowerLimit, handle),
                    "constraints": _optional(pynvml.nvmlDeviceGetPowerManagementLimitConstraints, handle),
                    "default": _optional(pynvml.nvmlDeviceGetPowerManagementDefaultLimit, handle),
                    "persistence": _optional(pynvml.nvmlDeviceGetPersistenceMode, handle),
                    "nvlinks": _nvlink_ports(pynvml, handle) if with_links else [],
                }
            )
        pairs = []
        if with_links:
            for a in range(len(handles)):
                for b in range(a + 1, len(handles)):
                    pairs.append(
                        {
                            "a": a,
                            "b": b,
                            "common_ancestor": _optional(
                                pynvml.nvmlDeviceGetTopologyCommonAncestor, handles[a], handles[b]
                            ),
                            # nvidia-ml-py defines the caps index as a tuple in some releases: pass the int.
                            "p2p_nvlink": _optional(
                                pynvml.nvmlDeviceGetP2PStatus, handles[a], handles[b], NVML_P2P_CAPS_INDEX_NVLINK
                            ),
                        }
                    )
    finally:
        pynvml.nvmlShutdown()
    return {"driver_version": driver, "cuda_driver_version": cuda, "devices": raw, "pairs": pairs}


def read_nvml(with_links=True):
    """NVML readings in the shape read_smi returns."""
    return reading_from_nvml(read_nvml_raw(with_links))


def _smi(module, binary, args):
    rc, out, err = module.run_command([binary] + args)
    if rc != 0:
        raise ProbeUnavailable("`nvidia-smi %s` exited %d: %s" % (" ".join(args), rc, (out + err).strip()))
    return out


def read_smi(module, with_links=True):
    """The same readings from nvidia-smi's CSV query, `topo -m` and `-q -d POWER` (for the CUDA version)."""
    binary = module.get_bin_path("nvidia-smi", opt_dirs=SMI_DIRS)
    if binary is None:
        raise ProbeUnavailable("nvidia-smi is not on PATH")
    query = _smi(module, binary, ["--query-gpu=" + ",".join(SMI_QUERY_FIELDS), "--format=csv,noheader"])
    try:
        rows = parse_query_csv(query)
    except ValueError as exc:
        raise ProbeUnavailable("unexpected nvidia-smi query output: %s" % exc)
    report = parse_query_report(_smi(module, binary, ["-q", "-d", "POWER"]))
    links = []
    if with_links and len(rows) > 1:
        try:
            links = parse_topo_matrix(_smi(module, binary, ["topo", "-m"]))["links"]
        except ValueError as exc:
            raise ProbeUnavailable("unexpected nvidia-smi topo -m output: %s" % exc)
    return {
        "driver_version": driver_version_from_smi_rows(rows) or report["driver_version"],
        "cuda_version": report["cuda_version"],
        "devices": devices_from_smi_rows(rows),
        "links": links,
        "source": "nvidia-smi",
    }


def read_gpus(module, backend="auto", with_links=True):
    """NVML, else nvidia-smi. Raises ProbeUnavailable with both reasons when neither answers."""
    reasons = []
    if backend in ("auto", "nvml"):
        try:
            return read_nvml(with_links)
        except ProbeUnavailable as exc:
            reasons.append(str(exc))
    if backend in ("auto", "nvidia-smi"):
        try:
            return read_smi(module, with_links)
        except ProbeUnavailable as exc:
            reasons.append(str(exc))
    raise ProbeUnavailable("; ".join(reasons))


def set_power_limit(module, source, index, watts):
    """Ask the driver for a new requested limit on one GPU, through the reader that answered."""
    if source == "nvml":
        pynvml = _nvml()
        pynvml.nvmlInit()
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            pynvml.nvmlDeviceSetPowerManagementLimit(handle, int(round(watts * 1000)))
        except pynvml.NVMLError as exc:
            raise ProbeUnavailable("NVML refused a %.2f W limit on GPU %d: %s" % (watts, index, exc))
        finally:
            pynvml.nvmlShutdown()
        return
    binary = module.get_bin_path("nvidia-smi", required=True, opt_dirs=SMI_DIRS)
    _smi(module, binary, ["-i", str(index), "-pl", "%.2f" % watts])


def read_telemetry_nvml():
    """Power, SM clock, utilisation and temperature of every GPU from NVML (one sample)."""
    pynvml = _nvml()
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as exc:
        raise ProbeUnavailable("NVML could not start: %s" % exc)
    try:
        gpus = []
        for index in range(pynvml.nvmlDeviceGetCount()):
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
            util = _optional(pynvml.nvmlDeviceGetUtilizationRates, handle)
            gpus.append(
                gpu_from_nvml(
                    index,
                    _optional(pynvml.nvmlDeviceGetPowerUsage, handle),
                    _optional(pynvml.nvmlDeviceGetEnforcedPowerLimit, handle),
                    _optional(pynvml.nvmlDeviceGetClockInfo, handle, pynvml.NVML_CLOCK_SM),
                    _optional(pynvml.nvmlDeviceGetMaxClockInfo, handle, pynvml.NVML_CLOCK_SM),
                    util.gpu if util is not None else None,
                    _optional(pynvml.nvmlDeviceGetTemperature, handle, pynvml.NVML_TEMPERATURE_GPU),
                )
            )
    finally:
        pynvml.nvmlShutdown()
    return gpus


def read_telemetry_smi(module, binary):
    """The same sample from `nvidia-smi --query-gpu`."""
    out = _smi(module, binary, ["--query-gpu=" + ",".join(SMI_TELEMETRY_FIELDS), "--format=csv,noheader,nounits"])
    try:
        return gpus_from_smi_csv(out)
    except ValueError as exc:
        raise ProbeUnavailable("unexpected nvidia-smi telemetry output: %s" % exc)


def telemetry_reader(module, backend="auto"):
    """A function taking one sample, plus the source name and whether it is emulated: NVML first."""
    reasons = []
    if backend in ("auto", "nvml"):
        try:
            read_telemetry_nvml()
            return read_telemetry_nvml, "nvml", False
        except ProbeUnavailable as exc:
            reasons.append(str(exc))
    if backend in ("auto", "nvidia-smi"):
        binary = module.get_bin_path("nvidia-smi", opt_dirs=SMI_DIRS)
        if binary is None:
            reasons.append("nvidia-smi is not on PATH")
        else:
            try:
                read_telemetry_smi(module, binary)
                emulated = is_emulated(_smi(module, binary, ["--version"]))
                return (lambda: read_telemetry_smi(module, binary)), "nvidia-smi", emulated
            except ProbeUnavailable as exc:
                reasons.append(str(exc))
    raise ProbeUnavailable("; ".join(reasons))


def sample_series(read, interval_s, duration_s, stop_file=None, should_stop=None):
    """Samples `read()` every interval until the duration ends, `stop_file` exists or `should_stop()` says so.

    Each sample is {"t": epoch seconds, "gpus": [...]}; a failed reading is kept as {"t", "error"}.
    """
    samples, deadline = [], time.time() + duration_s
    while True:
        now = time.time()
        try:
            samples.append({"t": now, "gpus": read()})
        except ProbeUnavailable as exc:
            samples.append({"t": now, "gpus": [], "error": str(exc)})
        if now >= deadline or (stop_file and os.path.exists(stop_file)) or (should_stop and should_stop()):
            return samples
        time.sleep(max(0.0, interval_s - (time.time() - now)))


def _nvml_set(index, what, call):
    """Run one NVML setter on GPU `index`; ProbeUnavailable naming what was refused."""
    pynvml = _nvml()
    pynvml.nvmlInit()
    try:
        call(pynvml, pynvml.nvmlDeviceGetHandleByIndex(index))
    except pynvml.NVMLError as exc:
        raise ProbeUnavailable("NVML refused %s on GPU %d: %s" % (what, index, exc))
    finally:
        pynvml.nvmlShutdown()


def set_persistence(module, source, index, enabled):
    """Turn persistence mode on or off on one GPU, through the reader that answered."""
    if source == "nvml":
        _nvml_set(
            index,
            "persistence mode %s" % ("on" if enabled else "off"),
            lambda nvml, handle: nvml.nvmlDeviceSetPersistenceMode(
                handle, nvml.NVML_FEATURE_ENABLED if enabled else nvml.NVML_FEATURE_DISABLED
            ),
        )
        return
    binary = module.get_bin_path("nvidia-smi", required=True, opt_dirs=SMI_DIRS)
    _smi(module, binary, ["-i", str(index), "-pm", "1" if enabled else "0"])


def set_clock_lock(module, source, index, clock_lock):
    """Lock one GPU's clock range ({min_mhz, max_mhz}) or release it (None)."""
    if source == "nvml":
        if clock_lock:
            _nvml_set(
                index,
                "a %d-%d MHz clock lock" % (clock_lock["min_mhz"], clock_lock["max_mhz"]),
                lambda nvml, handle: nvml.nvmlDeviceSetGpuLockedClocks(
                    handle, clock_lock["min_mhz"], clock_lock["max_mhz"]
                ),
            )
        else:
            _nvml_set(
                index, "releasing the clock lock", lambda nvml, handle: nvml.nvmlDeviceResetGpuLockedClocks(handle)
            )
        return
    binary = module.get_bin_path("nvidia-smi", required=True, opt_dirs=SMI_DIRS)
    if clock_lock:
        _smi(module, binary, ["-i", str(index), "-lgc", "%d,%d" % (clock_lock["min_mhz"], clock_lock["max_mhz"])])
    else:
        _smi(module, binary, ["-i", str(index), "-rgc"])


def stop_folder_problem(is_dir, mode, owner_uid, euid):
    """None when a stop file's folder is private to this process's user, else why it is refused.

    Anyone who can write the folder could plant the stop file (ending the sampling) or a link
    where the playbook later touches it; a private per-run folder leaves nobody that chance.
    """
    if not is_dir:
        return "is not a folder (a link or a file)"
    if owner_uid != euid:
        return "belongs to uid %d, not to uid %d that samples" % (owner_uid, euid)
    if mode & 0o022:
        return "can be written by others (mode %04o)" % stat.S_IMODE(mode)
    return None


def check_stop_file(stop_file):
    """GpuInputError unless `stop_file` lies in a folder only this user can write."""
    folder = os.path.dirname(os.path.abspath(stop_file))
    try:
        info = os.lstat(folder)
    except OSError as exc:
        raise GpuInputError("gpu_telemetry: stop_file's folder %s: %s" % (folder, exc.strerror))
    problem = stop_folder_problem(stat.S_ISDIR(info.st_mode), info.st_mode, info.st_uid, os.geteuid())
    if problem:
        raise GpuInputError(
            "gpu_telemetry: stop_file %s: its folder %s; put it in a private per-run folder "
            "(ansible.builtin.tempfile state=directory)" % (stop_file, problem)
        )


def record_telemetry(module, duration_s, interval_s, stop_file=None, backend="auto"):
    """The gpu_telemetry module's run: samples until the window ends or `stop_file` appears.

    A node with no reader gets an empty series and the reason: telemetry is evidence beside a
    benchmark, never a reason to stop it. GpuInputError for a window that cannot be sampled.
    """
    if duration_s < 1 or interval_s <= 0:
        raise GpuInputError(
            "gpu_telemetry: duration_s must be 1 or more and interval_s above 0 (got %r, %r)" % (duration_s, interval_s)
        )
    if stop_file:
        check_stop_file(stop_file)
    telemetry = {"source": None, "emulated": False, "interval_s": interval_s, "samples": []}
    try:
        read, source, emulated = telemetry_reader(module, backend)
    except ProbeUnavailable as exc:
        return dict(changed=False, telemetry=dict(telemetry, reason=str(exc)))
    samples = sample_series(read, interval_s, duration_s, stop_file)
    return dict(changed=False, telemetry=dict(telemetry, source=source, emulated=emulated, samples=samples))
