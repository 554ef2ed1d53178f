#!/usr/bin/python
"""Ansible module: the two-node all-reduce bus bandwidth of a node pair, in the engine image, cached on both."""

DOCUMENTATION = r"""
module: nccl_crossnode
short_description: Measure a node pair's all-reduce bus bandwidth over the fabric and keep it as a fact
description:
  - One run is a pair of nodes. The first node (node rank 0) hosts the rendezvous on its fabric
    address; every GPU of both nodes is one rank (world size = the GPUs of the pair). A play drives
    it in four steps (see roles/rdma_fabric/tasks/nccl_crossnode.yml). C(lookup) on the first node
    reads the cached record. C(join), delegated to the peer, starts the peer's ranks in the
    background, bounded by O(timeout_s). C(measure) on the first node runs its ranks, reads the bus
    bandwidth per size and the transport of every channel from rank 0's output, and caches the
    record. C(store), delegated to the peer, caches the same record there.
  - The ranks run inside the engine image (C(docker run), the client found on PATH, with host
    networking, host IPC, unlimited locked memory, the GPUs and, when both nodes have an active RDMA
    port, C(/dev/infiniband) with C(IPC_LOCK)), with the node's NCCL environment and
    C(NCCL_DEBUG=INFO). With O(runtime=none) they run under O(python) on the node itself.
  - O(backend=nccl) runs on GPUs; O(backend=gloo) runs CPU ranks over TCP, which proves the
    orchestration (two nodes, the rendezvous, parsing, caching, the threshold) where there is no GPU.
  - A record holds busbw per size, the best busbw over large sizes, the transports, the link rate
    it is judged against (the slower node's active RDMA port rates summed, else its interface
    speed, else O(line_rate_gbps)), and a fingerprint of what the figure depends on (the image,
    both ends' fabric facts and NCCL environment, the backend, the ranks, the sizes). While the
    fingerprint matches and the record is younger than O(max_age_s), C(lookup) reports it cached.
  - With O(enforce), C(lookup) fails when no record is cached or its busbw is below O(threshold)
    of the link rate (in GB/s, the link's Gb/s over 8), naming the pair and the numbers.
options:
  step:
    description: Which part of the run this task does.
    type: str
    choices: [lookup, join, measure, store]
    required: true
  host:
    description: Inventory name of the node the task runs for.
    type: str
    required: true
  peer:
    description: Inventory name of the other node.
    type: str
    required: true
  host_fabric:
    description: C(seatwright_fabric) facts of O(host).
    type: dict
    required: true
  peer_fabric:
    description: C(seatwright_fabric) facts of O(peer).
    type: dict
    required: true
  host_gpus:
    description: Ranks O(host) runs (its GPU count with nccl).
    type: int
    required: true
  peer_gpus:
    description: Ranks O(peer) runs.
    type: int
    required: true
  master_addr:
    description: Fabric address of the first node (the one that runs C(lookup) and C(measure)).
    type: str
    required: true
  port:
    description: TCP port of the rendezvous on the first node.
    type: int
    default: 29533
  backend:
    description: C(nccl) on GPUs, C(gloo) for CPU ranks.
    type: str
    choices: [nccl, gloo]
    default: nccl
  runtime:
    description: C(docker) runs the ranks in O(image); C(none) runs them under O(python) on the node.
    type: str
    choices: [docker, none]
    default: docker
  image:
    description:
      - The engine image to run in, as its facts give it - C(reference) (what C(docker run) starts) and
        C(id) (fingerprinted when given, so a retagged image is another image). Required by C(join) and
        C(measure) with runtime docker.
    type: dict
  python:
    description: Interpreter with PyTorch; inside the image (default C(python3)) or on the node with runtime none.
    type: str
  env:
    description: NCCL environment of O(host) (roles/nccl_env's variables).
    type: dict
    default: {}
  peer_env:
    description: NCCL environment of O(peer).
    type: dict
    default: {}
  sizes:
    description: Message sizes in bytes; from 64 MiB up they are judged (smaller ones measure latency).
    type: list
    elements: int
    default: [8388608, 67108864, 268435456, 1073741824]
  iters:
    description: Timed all-reduces per size.
    type: int
    default: 20
  line_rate_gbps:
    description: Link rate in Gb/s when sysfs reports none.
    type: float
  threshold:
    description: Smallest acceptable fraction of the link rate.
    type: float
    default: 0.8
  enforce:
    description: With C(lookup), fail when the record is missing or below O(threshold).
    type: bool
    default: false
  timeout_s:
    description: Give up on the ranks after this many seconds (the peer waits as long for rank 0).
    type: int
    default: 600
  max_age_s:
    description: A cached record older than this is measured again.
    type: int
    default: 604800
  state_dir:
    description:
      - Folder of seatwright's caches on the node; records go to C(nccl_crossnode/) in it.
      - Unset, the node's state folder (seatwright's one definition of it).
    type: path
  record:
    description: The record to store (C(store) step); the C(record) returned by C(measure).
    type: dict
  qos:
    description:
      - Host name to that node's RoCE QoS fact (C(seatwright_roce_qos) from C(roce_qos)), for both ends;
        recorded beside the result and part of the fingerprint. Unset, the record carries none.
    type: dict
notes:
  - "Check mode: Step lookup runs as usual; join, measure and store report what they would do and run nothing."
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_partial
author: seatwright
"""

