"""Lossless RoCE on the host: the fabric's declared QoS, the port's readings, the plan, the refusals.

Pure: io/fabric/qos.py runs iproute2's `dcb` (PFC, the APP table that maps a DSCP to a priority,
ETS's priority-to-traffic-class map) and reads mlx5's per-priority ECN switches in sysfs
(`/sys/class/net/<iface>/ecn/roce_np|roce_rp/enable/<prio>`); everything it reads is interpreted
here, compared with the fleet's declaration (`seatwright_fleet_roce_qos`) and turned into the
commands that set it. The DSCP -> traffic class relation (NCCL_IB_TC) lives here too.

Sources: dcb-pfc(8), dcb-app(8), dcb-ets(8) (iproute2; JSON shapes from iproute2's dcb/dcb_pfc.c
and dcb/dcb_app.c); NVIDIA MLNX_OFED "Explicit Congestion Notification (ECN)"
(https://docs.nvidia.com/networking/display/mlnxofedv24103250lts/explicit+congestion+notification+(ecn)).
An mlx5 port trusts DSCP (classifies by the IP header, not the VLAN PCP) once its APP table holds a
DSCP entry, and PCP when the last one is removed (Linux drivers/net/ethernet/mellanox/mlx5/core/
en_dcbnl.c, mlx5e_dcbnl_ieee_setapp/delapp).
"""

import json

# The keys of seatwright_fleet_roce_qos and what each must be.
DECLARED_KEYS = {
    "priority": "an integer from 0 to 7 (the 802.1p priority RoCE traffic is classified to)",
    "dscp": "an integer from 0 to 63 (the DSCP the switch's lossless class matches)",
    "pfc": "true or false (priority flow control on that priority)",
    "ecn": "true or false (ECN for RoCE on that priority: roce_np and roce_rp)",
    "trust": "dscp or pcp (what the port classifies incoming traffic by)",
}
PRIORITIES = 8
DSCP_MAX = 63
TRUST_MODES = ("dscp", "pcp")
ECN_POINTS = ("roce_np", "roce_rp")
# What `dcb` prints on stderr for a port whose driver has no DCB operations (veth, lo, most virtual
# ports): recorded from iproute2 6.1.0 on a veth port.
_UNSUPPORTED_MARKS = ("Operation not supported", "Not supported")
DECLARATION = "seatwright_fleet_roce_qos"


def _is_int(value):
    return isinstance(value, int) and not isinstance(value, bool)


def dscp_problem(dscp):
    """None for a DSCP value (0-63), else what was expected."""
    if _is_int(dscp) and 0 <= dscp <= DSCP_MAX:
        return None
    return "a DSCP value from 0 to %d" % DSCP_MAX


def traffic_class(dscp):
    """The IP traffic class (TOS) byte of a DSCP: DSCP in its upper six bits (RFC 2474), ECN bits 0.

    This is what NCCL_IB_TC and RDMA-CM's tos take; DSCP 26 gives 104.
    """
    return dscp << 2


def nccl_dscp(ib_dscp, qos):
    """(dscp, problem): the DSCP NCCL marks RoCE with. The fleet's class (`qos`) declares it once;
    a node's nccl_env_ib_dscp may only repeat it. Without a fleet class, nccl_env_ib_dscp alone."""
    fleet = qos.get("dscp") if isinstance(qos, dict) else None
    if fleet is None:
        return ib_dscp, None
    if ib_dscp is not None and ib_dscp != fleet:
        return None, (
            "nccl_env_ib_dscp is %r but %s.dscp is %r; the lossless class is declared once: remove "
            "nccl_env_ib_dscp (NCCL then takes the fleet's DSCP)" % (ib_dscp, DECLARATION, fleet)
        )
    return fleet, None


def declared_faults(qos):
    """[(key, value, expected)] for each unsound part of a declaration (a dict of DECLARED_KEYS)."""
    if qos is None:
        return []
    if not isinstance(qos, dict):
        return [(None, qos, "a mapping with %s" % ", ".join(DECLARED_KEYS))]
    faults = [
        (key, qos[key], "no such setting; one of %s" % ", ".join(DECLARED_KEYS))
        for key in sorted(set(qos) - set(DECLARED_KEYS))
    ]
    for key, expected in DECLARED_KEYS.items():
        value = qos.get(key)
        if key == "priority":
            sound = _is_int(value) and 0 <= value < PRIORITIES
        elif key == "dscp":
            sound = dscp_problem(value) is None
        elif key == "trust":
            sound = value in TRUST_MODES
        else:
            sound = isinstance(value, bool)
        if not sound:
            faults.append((key, value, expected))
    return faults


