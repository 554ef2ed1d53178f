"""The seats' file_sd files on the Prometheus node, for the monitoring_targets module.

monitoring/targets.py decides what each seat's file holds; this file reads the folder, writes what
changed atomically (Prometheus re-reads a file_sd file when it changes, never half of one) and
removes a torn-down seat's file. A re-run with nothing new changes nothing.
"""

import json
import os

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import MonitoringError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.files import atomic_write_bytes
from ansible_collections.seatwright.fleet.plugins.module_utils.monitoring import targets


def _text(groups):
    return json.dumps(groups, indent=2, sort_keys=True) + "\n"


def _read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except FileNotFoundError:
        return None


def read_seat_files(folder):
    """{seat: groups} of every seat file in `folder`."""
    found = {}
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        seat = targets.seat_of_file(name)
        if seat is None:
            continue
        try:
            found[seat] = json.loads(_read(os.path.join(folder, name)) or "[]")
        except ValueError as exc:
            raise MonitoringError(
                "%s is not a file_sd JSON file (%s); remove it and bring the seat up again"
                % (os.path.join(folder, name), exc)
            )
    return found


def converge_targets(params, check_mode, diff):
    """The monitoring_targets result: `present` writes one seat's file, `absent` removes it, `alias`
    moves an alias's label onto the seats that serve it across every seat file."""
    folder = params["file_sd_dir"]
    state = params["state"]
    if state == "present":
        alias = params.get("alias")
        if alias is None:
            # A seat brought up again keeps the alias it serves: only an alias move changes that.
            current = read_seat_files(folder).get(params["seat"]) or [{}]
            alias = (current[0].get("labels") or {}).get("alias", "")
        wanted = {params["seat"]: targets.seat_groups(params["seat"], params["plan"], alias)}
    elif state == "absent":
        targets.seat_file_name(params["seat"])
        wanted = {params["seat"]: None}
    else:
        holders = params.get("seats") or [params.get("seat") or ""]
        wanted = targets.move_alias(read_seat_files(folder), params["alias"], holders)
    changed, diffs = [], []
    for seat, groups in sorted(wanted.items()):
        path = os.path.join(folder, targets.seat_file_name(seat))
        before, after = _read(path), (None if groups is None else _text(groups))
        if before == after:
            continue
        changed.append(path)
        diffs.append({"before_header": path, "after_header": path, "before": before or "", "after": after or ""})
        if check_mode:
            continue
        if after is None:
            os.unlink(path)
        else:
            os.makedirs(folder, exist_ok=True)
            atomic_write_bytes(path, after.encode("utf-8"), 0o644)
    result = {"changed": bool(changed), "changed_paths": changed, "seats": sorted(read_seat_files(folder))}
    if diff:
        result["diff"] = diffs
    return result
