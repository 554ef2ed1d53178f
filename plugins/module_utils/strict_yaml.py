"""YAML read strictly: a key given twice in one mapping is an error, not a value silently dropped.

PyYAML's safe loader keeps the last of two equal keys without a word, so a recipe that sets
serving.max_model_len twice serves whichever came last. `strict_load` here refuses it, with the key
and both lines (errors.DuplicateKeyError), for the caller to report with the file's name.
"""

import yaml
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import DuplicateKeyError


class StrictSafeLoader(yaml.SafeLoader):
    """yaml.SafeLoader that raises DuplicateKeyError on a key given twice in one mapping."""

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue  # '<<' merges another mapping; its keys may be overridden on purpose
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:
                    continue  # an unhashable key: the base loader names that problem itself
                if first is not None:
                    raise DuplicateKeyError(key, first.line + 1, key_node.start_mark.line + 1)
                seen[key] = key_node.start_mark
        return super().construct_mapping(node, deep=deep)


def strict_load(text):
    """yaml.safe_load, except that a key given twice in a mapping raises DuplicateKeyError."""
    return yaml.load(text, Loader=StrictSafeLoader)  # noqa: S506 - a SafeLoader subclass