def declared_problems(qos):
    """Problems with a fleet's QoS declaration, one line each naming the setting; [] when sound."""
    return [
        "%s%s is %s; expected %s"
        % (DECLARATION, "" if key is None else "." + key, "not set" if value is None else "%r" % (value,), expected)
        for key, value, expected in declared_faults(qos)
    ]


def unsupported_text(rc, err):
    """True when `dcb` answered that the port has no DCB support (not an error of ours)."""
    return rc != 0 and any(mark in (err or "") for mark in _UNSUPPORTED_MARKS)


def parse_pfc(text):
    """[bool] * 8: PFC per priority from `dcb -j pfc show dev X`; None when the text is not that."""
    try:
        prio_pfc = json.loads(text).get("prio_pfc")
    except (ValueError, TypeError, AttributeError):
        return None
    if not isinstance(prio_pfc, list) or len(prio_pfc) != PRIORITIES:
        return None
    return [bool(flag) for flag in prio_pfc]


def parse_app_dscp(text):
    """{dscp: [priorities]} from `dcb -j app show dev X` (its dscp_prio pairs); None when unreadable."""
    try:
        pairs = json.loads(text).get("dscp_prio", [])
    except (ValueError, TypeError, AttributeError):
        return None
    table = {}
    for pair in pairs if isinstance(pairs, list) else []:
        if isinstance(pair, list) and len(pair) == 2 and all(_is_int(v) for v in pair):
            table.setdefault(pair[0], []).append(pair[1])
    return dict((dscp, sorted(prios)) for dscp, prios in table.items())


def parse_ets_prio_tc(text):
    """[traffic class] per priority from `dcb -j ets show dev X`; None when unreadable."""
    try:
        prio_tc = json.loads(text).get("prio_tc")
    except (ValueError, TypeError, AttributeError):
        return None
    if not isinstance(prio_tc, list) or len(prio_tc) != PRIORITIES or not all(_is_int(v) for v in prio_tc):
        return None
    return prio_tc


def parse_flag(text):
    """True/False from a sysfs switch ('1'/'0'); None when absent or not a switch."""
    text = (text or "").strip()
    return {"1": True, "0": False}.get(text)


def port_readings(iface, priority, dcb, ecn):
    """What the port reports, in the declaration's vocabulary.

    `dcb`: {'pfc'|'app'|'ets': (rc, out, err)} from `dcb -j <object> show dev iface`, or None when
    dcb is not installed. `ecn`: {'roce_np'|'roce_rp': text of enable/<priority>, None when absent}.
    Returns {supported, reason, pfc, dscp_prio, trust, ecn: {point: bool|None}, traffic_class}.
    """
    if dcb is None:
        return {"iface": iface, "supported": False, "reason": "dcb (iproute2) is not installed; install iproute2"}
    unsupported = [name for name, (rc, _out, err) in sorted(dcb.items()) if unsupported_text(rc, err)]
    failed = [(name, err) for name, (rc, _out, err) in sorted(dcb.items()) if rc != 0 and name not in unsupported]
    ecn_absent = all(ecn.get(point) is None for point in ECN_POINTS)
    if unsupported and ecn_absent:
        return {
            "iface": iface,
            "supported": False,
            "reason": "not supported by this port: %s answers dcb %s with '%s' and has no ecn/ in sysfs"
            % (iface, "/".join(unsupported), (dcb[unsupported[0]][2] or "").strip()),
        }
    if failed:
        return {
            "iface": iface,
            "supported": False,
            "reason": "dcb %s show dev %s failed: %s" % (failed[0][0], iface, (failed[0][1] or "no output").strip()),
        }
    pfc = parse_pfc(dcb["pfc"][1]) if "pfc" in dcb else None
    app = parse_app_dscp(dcb["app"][1]) if "app" in dcb else None
    prio_tc = parse_ets_prio_tc(dcb["ets"][1]) if "ets" in dcb else None
    return {
        "iface": iface,
        "supported": True,
        "reason": None,
        "pfc": None if pfc is None else pfc[priority],
        "pfc_priorities": None if pfc is None else [p for p in range(PRIORITIES) if pfc[p]],
        "dscp_prio": app,
        "trust": None if app is None else ("dscp" if app else "pcp"),
        "ecn": dict((point, parse_flag(ecn.get(point))) for point in ECN_POINTS),
        "traffic_class": None if prio_tc is None else prio_tc[priority],
    }


