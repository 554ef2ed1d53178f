#!/usr/bin/python
"""Read-only look at a node's engine containers: state, readiness verdict, logs, argv/env, stacks."""

DOCUMENTATION = r"""
---
module: seat_engine_probe
short_description: Probe the engine containers of a seat on one node
description:
  - Reports each named container's state and last log lines; with I(base_url), the engine's
    C(/health) and C(/v1/models); with I(started_epoch) and I(timeout_s), the readiness verdict
    (ready, waiting, exited or timeout; see C(plugins/module_utils/seat/readiness.py)).
  - I(read_process) reads the engine's real argv and env from C(/proc/1) inside the container.
  - I(expected_specs) reads each container back from Docker and names every field that differs
    from the plan's spec.
  - I(dump) takes a C(py-spy dump) of every Python process in each container (for a hang).
  - Never changes the node.
options:
  names:
    description: Engine containers on this node.
    type: list
    elements: str
    required: true
  base_url:
    description: The seat's endpoint without C(/v1), e.g. C(http://172.30.99.11:8000).
    type: str
  api_key:
    description: The seat's API key, when it has one.
    type: str
  served_name:
    description: The model name C(/v1/models) must list for the seat to be ready.
    type: str
  started_epoch:
    description: When the engine was started, by this node's clock (C(seat_engine) returns it).
    type: float
  timeout_s:
    description: The recipe's startup timeout.
    type: int
  host:
    description: Inventory name of the node, for messages.
    type: str
    default: this node
  log_tail:
    description: Last log lines kept per container.
    type: int
    default: 40
  full_log:
    description: Also return each container's whole log (for NCCL channel lines).
    type: bool
    default: false
  read_process:
    description: Read the engine process's argv and env.
    type: bool
    default: false
  dump:
    description: py-spy dump every Python process in each running container.
    type: bool
    default: false
  expected_argv:
    description: The plan's argv for the first container; with I(read_process), differences are returned.
    type: list
    elements: str
  expected_env:
    description: The env the first container was started with (no secrets), compared like I(expected_argv).
    type: dict
  expected_specs:
    description:
      - The plan's container specs of the rank (seat/container.py). Each container is read back
        (C(docker container inspect)) and every field that differs from its spec is named in
        C(differences); secrets are compared by hash.
    type: list
    elements: dict
  secrets:
    description: Values of the secrets the specs name (e.g. C(seat_api_key)), compared by hash only.
    type: dict
    default: {}
  image_id:
    description: The image id bring-up checked; the containers must run it.
    type: str
  transports:
    description:
      - C({multi_node, roce, required, must_show}) to read the first container's log for its transport.
      - I(required) is the plan's C(transport) (what the seat requires); I(must_show) says the log must
        show a transport (node rank 0). The result's C(transport) says what the log showed (NCCL channel
        lines, else a CPU seat's gloo backend line) and C(problem) when it falls short.
    type: dict
  ray_expected:
    description:
      - Ray nodes the cluster must hold, C([{host, address, resources}]); the first container is the Ray
        head. With I(started_epoch) and I(timeout_s) the verdict is the Ray alive-wait's.
    type: list
    elements: dict
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_full
author:
  - seatwright
"""

EXAMPLES = r"""
- name: Wait until the seat answers, or its container dies, or the startup timeout passes
  seat_engine_probe:
    names: [seatwright-lab-rank0]
    base_url: http://172.30.99.11:8000
    served_name: lab
    started_epoch: "{{ __seat_started_epoch }}"
    timeout_s: 300
  register: probe
  until: probe.verdict.done
  retries: 200
  delay: 2
"""

RETURN = r"""
containers:
  description: Each container's name, running, exit_code, id, log_tail, and argv/env/stack_dumps when asked.
  returned: always
  type: list
  elements: dict
evidence_files:
  description: Evidence paths (logs/<host>-<container>.log, stacks/<host>-<container>.txt) to the text read.
  returned: always
  type: dict
progress:
  description:
    - How far the wait is, for the line each retry prints (callback C(seatwright.fleet.progress)).
    - C(waiting_for), C(elapsed_s), C(timeout_s), C(detail) (what the probe saw) and C(last_log)
      (the first container's newest log line, when I(log_tail) is above 0).
  returned: when a verdict is returned with started_epoch and timeout_s
  type: dict
verdict:
  description: The readiness verdict (state, done, failed, message), when started_epoch and timeout_s are given.
  returned: when asked
  type: dict
differences:
  description: Where the running process (argv, env) or a container (every spec field) differs from the plan.
  returned: when expected_argv with read_process, or expected_specs, is given
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError, ServiceError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.seat.engine import probe_result

ARGUMENT_SPEC = dict(
    names=dict(type="list", elements="str", required=True),
    base_url=dict(type="str"),
    api_key=dict(type="str", no_log=True),
    served_name=dict(type="str"),
    started_epoch=dict(type="float"),
    timeout_s=dict(type="int"),
    log_tail=dict(type="int", default=40),
    full_log=dict(type="bool", default=False),
    read_process=dict(type="bool", default=False),
    dump=dict(type="bool", default=False),
    expected_argv=dict(type="list", elements="str"),
    expected_env=dict(type="dict"),
    expected_specs=dict(type="list", elements="dict"),
    secrets=dict(type="dict", default={}, no_log=True),
    image_id=dict(type="str"),
    transports=dict(type="dict"),
    ray_expected=dict(type="list", elements="dict"),
    host=dict(type="str", default="this node"),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        result = probe_result(module.params)
    except (ServiceError, SeatError, OSError, ValueError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
