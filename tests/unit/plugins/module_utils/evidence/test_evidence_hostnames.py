"""Which node names the evidence redactor is told (evidence/hostnames.py, filter redact_hostnames),
and that the seat playbooks tell it: a node's FQDN never reaches the evidence."""

import json
import os
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import yaml
from ansible_collections.seatwright.fleet.plugins.filter.redact_hostnames import redact_hostnames
from ansible_collections.seatwright.fleet.plugins.module_utils.evidence.hostnames import hostnames_to_redact
from ansible_collections.seatwright.fleet.plugins.module_utils.evidence.redact import Redactor
from ansible_collections.seatwright.fleet.plugins.module_utils.io.evidence.writer import write_evidence
from conftest import PLAYBOOK, run_playbook
from seat_cases import ROOT

PYTHON = str(ROOT / ".venv" / "bin" / "python")
# Recorded from the lab's containers (fact cache of a `make lab` run): Docker names them after their inventory names.
LAB_FACTS = json.loads((ROOT / "tests" / "fixtures" / "lab" / "name-facts.json").read_text())


def _inventory_hosts(name):
    """{inventory name: ansible_host} of inventory/<name>/hosts.yml."""
    hosts = yaml.safe_load((ROOT / "inventory" / name / "hosts.yml").read_text())
    found = {}
    for group in hosts["all"]["children"].values():
        for host, variables in (group.get("hosts") or {}).items():
            found[host] = (variables or {}).get("ansible_host")
    return found


def _nodes(hosts, facts=None):
    return [
        dict(
            name=host, ansible_host=address, **{k[len("ansible_") :]: v for k, v in (facts or {}).get(host, {}).items()}
        )
        for host, address in hosts.items()
    ]


@pytest.mark.parametrize(
    "inventory, facts",
    [("lab", None), ("lab", LAB_FACTS), ("example", None)],
    ids=["lab", "lab-with-gathered-facts", "example"],
)
def test_the_projects_inventories_add_no_names_so_their_evidence_is_unchanged(inventory, facts):
    hosts = _inventory_hosts(inventory)
    assert sorted(hosts) == ["node-a", "node-b"]
    assert hostnames_to_redact(_nodes(hosts, facts)) == []


@pytest.mark.parametrize(
    "nodes, expected",
    [
        # The attack's inventory: a short label, the node reached by its site name.
        ([{"name": "node-a", "ansible_host": "gpu7.corp.example.com"}], ["gpu7.corp.example.com", "gpu7"]),
        # An FQDN inventory name, with and without an address to reach it.
        ([{"name": "gpu8.dc1.example.net", "ansible_host": "10.0.0.8"}], ["gpu8.dc1.example.net", "gpu8"]),
        ([{"name": "GPU8.dc1.example.net."}], ["gpu8.dc1.example.net", "gpu8"]),
        # A short ansible_host other than the inventory name is a real name.
        ([{"name": "node-a", "ansible_host": "rack3-gpu2"}], ["rack3-gpu2"]),
        # Addresses in every spelling are left to the redactor's address rules.
        ([{"name": "node-a", "ansible_host": "192.168.10.11"}], []),
        ([{"name": "node-a", "ansible_host": "fe80::1%eth0"}], []),
        ([{"name": "node-a", "ansible_host": "[2001:db8::7]"}], []),
        ([{"name": "10.0.0.9"}], []),
        # Gathered names: FQDN first so the short form shares its placeholder; localhost says nothing.
        (
            [{"name": "node-a", "ansible_host": "10.0.0.1", "hostname": "gpu7", "fqdn": "gpu7.corp.example.com"}],
            ["gpu7.corp.example.com", "gpu7"],
        ),
        ([{"name": "node-a", "fqdn": "localhost", "hostname": "localhost", "nodename": "localhost.localdomain"}], []),
        # A container whose hostname is its id: redacted like any host name.
        ([{"name": "node-a", "hostname": "3f2a9c1b7e4d", "nodename": "3f2a9c1b7e4d"}], ["3f2a9c1b7e4d"]),
        # The seat's short labels are kept, even when another node reports one.
        ([{"name": "node-a", "hostname": "node-b"}, {"name": "node-b"}], []),
        # Too short to replace as a word; a placeholder already; not a host name at all.
        ([{"name": "node-a", "ansible_host": "db"}], []),
        ([{"name": "node-a", "ansible_host": "host-3"}], []),
        ([{"name": "node-a", "ansible_host": "not a name", "hostname": None, "fqdn": ""}], []),
        # Two nodes: each name once, hosts in the order given.
        (
            [
                {"name": "node-a", "ansible_host": "gpu7.corp.example.com", "hostname": "gpu7"},
                {"name": "node-b", "ansible_host": "gpu8.corp.example.com", "fqdn": "gpu8.corp.example.com"},
            ],
            ["gpu7.corp.example.com", "gpu7", "gpu8.corp.example.com", "gpu8"],
        ),
    ],
)
def test_names_to_redact(nodes, expected):
    assert hostnames_to_redact(nodes) == expected


