"""The step machine of a node-pair measurement on a node: look up, start the peer's side, measure, store.

One driver for every probe of a node pair (the fabric bandwidth probe, io/fabric/bandwidth.py; the
cross-node all-reduce, io/fabric/crossnode.py). A play runs it in four steps: `lookup` on the first
node reads the cached record (fingerprinted by the probe's inputs) and judges it; the start step,
delegated to the peer, starts the peer's side (the bandwidth server, the peer's ranks); `measure` on
the first node runs the measurement, caches the record and judges it; `store`, delegated to the
peer, caches the same record there. Both ends plan from the first node's point of view, so they
agree on the fingerprint. A probe says only what differs: its plan and inputs, how it starts the
peer, how it measures, how a record is judged, its cache folder, fact and error class.
"""

import os

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.files import (
    atomic_write_json,
    cache_lookup,
    fingerprint,
    read_json,
)


class PairProbe:
    """What one kind of pair probe decides; run_pair_step drives it."""

    # The folder of its records under the node's state folder, and the fact that lists them.
    folder = None
    fact = None
    error = SeatwrightError
    # The step, delegated to the peer, that starts the peer's side.
    start_step = None
    # What a record is, for the store step's refusal ("the record given is not a <what> of <pair>").
    what = "measurement"

    def checked(self, params):
        """`params` checked (the probe's error naming what is wrong), with any default filled in."""
        return params

    def plan(self, params, first, first_fabric, second, second_fabric, swapped):
        """(pair label, plan, inputs) from the first node's point of view; `swapped` when the task
        runs for the peer (params' host is then `second`)."""
        raise NotImplementedError

    def judge(self, record, threshold):
        """(passed, message) of a record."""
        raise NotImplementedError

    def missing(self, label, digest):
        """The enforcing lookup's message when no valid record is cached."""
        raise NotImplementedError

    def start(self, module, params, plan, label):
        """Start the peer's side; the result's keys to add (msg among them)."""
        raise NotImplementedError

    def measure(self, module, params, plan, label, inputs, digest):
        """Run the measurement on the first node; its record."""
        raise NotImplementedError


def cache_path(state_dir, folder, label):
    return os.path.join(state_dir, folder, label.replace("<->", "--") + ".json")


def cached_records(state_dir, folder):
    """Every pair record cached in `folder` of the state folder, keyed by pair."""
    path = os.path.join(state_dir, folder)
    records = {}
    for name in sorted(os.listdir(path)) if os.path.isdir(path) else []:
        record = read_json(os.path.join(path, name)) if name.endswith(".json") else None
        if isinstance(record, dict) and record.get("pair"):
            records[record["pair"]] = record
    return records


def run_pair_step(probe, module, params, check_mode):
    """One step (lookup, the probe's start step, measure or store); returns the module's result."""
    params = probe.checked(params)
    state_dir = params["state_dir"]
    first, second = params["host"], params["peer"]
    first_fabric, second_fabric = params["host_fabric"], params["peer_fabric"]
    swapped = params["step"] in (probe.start_step, "store")
    if swapped:
        first, second = second, first
        first_fabric, second_fabric = second_fabric, first_fabric
    label, plan, inputs = probe.plan(params, first, first_fabric, second, second_fabric, swapped)
    digest = fingerprint(inputs)
    path = cache_path(state_dir, probe.folder, label)
    result = {"changed": False, "fingerprint": digest, "plan": plan, "pair": label}

    if params["step"] == "lookup":
        record = cache_lookup(path, digest, params["max_age_s"])
        result["cached"] = record is not None
        if record is not None:
            passed, message = probe.judge(record, params["threshold"])
            result.update(record=record, passed=passed, msg=message)
        result["ansible_facts"] = {probe.fact: cached_records(state_dir, probe.folder)}
        if params["enforce"] and record is None:
            raise probe.error(probe.missing(label, digest), **result)
        if params["enforce"] and not result["passed"]:
            raise probe.error(result.pop("msg"), **result)
        return result

    if check_mode:
        return dict(result, changed=True, msg="check mode: would %s for %s" % (params["step"], label))

    if params["step"] == probe.start_step:
        return dict(result, **probe.start(module, params, plan, label))

    if params["step"] == "measure":
        record = probe.measure(module, params, plan, label, inputs, digest)
    else:
        record = params["record"]
        if not isinstance(record, dict) or record.get("fingerprint") != digest or record.get("pair") != label:
            raise probe.error(
                "step store: the record given is not a %s of %s with fingerprint %s; "
                "pass the record returned by step measure" % (probe.what, label, digest[:12]),
                **result,
            )
    changed = read_json(path) != record
    if changed:
        atomic_write_json(path, record)
    passed, message = probe.judge(record, params["threshold"])
    return dict(
        result,
        changed=changed,
        record=record,
        passed=passed,
        msg=message,
        ansible_facts={probe.fact: cached_records(state_dir, probe.folder)},
    )
