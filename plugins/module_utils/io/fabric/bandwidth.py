"""The pairwise fabric bandwidth probe on a node: look up a cached measurement, serve, measure, store.

The steps are the pair probe's (io/fabric/pair_probe.py); this file runs the tools (ib_write_bw,
iperf3) and keeps records under the state folder; fabric/links.py plans the probe and judges the
result. Failures raise FabricError with the message for people.
"""

import datetime
import os
import subprocess
import time

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import FabricError
from ansible_collections.seatwright.fleet.plugins.module_utils.fabric.links import (
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
from ansible_collections.seatwright.fleet.plugins.module_utils.io.fabric.pair_probe import PairProbe, run_pair_step

_LISTEN = "0A"
FOLDER = "fabric_bandwidth"


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


def serve(module, params, plan):
    if plan["method"] == "rdma":
        argv = ib_write_bw_argv(plan, params["duration_s"], params["qps"], params["tcp_port"])
    else:
        argv = iperf3_argv(params["duration_s"], params["tcp_port"])
    binary = module.get_bin_path(argv[0])
    timeout = module.get_bin_path("timeout")
    if not binary or not timeout:
        raise FabricError(
            "host %s: %s (and coreutils timeout) must be installed to serve a probe; "
            "run the rdma_fabric role's package step" % (params["host"], argv[0])
        )
    if listening(params["tcp_port"]):
        raise FabricError(
            "host %s: TCP port %d is already in use, so no probe server can listen "
            "there; stop what holds it or set tcp_port" % (params["host"], params["tcp_port"])
        )
    log_path = os.path.join(params["state_dir"], FOLDER, "server.log")
    os.makedirs(os.path.dirname(log_path), exist_ok=True)
    with open(log_path, "wb") as log:
        # A new session keeps the server alive after the module returns; timeout bounds its life.
        server = subprocess.Popen(
            [timeout, str(params["server_lifetime_s"]), binary] + argv[1:],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            close_fds=True,
        )
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline:
        if listening(params["tcp_port"]):
            return server.pid, argv
        if server.poll() is not None:
            break
        time.sleep(0.2)
    with open(log_path, "rb") as log:
        tail = log.read()[-2000:].decode("utf-8", "replace")
    raise FabricError(
        "host %s: the %s server did not start listening on port %d: %s"
        % (params["host"], argv[0], params["tcp_port"], tail.strip() or "no output")
    )


def measure(module, params, plan, label, inputs, digest):
    if not params["server_address"]:
        raise FabricError("step measure needs server_address (the peer's fabric address)")
    json_file = None
    if plan["method"] == "rdma":
        rc, help_out, help_err = module.run_command(["ib_write_bw", "--help"])
        if "out_json" in help_out + help_err:
            json_file = os.path.join(params["state_dir"], FOLDER, "ib_write_bw.json")
            if os.path.exists(json_file):
                os.unlink(json_file)
        argv = ib_write_bw_argv(
            plan,
            params["duration_s"],
            params["qps"],
            params["tcp_port"],
            server_address=params["server_address"],
            json_file=json_file,
        )
    else:
        argv = iperf3_argv(params["duration_s"], params["tcp_port"], params["server_address"], streams=params["qps"])
    timeout = module.get_bin_path("timeout", required=True)
    rc, out, err = module.run_command([timeout, str(params["duration_s"] + 60)] + argv)
    if rc != 0:
        raise FabricError("pair %s: %s exited %d: %s" % (label, argv[0], rc, (err or out).strip()[-1500:]), argv=argv)
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
        raise FabricError("pair %s: %s" % (label, exc), argv=argv)
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
        "measured_at": datetime.datetime.fromtimestamp(now, datetime.UTC).isoformat(),
        "measured_at_epoch": now,
        "fingerprint": digest,
        "inputs": inputs,
    }


class BandwidthProbe(PairProbe):
    """ib_write_bw or iperf3 between a client (the first node) and a server (the peer)."""

    folder = FOLDER
    fact = "seatwright_fabric_bandwidth"
    error = FabricError
    start_step = "serve"

    def checked(self, params):
        if not 0 < params["threshold"] <= 1.5:
            raise FabricError("threshold is %r; expected a fraction of line rate such as 0.9" % params["threshold"])
        if params["duration_s"] < 1 or params["qps"] < 1:
            raise FabricError("duration_s and qps must be at least 1")
        if params["host"] == params["peer"]:
            raise FabricError("host and peer are both %s; a probe needs two different nodes" % params["host"])
        return params

    def plan(self, params, client, client_fabric, server, server_fabric, swapped):
        plan = probe_plan(
            client, client_fabric, server, server_fabric, params["method"], params["line_rate_gbps"], params["use_cuda"]
        )
        inputs = bandwidth_inputs(client, client_fabric, server, server_fabric, plan, params["duration_s"])
        return pair_label(client, server), plan, inputs

    def judge(self, record, threshold):
        return judge(record, threshold)

    def missing(self, label, digest):
        return "pair %s: no valid measurement is cached (fingerprint %s); run the probe" % (label, digest[:12])

    def start(self, module, params, plan, label):
        pid, argv = serve(module, params, plan)
        return {
            "server_pid": pid,
            "argv": argv,
            "msg": "%s server on %s for %s, exits after one client or %d s"
            % (argv[0], params["host"], label, params["server_lifetime_s"]),
        }

    def measure(self, module, params, plan, label, inputs, digest):
        return measure(module, params, plan, label, inputs, digest)


def run_step(module, params, check_mode):
    """One step of the probe (lookup, serve, measure or store); returns the module's result."""
    return run_pair_step(BandwidthProbe(), module, params, check_mode)
