"""What every router kind's description builds on: the units' name prefix, the blue/green colours'
ports, and how a bind address reads (every interface, this node only). No I/O."""

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import RouterError

UNIT_PREFIX = "seatwright-router"
COLOURS = ("blue", "green")
# The colours' private ports sit just above the public one (a router behind the front takes blue's).
COLOUR_PORT_OFFSET = {"blue": 1, "green": 2}
# Addresses that listen on every interface of the node.
WILDCARD_BINDS = ("0.0.0.0", "::", "[::]", "*", "")


def check_port(port, what="router port"):
    if isinstance(port, bool) or not isinstance(port, int) or not 1 <= port <= 65533:
        raise RouterError("%s %r is not a TCP port: give a whole number from 1 to 65533" % (what, port))
    return port


def colour_ports(port):
    """{colour: private port}; the public port is the front's."""
    check_port(port)
    return {colour: port + offset for colour, offset in COLOUR_PORT_OFFSET.items()}


def is_wildcard(bind):
    return (bind or "").strip() in WILDCARD_BINDS


def is_loopback(bind):
    return (bind or "").startswith("127.") or bind in ("::1", "[::1]", "localhost")