def node_settings(declared, readings):
    """The node's values of each declared setting, as read: {setting: value}; a value the port
    could not report is None (never the declared value)."""
    dscp, priority = declared["dscp"], declared["priority"]
    app = readings.get("dscp_prio")
    ecn = readings.get("ecn") or {}
    return {
        "pfc": readings.get("pfc"),
        "dscp_priority": None if app is None else app.get(dscp, []),
        "trust": readings.get("trust"),
        "ecn_roce_np": ecn.get("roce_np"),
        "ecn_roce_rp": ecn.get("roce_rp"),
        "priority": priority,
        "dscp": dscp,
    }


def wanted_settings(declared):
    """What node_settings must read for the declaration to hold."""
    return {
        "pfc": declared["pfc"],
        "dscp_priority": [declared["priority"]] if declared["trust"] == "dscp" else [],
        "trust": declared["trust"],
        "ecn_roce_np": declared["ecn"],
        "ecn_roce_rp": declared["ecn"],
        "priority": declared["priority"],
        "dscp": declared["dscp"],
    }


# Settings that commands change, in the order they are applied; trust follows the APP entry on mlx5.
CHANGEABLE = ("pfc", "dscp_priority", "ecn_roce_np", "ecn_roce_rp")


def plan_qos(iface, declared, readings):
    """{'supported', 'reason', 'changes': [{setting, before, after, argv | path+value}], 'changed'}."""
    plan = {"iface": iface, "supported": readings["supported"], "reason": readings.get("reason"), "changes": []}
    if not readings["supported"]:
        plan["changed"] = False
        return plan
    before, after = node_settings(declared, readings), wanted_settings(declared)
    priority, dscp = declared["priority"], declared["dscp"]
    for setting in CHANGEABLE:
        if before[setting] == after[setting]:
            continue
        change = {"setting": setting, "before": before[setting], "after": after[setting]}
        if setting == "pfc":
            change["argv"] = [
                "pfc",
                "set",
                "dev",
                iface,
                "prio-pfc",
                "%d:%s" % (priority, "on" if after[setting] else "off"),
            ]
        elif setting == "dscp_priority" and after[setting]:
            # replace drops any other priority DSCP was mapped to (dcb-app(8)).
            change["argv"] = ["app", "replace", "dev", iface, "dscp-prio", "%d:%d" % (dscp, priority)]
        elif setting == "dscp_priority":
            change["argv"] = ["app", "flush", "dev", iface, "dscp-prio"]
        else:
            point = setting[len("ecn_") :]
            change["path"] = "sys/class/net/%s/ecn/%s/enable/%d" % (iface, point, priority)
            change["value"] = "1" if after[setting] else "0"
        plan["changes"].append(change)
    plan["changed"] = bool(plan["changes"])
    return plan


def _shown(setting, value):
    if value is None:
        return "unreadable"
    if setting == "dscp_priority":
        return "priority %s" % ",".join(str(p) for p in value) if value else "no entry"
    if isinstance(value, bool):
        return "on" if value else "off"
    return str(value)


SETTING_NAMES = {
    "pfc": "PFC on priority {priority}",
    "dscp_priority": "APP table DSCP {dscp}",
    "trust": "DSCP trust",
    "ecn_roce_np": "ECN roce_np on priority {priority}",
    "ecn_roce_rp": "ECN roce_rp on priority {priority}",
}


def setting_name(setting, declared):
    return SETTING_NAMES.get(setting, setting).format(**declared)


