#!/usr/bin/python
"""Start one container of a seat's rank to the plan's spec, or take containers down within a bound."""

DOCUMENTATION = r"""
---
module: seat_engine
short_description: One container of a seat's rank, started to the plan's spec or removed
description:
  - C(state=started) runs the container the plan's I(spec) describes (seat/container.py), with
    its image, entrypoint and command, env (from a 0600 file), labels, network, IPC, /dev/shm,
    GPUs, ulimits, capabilities, mounts and site run options. A running container of that name
    that carries the same spec fingerprint (spec, image id, secret hashes) and reads back equal to
    the spec is kept; otherwise it is replaced, and the fields that drifted are returned.
  - Secrets are named in the spec (e.g. the API key as C(seat_api_key)) and their values come
    from I(secrets) only here, at start; an env secret goes into the 0600 env file, a flag secret
    (SGLang's C(--api-key)) onto the command line, as the engine table says.
  - The image must be present with the id bring-up checked (I(image_id), else the spec's); a
    different id fails before anything starts.
  - C(state=absent) stops the containers within I(stop_timeout_s) and force-removes them (a
    shutdown that hangs Docker must not block the restore of evicted services).
options:
  state:
    description: C(started) or C(absent).
    type: str
    choices: [started, absent]
    required: true
  spec:
    description: The container spec from the plan (a rank's C(container_spec) or C(setup_container_spec)).
    type: dict
  secrets:
    description: Values of the secrets the spec names, by name (e.g. C(seat_api_key)); never logged.
    type: dict
    default: {}
  name:
    description: Container to remove (C(state=absent)).
    type: str
  names:
    description: Containers to remove (C(state=absent)); defaults to I(name).
    type: list
    elements: str
    default: []
  seat:
    description: With C(state=absent), also remove every container labelled as part of this seat.
    type: str
  image_id:
    description: The image id (sha256:...) bring-up checked on every node; the container must use it.
    type: str
  multi_node:
    description:
      - The seat spans nodes. The node's rendered NCCL/Gloo env file (I(nccl_env_file)) must then
        agree with the spec's env on every C(NCCL_*)/C(GLOO_*) value, or nothing starts.
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
  env_dir:
    description: Folder of the 0600 env files on the node.
    type: path
    default: /var/lib/seatwright/seat
  stop_timeout_s:
    description: Seconds an engine may take to stop before it is force-removed.
    type: int
    default: 30
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_full
author:
  - seatwright
"""

EXAMPLES = r"""
- name: Start node rank 0 of the lab seat to its plan
  seatwright.fleet.seat_engine:
    state: started
    spec: "{{ plan.ranks[0].container_spec }}"
    secrets:
      seat_api_key: "{{ seat_api_key }}"
    image_id: sha256:0123...

- name: Take the seat down
  seatwright.fleet.seat_engine:
    state: absent
    seat: lab
"""

RETURN = r"""
container_id:
  description: Id of the container (state=started).
  returned: state=started
  type: str
started_epoch:
  description: This node's clock when the container was started (now, when it was kept); readiness is timed from it.
  returned: state=started
  type: float
env:
  description: The spec's environment (no secrets).
  returned: state=started
  type: dict
spec_hash:
  description: Fingerprint of the spec the container runs (secrets enter as hashes).
  returned: state=started
  type: str
action:
  description: kept, started or replaced (state=started).
  returned: state=started
  type: str
drift:
  description: Where a running container with this spec's fingerprint differed from the spec (it was replaced).
  returned: state=started
  type: list
  elements: str
removed:
  description: Containers removed (state=absent).
  returned: state=absent
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.defaults import NCCL_ENV_FILE, SEAT_DIR
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError, ServiceError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.seat.engine import engine_result

ARGUMENT_SPEC = dict(
    state=dict(type="str", choices=["started", "absent"], required=True),
    spec=dict(type="dict"),
    secrets=dict(type="dict", default={}, no_log=True),
    name=dict(type="str"),
    names=dict(type="list", elements="str", default=[]),
    seat=dict(type="str"),
    image_id=dict(type="str"),
    multi_node=dict(type="bool", default=False),
    nccl_env_file=dict(type="path", default=NCCL_ENV_FILE),
    host_name=dict(type="str", default="this node"),
    env_dir=dict(type="path", default=SEAT_DIR),
    stop_timeout_s=dict(type="int", default=30),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        result = engine_result(module.params, module.check_mode)
    except (ServiceError, SeatError, OSError, ValueError) as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
