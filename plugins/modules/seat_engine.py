#!/usr/bin/python
"""Start one engine rank's container to the plan's spec, or take it down within a bound."""

DOCUMENTATION = r"""
---
module: seat_engine
short_description: One engine rank of a seat as a container, started to a spec or removed
description:
  - C(state=started) runs the rank's container (host network, the engine as PID 1 with the plan's
    argv, the env from a 0600 file) unless a running container of that name already carries the
    same spec fingerprint (image id, argv, env, mounts, run options), in which case nothing
    changes and the same container keeps serving. A different spec replaces it.
  - The image must be present with the id the plan checked (I(image_id)); a different id fails
    before anything starts.
  - C(state=absent) stops the containers within I(stop_timeout_s) and force-removes them (a
    shutdown that hangs Docker must not block the restore of evicted services).
options:
  state:
    description: C(started) or C(absent).
    type: str
    choices: [started, absent]
    required: true
  name:
    description: Container name (C(state=started)).
    type: str
  names:
    description: Containers to remove (C(state=absent)); defaults to I(name).
    type: list
    elements: str
    default: []
  seat:
    description: With C(state=absent), also remove every container labelled as part of this seat.
    type: str
  image:
    description: Image reference to run.
    type: str
  image_id:
    description: The image id (sha256:...) bring-up checked on every node; the container must use it.
    type: str
  argv:
    description: The engine's argv from the plan; argv[0] becomes the entrypoint.
    type: list
    elements: str
  env:
    description: The rank's environment (no secrets).
    type: dict
    default: {}
  multi_node:
    description:
      - The seat spans nodes. The node's rendered NCCL/Gloo env file (I(nccl_env_file)) must then
        agree with I(env) on every C(NCCL_*)/C(GLOO_*) value, or nothing starts.
    type: bool
    default: false
  nccl_env_file:
    description: The node's rendered NCCL env file (roles/nccl_env); read only when I(multi_node).
    type: path
    default: /etc/seatwright/nccl.env
  host_name:
    description: Inventory name of the node, for messages.
    type: str
    default: this node
  secret_env:
    description: Secret environment entries (the API key); never logged, hashed into the fingerprint.
    type: dict
    default: {}
  labels:
    description: Extra labels (without the io.seatwright. prefix) such as seat and rank.
    type: dict
    default: {}
  mounts:
    description: Volume specs, e.g. C(/srv/models/x:/models/x:ro).
    type: list
    elements: str
    default: []
  run_args:
    description: Further docker run options (GPUs, IPC, shm, ulimits).
    type: list
    elements: str
    default: []
  env_dir:
    description: Folder of the 0600 env files on the node.
    type: path
    default: /var/lib/seatwright/seat
  stop_timeout_s:
    description: Seconds an engine may take to stop before it is force-removed.
    type: int
    default: 30
attributes:
  check_mode:
    support: full
    details: Reports whether the container would be started, replaced or removed.
  diff_mode:
    support: none
author:
  - seatwright
"""

EXAMPLES = r"""
- name: Start node rank 0 of the lab seat
  seat_engine:
    state: started
    name: seatwright-lab-rank0
    image: seatwright/vllm-cpu:0.32.0
    image_id: sha256:0123...
    argv: [python3, -m, vllm.entrypoints.openai.api_server, --model, /models/lab]
    env: {HF_HUB_OFFLINE: "1"}
    mounts: [/var/lib/seatwright/models/lab:/models/lab:ro]

- name: Take the seat down
  seat_engine:
    state: absent
    names: [seatwright-lab-rank0]
"""

RETURN = r"""
container_id:
  description: Id of the rank's container (state=started).
  returned: state=started
  type: str
started_epoch:
  description: This node's clock when the container was started (now, when it was kept); readiness is timed from it.
  returned: state=started
  type: float
env:
  description: The environment the rank runs with (the plan's), without secrets.
  returned: state=started
  type: dict
spec_hash:
  description: Fingerprint of the spec the container runs.
  returned: state=started
  type: str
action:
  description: kept, started or replaced (state=started).
  returned: state=started
  type: str
removed:
  description: Containers removed (state=absent).
  returned: state=absent
  type: list
  elements: str
"""

