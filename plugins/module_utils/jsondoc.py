"""Reading JSON documents that came from disk or the network, refused as damage rather than crashing.

Pure: bytes or text in, data out. It lives beside errors.py because caches, checkpoint headers,
staging listings and manifests all read JSON through it, and none of those concerns owns it.
"""

import json
import math


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


def finite(value):
    """(copy, paths): `value` with every float that is not finite (NaN, Infinity) made None, and
    the paths where that happened with what stood there, so strict JSON can hold any document.

    Walks with an explicit stack, like too_deep.
    """
    notes = []

    def fix(node, path):
        if isinstance(node, float) and not math.isfinite(node):
            notes.append("%s: %r" % (path_text(path) or "(top)", node))
            return None
        return node

    top = [fix(value, ())]
    stack = [(top, 0, value, ())]
    while stack:
        parent, key, node, path = stack.pop()
        if isinstance(node, dict):
            copy = {}
            parent[key] = copy
            for name, child in node.items():
                copy[name] = fix(child, path + (name,))
                stack.append((copy, name, child, path + (name,)))
        elif isinstance(node, (list, tuple)):
            copy = [fix(child, path + (i,)) for i, child in enumerate(node)]
            parent[key] = copy
            stack.extend((copy, i, child, path + (i,)) for i, child in enumerate(node))
    return top[0], notes
