"""IP addresses as a socket would bind them: one home for 'is this the wildcard?'.

Standard library only: node-side modules import it.
"""

import ipaddress


def plain_ip(value):
    """The IP address `value` names, an IPv4-mapped IPv6 address (::ffff:a.b.c.d) as the IPv4 one.

    A dual-stack socket bound to ::ffff:0.0.0.0 listens on every IPv4 address: judged as itself it
    would pass for a unicast address. ValueError when `value` is not an IP address.
    """
    parsed = ipaddress.ip_address(str(value if value is not None else "").strip())
    mapped = getattr(parsed, "ipv4_mapped", None)
    return mapped if mapped is not None else parsed


def is_wildcard(value):
    """True when binding `value` listens on every interface (0.0.0.0, ::, ::ffff:0.0.0.0)."""
    try:
        return plain_ip(value).is_unspecified
    except ValueError:
        return False