def refusals(host, iface, declared, failed_commands, after_readings):
    """One line per setting the port did not take: a command that failed, or a value that did not
    read back. Such a setting is never reported as set."""
    lines = []
    for change, err in failed_commands:
        if "argv" in change:
            how, look = "dcb " + " ".join(change["argv"]), "`dcb -j %s show dev %s`" % (change["argv"][0], iface)
        else:
            how, look = "write %s to /%s" % (change["value"], change["path"]), "/sys/class/net/%s/ecn/" % iface
        lines.append(
            "host %s: %s refused %s (%s): %s; it is not set. Check %s and the NIC firmware's DCB and "
            "congestion-control settings (mlxconfig)"
            % (host, iface, setting_name(change["setting"], declared), how, (err or "no output").strip()[-300:], look)
        )
    failed = set(change["setting"] for change, _ in failed_commands)
    if not after_readings.get("supported"):
        return lines + [
            "host %s: %s could not be read back after setting: %s" % (host, iface, after_readings.get("reason"))
        ]
    now, wanted = node_settings(declared, after_readings), wanted_settings(declared)
    for setting in CHANGEABLE + ("trust",):
        if setting in failed or now[setting] == wanted[setting]:
            continue
        lines.append(
            "host %s: %s reads %s as %s after setting it to %s; the NIC refused it, so it is not set "
            "(see `dcb -j %s show dev %s` and /sys/class/net/%s/ecn/)"
            % (
                host,
                iface,
                setting_name(setting, declared),
                _shown(setting, now[setting]),
                _shown(setting, wanted[setting]),
                "pfc" if setting == "pfc" else "app",
                iface,
                iface,
            )
        )
    return lines


def qos_fact(iface, declared, readings):
    """What the node records (and the cross-node NCCL fact keeps beside its result): the declared
    values, and each setting as the port reads it (None where it cannot be read), never as asked."""
    fact = {"iface": iface, "declared": declared, "supported": readings["supported"], "reason": readings.get("reason")}
    # The traffic class NCCL_IB_TC carries for the declared DSCP (the same function renders it).
    fact["ib_traffic_class"] = traffic_class(declared["dscp"]) if declared is not None else None
    if declared is not None and readings["supported"]:
        fact["settings"] = node_settings(declared, readings)
        fact["traffic_class"] = readings.get("traffic_class")
        fact["pfc_priorities"] = readings.get("pfc_priorities")
    else:
        fact["settings"] = None
    return fact


def fleet_problems(declared, facts, rdma_hosts=()):
    """One line per node whose port settings differ from the fleet's declaration, by host and setting.

    `facts`: host -> qos_fact (None: never read). A node that declares RDMA devices (`rdma_hosts`) but
    whose port cannot report its settings is refused too; one without RDMA (the lab's veth) is not.
    """
    if declared is None:
        return []
    wanted = wanted_settings(declared)
    problems = []
    for host in sorted(facts):
        fact = facts[host]
        if not fact:
            problems.append(
                "host %s: its RoCE QoS has not been read; run the rdma_fabric role on it "
                "(ansible-playbook site.yml --tags fabric --limit %s)" % (host, host)
            )
            continue
        if not fact.get("supported"):
            if host in rdma_hosts:
                problems.append("host %s: its RoCE QoS cannot be read: %s" % (host, fact.get("reason")))
            continue
        settings = fact.get("settings") or {}
        for setting in ("pfc", "dscp_priority", "trust", "ecn_roce_np", "ecn_roce_rp"):
            if settings.get(setting) != wanted[setting]:
                problems.append(
                    "host %s: %s is %s on %s; the fleet declares %s (%s); run the rdma_fabric role on it, or "
                    "fix the NIC where it refuses the setting"
                    % (
                        host,
                        setting_name(setting, declared),
                        _shown(setting, settings.get(setting)),
                        fact.get("iface"),
                        _shown(setting, wanted[setting]),
                        DECLARATION,
                    )
                )
    return problems


def qos_text(iface, declared, values):
    """One line per setting, for --diff."""
    if values is None:
        return ""
    return "".join(
        "%s %s: %s\n" % (iface, setting_name(setting, declared), _shown(setting, values[setting]))
        for setting in CHANGEABLE + ("trust",)
    )


def qos_diff(plan, declared, readings):
    before = node_settings(declared, readings) if readings["supported"] else None
    return {
        "before_header": "RoCE QoS of %s" % plan["iface"],
        "after_header": "RoCE QoS of %s" % plan["iface"],
        "before": qos_text(plan["iface"], declared, before),
        "after": qos_text(plan["iface"], declared, wanted_settings(declared) if readings["supported"] else None),
    }
