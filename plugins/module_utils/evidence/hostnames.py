"""Which host names of a seat's nodes the evidence redactor must be told (pure, standard library).

The redactor replaces names under private zones by itself; a node's public or site name (an
`ansible_host` like `gpu7.corp.example.com`, an FQDN inventory name, the name the node gave when its
facts were gathered) it can only replace when told. `hostnames_to_redact` decides that list, in one
place, for the seat playbooks (through the filter `seatwright.fleet.redact_hostnames`) and anyone
else who writes evidence.

Kept on purpose: a short inventory name (`node-a`). It is the project's own label of a node and
names the ranks in plan.json, bringup.json and telemetry.json; it is no more than the operator
chose to call it. A short name the node itself reports is kept too when it is one of those labels
(a lab container's hostname is its inventory name), so the lab's evidence reads as it always has.
"""

import ipaddress
import re

# Facts (without the ansible_ prefix) that carry a name the node gave itself.
NAME_FACTS = ("fqdn", "hostname", "nodename")
# Names every machine answers to: they say nothing about which one.
GENERIC_NAMES = frozenset(
    ("localhost", "localhost.localdomain", "localhost4", "localhost6", "ip6-localhost", "ip6-loopback")
)
# Shorter names would be replaced as whole words all over the evidence ("a", "db"); the redactor
# applies the same bound to the short form it derives from an FQDN.
MIN_HOST_NAME_LEN = 3
_LABEL = r"[a-z0-9](?:[a-z0-9_-]{0,61}[a-z0-9])?"
HOST_NAME = re.compile(r"^%s(?:\.%s)*$" % (_LABEL, _LABEL))
PLACEHOLDER = re.compile(r"^host-\d+$")


def is_address(value):
    """True for an IPv4 or IPv6 address (brackets and a zone index allowed)."""
    text = str(value).strip().strip("[]").split("%", 1)[0]
    try:
        ipaddress.ip_address(text)
    except ValueError:
        return False
    return True


def host_name(value):
    """The value as a lower-case host name without a trailing dot, or None when it is not a real
    one: empty, an address, localhost, a placeholder, too short, or not host-name syntax."""
    if not isinstance(value, str):
        return None
    name = value.strip().rstrip(".").lower()
    if (
        len(name) < MIN_HOST_NAME_LEN
        or is_address(name)
        or name in GENERIC_NAMES
        or PLACEHOLDER.match(name)
        or not HOST_NAME.match(name)
    ):
        return None
    return name


def _fqdn_first(names):
    """An FQDN before the short names, so the redactor numbers the host by its full name and its
    short form shares that number."""
    return sorted(names, key=lambda name: "." not in name)


def hostnames_to_redact(nodes):
    """The names to redact in a seat's evidence, in a stable order (one placeholder per host).

    `nodes` is a list of mappings, one per node of the seat: `name` (the inventory name),
    `ansible_host` and the gathered `fqdn`, `hostname` and `nodename` where known (None or absent
    otherwise). Returned: FQDN inventory names, `ansible_host` when it is a name other than the
    inventory name, gathered names, and the short form of each FQDN; never an address, localhost,
    or one of the seat's short inventory names (see the module docstring).
    """
    nodes = list(nodes or ())
    labels = set()
    for node in nodes:
        name = host_name(node.get("name"))
        if name and "." not in name:
            labels.add(name)
    found = []
    for node in nodes:
        own = []
        inventory = host_name(node.get("name"))
        if inventory and "." in inventory:
            own.append(inventory)
        address = host_name(node.get("ansible_host"))
        if address and address != inventory:
            own.append(address)
        own.extend(filter(None, (host_name(node.get(fact)) for fact in NAME_FACTS)))
        shorts = [host_name(name.split(".", 1)[0]) for name in own if "." in name]
        for name in _fqdn_first(own + [short for short in shorts if short]):
            if name not in labels and name not in found:
                found.append(name)
    return found
