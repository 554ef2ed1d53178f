"""GPU telemetry during a benchmark: power, clocks, utilisation and temperature per GPU per node.

The node-side sampler (library/gpu_telemetry.py through io/gpu_probe.py) turns NVML readings or
nvidia-smi rows into samples with the functions here; the benchmark summarises them per
concurrency level and flags a seat that draws far below its power cap at full load (the field saw
87 W per GPU at "full" load: the software, not the GPU, was the limit). Readings from the lab's
nvidia-smi emulator are test equipment: they are kept, labelled, and never judged.
"""

from ansible_collections.seatwright.fleet.plugins.module_utils.bench.stats import median

# nvidia-smi --query-gpu fields for one sample, in this order (nvidia-smi's own names).
SMI_TELEMETRY_FIELDS = (
    "index",
    "power.draw",
    "enforced.power.limit",
    "clocks.sm",
    "clocks.max.sm",
    "utilization.gpu",
    "temperature.gpu",
)
_SAMPLE_KEYS = ("index", "power_w", "power_limit_w", "sm_clock_mhz", "sm_clock_max_mhz", "util_pct", "temp_c")
EMULATOR_MARK = "emulator"
# A GPU whose median draw at the highest load stays under this share of its cap is software-bound.
DEFAULT_SOFTWARE_BOUND_SHARE = 0.5


def _number(text):
    text = (text or "").strip()
    for unit in (" W", " MHz", " %", " C"):
        if text.endswith(unit):
            text = text[: -len(unit)]
    try:
        return float(text)
    except ValueError:
        return None  # "[N/A]", "[Not Supported]"


def gpus_from_smi_csv(text):
    """One dict per GPU from `--query-gpu=<SMI_TELEMETRY_FIELDS> --format=csv,noheader,nounits`."""
    gpus = []
    for line in text.splitlines():
        cells = [cell.strip() for cell in line.split(",")]
        if not line.strip() or cells[0].startswith("index"):
            continue
        if len(cells) != len(SMI_TELEMETRY_FIELDS):
            raise ValueError(
                "expected %d telemetry fields, got %d in %r" % (len(SMI_TELEMETRY_FIELDS), len(cells), line)
            )
        values = [_number(cell) for cell in cells]
        gpu = dict(zip(_SAMPLE_KEYS, values))
        gpu["index"] = int(gpu["index"]) if gpu["index"] is not None else None
        gpus.append(gpu)
    return gpus


def gpu_from_nvml(index, power_mw, limit_mw, sm_mhz, sm_max_mhz, util_pct, temp_c):
    """One GPU's sample from raw NVML values (milliwatts as NVML gives them; None where unsupported)."""
    return {
        "index": index,
        "power_w": power_mw / 1000.0 if power_mw is not None else None,
        "power_limit_w": limit_mw / 1000.0 if limit_mw is not None else None,
        "sm_clock_mhz": sm_mhz,
        "sm_clock_max_mhz": sm_max_mhz,
        "util_pct": util_pct,
        "temp_c": temp_c,
    }


def is_emulated(smi_version_text):
    """True when `nvidia-smi --version` is the lab's emulator (test equipment, not a measurement)."""
    return EMULATOR_MARK in (smi_version_text or "").lower()


def samples_in_windows(series, windows):
    """The samples of one node's series taken inside any of the (start, end) windows (epoch seconds)."""
    return [s for s in series.get("samples", []) if any(start <= s["t"] <= end for start, end in windows)]


def window_summary(series_by_host, windows):
    """Median power, clocks, utilisation and temperature per host and GPU over some time windows."""
    out = {}
    for host, series in sorted(series_by_host.items()):
        per_gpu = {}
        for sample in samples_in_windows(series, windows):
            for gpu in sample.get("gpus", []):
                per_gpu.setdefault(gpu["index"], []).append(gpu)
        out[host] = {
            str(index): {key: median([g.get(key) for g in readings]) for key in _SAMPLE_KEYS[1:]}
            for index, readings in sorted(per_gpu.items())
        }
    return out


def software_bound(full_load_summary, emulated, share=DEFAULT_SOFTWARE_BOUND_SHARE):
    """Verdict on the power draw at the highest load: software-bound, GPU-bound, or not judged, with why."""
    if emulated:
        return {
            "verdict": "not judged",
            "reasons": ["telemetry came from the lab's nvidia-smi emulator: test equipment, not a measurement"],
        }
    low, judged = [], 0
    for host, gpus in sorted(full_load_summary.items()):
        for index, reading in sorted(gpus.items()):
            power, cap = reading.get("power_w"), reading.get("power_limit_w")
            if power is None or not cap:
                continue
            judged += 1
            if power < share * cap:
                low.append(
                    "%s GPU %s drew a median %.0f W of its %.0f W cap (%.0f %%) at the highest "
                    "concurrency" % (host, index, power, cap, 100.0 * power / cap)
                )
    if not judged:
        return {"verdict": "not judged", "reasons": ["no power readings with a cap during the highest load"]}
    if low:
        return {
            "verdict": "software-bound",
            "reasons": low
            + ["under %.0f %% of the cap at full load: the engine, not the GPU, limits throughput" % (100 * share)],
        }
    return {
        "verdict": "gpu-bound",
        "reasons": ["every GPU drew at least %.0f %% of its cap at the highest load" % (100 * share)],
    }


def summarise(telemetry, benchmark, share=DEFAULT_SOFTWARE_BOUND_SHARE):
    """The record's telemetry: per-node series kept, medians over the highest-concurrency windows, verdict.

    `telemetry` is the telemetry.json part ({"hosts": {host: {source, emulated, interval_s, samples}}});
    `benchmark` supplies the time windows of its levels.
    """
    hosts = (telemetry or {}).get("hosts") or {}
    if not hosts:
        return None
    levels = (benchmark or {}).get("levels") or []
    top = max((lv["concurrency"] for lv in levels), default=None)
    windows = [tuple(lv["window"]) for lv in levels if lv["concurrency"] == top and lv.get("window")]
    emulated = any(series.get("emulated") for series in hosts.values())
    full_load = window_summary(hosts, windows) if windows else {}
    sources = sorted({series.get("source") or "unknown" for series in hosts.values()})
    return {
        "hosts": sorted(hosts),
        "emulated": emulated,
        "label": (
            "emulated test equipment (the lab's nvidia-smi emulator), not a measurement" if emulated else "measured"
        ),
        "source": ", ".join(sources),
        "interval_s": max((series.get("interval_s") or 0) for series in hosts.values()),
        "samples": sum(len(series.get("samples") or []) for series in hosts.values()),
        "full_load_concurrency": top,
        "full_load": full_load,
        "verdict": software_bound(full_load, emulated, share),
    }