def test_a_short_form_given_after_its_fqdn_shares_the_fqdns_placeholder():
    redactor = Redactor(hostnames=["gpu7.corp.example.com", "gpu7", "gpu8"])
    assert redactor.redact("gpu7.corp.example.com gpu7 gpu8") == "host-1 host-1 host-2"


def test_filter_reads_ansible_host_and_gathered_names_from_hostvars():
    hostvars = {
        "node-a": {"ansible_host": "10.0.0.1", "ansible_facts": {"fqdn": "gpu7.corp.example.com", "hostname": "gpu7"}},
        # Facts injected as variables (inject_facts_as_vars) are read too.
        "node-b": {"ansible_host": "node-b", "ansible_nodename": "gpu8.corp.example.com"},
    }
    assert redact_hostnames(["node-a", "node-b", "absent"], hostvars) == [
        "gpu7.corp.example.com",
        "gpu7",
        "gpu8.corp.example.com",
        "gpu8",
    ]


# ---- the attack: a node reached by its site name, and an engine that says where it runs ----------


class _EchoingEngine(BaseHTTPRequestHandler):
    """Answers the bring-up's question and, as engines do in errors and banners, names its host."""

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        body = json.dumps(
            {
                "object": "chat.completion",
                "choices": [
                    {
                        "index": 0,
                        "finish_reason": "stop",
                        "message": {"role": "assistant", "content": "Paris. [served by gpu7.corp.example.com (gpu7)]"},
                    }
                ],
                "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
            }
        ).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


def _plan(serve):
    return {
        "seat": "lab",
        "model": {"served_name": "seatwright-tiny", "revision": "0" * 40},
        "engine": {"image": {"reference": "seatwright/vllm-cpu:lab"}},
        "bringup": {"serve": True, "refusals": [], "summary": "would serve"},
        "ranks": [
            {
                "host": "node-a",
                "rank": 0,
                "role": "server",
                "container": "seatwright-lab-rank0",
                "serve": serve,
                "setup": [],
                "env": {},
                "argv": ["vllm", "serve", "/models/seatwright-tiny"],
            }
        ],
    }


@pytest.mark.skipif(not os.path.exists(PLAYBOOK), reason="needs the project venv (scripts/bootstrap)")
def test_fqdn_of_a_seat_node_is_redacted_in_evidence(tmp_path):
    """playbooks/bringup.yml, run for real on the controller (the node play limited away): the node's
    ansible_host is its site name, and the engine's answer names it; bringup.json must not."""
    (tmp_path / "hosts.yml").write_text(
        yaml.safe_dump(
            {
                "all": {
                    "hosts": {"localhost": {"ansible_connection": "local"}},
                    "children": {
                        "gpu_nodes": {
                            "hosts": {
                                "node-a": {
                                    "ansible_host": "gpu7.corp.example.com",
                                    # What the node play (limited away) reads back from the running rank.
                                    "__seat_rank_record": {
                                        "host": "node-a",
                                        "rank": 0,
                                        "argv": ["vllm", "serve", "/models/seatwright-tiny"],
                                        "env": {"HOSTNAME": "gpu7", "PATH": "/usr/bin"},
                                    },
                                }
                            }
                        }
                    },
                }
            }
        )
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), _EchoingEngine)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    plan = tmp_path / "lab.json"
    plan.write_text(json.dumps(_plan("127.0.0.1:%d" % server.server_address[1])))
    evidence = tmp_path / "evidence" / "lab" / "20260101T000000Z"
    evidence.mkdir(parents=True)
    # The evidence folder's checkout (the module finds the record schema there).
    (tmp_path / "schemas").symlink_to(ROOT / "schemas")
    try:
        result = run_playbook(
            tmp_path,
            tmp_path / "hosts.yml",
            "playbooks/bringup.yml",
            "--limit",
            "localhost",
            *["-e", "seat=lab", "-e", "seat_plan_path=%s" % plan, "-e", "seat_evidence_dir=%s" % evidence],
        )
    finally:
        server.shutdown()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    record = (evidence / "bringup.json").read_text()
    assert "Paris." in record  # the answer was recorded
    written = "".join(path.read_text() for path in evidence.rglob("*") if path.is_file())
    assert "gpu7" not in written.lower()
    assert "host-1" in record