EXAMPLES = r"""
- name: Look up the pair's cached cross-node all-reduce
  nccl_crossnode:
    step: lookup
    host: node-a
    peer: node-b
    host_fabric: "{{ ansible_facts.seatwright_fabric }}"
    peer_fabric: "{{ hostvars['node-b'].ansible_facts.seatwright_fabric }}"
    host_gpus: 2
    peer_gpus: 2
    master_addr: 10.77.0.11
    image: "{{ ansible_facts.seatwright_engine_images['glm53'] }}"
  register: pair
"""

RETURN = r"""
cached:
  description: Whether a valid record for the current fingerprint exists (C(lookup)).
  returned: lookup
  type: bool
fingerprint:
  description: Fingerprint of the run's inputs.
  returned: always
  type: str
plan:
  description: The pair, backend, world size, each node's ranks, the rendezvous address and the link rate.
  returned: always
  type: dict
record:
  description:
    - The measurement, keyed like the cached fact - pair, backend, world_size, rows (busbw per size),
      judged_busbw_gbps, transports, line_rate_gbps, fraction, image, measured_at, fingerprint, inputs,
      roce_qos (each end's lossless RoCE settings as read, null when not given).
  returned: when a record exists or was measured
  type: dict
passed:
  description: Whether the record meets the threshold with no wrong results.
  returned: when a record exists or was measured
  type: bool
pid:
  description: Process id of the peer's background ranks (C(join)).
  returned: join
  type: int
argv:
  description: The command of this node's ranks.
  returned: join
  type: list
  elements: str
ansible_facts:
  description: C(seatwright_nccl_crossnode), every pair record cached on this node keyed by pair.
  returned: lookup, measure, store
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.fabric.crossnode import run_step

ARGUMENT_SPEC = {
    "step": {"type": "str", "choices": ["lookup", "join", "measure", "store"], "required": True},
    "host": {"type": "str", "required": True},
    "peer": {"type": "str", "required": True},
    "host_fabric": {"type": "dict", "required": True},
    "peer_fabric": {"type": "dict", "required": True},
    "host_gpus": {"type": "int", "required": True},
    "peer_gpus": {"type": "int", "required": True},
    "master_addr": {"type": "str", "required": True},
    "port": {"type": "int", "default": 29533},
    "backend": {"type": "str", "choices": ["nccl", "gloo"], "default": "nccl"},
    "runtime": {"type": "str", "choices": ["docker", "none"], "default": "docker"},
    "image": {"type": "dict"},
    "python": {"type": "str"},
    "env": {"type": "dict", "default": {}},
    "peer_env": {"type": "dict", "default": {}},
    "sizes": {"type": "list", "elements": "int", "default": [8388608, 67108864, 268435456, 1073741824]},
    "iters": {"type": "int", "default": 20},
    "line_rate_gbps": {"type": "float"},
    "threshold": {"type": "float", "default": 0.8},
    "enforce": {"type": "bool", "default": False},
    "timeout_s": {"type": "int", "default": 600},
    "max_age_s": {"type": "int", "default": 604800},
    "state_dir": {"type": "path"},
    "record": {"type": "dict"},
    "qos": {"type": "dict"},
}


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    try:
        result = run_step(module, module.params, module.check_mode)
    except SeatwrightError as exc:
        module.fail_json(**dict(exc.details, msg=str(exc)))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
