#!/usr/bin/python
"""Ansible module: pairwise fabric bandwidth probe (ib_write_bw or iperf3), cached on both nodes."""

DOCUMENTATION = r"""
module: fabric_bandwidth
short_description: Measure the bandwidth between two nodes and keep it as a fingerprinted fact
description:
  - One probe is a pair of hosts, a client and a server, driven by a play in four steps (see
    roles/rdma_fabric/tasks/probe.yml). C(lookup) on the client reads the cached record and says
    whether it is still valid. C(serve), delegated to the peer, starts a server there that exits
    after one client or O(server_lifetime_s). C(measure) on the client runs the test and caches the
    record. C(store), delegated to the peer, caches the same record there.
  - RDMA pairs run C(ib_write_bw) (Gb/s, C(--out_json) when the binary has it, GPU memory with
    O(use_cuda)); pairs without an active RDMA port on both ends run C(iperf3) over TCP.
  - A record holds the rate, the line rate, their ratio, the method, the time, and a fingerprint of
    what the figure depends on (both ends' RDMA devices and firmware, MTUs, driver versions, the
    method and its parameters). While the fingerprint matches and the record is younger than
    O(max_age_s), C(lookup) reports it as cached and nothing is measured.
  - With O(enforce), C(lookup) fails when the record is below O(threshold) of the line rate, naming
    the pair and the numbers.
options:
  step:
    description: Which part of the probe to run on this host.
    type: str
    choices: [lookup, serve, measure, store]
    required: true
  host:
    description: Inventory name of the host the task runs for.
    type: str
    required: true
  peer:
    description: Inventory name of the other end.
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
  server_address:
    description: Fabric address of the server (the peer); required by C(measure).
    type: str
  method:
    description: C(rdma) or C(tcp) to force one path; C(auto) takes RDMA when both ends have an active port.
    type: str
    choices: [auto, rdma, tcp]
    default: auto
  line_rate_gbps:
    description: Line rate to judge against when sysfs reports none (Gb/s).
    type: float
  threshold:
    description: Smallest acceptable fraction of the line rate.
    type: float
    default: 0.9
  enforce:
    description: With C(lookup), fail when the cached record is missing or below O(threshold).
    type: bool
    default: false
  duration_s:
    description: Seconds each test runs.
    type: int
    default: 10
  qps:
    description: Queue pairs for ib_write_bw (parallel streams for iperf3).
    type: int
    default: 4
  use_cuda:
    description: GPU index whose memory ib_write_bw uses (GPUDirect RDMA path); RDMA only.
    type: int
  tcp_port:
    description: TCP port the server listens on.
    type: int
    default: 18515
  server_lifetime_s:
    description: The server exits after this many seconds if no client came.
    type: int
    default: 120
  max_age_s:
    description: A cached record older than this is measured again.
    type: int
    default: 604800
  state_dir:
    description: Folder of seatwright's caches on the node; records go to C(fabric_bandwidth/) in it.
    type: path
    default: /var/lib/seatwright
  record:
    description: The record to store (C(store) step); the C(record) returned by C(measure).
    type: dict
notes:
  - "Check mode: Step lookup runs as usual; serve, measure and store report what they would do and run nothing."
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_partial
author: seatwright
"""

EXAMPLES = r"""
- name: Look up the cached measurement of this pair
  fabric_bandwidth:
    step: lookup
    host: node-a
    peer: node-b
    host_fabric: "{{ ansible_facts.seatwright_fabric }}"
    peer_fabric: "{{ hostvars['node-b'].ansible_facts.seatwright_fabric }}"
  register: probe
"""

RETURN = r"""
cached:
  description: Whether a valid record for the current fingerprint exists (C(lookup)).
  returned: lookup
  type: bool
fingerprint:
  description: Fingerprint of the probe's inputs.
  returned: always
  type: str
plan:
  description: Method, line rate and its source, devices and GID indexes the probe uses.
  returned: always
  type: dict
record:
  description: The measurement (pair, rate_gbps, line_rate_gbps, fraction, method, measured_at, fingerprint, inputs).
  returned: when a record exists or was measured
  type: dict
passed:
  description: Whether the record meets the threshold.
  returned: when a record exists or was measured
  type: bool
server_pid:
  description: Process id of the started server (C(serve)).
  returned: serve
  type: int
ansible_facts:
  description: C(seatwright_fabric_bandwidth), every pair record cached on this node keyed by pair.
  returned: lookup, measure, store
  type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.defaults import PROBE_THRESHOLD, STATE_DIR
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import FabricError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.fabric.bandwidth import run_step


def main():
    module = AnsibleModule(
        argument_spec={
            "step": {"type": "str", "choices": ["lookup", "serve", "measure", "store"], "required": True},
            "host": {"type": "str", "required": True},
            "peer": {"type": "str", "required": True},
            "host_fabric": {"type": "dict", "required": True},
            "peer_fabric": {"type": "dict", "required": True},
            "server_address": {"type": "str"},
            "method": {"type": "str", "choices": ["auto", "rdma", "tcp"], "default": "auto"},
            "line_rate_gbps": {"type": "float"},
            "threshold": {"type": "float", "default": PROBE_THRESHOLD},
            "enforce": {"type": "bool", "default": False},
            "duration_s": {"type": "int", "default": 10},
            "qps": {"type": "int", "default": 4},
            "use_cuda": {"type": "int"},
            "tcp_port": {"type": "int", "default": 18515},
            "server_lifetime_s": {"type": "int", "default": 120},
            "max_age_s": {"type": "int", "default": 604800},
            "state_dir": {"type": "path", "default": STATE_DIR},
            "record": {"type": "dict"},
        },
        supports_check_mode=True,
    )
    try:
        result = run_step(module, module.params, module.check_mode)
    except FabricError as exc:
        module.fail_json(**dict(exc.details, msg=str(exc)))
    module.exit_json(**result)


if __name__ == "__main__":
    main()
