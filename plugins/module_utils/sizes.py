"""Sizes as recipes and inventories write them ('204.5 GB', '21.6 GiB'), read as bytes.

Pure and standard-library only: node-side modules import it (through node/contract.py), and the
nodes' Python has no PyYAML or jsonschema.
"""

import decimal
import re

_SIZE = re.compile(r"^([0-9]+(?:\.[0-9]+)?) ?(B|kB|KB|MB|GB|TB|KiB|MiB|GiB|TiB)$")
_UNITS = {
    "B": 1,
    "kB": 10**3,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
}


def parse_size(value):
    """Bytes from an integer or a size string such as '204.5 GB'; None stays None."""
    if value is None or (isinstance(value, int) and not isinstance(value, bool)):
        return value
    match = _SIZE.match(str(value))
    if not match:
        raise ValueError("not a size: %r" % (value,))
    return int((decimal.Decimal(match.group(1)) * _UNITS[match.group(2)]).to_integral_value(decimal.ROUND_HALF_UP))
