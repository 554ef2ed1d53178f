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
  transports:
    description: C({multi_node, roce}) to judge the NCCL channel lines of the first container's log.
    type: dict
  ray_expected:
    description:
      - Ray nodes the cluster must hold, C([{host, address, resources}]); the first container is the Ray
        head. With I(started_epoch) and I(timeout_s) the verdict is the Ray alive-wait's.
    type: list
    elements: dict
attributes:
  check_mode:
    support: full
    details: Read-only; runs the same in check mode.
  diff_mode:
    support: none
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
"""

import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError, ServiceError
from ansible_collections.seatwright.fleet.plugins.module_utils.fabric.nccl import engine_transports
from ansible_collections.seatwright.fleet.plugins.module_utils.io.seat.engine import probe, ray_nodes
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.readiness import (
    ray_alive_verdict,
    readiness_verdict,
    wait_progress,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.running import compare_running, redact_env


def main():
    module = AnsibleModule(
        argument_spec=dict(
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
            transports=dict(type="dict"),
            ray_expected=dict(type="list", elements="dict"),
            host=dict(type="str", default="this node"),
        ),
        supports_check_mode=True,
    )
    params = module.params
    try:
        result = probe(
            params["names"],
            params["base_url"],
            params["api_key"],
            params["log_tail"],
            params["full_log"],
            params["read_process"],
            params["dump"],
            params["host"],
        )
        first = result["containers"][0]
        elapsed = None if params["started_epoch"] is None else time.time() - params["started_epoch"]
        if params["ray_expected"] is not None:
            nodes, why = (
                ray_nodes(params["names"][0]) if first["running"] else (None, "%s is not running" % first["name"])
            )
            if nodes is None:
                verdict = {"alive": False, "done": False, "failed": False, "missing": [why], "message": why}
                if not first["running"] or (elapsed is not None and elapsed >= params["timeout_s"]):
                    verdict.update(done=True, failed=True)
            else:
                verdict = ray_alive_verdict(nodes, params["ray_expected"], elapsed or 0, params["timeout_s"])
            result["ray_nodes"], result["verdict"] = nodes, verdict
        elif elapsed is not None and params["timeout_s"] is not None:
            result["verdict"] = readiness_verdict(result, elapsed, params["timeout_s"], params["served_name"])
        if "verdict" in result and elapsed is not None and params["timeout_s"] is not None:
            # Each retry of the wait prints this (callback seatwright.fleet.progress), not "FAILED - RETRYING".
            kind = "engine" if params["ray_expected"] is None else "ray"
            result["progress"] = wait_progress(kind, result, result["verdict"], elapsed, params["timeout_s"])
        if params["expected_argv"] is not None and params["read_process"]:
            result["differences"] = compare_running(
                params["host"],
                params["expected_argv"],
                first.get("argv"),
                params["expected_env"] or {},
                first.get("env"),
            )
        if params["read_process"]:
            for item in result["containers"]:
                if item.get("env") is not None:
                    item["env"] = redact_env(item["env"])
        if params["transports"] is not None:
            result["nccl"] = engine_transports(
                first.get("log", ""),
                bool(params["transports"].get("multi_node")),
                bool(params["transports"].get("roce")),
            )
        for item in result["containers"]:
            # The whole log travels once, as an evidence file, not twice.
            item.pop("log", None)
    except (ServiceError, SeatError, OSError, ValueError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
