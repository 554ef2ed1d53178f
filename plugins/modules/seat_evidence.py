#!/usr/bin/python
"""Write files into a seat run's evidence folder on the controller, each through the redactor."""

DOCUMENTATION = r"""
---
module: seat_evidence
short_description: Name a seat run's evidence folder and write redacted files into it
description:
  - Writes each entry of I(files) under the folder atomically, a string as text and anything else as JSON,
    and with I(bringup) the run's C(bringup.json), one shape for a served and a failed bring-up, checked
    against C(schemas/record.schema.json) before it is written.
  - Every file goes through the project's redactor (C(plugins/module_utils/evidence/redact.py)), with one
    numbering across the files of the call, so one host or GPU keeps one placeholder, and the checkout's
    paths made project-relative.
  - Given I(seat) instead of I(dir), names the new folder C(evidence/<seat>/<UTC>) under I(root) (the one
    naming function, C(plugins/module_utils/evidence/folder.py)) and returns it as I(dir).
  - Runs on the controller (C(delegate_to) localhost).
options:
  dir:
    description: The run's evidence folder, C(<root>/evidence/<seat>/<UTC>). Give this or I(seat).
    type: path
  seat:
    description: Name a new evidence folder for this seat under I(root) (returned as I(dir)).
    type: str
  root:
    description:
      - The checkout on the controller. Default, the checkout I(dir) lies in. Needed with I(seat).
    type: path
  files:
    description: Relative path to content (text, or a JSON-like value).
    type: dict
    default: {}
  plan:
    description: The seat's plan; what the bring-up launched is read from it. Needed with I(bringup).
    type: dict
  bringup:
    description:
      - The outcome of a bring-up, written as C(bringup.json). Keys C(state) (C(serving), C(cluster-up)
        or C(failed)), C(reason) (required when failed), C(image_id), C(ranks), C(evicted), C(restored),
        C(ready), C(ray), C(answer) (the first question's response), C(log_tails), C(started_at_epoch).
    type: dict
  hostnames:
    description:
      - Host names to replace as well, each with its short form. The seat playbooks pass the nodes' own
        (filter C(seatwright.fleet.redact_hostnames)) - an C(ansible_host) name, FQDNs, gathered names -
        and the same list to every call of a run, so one host keeps one placeholder across files. Short
        inventory names (C(node-a)) name the ranks and are not among them.
    type: list
    elements: str
    default: []
  secrets:
    description:
      - The run's own secrets (the seat's API key, router keys, tokens), removed from every file in every
        shape an engine or log may echo them (bare, URL-encoded, JSON-escaped, base64). The values of the
        controller's secret environment variables (C(HF_TOKEN), C(*_API_KEY)) are removed as well.
    type: list
    elements: str
    default: []
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_full
author:
  - seatwright
"""

EXAMPLES = r"""
- name: Name this run's evidence folder and keep the plan in it
  seatwright.fleet.seat_evidence:
    seat: lab
    root: "{{ playbook_dir | dirname }}"
    files:
      plan.json: "{{ plan }}"
  delegate_to: localhost
  register: evidence

- name: Record the bring-up
  seatwright.fleet.seat_evidence:
    dir: "{{ evidence.dir }}"
    plan: "{{ plan }}"
    bringup:
      state: failed
      reason: the engine exited during start-up
      log_tails: {node-a: []}
  delegate_to: localhost
"""

RETURN = r"""
dir:
  description: The evidence folder (named here when I(seat) was given).
  returned: always
  type: str
  sample: /home/me/seatwright/evidence/lab/20261130T150000Z
written:
  description: Paths written (in check mode, those that would be).
  returned: always
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.evidence.writer import write_evidence


def main():
    module = AnsibleModule(
        argument_spec=dict(
            dir=dict(type="path"),
            seat=dict(type="str"),
            root=dict(type="path"),
            files=dict(type="dict", default={}),
            plan=dict(type="dict"),
            bringup=dict(type="dict"),
            hostnames=dict(type="list", elements="str", default=[]),
            secrets=dict(type="list", elements="str", default=[], no_log=True),
        ),
        required_one_of=[("dir", "seat")],
        mutually_exclusive=[("dir", "seat")],
        required_by={"seat": "root", "bringup": "plan"},
        supports_check_mode=True,
    )
    try:
        result = write_evidence(check_mode=module.check_mode, **module.params)
    except SeatwrightError as exc:
        module.fail_json(msg=str(exc))
    # Evidence records a run; the playbooks mark these tasks unchanged, but the module reports what it wrote.
    module.exit_json(changed=bool(result["written"]) and not module.check_mode, **result)


if __name__ == "__main__":
    main()
