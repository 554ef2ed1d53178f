"""Filter seatwright.fleet.redact_hostnames: the host names of a seat's nodes that evidence must not show."""

from ansible.errors import AnsibleFilterError
from ansible_collections.seatwright.fleet.plugins.module_utils.evidence.hostnames import (
    NAME_FACTS,
    hostnames_to_redact,
)

DOCUMENTATION = r"""
name: redact_hostnames
author: seatwright
short_description: The host names of a seat's nodes to pass to the evidence redactor
description:
  - Given the inventory names of a seat's nodes and C(hostvars), returns the names the redactor must be
    told (C(plugins/module_utils/evidence/hostnames.py)) - C(ansible_host) when it is a name other than
    the inventory name, FQDN inventory names, the C(fqdn), C(hostname) and C(nodename) facts where they
    were gathered, and the short form of each FQDN.
  - Never an address, localhost, or one of the seat's short inventory names (they name the ranks).
options:
  _input:
    description: Inventory names of the seat's nodes.
    type: list
    elements: str
    required: true
  hostvars:
    description: The play's C(hostvars).
    type: dict
    required: true
"""

EXAMPLES = r"""
- name: Record the run's files with the nodes' names removed
  seatwright.fleet.seat_evidence:
    dir: "{{ seat_evidence_dir }}"
    files: {note.txt: "{{ inventory_hostname }} served"}
    hostnames: "{{ ansible_play_hosts | seatwright.fleet.redact_hostnames(hostvars) }}"
  delegate_to: localhost
"""

RETURN = r"""
_value:
  description: Names to redact, each host's FQDN before its short forms, the hosts in the order given.
  type: list
  elements: str
"""


def _facts(variables):
    """A node's gathered names: under ansible_facts, or as ansible_* variables when facts are injected."""
    facts = variables.get("ansible_facts") or {}
    return {fact: facts.get(fact) or variables.get("ansible_" + fact) for fact in NAME_FACTS}


def redact_hostnames(nodes, hostvars):
    if isinstance(nodes, str) or not hasattr(nodes, "__iter__"):
        raise AnsibleFilterError(
            "redact_hostnames takes a list of inventory names, got %s: pass e.g. ansible_play_hosts"
            % type(nodes).__name__
        )
    described = []
    for name in nodes:
        variables = hostvars[name] if name in hostvars else {}
        described.append(dict(_facts(variables), name=str(name), ansible_host=variables.get("ansible_host")))
    return hostnames_to_redact(described)


class FilterModule:
    def filters(self):
        return {"redact_hostnames": redact_hostnames}