import os
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError, ServiceError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.services import (
    container_state,
    containers_labelled,
    remove_container,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.io.seat.engine import (
    image_id as read_image_id,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.io.seat.engine import (
    remove,
    run_container,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.node.defaults import NCCL_ENV_FILE, SEAT_DIR
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.running import (
    LABEL_PREFIX,
    nccl_env_drift,
    parse_env_file,
    spec_hash,
)


def _started(module, params):
    name = params["name"]
    for required in ("name", "image", "argv"):
        if not params[required]:
            module.fail_json(msg="seat_engine state=started needs %s" % required)
    present = read_image_id(params["image"])
    if present is None:
        module.fail_json(
            msg="image %s is not on this node; build or load it (the engine image role) before "
            "bring-up" % params["image"]
        )
    if params["image_id"] and present != params["image_id"]:
        module.fail_json(
            msg="image %s on this node is %s, but bring-up checked %s; every node must run the "
            "same image: load the same build everywhere" % (params["image"], present, params["image_id"])
        )
    public_env = dict(params["env"])
    if params["multi_node"]:
        if not os.path.exists(params["nccl_env_file"]):
            module.fail_json(
                msg="%s: %s is missing; prepare the node (site.yml, role nccl_env) before a "
                "multi-node seat" % (params["host_name"], params["nccl_env_file"])
            )
        with open(params["nccl_env_file"], encoding="utf-8") as handle:
            drift = nccl_env_drift(params["host_name"], public_env, parse_env_file(handle.read()))
        if drift:
            module.fail_json(msg="%s; re-run site.yml (role nccl_env) and plan the seat again" % "; ".join(drift))
    env = dict(public_env)
    env.update(params["secret_env"])
    fingerprint = spec_hash(
        present,
        params["argv"],
        env,
        {"mounts": params["mounts"], "run_args": params["run_args"], "labels": params["labels"]},
    )
    state = container_state(name)
    if state["running"] and state["labels"].get(LABEL_PREFIX + "spec") == fingerprint:
        return dict(
            changed=False,
            action="kept",
            container_id=state["id"],
            spec_hash=fingerprint,
            started_epoch=time.time(),
            env=public_env,
        )
    action = "replaced" if state["exists"] else "started"
    if module.check_mode:
        return dict(
            changed=True,
            action=action,
            container_id=state["id"],
            spec_hash=fingerprint,
            started_epoch=time.time(),
            env=public_env,
        )
    if state["exists"]:
        remove_container(name, params["stop_timeout_s"])
    labels = dict(params["labels"], spec=fingerprint)
    container_id = run_container(
        name,
        params["image"],
        params["argv"],
        env,
        os.path.join(params["env_dir"], name + ".env"),
        labels,
        params["mounts"],
        params["run_args"],
    )
    return dict(
        changed=True,
        action=action,
        container_id=container_id,
        spec_hash=fingerprint,
        started_epoch=time.time(),
        env=public_env,
    )


def _absent(module, params):
    names = list(params["names"]) or ([params["name"]] if params["name"] else [])
    if params["seat"]:
        names += [n for n in containers_labelled(LABEL_PREFIX + "seat", params["seat"]) if n not in names]
    if module.check_mode:
        return dict(
            changed=any(container_state(n)["exists"] for n in names),
            removed=[n for n in names if container_state(n)["exists"]],
        )
    removed = remove(names, params["stop_timeout_s"], params["env_dir"])
    return dict(changed=bool(removed), removed=removed)


def main():
    module = AnsibleModule(
        argument_spec=dict(
            state=dict(type="str", choices=["started", "absent"], required=True),
            name=dict(type="str"),
            names=dict(type="list", elements="str", default=[]),
            seat=dict(type="str"),
            image=dict(type="str"),
            image_id=dict(type="str"),
            argv=dict(type="list", elements="str"),
            env=dict(type="dict", default={}),
            multi_node=dict(type="bool", default=False),
            nccl_env_file=dict(type="path", default=NCCL_ENV_FILE),
            host_name=dict(type="str", default="this node"),
            secret_env=dict(type="dict", default={}, no_log=True),
            labels=dict(type="dict", default={}),
            mounts=dict(type="list", elements="str", default=[]),
            run_args=dict(type="list", elements="str", default=[]),
            env_dir=dict(type="path", default=SEAT_DIR),
            stop_timeout_s=dict(type="int", default=30),
        ),
        supports_check_mode=True,
    )
    params = module.params
    params["env"] = {str(k): str(v) for k, v in params["env"].items()}
    params["secret_env"] = {str(k): str(v) for k, v in params["secret_env"].items()}
    try:
        result = _started(module, params) if params["state"] == "started" else _absent(module, params)
    except (ServiceError, SeatError, OSError, ValueError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
