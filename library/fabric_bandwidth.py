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

import datetime
import os
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule
from ansible.module_utils.seatwright.node.contract import STATE_DIR
from ansible.module_utils.seatwright.errors import FabricError
from ansible.module_utils.seatwright.fabric.links import (
    bandwidth_inputs,
    ib_write_bw_argv,
    iperf3_argv,
    judge,
    pair_label,
    parse_ib_write_bw,
    parse_ib_write_bw_json,
    parse_iperf3_json,
    probe_plan,
)
from ansible.module_utils.seatwright.io.files import atomic_write_json, cache_lookup, fingerprint, read_json

_LISTEN = "0A"


def cache_path(state_dir, label):
    return os.path.join(state_dir, "fabric_bandwidth", label.replace("<->", "--") + ".json")


def cached_records(state_dir):
    folder = os.path.join(state_dir, "fabric_bandwidth")
    records = {}
    for name in sorted(os.listdir(folder)) if os.path.isdir(folder) else []:
        record = read_json(os.path.join(folder, name)) if name.endswith(".json") else None
        if isinstance(record, dict) and record.get("pair"):
            records[record["pair"]] = record
    return records


def listening(port):
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            with open(table) as handle:
                next(handle)
                for line in handle:
                    fields = line.split()
                    if int(fields[1].rsplit(":", 1)[1], 16) == port and fields[3] == _LISTEN:
                        return True
        except (OSError, StopIteration):
            continue
    return False


def serve(module, plan):
    params = module.params
    if plan["method"] == "rdma":
        argv = ib_write_bw_argv(plan, params["duration_s"], params["qps"], params["tcp_port"])
    else:
        argv = iperf3_argv(params["duration_s"], params["tcp_port"])
    binary = module.get_bin_path(argv[0])
    timeout = module.get_bin_path("timeout")
    if not binary or not timeout:
        module.fail_json(msg="host %s: %s (and coreutils timeout) must be installed to serve a probe; "
                             "run the rdma_fabric role's package step" % (params["host"], argv[0]))
    if listening(params["tcp_port"]):
        module.fail_json(msg="host %s: TCP port %d is already in use, so no probe server can listen "
                             "there; stop what holds it or set tcp_port" % (params["host"], params["tcp_port"]))
    log_path = os.path.join(params["state_dir"], "fabric_bandwidth", "server.log")
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    with open(log_path, "wb") as log:
        # A new session keeps the server alive after the module returns; timeout bounds its life.
        server = subprocess.Popen([timeout, str(params["server_lifetime_s"]), binary] + argv[1:],
                                  stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                  start_new_session=True, close_fds=True)
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if listening(params["tcp_port"]):
            return server.pid, argv
        if server.poll() is not None:
            break
        time.sleep(0.2)
    with open(log_path, "rb") as log:
        tail = log.read()[-2000:].decode("utf-8", "replace")
    module.fail_json(msg="host %s: the %s server did not start listening on port %d: %s"
                         % (params["host"], argv[0], params["tcp_port"], tail.strip() or "no output"))


