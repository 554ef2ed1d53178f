#!/usr/bin/python
"""Ansible module: plan one seat from its recipe and the hosts' declared or cached hardware."""

DOCUMENTATION = r"""
module: seat_plan
short_description: Plan a seat (rules, fit, per-rank launch) without touching any node
description:
  - Loads the seat's recipe, validates it against the JSON Schema, applies the SM120 and multi-node
    compatibility rules, checks that the checkpoint fits the GPUs, and renders the exact argv and
    environment of every node rank for vLLM or SGLang.
  - Each rank carries the complete spec of its container (and of the Ray head's beside it),
    image, entrypoint and command, env, labels, network, IPC, /dev/shm, GPUs, ulimits, mounts; the
    API key is held by name and supplied only when the container starts.
  - A host may carry C(seat_models_root) and C(seat_engine_run_args); they shape its containers'
    mount and site run options (the seat role's defaults otherwise).
  - Reads only files on the controller. Each host's GPUs come from its cached C(seatwright_gpus)
    facts when present, else from the inventory's declared profile and count.
  - The seat uses the first C(topology.nodes) hosts of O(nodes), in order; node rank 0 (the Ray head
    or SGLang's dist-init address) is the first.
  - Writing O(plan_out) is the only change; in check mode the plan is computed and shown but not
    written, and C(changed) says whether it would have been. With C(--diff) the old and new plan
    files are compared.
  - Bad recipes and bad inventories fail with a message naming the file or host, the field, what is
    expected and what to do.
options:
  seat:
    description: The seat's name; the recipe's C(name) must equal it.
    type: str
    required: true
  recipe_path:
    description: Path of the recipe file, normally C(seats/<seat>.yml).
    type: path
    required: true
  schema_path:
    description: Path of C(schemas/seat.schema.json), the recipe schema.
    type: path
    required: true
  nodes:
    description:
      - The candidate hosts in order, each a mapping with C(host), C(in_inventory) and the host's
        C(seatwright_node_*) variables, plus C(seatwright_gpus) and C(seatwright_checkpoint) from the
        fact cache when present.
      - A host may also carry C(rdma_fabric_mtu), C(rdma_fabric_probe_threshold) (with its
        C(_reason)) and C(nvidia_driver_branch) from the inventory; the plan's C(provenance) shows
        each host's value in effect, the inventory's or the role default with where it comes from.
      - Checkpoint facts count only for the recipe's pinned revision and when they judged the
        checkpoint complete; their safetensors tensor bytes then replace the declared size.
    type: list
    elements: dict
    required: true
  image_facts_dir:
    description:
      - Folder of image facts recorded from real builds (C(images/facts/<name>.json), written by
        C(scripts/images-record)). The plan reads the facts of the recipe's C(engine.image.build) from
        the first candidate host that caches them, else from here, and checks the launch's flags
        and the kernels' architectures against them.
      - Without it only the hosts' cached facts are read; C(playbooks/plan.yml) passes the collection's own.
    type: path
  served_aliases:
    description:
      - Router alias names the seat serves ahead of its own name (C(--served-model-name ALIAS NAME)),
        for an smg router, which routes by each seat's first served name. C(playbooks/plan.yml)
        passes the inventory's, from the C(seatwright.fleet.seat_aliases) filter.
    type: list
    elements: str
    default: []
  model_pins:
    description:
      - The operator's pins of the checkpoint for this run, where the recipe leaves them unknown (a field
        report that names neither). C(playbooks/plan.yml) passes C(seat_model_repo) and C(seat_model_revision).
      - A malformed pin fails naming the variable; the plan's notes say which pins were given.
    type: dict
    suboptions:
      repo:
        description: The checkpoint's Hugging Face repository, C(ORG/NAME).
        type: str
      revision:
        description: The checkpoint's full 40-hex commit.
        type: str
  plan_out:
    description: Where to write the plan as JSON; nothing is written when omitted.
    type: path
requirements:
  - jsonschema (on the controller)
notes:
  - "Check mode: Plans and reports whether the plan file would change; writes nothing."
  - "Diff mode: The plan file before and after."
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_full_diff
author: seatwright
"""

EXAMPLES = r"""
- name: Plan the GLM-5.3-Flash seat on the first two gpu_nodes hosts
  seat_plan:
    seat: glm53
    recipe_path: "{{ playbook_dir }}/../seats/glm53.yml"
    schema_path: "{{ playbook_dir }}/../schemas/seat.schema.json"
    nodes:
      - host: node-a
        in_inventory: true
        seatwright_node_gpu_profile: rtx-pro-6000-maxq
        seatwright_node_gpu_count: 2
        seatwright_node_fabric_ip: 10.77.0.11
        seatwright_node_fabric_iface: enp65s0f0np0
        seatwright_node_rdma_devices: [mlx5_0]
      - host: node-b
        in_inventory: true
        seatwright_node_gpu_profile: rtx-pro-6000-ws
        seatwright_node_gpu_count: 2
        seatwright_node_fabric_ip: 10.77.0.12
        seatwright_node_fabric_iface: enp65s0f0np0
        seatwright_node_rdma_devices: [mlx5_0]
    plan_out: .cache/plans/glm53.json
"""

RETURN = r"""
plan:
  description:
    - The plan, as written to O(plan_out). Keys include C(seat), C(fits), C(verdict),
      C(launchable), C(ready), C(reasons), C(checkpoint_bytes), C(node_vram_bytes),
      C(per_rank_weight_bytes), C(rules) (each with C(id) and C(reason)), C(refusals), C(unknowns),
      and C(ranks) (each with C(host), C(rank), C(argv), C(env), and C(container_spec) with
      C(setup_container_spec), the complete container each part of the rank runs).
  returned: success
  type: dict
summary:
  description: The plan as lines for people, ending with each rank's environment and command.
  returned: success
  type: list
  elements: str
plan_out:
  description: Where the plan was (or in check mode would be) written.
  returned: when O(plan_out) is set
  type: str
"""

from ansible.module_utils.basic import AnsibleModule, missing_required_lib
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.seat.plan import plan_result
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.recipe import HAS_JSONSCHEMA

ARGUMENT_SPEC = {
    "seat": {"type": "str", "required": True},
    "recipe_path": {"type": "path", "required": True},
    "schema_path": {"type": "path", "required": True},
    "nodes": {"type": "list", "elements": "dict", "required": True},
    "image_facts_dir": {"type": "path"},
    "served_aliases": {"type": "list", "elements": "str", "default": []},
    "model_pins": {
        "type": "dict",
        "options": {"repo": {"type": "str"}, "revision": {"type": "str"}},
    },
    "plan_out": {"type": "path"},
}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    if not HAS_JSONSCHEMA:
        module.fail_json(msg=missing_required_lib("jsonschema"))
    try:
        result = plan_result(module.params, module.check_mode, module._diff)
    except SeatError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