def test_an_evidence_file_named_after_a_node_does_not_carry_its_fqdn(tmp_path):
    result = write_evidence(
        dir=str(tmp_path),
        root=str(ROOT),
        files={"ranks/gpu7.corp.example.com.json": {"host": "gpu7.corp.example.com"}},
        hostnames=["gpu7.corp.example.com"],
    )
    assert [os.path.relpath(path, tmp_path) for path in result["written"]] == ["ranks/host-1.json"]
    assert json.loads((tmp_path / "ranks" / "host-1.json").read_text()) == {"host": "host-1"}


@pytest.mark.skipif(not os.path.exists(PLAYBOOK), reason="needs the project venv (scripts/bootstrap)")
def test_a_drained_seat_brought_back_leaves_its_evidence_redacted(tmp_path):
    """playbooks/tasks/drain_seat_back.yml (the drain's bring-back, issue 52), run for real from a batch node
    the seat does not use (the seat role finds no rank there and starts nothing): the seat's plan file is
    read, a fresh evidence folder keeps it, and bringup.json records the answer and the seat's rank from
    the seat node's facts, with the node's FQDN redacted, as bringup.yml's own record does."""
    checkout = tmp_path / "checkout"
    (checkout / "playbooks").mkdir(parents=True)
    (checkout / "schemas").symlink_to(ROOT / "schemas")
    (checkout / "playbooks" / "back.yml").write_text(
        yaml.safe_dump(
            [
                {
                    "name": "The drain's bring-back of one seat",
                    "hosts": "node-z",
                    "gather_facts": False,
                    "tasks": [
                        {
                            "name": "Bring the seat back",
                            "ansible.builtin.include_tasks": str(ROOT / "playbooks" / "tasks" / "drain_seat_back.yml"),
                            "vars": {"__nodes_drain_step": {"step": "bringup", "seat": "lab"}},
                        }
                    ],
                }
            ]
        )
    )
    rank = {"host": "node-a", "rank": 0, "argv": ["vllm", "serve", "/models/seatwright-tiny"], "env": {}}
    (tmp_path / "hosts.yml").write_text(
        yaml.safe_dump(
            {
                "all": {
                    "children": {
                        "gpu_nodes": {
                            "hosts": {
                                "node-a": {"ansible_host": "gpu7.corp.example.com", "__seat_rank_record": rank},
                                "node-z": {"ansible_connection": "local", "ansible_python_interpreter": PYTHON},
                            }
                        }
                    }
                }
            }
        )
    )
    server = ThreadingHTTPServer(("127.0.0.1", 0), _EchoingEngine)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    plans = checkout / ".cache" / "plans"
    plans.mkdir(parents=True)
    (plans / "lab.json").write_text(json.dumps(_plan("127.0.0.1:%d" % server.server_address[1])))
    try:
        result = run_playbook(tmp_path, tmp_path / "hosts.yml", str(checkout / "playbooks" / "back.yml"))
    finally:
        server.shutdown()
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    folders = sorted((checkout / "evidence" / "lab").iterdir())
    assert len(folders) == 1, folders
    record = json.loads((folders[0] / "bringup.json").read_text())
    assert json.loads((folders[0] / "plan.json").read_text())["seat"] == "lab"
    assert record["first_answer"]["message"]["content"].startswith("Paris.")
    assert [r["host"] for r in record["ranks"]] == ["node-a"]  # the inventory name stays; its FQDN goes
    written = "".join(path.read_text() for path in folders[0].rglob("*") if path.is_file())
    assert "gpu7" not in written.lower()
    assert "evidence: %s" % folders[0] in result.stdout
