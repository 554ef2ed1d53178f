#!/usr/bin/python
"""Ansible module: the seats' scrape targets in Prometheus's file_sd folder."""

DOCUMENTATION = r"""
module: monitoring_targets
short_description: Keep the seats' Prometheus scrape targets (file_sd) in step with the seats
description:
  - Runs on the Prometheus node (roles/monitoring C(tasks_from=seat_targets) and C(alias) delegate it there).
  - C(present) writes C(seat-<seat>.json) in I(file_sd_dir) from the seat's plan, one target per serving rank,
    labelled C(seat), C(node), C(rank), C(engine) and C(alias) (C(plugins/module_utils/monitoring/targets.py)).
  - C(absent) removes the seat's file (teardown). C(alias) puts the alias label on I(seat) or I(seats), the
    seats the alias now serves, and takes it off every other seat's targets (a promotion's move or rollback,
    a drain's move onto the seats that stay and its putting back).
  - Prometheus re-reads a changed file by itself; each file is written atomically. The seats' API key is
    never here; the scrape job reads it from a credentials file.
options:
  state:
    description: What to do.
    type: str
    choices: [present, absent, alias]
    default: present
  file_sd_dir:
    description: The folder Prometheus's seats job reads (C(seat-*.json)).
    type: path
    required: true
  seat:
    description: The seat (present, absent; required there), or the seat the alias serves now (alias).
    type: str
  seats:
    description: Every seat the alias serves now (alias), where it serves more than one; not with I(seat).
    type: list
    elements: str
  plan:
    description: The seat's plan (C(engine.name), C(ranks[].host, rank, serve)); present only.
    type: dict
  alias:
    description: >-
      The alias the seat serves (present; left out, a seat that has a target file keeps its alias label), or
      the alias that moved (alias).
    type: str
notes:
  - "Check mode: Says which files would change; writes nothing."
  - "Diff mode: Each changed file before and after."
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_full_diff
author: seatwright
"""

EXAMPLES = r"""
- name: Scrape the lab seat
  seatwright.fleet.monitoring_targets:
    file_sd_dir: /etc/prometheus/seatwright/file_sd
    seat: lab
    plan: {engine: {name: vllm}, ranks: [{host: node-a, rank: 0, serve: "172.30.99.11:8000"}]}
    alias: production
"""

RETURN = r"""
changed_paths:
  description: The files written or removed (or that would be, in check mode).
  returned: always
  type: list
  elements: str
seats:
  description: The seats with a target file now.
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.monitoring.targets import converge_targets


def main():
    module = AnsibleModule(
        argument_spec={
            "state": {"type": "str", "choices": ["present", "absent", "alias"], "default": "present"},
            "file_sd_dir": {"type": "path", "required": True},
            "seat": {"type": "str"},
            "seats": {"type": "list", "elements": "str"},
            "plan": {"type": "dict"},
            "alias": {"type": "str"},
        },
        required_if=[
            ("state", "present", ["seat", "plan"]),
            ("state", "absent", ["seat"]),
            ("state", "alias", ["alias"]),
            ("state", "alias", ["seat", "seats"], True),
        ],
        mutually_exclusive=[("seat", "seats")],
        supports_check_mode=True,
    )
    try:
        result = converge_targets(module.params, module.check_mode, module._diff)
    except (SeatwrightError, OSError) as exc:
        module.fail_json(msg="monitoring targets in %s: %s" % (module.params["file_sd_dir"], exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
