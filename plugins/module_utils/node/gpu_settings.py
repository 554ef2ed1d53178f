"""GPU settings as one decision: power limits, persistence mode and the clock lock.

Takes what the GPUs report (and the clock lock last applied, which no driver interface reads back)
and the request; returns, per setting, what it is, what it becomes and whether that is a change.
The gpu_settings module and the boot unit (io/gpu_settings.py) both apply this plan.
"""

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import GpuInputError
from ansible_collections.seatwright.fleet.plugins.module_utils.node.gpu import (
    plan_diff,
    plan_power_limits,
    readback_failures,
)

SETTINGS_FORMAT = "seatwright-gpu-settings/1"


def check_clock_lock(host, clock_lock):
    """{min_mhz, max_mhz} as ints, or None to release; GpuInputError naming the host otherwise."""
    if clock_lock is None:
        return None
    expected = "expected {min_mhz, max_mhz} with 0 < min_mhz <= max_mhz (MHz); fix it, or set null to release the lock"
    if not isinstance(clock_lock, dict) or set(clock_lock) != {"min_mhz", "max_mhz"}:
        raise GpuInputError("host %s: clock lock is %r; %s." % (host, clock_lock, expected))
    try:
        low, high = int(clock_lock["min_mhz"]), int(clock_lock["max_mhz"])
    except (TypeError, ValueError):
        raise GpuInputError("host %s: clock lock is %r; %s." % (host, clock_lock, expected))
    if not 0 < low <= high:
        raise GpuInputError("host %s: clock lock is %r; %s." % (host, clock_lock, expected))
    return {"min_mhz": low, "max_mhz": high}


def plan_persistence(devices, wanted, selected=None):
    """Per GPU: persistence mode before and after; `wanted` None leaves it as it is."""
    chosen = set(selected or [d["index"] for d in devices])
    plan = []
    for device in sorted(devices, key=lambda d: d["index"]):
        if device["index"] not in chosen:
            continue
        before = device.get("persistence_mode")
        after = before if wanted is None else bool(wanted)
        plan.append({"index": device["index"], "before": before, "after": after, "changed": before != after})
    return plan


def plan_clocks(applied, wanted):
    """The clock lock recorded as applied against the one requested (None: no lock)."""
    return {"before": applied, "after": wanted, "changed": applied != wanted}


def plan_settings(host, devices, request, applied_clock_lock):
    """The whole plan for one node; `request` has power_state, power_limit_w, power_overrides, gpus,
    persistence and clock_lock (already checked by check_clock_lock)."""
    power = plan_power_limits(
        host,
        devices,
        request.get("power_state", "present"),
        request.get("power_limit_w"),
        request.get("power_overrides"),
        request.get("gpus"),
    )
    persistence = plan_persistence(devices, request.get("persistence"), request.get("gpus"))
    clocks = plan_clocks(applied_clock_lock, request.get("clock_lock"))
    changed = any(p["changed"] for p in power) or any(p["changed"] for p in persistence) or clocks["changed"]
    return {"limits": power, "persistence": persistence, "clocks": clocks, "changed": changed}


def boot_settings(plan, request):
    """What the boot unit re-applies: the request made concrete (one limit per GPU index)."""
    return {
        "format": SETTINGS_FORMAT,
        "power_limits_w": dict((str(p["index"]), p["after_w"]) for p in plan["limits"]),
        "persistence": request.get("persistence"),
        "clock_lock": request.get("clock_lock"),
    }


def request_from_boot_settings(settings):
    """The request the boot unit applies, from the settings file gpu_settings wrote."""
    if not isinstance(settings, dict) or settings.get("format") != SETTINGS_FORMAT:
        raise GpuInputError(
            "the GPU settings file is not %s; re-run the gpu_power role to rewrite it" % SETTINGS_FORMAT
        )
    limits = settings.get("power_limits_w") or {}
    return {
        "power_state": "present",
        "power_limit_w": None,
        "power_overrides": limits,
        "gpus": sorted(int(i) for i in limits),
        "persistence": settings.get("persistence"),
        "clock_lock": settings.get("clock_lock"),
    }


def settings_diff(plan):
    """Ansible --diff payload covering all three settings."""
    power = plan_diff(plan["limits"])

    def render(side, key):
        lines = [power[side]]
        lines.extend(
            "GPU %d: persistence mode %s\n" % (p["index"], "on" if p[key] else "off" if p[key] is False else "unknown")
            for p in plan["persistence"]
        )
        lock = plan["clocks"][key]
        lines.append("clock lock: %s\n" % ("%d-%d MHz" % (lock["min_mhz"], lock["max_mhz"]) if lock else "none"))
        return "".join(lines)

    return {
        "before": render("before", "before"),
        "after": render("after", "after"),
        "before_header": "GPU settings",
        "after_header": "GPU settings",
    }


def settings_readback_failures(host, plan, devices_after):
    """Messages for every setting that, read back after applying, is not what was asked for."""
    failures = readback_failures(host, plan["limits"], devices_after)
    by_index = dict((d["index"], d) for d in devices_after)
    for item in plan["persistence"]:
        if item["changed"] and by_index.get(item["index"], {}).get("persistence_mode") != item["after"]:
            failures.append(
                "host %s: GPU %d was asked to turn persistence mode %s but reads back %s; check "
                "`nvidia-smi -q -i %d` and whether nvidia-persistenced owns it."
                % (
                    host,
                    item["index"],
                    "on" if item["after"] else "off",
                    by_index.get(item["index"], {}).get("persistence_mode"),
                    item["index"],
                )
            )
    return failures
