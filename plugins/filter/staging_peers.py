"""Filter seatwright.fleet.staging_peers: the run's destinations as peers ({name, url}) for weight_stage."""

from ansible.errors import AnsibleFilterError
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import StagingError
from ansible_collections.seatwright.fleet.plugins.module_utils.weights.staging import peer_list

DOCUMENTATION = r"""
name: staging_peers
author: seatwright
short_description: The destinations of a staging run as peers of each other
description:
  - Given the play's hosts and C(hostvars), returns one C({name, url}) per host, the URL built from
    the host's C(seatwright_node_fabric_ip) and the peer port (C(plugins/module_utils/weights/staging.py)).
  - Fails naming the host whose fabric address is missing or unusable.
options:
  _input:
    description: Inventory names of the destinations, in the play's order.
    type: list
    elements: str
    required: true
  hostvars:
    description: The play's C(hostvars).
    type: dict
    required: true
  port:
    description: TCP port every destination serves its pieces on.
    type: int
    required: true
"""

EXAMPLES = r"""
- name: Pull from the source and from every other node of the play
  seatwright.fleet.weight_stage:
    peers: "{{ ansible_play_hosts | seatwright.fleet.staging_peers(hostvars, 8475) }}"
"""

RETURN = r"""
_value:
  description: One entry per host, C(name) the inventory name and C(url) C(http://<fabric address>:<port>).
  type: list
  elements: dict
"""


def staging_peers(hosts, hostvars, port):
    if isinstance(hosts, str) or not hasattr(hosts, "__iter__"):
        raise AnsibleFilterError("staging_peers takes a list of inventory names, e.g. ansible_play_hosts")
    addresses = {host: (hostvars[host] if host in hostvars else {}).get("seatwright_node_fabric_ip") for host in hosts}
    try:
        return peer_list(list(hosts), addresses, port)
    except StagingError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule:
    def filters(self):
        return {"staging_peers": staging_peers}
