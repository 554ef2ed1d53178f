#!/usr/bin/python
"""Read-only facts for the drain before a disruptive change: the seats running on a node."""

DOCUMENTATION = r"""
---
module: node_drain_facts
short_description: Report the seats running on a node, its co-tenant record and the lab test changes made
description:
  - Lists the seat containers on the node (Docker's C(io.seatwright.seat) label) with their image,
    state and rank, reads the co-tenant record a seat left (which co-tenants it stopped), and the
    lab test changes the node records as made.
  - plugins/module_utils/node/drain.py decides from these, the router's listing and the plans what a
    converge does with each seat before a driver, Docker, engine image, power cap or MTU change.
  - A node without Docker runs no seat. I(test_changes) is lab test equipment and is refused outside
    the lab (C(seatwright_fleet_name) lab and a node prepared by lab/prepare.yml).
  - Never changes the node.
options:
  drain_dir:
    description: Where the node records the lab test changes made.
    type: path
    default: /var/lib/seatwright/drain
  cotenants_record:
    description: The co-tenant record a seat leaves on the node.
    type: path
    default: /var/lib/seatwright/seat/cotenants.json
  test_changes:
    description: This node's labelled lab test changes (C(seatwright_drain_test_changes)), only checked here.
    type: list
    elements: dict
  fleet_name:
    description: The inventory's C(seatwright_fleet_name).
    type: str
  lab_marker:
    description: The file lab/prepare.yml leaves on a lab node.
    type: path
    default: /etc/seatwright-lab/gpu-profile.json
notes:
  - "Check mode: Read-only; runs the same in check mode."
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_full
author:
  - seatwright
"""

EXAMPLES = r"""
- name: Read the seats running on the node
  seatwright.fleet.node_drain_facts:
"""

RETURN = r"""
ansible_facts:
  description: What the drain decision needs from the node.
  returned: always
  type: dict
  contains:
    seatwright_drain_node:
      description:
        - docker (installed), containers ([{name, image, running, seat, rank}]), cotenants (the
          record or null), done (the ids of the lab test changes made).
      type: dict
      sample:
        docker: true
        containers:
          - {name: seatwright-lab-rank0, image: "seatwright/vllm-cpu:c3df", running: true, seat: lab, rank: 0}
        cotenants:
          format: seatwright-cotenants/1
          host: node-a
          seat: lab
          entries: [{name: lab-cotenant, kind: container, was_running: true}]
        done: []
"""

import os
import platform

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.defaults import COTENANTS_RECORD, DRAIN_DIR
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.node.drain_probe import drain_facts
from ansible_collections.seatwright.fleet.plugins.module_utils.node.drain import test_input_problem


def main():
    module = AnsibleModule(
        argument_spec={
            "drain_dir": {"type": "path", "default": DRAIN_DIR},
            "cotenants_record": {"type": "path", "default": COTENANTS_RECORD},
            "test_changes": {"type": "list", "elements": "dict"},
            "fleet_name": {"type": "str"},
            "lab_marker": {"type": "path", "default": "/etc/seatwright-lab/gpu-profile.json"},
        },
        supports_check_mode=True,
    )
    params = module.params
    refused = test_input_problem(
        platform.node(), params["test_changes"], os.path.exists(params["lab_marker"]), params["fleet_name"]
    )
    if refused:
        module.fail_json(msg=refused)
    try:
        found = drain_facts(params)
    except SeatwrightError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, ansible_facts={"seatwright_drain_node": found})


if __name__ == "__main__":
    main()
