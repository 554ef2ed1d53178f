"""Where the node-side defaults the field did not measure come from.

One table (`LABELLED_DEFAULTS`): the role variable, what it is, the role's default (a unit test keeps
it equal to the role's defaults/main.yml) and the source of that default. The plan shows, for each
seat node, the value in effect (the inventory's when it sets one, else the default) and its source.
"""

from collections import namedtuple

Labelled = namedtuple("Labelled", "name what default source needs_rdma")

LABELLED_DEFAULTS = (
    Labelled(
        "rdma_fabric_mtu",
        "fabric MTU (bytes)",
        9000,
        "assumed: the field reports do not give the fabric's MTU; 9000 is the usual jumbo frame, "
        "large enough for RoCE's largest RDMA path MTU of 4096 bytes (docs/field.md#roce-and-sysfs)",
        True,
    ),
    Labelled(
        "rdma_fabric_probe_threshold",
        "bandwidth probe threshold (fraction of line rate)",
        0.9,
        "seatwright's choice, below the 98 % of line rate the field measured between its nodes [000] "
        "(docs/field.md#roce-and-sysfs)",
        False,
    ),
    Labelled(
        "nvidia_driver_branch",
        "NVIDIA driver branch",
        "580",
        "seatwright's choice: the first branch NVIDIA ships with a pinning package, Blackwell needs 570 "
        "or newer; the field's [003] node ran driver 610.88 (docs/field.md#driver)",
        False,
    ),
)

# Inventory variables a play passes to the plan for these labels (playbooks/plan.yml carries the
# same pattern; a unit test keeps them equal).
COLLECT_PATTERN = r"^(rdma_fabric_mtu|rdma_fabric_probe_threshold(_reason)?|nvidia_driver_branch)$"


def _in_effect(item, host_vars):
    """(value, source) of one labelled variable on one host."""
    if item.name not in host_vars:
        return item.default, item.source
    value = host_vars[item.name]
    reason = host_vars.get(item.name + "_reason") if item.name == "rdma_fabric_probe_threshold" else None
    if value is None and item.name == "rdma_fabric_mtu":
        return None, "inventory (rdma_fabric_mtu is null: the MTU is left as the node has it)"
    return value, "inventory: %s" % reason if reason else "inventory"


def default_origins(seat_hosts):
    """Provenance entries for the labelled node defaults on the seat's hosts, one per distinct value.

    `seat_hosts` are the hosts' variables in node-rank order, each with `host`; hosts that agree on a
    value and its source share one entry naming them all.
    """
    entries = []
    for item in LABELLED_DEFAULTS:
        grouped = []
        for host_vars in seat_hosts:
            if item.needs_rdma and not host_vars.get("seatwright_node_rdma_devices"):
                continue
            value, source = _in_effect(item, host_vars)
            for group in grouped:
                if group[0] == value and group[1] == source:
                    group[2].append(host_vars["host"])
                    break
            else:
                grouped.append((value, source, [host_vars["host"]]))
        entries += [
            {"what": "%s on %s" % (item.what, ", ".join(hosts)), "value": value, "source": source}
            for value, source, hosts in grouped
        ]
    return entries
