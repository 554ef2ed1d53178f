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


# Recipes, inventories and facts are shallow: the deepest real recipe field is five levels down.
# Anything far deeper is damage or an attack, and would exhaust Python's recursion in the YAML
# loader, the schema validator or deepcopy long before a person read a useful message.
MAX_NESTING = 64


def too_deep(value, limit=MAX_NESTING):
    """The path (keys and indexes) to the first mapping or list nested more than `limit` levels down, or None.

    Walks with an explicit stack, so it answers for any depth without recursing.
    """
    stack = [(value, ())]
    while stack:
        node, path = stack.pop()
        if isinstance(node, dict):
            children = list(node.items())
        elif isinstance(node, (list, tuple)):
            children = list(enumerate(node))
        else:
            continue
        if len(path) >= limit:
            return list(path)
        stack.extend((child, path + (key,)) for key, child in reversed(children))
    return None


def path_text(path, head=""):
    """['a', 0, 'b'] -> 'a[0].b', after `head` when given."""
    text = head
    for part in path:
        if isinstance(part, int) and not isinstance(part, bool):
            text += "[%d]" % part
        else:
            text += ("." if text else "") + str(part)
    return text
