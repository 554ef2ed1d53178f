"""Lossless RoCE settings of a node's fabric port, for the roce_qos module: read, plan, apply, read back.

fabric/qos.py decides; this file runs `dcb -j pfc|app|ets show dev <iface>` and reads the port's
per-priority ECN switches in sysfs, runs the planned `dcb ... set/replace/flush` commands and
writes the ECN switches, then reads everything again. A setting the NIC refuses is reported and
recorded as read, never as asked.
"""

import os

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import FabricError
from ansible_collections.seatwright.fleet.plugins.module_utils.fabric.qos import (
    ECN_POINTS,
    declared_problems,
    plan_qos,
    port_readings,
    qos_diff,
    qos_fact,
    refusals,
)

DCB_OBJECTS = ("pfc", "app", "ets")
FACT = "seatwright_roce_qos"


def read_port(module, root, iface, priority):
    """port_readings of `iface` as dcb and sysfs report it now."""
    tool = module.get_bin_path("dcb")
    dcb = None
    if tool:
        dcb = dict((name, module.run_command([tool, "-j", name, "show", "dev", iface])) for name in DCB_OBJECTS)
    ecn = {}
    for point in ECN_POINTS:
        path = os.path.join(root, "sys", "class", "net", iface, "ecn", point, "enable", str(priority))
        try:
            with open(path) as handle:
                ecn[point] = handle.read()
        except OSError:
            ecn[point] = None
    return port_readings(iface, priority, dcb, ecn)


def converge_qos(module, host):
    """The roce_qos result: the fact, the plan, applied unless in check mode, and read back."""
    params = module.params
    declared, iface, root = params["declared"], params["fabric_iface"], params["sysfs_root"]
    problems = declared_problems(declared)
    if problems:
        raise FabricError("host %s: %s" % (host, "; ".join(problems)))
    if declared is None:
        return {
            "changed": False,
            "plan": None,
            "fact": qos_fact(iface, None, {"supported": False, "reason": "nothing declared"}),
        }
    readings = read_port(module, root, iface, declared["priority"])
    plan = plan_qos(iface, declared, readings)
    result = _with_fact({"changed": plan["changed"], "plan": plan}, qos_fact(iface, declared, readings))
    if module._diff:
        result["diff"] = qos_diff(plan, declared, readings)
    if module.check_mode or not plan["changed"]:
        return result
    failed = []
    tool = module.get_bin_path("dcb")
    for change in plan["changes"]:
        if "argv" in change:
            rc, out, err = module.run_command([tool] + change["argv"])
            if rc != 0:
                failed.append((change, err or out))
            continue
        try:
            with open(os.path.join(root, change["path"]), "w") as handle:
                handle.write(change["value"])
        except OSError as exc:
            failed.append((change, str(exc)))
    after = read_port(module, root, iface, declared["priority"])
    result = _with_fact(result, qos_fact(iface, declared, after))
    lines = refusals(host, iface, declared, failed, after)
    if lines:
        raise FabricError("\n".join(lines), **result)
    return result


def _with_fact(result, fact):
    """The result with the fact under `fact` and as ansible_facts.seatwright_roce_qos (cached by Ansible)."""
    return dict(result, fact=fact, ansible_facts={FACT: fact})
