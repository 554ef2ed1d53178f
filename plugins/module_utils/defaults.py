"""seatwright's shared values: the one definition of every default that code, roles and docs share.

The node folders and the paths under them, the NCCL env file, the plan folder, the seat-name pattern
and the node defaults the field did not measure are assigned here and nowhere else. Modules take
their argument_spec defaults from these names; roles reach them through the collection's lookup
(`lookup('seatwright.fleet.defaults', NAME)`, read once by the common role's defaults); the
documented copies (module DOCUMENTATION, role argument specs, the seat schema's name pattern) are
written by tools/render_defaults.py, and `--check` fails when one is stale.

`LABELLED_DEFAULTS` says, for the node defaults the field did not measure, what each is and where its
value comes from; the plan shows, for each seat node, the value in effect (the inventory's when it
sets one, else the default) and its source.
"""

import os
import re
from collections import namedtuple

# seatwright's folders on every node; everything below derives from these two.
CONFIG_DIR = "/etc/seatwright"
STATE_DIR = "/var/lib/seatwright"

# Paths on a node under those folders, each named once.
NCCL_ENV_FILE = CONFIG_DIR + "/nccl.env"
GPU_SETTINGS_FILE = CONFIG_DIR + "/gpu-settings.json"
GPU_FACTS_CACHE = STATE_DIR + "/gpu_facts.json"
STAGING_DIR = STATE_DIR + "/staging"
IMAGES_DIR = STATE_DIR + "/images"
IMAGE_FACTS_DIR = IMAGES_DIR + "/facts"
SEAT_DIR = STATE_DIR + "/seat"
COTENANTS_RECORD = SEAT_DIR + "/cotenants.json"
MODELS_DIR = STATE_DIR + "/models"
# The record of a node's last full converge (node/converge_record.py).
CONVERGE_RECORD = STATE_DIR + "/converge-record.json"
# What the drain before a disruptive change records on a node: the lab's test changes made (node/drain.py).
DRAIN_DIR = STATE_DIR + "/drain"

# Where playbooks/plan.yml writes a seat's plan and bring-up reads it, relative to the project on the
# controller (<project>/.cache/plans/<seat>.json).
PLAN_DIR = ".cache/plans"

# A DNS label (RFC 1123, lower case): what names a seat, an image definition or a patch, so each can
# name containers, files, tags and folders unchanged.
DNS_LABEL_PATTERN = r"^[a-z0-9][a-z0-9-]{0,62}$"
# A seat's name: a DNS label, so it can name containers, files and evidence folders unchanged.
SEAT_NAME_PATTERN = DNS_LABEL_PATTERN


def plan_file(plan_dir, seat):
    """A seat's plan in the plan folder: the one place its file name is decided (plan.yml writes it,
    bring-up and promote.yml read it, promote.yml reads the incumbent's beside the candidate's)."""
    if not isinstance(seat, str) or not re.match(SEAT_NAME_PATTERN, seat):
        raise ValueError("seat name %r is not a DNS label (%s): name the seat as in seats/" % (seat, SEAT_NAME_PATTERN))
    return os.path.join(plan_dir, seat + ".json")


# Node defaults the field did not measure; LABELLED_DEFAULTS below says where each comes from.
FABRIC_MTU = 9000
PROBE_THRESHOLD = 0.9
DRIVER_BRANCH = "580"

Labelled = namedtuple("Labelled", "name what default source needs_rdma")

LABELLED_DEFAULTS = (
    Labelled(
        "rdma_fabric_mtu",
        "fabric MTU (bytes)",
        FABRIC_MTU,
        "assumed: the field reports do not give the fabric's MTU; 9000 is the usual jumbo frame, "
        "large enough for RoCE's largest RDMA path MTU of 4096 bytes (docs/field.md#roce-and-sysfs)",
        True,
    ),
    Labelled(
        "rdma_fabric_probe_threshold",
        "bandwidth probe threshold (fraction of line rate)",
        PROBE_THRESHOLD,
        "seatwright's choice, below the 98 % of line rate the field measured between its nodes [000] "
        "(docs/field.md#roce-and-sysfs)",
        False,
    ),
    Labelled(
        "nvidia_driver_branch",
        "NVIDIA driver branch",
        DRIVER_BRANCH,
        "seatwright's choice: the first branch NVIDIA ships with a pinning package, Blackwell needs 570 "
        "or newer; the field's [003] node ran driver 610.88 (docs/field.md#driver)",
        False,
    ),
)

# Inventory variables a play passes to the plan for these labels (playbooks/plan.yml reads it).
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


# The values roles and plays read, by the name they pass to lookup('seatwright.fleet.defaults', NAME).
FOR_ANSIBLE = {
    "config_dir": CONFIG_DIR,
    "state_dir": STATE_DIR,
    "nccl_env_file": NCCL_ENV_FILE,
    "gpu_settings_file": GPU_SETTINGS_FILE,
    "gpu_facts_cache": GPU_FACTS_CACHE,
    "staging_dir": STAGING_DIR,
    "images_dir": IMAGES_DIR,
    "seat_dir": SEAT_DIR,
    "cotenants_record": COTENANTS_RECORD,
    "models_dir": MODELS_DIR,
    "converge_record": CONVERGE_RECORD,
    "drain_dir": DRAIN_DIR,
    "plan_dir": PLAN_DIR,
    "labelled_pattern": COLLECT_PATTERN,
    "seat_name_pattern": SEAT_NAME_PATTERN,
    "fabric_mtu": FABRIC_MTU,
    "probe_threshold": PROBE_THRESHOLD,
    "driver_branch": DRIVER_BRANCH,
}


def rebased(value, config_dir=None, state_dir=None):
    """`value` with the default folders replaced by the ones an inventory chose, so a path under a
    moved folder moves with it (the name under the folder stays defined once, above)."""
    for default, chosen in ((CONFIG_DIR, config_dir), (STATE_DIR, state_dir)):
        if not chosen or not isinstance(value, str):
            continue
        if value == default or value.startswith(default + "/"):
            return chosen.rstrip("/") + value[len(default) :]
    return value