def measure(module, plan, label, inputs, digest):
    params = module.params
    if not params["server_address"]:
        module.fail_json(msg="step measure needs server_address (the peer's fabric address)")
    json_file = None
    if plan["method"] == "rdma":
        rc, help_out, help_err = module.run_command(["ib_write_bw", "--help"])
        if "out_json" in help_out + help_err:
            json_file = os.path.join(params["state_dir"], "fabric_bandwidth", "ib_write_bw.json")
            if os.path.exists(json_file):
                os.unlink(json_file)
        argv = ib_write_bw_argv(plan, params["duration_s"], params["qps"], params["tcp_port"],
                                server_address=params["server_address"], json_file=json_file)
    else:
        argv = iperf3_argv(params["duration_s"], params["tcp_port"], params["server_address"],
                           streams=params["qps"])
    timeout = module.get_bin_path("timeout", required=True)
    rc, out, err = module.run_command([timeout, str(params["duration_s"] + 60)] + argv)
    if rc != 0:
        module.fail_json(msg="pair %s: %s exited %d: %s" % (label, argv[0], rc, (err or out).strip()[-1500:]),
                         argv=argv)
    try:
        if plan["method"] == "rdma":
            if json_file and os.path.exists(json_file):
                with open(json_file) as handle:
                    parsed = parse_ib_write_bw_json(handle.read(), unit="Gb/sec")
            else:
                parsed = parse_ib_write_bw(out)
            rate, details = parsed["average_gbps"], parsed
        else:
            rate, details = parse_iperf3_json(out), {}
    except FabricError as exc:
        module.fail_json(msg="pair %s: %s" % (label, exc), argv=argv)
    now = time.time()
    return {
        "pair": label,
        "client": params["host"],
        "server": params["peer"],
        "method": plan["method"],
        "tool": argv[0],
        "argv": argv,
        "rate_gbps": round(rate, 3),
        "line_rate_gbps": plan["line_rate_gbps"],
        "line_rate_source": plan["line_rate_source"],
        "fraction": round(rate / plan["line_rate_gbps"], 4),
        "details": details,
        "measured_at": datetime.datetime.fromtimestamp(now, datetime.timezone.utc).isoformat(),
        "measured_at_epoch": now,
        "fingerprint": digest,
        "inputs": inputs,
    }


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
            "threshold": {"type": "float", "default": 0.9},
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
    params = module.params
    if not 0 < params["threshold"] <= 1.5:
        module.fail_json(msg="threshold is %r; expected a fraction of line rate such as 0.9" % params["threshold"])
    if params["duration_s"] < 1 or params["qps"] < 1:
        module.fail_json(msg="duration_s and qps must be at least 1")
    if params["host"] == params["peer"]:
        module.fail_json(msg="host and peer are both %s; a probe needs two different nodes" % params["host"])

    # The plan is always made from the client's point of view, so both ends agree on it.
    client, server = params["host"], params["peer"]
    client_fabric, server_fabric = params["host_fabric"], params["peer_fabric"]
    if params["step"] in ("serve", "store"):
        client, server = server, client
        client_fabric, server_fabric = server_fabric, client_fabric
    label = pair_label(client, server)
    try:
        plan = probe_plan(client, client_fabric, server, server_fabric, params["method"],
                          params["line_rate_gbps"], params["use_cuda"])
    except FabricError as exc:
        module.fail_json(msg=str(exc))
    inputs = bandwidth_inputs(client, client_fabric, server, server_fabric, plan, params["duration_s"])
    digest = fingerprint(inputs)
    path = cache_path(params["state_dir"], label)
    result = {"changed": False, "fingerprint": digest, "plan": plan, "pair": label}

    if params["step"] == "lookup":
        record = cache_lookup(path, digest, params["max_age_s"])
        result["cached"] = record is not None
        if record is not None:
            passed, message = judge(record, params["threshold"])
            result.update(record=record, passed=passed, msg=message)
        result["ansible_facts"] = {"seatwright_fabric_bandwidth": cached_records(params["state_dir"])}
        if params["enforce"] and record is None:
            module.fail_json(msg="pair %s: no valid measurement is cached (fingerprint %s); run the "
                                 "probe" % (label, digest[:12]), **result)
        if params["enforce"] and record is not None and not passed:
            module.fail_json(**dict(result, msg=message))
        module.exit_json(**result)

    if module.check_mode:
        module.exit_json(**dict(result, changed=True, msg="check mode: would %s for %s" % (params["step"], label)))

    if params["step"] == "serve":
        pid, argv = serve(module, plan)
        module.exit_json(**dict(result, server_pid=pid, argv=argv,
                                msg="%s server on %s for %s, exits after one client or %d s"
                                    % (argv[0], params["host"], label, params["server_lifetime_s"])))

    if params["step"] == "measure":
        record = measure(module, plan, label, inputs, digest)
    else:
        record = params["record"]
        if not isinstance(record, dict) or record.get("fingerprint") != digest or record.get("pair") != label:
            module.fail_json(msg="step store: the record given is not a measurement of %s with fingerprint "
                                 "%s; pass the record returned by step measure" % (label, digest[:12]), **result)
    changed = read_json(path) != record
    if changed:
        atomic_write_json(path, record)
    passed, message = judge(record, params["threshold"])
    module.exit_json(**dict(result, changed=changed, record=record, passed=passed, msg=message,
                            ansible_facts={"seatwright_fabric_bandwidth": cached_records(params["state_dir"])}))


if __name__ == "__main__":
    main()
