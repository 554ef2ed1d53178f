"""Reading JSON documents that came from disk or the network, refused as damage rather than crashing.

Pure: bytes or text in, data out. It lives beside errors.py because caches, checkpoint headers,
staging listings and manifests all read JSON through it, and none of those concerns owns it.
"""

import json


def parse_json(data):
    """Parse JSON bytes or text; ValueError (never RecursionError) for anything that is not plain JSON.

    A document nested deeper than Python's recursion limit must be refused as damage, not crash
    the reader.
    """
    if isinstance(data, bytes):
        data = data.decode("utf-8")
    try:
        return json.loads(data)
    except RecursionError:
        raise ValueError("JSON nested too deeply to read (Python's recursion limit)")
