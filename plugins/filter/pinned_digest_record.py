"""Filter seatwright.fleet.pinned_digest_record: where a node records the registry digest a seat pins."""

from ansible.errors import AnsibleFilterError
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import ImageError
from ansible_collections.seatwright.fleet.plugins.module_utils.images.registry import record_name, seat_reference

DOCUMENTATION = r"""
name: pinned_digest_record
author: seatwright
short_description: The node's record of the registry digest a seat pins, under the images state folder
description:
  - Given the image a seat runs and the digest its recipe pins (C(engine.image.digest)), returns the
    record's path relative to the images state folder, as the engine_image role writes it
    (C(registry/sha256-<hex>.json), images/registry.py C(record_name)).
  - An empty string when nothing is pinned.
options:
  _input:
    description: The image the seat runs (the container spec's image).
    type: str
    required: true
  digest:
    description: The pinned digest, C(sha256:<64 hex>), or null.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Read the node's record of the pinned digest
  ansible.builtin.slurp:
    src: "{{ images_dir }}/{{ image_ref | seatwright.fleet.pinned_digest_record(pinned_digest) }}"
"""

RETURN = r"""
_value:
  description: The record's path under the images state folder, or an empty string.
  type: str
"""


def pinned_digest_record(image_ref, digest):
    if not digest:
        return ""
    try:
        return record_name(seat_reference(image_ref, digest))
    except ImageError as exc:
        raise AnsibleFilterError(str(exc))


class FilterModule:
    def filters(self):
        return {"pinned_digest_record": pinned_digest_record}
