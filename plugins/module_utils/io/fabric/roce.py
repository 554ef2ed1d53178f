"""RoCE mode and MTU on a node, for the roce_settings module: read, plan, apply, read back.

fabric/roce.py decides; this file asks cma_roce_mode (rdma-core) for each declared port's
default RoCE version and sets it, and reads the interface's MTU from sysfs and sets it with
`ip link`. Failures raise FabricError with the message for people.
"""

import os

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import FabricError
from ansible_collections.seatwright.fleet.plugins.module_utils.fabric.roce import (
    check_request,
    plan_settings,
    readback_failures,
    settings_diff,
)


def converge_roce(module, host):
    """The roce_settings result: the plan, applied unless in check mode, and read back."""
    params = module.params
    devices, version = params["rdma_devices"], params["roce_version"]
    iface, mtu = params["fabric_iface"], params["mtu"]
    check_request(host, devices, version, iface, mtu)
    root = params["sysfs_root"]
    ports = device_ports(host, root, devices) if version is not None else []
    tool = _binary(module, "cma_roce_mode", "rdma-core") if ports else None
    readings = [dict(port, text=read_roce_mode(module, tool, port)) for port in ports]
    plan = plan_settings(readings, version, iface, read_mtu(host, root, iface) if mtu is not None else None, mtu)
    result = dict(plan)
    if module._diff:
        result["diff"] = settings_diff(plan)
    if module.check_mode or not plan["changed"]:
        return result
    for item in plan["roce"]:
        if item["changed"]:
            _run(module, host, [tool, "-d", item["device"], "-p", str(item["port"]), "-m", str(item["after"])])
    if plan["mtu"] and plan["mtu"]["changed"]:
        _run(module, host, [_binary(module, "ip", "iproute2"), "link", "set", "dev", iface, "mtu", str(mtu)])
    after = {(item["device"], item["port"]): read_roce_mode(module, tool, item) for item in plan["roce"]}
    failures = readback_failures(host, plan, after, read_mtu(host, root, iface) if plan["mtu"] else None)
    if failures:
        raise FabricError("\n".join(failures), **result)
    return result


def device_ports(host, root, devices):
    """[{device, port}] of every port of the named RDMA devices, from sysfs."""
    found = []
    for device in devices:
        folder = os.path.join(root, "sys", "class", "infiniband", device, "ports")
        try:
            names = sorted(os.listdir(folder), key=lambda name: int(name) if name.isdigit() else 0)
        except OSError:
            raise FabricError(
                "host %s: RDMA device %s is not on this node (no %s); fix seatwright_node_rdma_devices or "
                "load the NIC's driver (mlx5_core)" % (host, device, folder)
            )
        found += [{"device": device, "port": int(name)} for name in names if name.isdigit()]
    return found


def read_mtu(host, root, iface):
    path = os.path.join(root, "sys", "class", "net", iface, "mtu")
    try:
        with open(path) as handle:
            return int(handle.read().strip())
    except (OSError, ValueError):
        raise FabricError(
            "host %s: cannot read the MTU of %s (%s); check seatwright_node_fabric_iface (see `ip -br link`)"
            % (host, iface, path)
        )


def read_roce_mode(module, tool, port):
    """cma_roce_mode's answer for one port, or None when it cannot say."""
    rc, out, _err = module.run_command([tool, "-d", port["device"], "-p", str(port["port"])])
    return out.strip() if rc == 0 else None


def _binary(module, name, package):
    path = module.get_bin_path(name)
    if not path:
        raise FabricError(
            "%s is not installed on this node; install %s (rdma_fabric_install_packages)" % (name, package)
        )
    return path


def _run(module, host, argv):
    rc, out, err = module.run_command(argv)
    if rc != 0:
        raise FabricError(
            "host %s: %s failed (rc %d): %s" % (host, " ".join(argv), rc, (err or out or "no output").strip()[-400:])
        )
