"""When a node may skip its converge: the record of its last full converge, and what makes it stale.

A full converge of a node runs every node role (about 50 task runs); on a fleet of a dozen nodes most
re-runs change nothing. After a full converge succeeds, the node keeps a record: the digest of what
the converge was made from (the collection's roles, modules and plays, and the node's variables), the
boot it ran in, when, and the state of every path the node roles write (kind, mode, size, mtime and
link target; a content change moves the mtime). A later run skips the roles on that node only while
all of these still hold. Anything else sends the node through the roles again:

- no record, or one this code cannot read;
- other roles, modules, plays or variables (a new seatwright, an inventory edit, `-e` overrides);
- a reboot (GPU power limits, loaded modules and the MTU live in the running kernel);
- a record older than the age limit (what the record cannot see, such as a stopped service, is
  repaired within that time);
- any watched path added, removed or changed since (a hand edit, a package change in dpkg's status).

The node's side is one shell command (`snapshot_command`: cat and GNU find, no Python started on the
node), so a fleet whose nodes are all current costs one short round trip per node. Everything else
here is pure: parsing its output, the staleness rule and the record's text.
"""

import hashlib
import json
import shlex

from ansible_collections.seatwright.fleet.plugins.module_utils.defaults import (
    CONFIG_DIR,
    CONVERGE_RECORD,
    GPU_FACTS_CACHE,
    STATE_DIR,
    rebased,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.node.kind import role_skip

RECORD_SCHEMA = 1
# Hours a record is trusted at most: the controller's fact cache keeps facts as long (ansible.cfg).
MAX_AGE_H = 24

# What the node roles write, as (path, recursive). Folders are listed (walked when recursive); a
# missing path is watched for appearing. Over-watching costs a full converge, never a missed repair.
WATCHED = (
    # Top level only: other roles keep their own folders below (the router's, for one).
    (CONFIG_DIR, False),
    (STATE_DIR, False),
    ("/etc/nccl.conf", False),
    ("/etc/docker/daemon.json", False),
    ("/etc/apt/sources.list.d", False),
    ("/etc/apt/preferences.d", False),
    ("/etc/apt/keyrings", False),
    ("/etc/ansible/facts.d", False),
    ("/etc/systemd/system", True),
    ("/etc/udev/rules.d", False),
    ("/etc/modules-load.d", False),
    ("/etc/modprobe.d", False),
    ("/usr/local/lib/seatwright", True),
    # Installed and removed packages, the driver's among them.
    ("/var/lib/dpkg/status", False),
)

# Rewritten on every run by design, so not watched: the record itself and the GPU facts cache.
UNWATCHED = (CONVERGE_RECORD, GPU_FACTS_CACHE)

# The variables that steer the node roles: seatwright's own and each role's, by name prefix.
VARIABLE_PREFIXES = ("seatwright_",)
# Variables that do not change what a converge makes (the switch itself).
IGNORED_VARIABLES = frozenset({"seatwright_full_converge"})

_FORMAT = r"%p\t%y\t%m\t%s\t%T@\t%l\n"
_MARKS = ("#boot", "#now", "#record", "#paths")


def steering_names(names, role_names, facts):
    """The variable names, of `names`, whose values go into the inputs digest (sorted).

    Facts (which change between runs without anyone asking) and the switch are left out.
    """
    prefixes = VARIABLE_PREFIXES + tuple("%s_" % role for role in role_names)
    return sorted(
        name for name in names if name.startswith(prefixes) and name not in facts and name not in IGNORED_VARIABLES
    )


def inputs_digest(code, settings):
    """The digest of what a converge is made from: `code` maps each collection file to its digest,
    `settings` each steering variable to its value (templated)."""
    blob = json.dumps({"code": code, "settings": settings}, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()


def record_path(state_dir=None):
    return rebased(CONVERGE_RECORD, state_dir=state_dir)


def watched(config_dir=None, state_dir=None):
    """WATCHED with seatwright's folders where the inventory moved them."""
    return [(rebased(path, config_dir=config_dir, state_dir=state_dir), deep) for path, deep in WATCHED]


def snapshot_command(config_dir=None, state_dir=None):
    """The shell command a node runs: its boot, its clock, its record and the watched paths' state."""
    roots = watched(config_dir, state_dir)
    deep = " ".join(shlex.quote(path) for path, recursive in roots if recursive)
    shallow = " ".join(shlex.quote(path) for path, recursive in roots if not recursive)
    form = shlex.quote(_FORMAT)
    return (
        "echo '#boot'; cat /proc/sys/kernel/random/boot_id; echo '#now'; date +%s; echo '#record'; "
        "cat {record} 2>/dev/null; echo; echo '#paths'; "
        "find {deep} -printf {form} 2>/dev/null; find {shallow} -maxdepth 1 -printf {form} 2>/dev/null; true"
    ).format(record=shlex.quote(record_path(state_dir)), deep=deep, shallow=shallow, form=form)


def _sections(text):
    sections, current = {}, None
    for line in text.splitlines():
        if line.strip() in _MARKS:
            current = line.strip()
            sections[current] = []
        elif current:
            sections[current].append(line)
    return sections


def _path_state(fields):
    path, kind, mode, size, mtime, target = fields
    # A folder's size and mtime move with every entry added or removed; its entries are listed.
    if kind == "d":
        return path, [kind, mode, "", "", ""]
    return path, [kind, mode, size, mtime, target]


def parse_snapshot(text, state_dir=None):
    """{boot_id, now, record, paths} from snapshot_command's output.

    `record` is the parsed record, None when the node has none, or "unreadable". Raises ValueError
    when the output is not the command's (a node without GNU find or /proc, say).
    """
    sections = _sections(text or "")
    if set(sections) != set(_MARKS):
        raise ValueError("the node's converge snapshot is incomplete (expected %s)" % ", ".join(_MARKS))
    boot = "".join(sections["#boot"]).strip()
    now = "".join(sections["#now"]).strip()
    if not boot or not now.isdigit():
        raise ValueError("the node's converge snapshot has no boot id or clock (got %r, %r)" % (boot, now))
    raw = "\n".join(sections["#record"]).strip()
    record = None
    if raw:
        try:
            record = json.loads(raw)
        except ValueError:
            record = "unreadable"
    skip = {rebased(path, state_dir=state_dir) for path in UNWATCHED}
    paths = {}
    for line in sections["#paths"]:
        fields = line.split("\t")
        if len(fields) == 6 and fields[0] not in skip:
            path, state = _path_state(fields)
            paths[path] = state
    return {"boot_id": boot, "now": int(now), "record": record, "paths": paths}


def stale_reason(snapshot, inputs, max_age_h=MAX_AGE_H):
    """Why the node must converge again, or None when its record still holds."""
    record = snapshot["record"]
    if record is None:
        return "no converge record on the node (never converged by this seatwright, or it was removed)"
    if not isinstance(record, dict) or record.get("schema") != RECORD_SCHEMA:
        return "the converge record is unreadable or from another seatwright"
    if record.get("inputs") != inputs:
        return "the roles, modules, plays or this node's variables changed since the last converge"
    if record.get("boot_id") != snapshot["boot_id"]:
        return "the node rebooted since the last converge (power limits, modules and MTU live in the kernel)"
    written = record.get("written_at")
    if not isinstance(written, int) or not 0 <= snapshot["now"] - written <= max_age_h * 3600:
        return "the last full converge is older than %s h, or the node's clock moved back" % max_age_h
    before, after = record.get("paths") or {}, snapshot["paths"]
    changed = sorted(path for path in set(before) | set(after) if before.get(path) != after.get(path))
    if changed:
        shown = ", ".join(changed[:3]) + (" and %d more" % (len(changed) - 3) if len(changed) > 3 else "")
        return "changed on the node since the last converge: %s" % shown
    return None


# Facts the later plays and the plan read from the controller's cache: a node without them converges.
CACHED_FACTS = ("seatwright_gpu_summary", "seatwright_fabric")
# The role that gathers a cached fact where a node kind can skip that role (node/kind.py role_skip):
# rdma_fabric gathers no fabric facts on a WSL2 node, which would otherwise never skip the roles.
FACT_ROLES = {"seatwright_fabric": "rdma_fabric"}
FORCED = "asked for a full converge (-e seatwright_full_converge, --tags or --skip-tags)"
NO_FACTS = "the controller has no cached facts of the node (later plays and the plan read them)"


def needed_facts(facts):
    """The CACHED_FACTS a node must have cached, given the kind it showed (seatwright_host_kind)."""
    host_kind = facts.get("seatwright_host_kind")
    kind = host_kind.get("kind") if isinstance(host_kind, dict) else None
    return tuple(name for name in CACHED_FACTS if not (name in FACT_ROLES and role_skip(kind, FACT_ROLES[name])))


def node_decision(host_vars, code, role_names, forced, state_dir=None, max_age_h=MAX_AGE_H):
    """{inputs, reason} for one node: `host_vars` its variables (with `ansible_facts` and the
    registered `__nodes_snapshot`), `code` the collection's file digests, `forced` whether a full
    converge was asked for. `reason` is empty when the node may skip the roles."""
    facts = host_vars.get("ansible_facts") or {}
    names = steering_names(host_vars, role_names, facts)
    inputs = inputs_digest(code, {name: host_vars[name] for name in names})
    if forced:
        return {"inputs": inputs, "reason": FORCED}
    if any(name not in facts for name in needed_facts(facts)) or "seatwright" not in (facts.get("ansible_local") or {}):
        return {"inputs": inputs, "reason": NO_FACTS}
    snapshot = parse_snapshot((host_vars.get("__nodes_snapshot") or {}).get("stdout", ""), state_dir)
    return {"inputs": inputs, "reason": stale_reason(snapshot, inputs, max_age_h) or ""}


def new_record(snapshot, inputs):
    """The text of the record a node keeps after a full converge."""
    record = {
        "schema": RECORD_SCHEMA,
        "inputs": inputs,
        "boot_id": snapshot["boot_id"],
        "written_at": snapshot["now"],
        "paths": snapshot["paths"],
    }
    return json.dumps(record, sort_keys=True, separators=(",", ":")) + "\n"
