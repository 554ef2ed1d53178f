"""RoCE mode and MTU of a node's fabric port: what to change, and whether the change held.

Pure: readings in, a plan out. io/fabric/roce.py reads RDMA-CM's default RoCE version of each
declared port (cma_roce_mode) and the fabric interface's MTU, applies the plan and reads back.

RDMA-CM picks the RoCE version of a connection from the port's default: v2 runs over UDP/IP and
is routable, v1 is link-local. RoCE also wants the same jumbo MTU on every hop; a smaller MTU on
one node caps the RDMA MTU the pair negotiates.
"""

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import FabricError

# cma_roce_mode prints the port's default as one of these (rdma-core's configfs text).
ROCE_MODE_NAMES = {1: "IB/RoCE v1", 2: "RoCE v2"}
# Below 1280 (IPv6's minimum) the fabric carries no IPv6; 9978 is the most a ConnectX port takes.
MTU_RANGE = (1280, 9978)


def parse_roce_mode(text):
    """1 or 2 from cma_roce_mode's answer, None when it says something else."""
    text = (text or "").strip()
    for version, name in ROCE_MODE_NAMES.items():
        if text == name:
            return version
    return None


def check_request(host, devices, roce_version, iface, mtu):
    """FabricError naming the first setting that cannot be applied."""
    if roce_version is not None and roce_version not in ROCE_MODE_NAMES:
        raise FabricError("host %s: roce_version is %r; give 1 or 2 (2: RoCE v2, routable)" % (host, roce_version))
    if roce_version is not None and not devices:
        raise FabricError("host %s: roce_version is set but no RDMA device is named; pass rdma_devices" % host)
    if mtu is not None:
        if not iface:
            raise FabricError("host %s: mtu is set but no interface is named; pass fabric_iface" % host)
        if not MTU_RANGE[0] <= mtu <= MTU_RANGE[1]:
            raise FabricError(
                "host %s: mtu %d is outside %d-%d; RoCE wants 9000 end to end (switch included)"
                % (host, mtu, MTU_RANGE[0], MTU_RANGE[1])
            )


def plan_settings(roce_readings, roce_version, iface, mtu_before, mtu):
    """{'roce': [{device, port, before, after, changed}], 'mtu': {...} or None, 'changed': bool}.

    `roce_readings`: [{device, port, text}] as cma_roce_mode answered (text None: not read).
    A port whose answer cannot be read is set, so the run ends in a known state.
    """
    roce = []
    if roce_version is not None:
        for reading in roce_readings:
            before = parse_roce_mode(reading["text"])
            roce.append(
                {
                    "device": reading["device"],
                    "port": reading["port"],
                    "before": before,
                    "before_text": reading["text"],
                    "after": roce_version,
                    "changed": before != roce_version,
                }
            )
    mtu_plan = None
    if mtu is not None:
        mtu_plan = {"iface": iface, "before": mtu_before, "after": mtu, "changed": mtu_before != mtu}
    changed = any(item["changed"] for item in roce) or bool(mtu_plan and mtu_plan["changed"])
    return {"roce": roce, "mtu": mtu_plan, "changed": changed}


def readback_failures(host, plan, roce_after, mtu_after):
    """Messages for every setting that did not hold; `roce_after` maps (device, port) to cma_roce_mode's text."""
    failures = []
    for item in plan["roce"]:
        text = roce_after.get((item["device"], item["port"]))
        if parse_roce_mode(text) != item["after"]:
            failures.append(
                "host %s: %s port %s still reports %r after setting %s; check that configfs is mounted "
                "(/sys/kernel/config) and the rdma_cm module is loaded"
                % (host, item["device"], item["port"], text, ROCE_MODE_NAMES[item["after"]])
            )
    if plan["mtu"] and mtu_after != plan["mtu"]["after"]:
        failures.append(
            "host %s: %s reports MTU %s after setting %d; the NIC or its driver refused it (see `ip -d link "
            "show %s` for its maxmtu)"
            % (host, plan["mtu"]["iface"], mtu_after, plan["mtu"]["after"], plan["mtu"]["iface"])
        )
    return failures


def settings_text(plan, side):
    """One line per setting, as it stands `before` or `after`, for --diff."""
    lines = []
    for item in plan["roce"]:
        value = item[side]
        shown = ROCE_MODE_NAMES.get(value) or (item["before_text"] if side == "before" else None) or "unknown"
        lines.append("%s port %s: %s" % (item["device"], item["port"], shown))
    if plan["mtu"]:
        lines.append("%s mtu: %s" % (plan["mtu"]["iface"], plan["mtu"][side]))
    return "\n".join(lines) + "\n" if lines else ""


def settings_diff(plan):
    return {
        "before_header": "RoCE mode and MTU",
        "after_header": "RoCE mode and MTU",
        "before": settings_text(plan, "before"),
        "after": settings_text(plan, "after"),
    }
