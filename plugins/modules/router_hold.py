#!/usr/bin/python
"""Hold an alias and judge it, or confirm a rollback, through the router (controller side)."""

DOCUMENTATION = r"""
---
module: router_hold
short_description: Watch a router alias during a promotion's hold and judge it with the benchmark's gates
description:
  - With I(mode=hold), sends a probe through the alias for I(hold_s) seconds, reads who answered from the
    router's header, adds synthetic load when the answers are too thin to judge, and judges the candidate's
    answers with the benchmark's own per-level analysis (C(plugins/module_utils/router/rollout.py) judge_hold).
    A failed gate ends the hold at once; the module does not fail on it, it returns the verdict. A hold still
    too thin to judge at its time holds on for as long again (at least 30 s) before it is called a failure.
    The candidate's visible tok/s is judged against I(baseline) when given, else against its benchmark.
  - With I(mode=baseline), holds the alias the same way while I(candidate) (then the incumbent) carries it
    alone, and returns its figures, the baseline every later hold of the promotion is judged against.
  - With I(mode=confirm), asks through the alias until answers come from I(seats) several times in a row and
    returns the seconds since I(since_epoch) (a rollback's measured time).
  - Progress lines go to C(SEATWRIGHT_PROGRESS_LOG) when it is set (C(tail -f) it while a hold runs).
  - Runs on the controller (C(delegate_to) localhost); the logic is in C(plugins/module_utils/io/router/hold.py).
options:
  mode:
    description: C(hold), C(baseline) or C(confirm).
    type: str
    choices: [hold, baseline, confirm]
    default: hold
  router_url:
    description: The router's address (C(http://host:port)); requests go to its C(/v1).
    type: str
    required: true
  api_key:
    description: The key clients use for the alias at the router, if it needs one.
    type: str
  alias:
    description: The alias clients call.
    type: str
    required: true
  candidate:
    description: The seat being promoted (I(mode=hold)), or the incumbent measured (I(mode=baseline)).
    type: str
  step:
    description: The step's name, for progress and the verdict.
    type: str
    default: hold
  hold_s:
    description: Seconds to hold (I(mode=hold)).
    type: int
    default: 60
  benchmark_record:
    description: The candidate's record (its benchmark summary is what the live figures are judged against).
    type: dict
    default: {}
  gates:
    description: Overrides of the gates (max_error_rate, ttft_ms_p95, min_visible_ratio, min_requests).
    type: dict
    default: {}
  force_fail:
    description: Fail the gate on purpose at the end of the hold (the rollback demonstration).
    type: bool
    default: false
  synthetic_streams:
    description: Streams of synthetic load added when the answers are too thin to judge.
    type: int
    default: 4
  synthetic_at_start:
    description: Streams of synthetic load from the start (the count the baseline hold ended with).
    type: int
    default: 0
  baseline:
    description: The baseline hold's C(figures) (I(mode=hold)); empty, the candidate's benchmark is the reference.
    type: dict
    default: {}
  contended:
    description:
      - What a canary's two seats both compute on (the step's C(contended), from the plans); the
        candidate's visible tok/s is then recorded, not judged, since it measures their contention.
    type: str
  seats:
    description: The seats a confirmed rollback must be answered by (I(mode=confirm)).
    type: list
    elements: str
    default: []
  since_epoch:
    description: When the gate failed (I(mode=confirm)).
    type: float
    default: 0
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_full
author:
  - seatwright
"""

EXAMPLES = r"""
- name: Hold the canary
  seatwright.fleet.router_hold:
    router_url: http://node-a:4000
    alias: production
    candidate: lab-fast
    step: canary 10%
    hold_s: 60
    benchmark_record: "{{ course.record }}"
  delegate_to: localhost
"""

RETURN = r"""
verdict:
  description: C(pass), C(fail), or C(not run) in check mode (I(mode=hold)).
  returned: always
  type: str
reasons:
  description: Why (I(mode=hold)).
  returned: when mode is hold
  type: list
  elements: str
figures:
  description: The hold's figures (requests, failed, error rate, TTFT p95, visible tok/s, who answered).
  returned: when mode is hold
  type: dict
overtime_s:
  description: Seconds the hold went on past I(hold_s) because it was too thin to judge (0 when it did not).
  returned: when mode is hold
  type: float
rollback_s:
  description: Seconds from I(since_epoch) to the alias answering from I(seats) (I(mode=confirm)).
  returned: when mode is confirm
  type: float
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.router import hold

ARGUMENT_SPEC = dict(
    mode=dict(type="str", choices=["hold", "baseline", "confirm"], default="hold"),
    router_url=dict(type="str", required=True),
    api_key=dict(type="str", no_log=True),
    alias=dict(type="str", required=True),
    candidate=dict(type="str"),
    step=dict(type="str", default="hold"),
    hold_s=dict(type="int", default=60),
    benchmark_record=dict(type="dict", default={}),
    gates=dict(type="dict", default={}),
    force_fail=dict(type="bool", default=False),
    synthetic_streams=dict(type="int", default=4),
    synthetic_at_start=dict(type="int", default=0),
    baseline=dict(type="dict", default={}),
    contended=dict(type="str"),
    seats=dict(type="list", elements="str", default=[]),
    since_epoch=dict(type="float", default=0),
)


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        required_if=[("mode", "hold", ("candidate",)), ("mode", "baseline", ("candidate",))],
        supports_check_mode=True,
    )
    p = module.params
    if module.check_mode:
        module.exit_json(changed=False, verdict="not run", reasons=["check mode"], figures={})
    try:
        result = hold.run_from(p)
    except SeatwrightError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
