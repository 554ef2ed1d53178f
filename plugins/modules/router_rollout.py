#!/usr/bin/python
"""Decide a promotion's course from the candidate's evidence, or record how it ran (controller side)."""

DOCUMENTATION = r"""
---
module: router_rollout
short_description: Plan a promotion that moves a router alias, or record it in the candidate's evidence
description:
  - With I(action=plan), reads the candidate's latest record under I(evidence_root) and the alias's current
    targets, and returns the refusal (C(refusal), a sentence) or the steps (C(plugins/module_utils/router/hold.py)
    plan, on C(rollout.rollout_steps)) with each step's router targets and the lines C(--check) prints. It
    changes nothing, so it runs in check mode too.
  - With I(action=record), writes C(promotion-rollout.json) into the candidate's evidence folder through the
    project's redactor (told I(secrets)) and re-renders its C(record.json) and C(report.md).
  - Runs on the controller (C(delegate_to) localhost).
options:
  action:
    description: C(plan) or C(record).
    type: str
    choices: [plan, record]
    default: plan
  alias:
    description: The alias to move (I(action=plan)).
    type: str
  kind:
    description: The router's kind (one description each in C(plugins/module_utils/router/kinds/)), for I(action=plan).
    type: str
    choices: [litellm, smg]
  seat:
    description: The candidate seat (I(action=plan)).
    type: str
  current_targets:
    description: "The alias's targets now, C({seat: {api_base, weight}}) (I(action=plan))."
    type: dict
    default: {}
  candidate_api_base:
    description: The candidate's OpenAI base URL; default, rank 0's serve address in its plan.
    type: str
  candidate_model:
    description: The name the candidate serves, which the router sends it; default, the served name in its plan.
    type: str
  plan_dir:
    description: The plan folder (C(.cache/plans)) holding the candidate's plan and the alias's current seat's.
    type: path
  evidence_root:
    description: The folder holding C(<seat>/<UTC>/) evidence folders (I(action=plan)).
    type: path
  options:
    description: "Keys: shares (canary percentages), hold_s, gates (overrides), force_gate_failure, stop_old."
    type: dict
    default: {}
  evidence_dir:
    description: The candidate's evidence folder (I(action=record)).
    type: path
  course:
    description: What I(action=plan) returned (I(action=record)).
    type: dict
  events:
    description: "Each step as it ran (targets, times, verdicts, the rollback's seconds) (I(action=record))."
    type: list
    elements: dict
    default: []
  started_epoch:
    description: When the promotion started (I(action=record)).
    type: float
  root:
    description: The checkout whose C(schemas/record.schema.json) checks the record (I(action=record)).
    type: path
  secrets:
    description: Secrets to remove from the evidence (the router's keys), whatever shape they appear in.
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
- name: Plan the move of production to lab-fast
  seatwright.fleet.router_rollout:
    alias: production
    kind: litellm
    seat: lab-fast
    current_targets: "{{ router_current_targets }}"
    evidence_root: "{{ playbook_dir | dirname }}/evidence"
    options: {shares: [10], hold_s: 60}
  delegate_to: localhost
  register: course
"""

RETURN = r"""
refusal:
  description: Why the promotion is refused, or null (I(action=plan)).
  returned: when action is plan
  type: str
steps:
  description: The ordered steps, each with C(step), C(action), C(targets), C(router_targets), C(hold_s), C(gate).
  returned: when action is plan
  type: list
  elements: dict
lines:
  description: The steps as a person reads them (what C(--check) prints).
  returned: when action is plan
  type: list
  elements: str
path:
  description: The C(promotion-rollout.json) written (I(action=record)).
  returned: when action is record
  type: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.router import hold

ARGUMENT_SPEC = dict(
    action=dict(type="str", choices=["plan", "record"], default="plan"),
    alias=dict(type="str"),
    kind=dict(type="str"),
    seat=dict(type="str"),
    current_targets=dict(type="dict", default={}),
    candidate_api_base=dict(type="str"),
    candidate_model=dict(type="str"),
    plan_dir=dict(type="path"),
    evidence_root=dict(type="path"),
    options=dict(type="dict", default={}),
    evidence_dir=dict(type="path"),
    course=dict(type="dict"),
    events=dict(type="list", elements="dict", default=[]),
    started_epoch=dict(type="float"),
    root=dict(type="path"),
    secrets=dict(type="list", elements="str", default=[], no_log=True),
)


def main():
    required = [
        ("action", "plan", ("alias", "kind", "seat", "evidence_root")),
        ("action", "record", ("evidence_dir", "course")),
    ]
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, required_if=required, supports_check_mode=True)
    p = module.params
    try:
        if p["action"] == "record":
            args = (p["evidence_dir"], p["course"], p["events"], p["started_epoch"] or 0.0, p["secrets"])
            result = hold.record(*args, root=p["root"], check_mode=module.check_mode)
        else:
            result = hold.course_from(p)
    except SeatwrightError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=p["action"] == "record" and not module.check_mode, **result)


if __name__ == "__main__":
    main()
