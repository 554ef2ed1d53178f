"""Filter seatwright.fleet.pinned_digest_problem: why the image a seat runs is not its pinned digest."""

import base64
import binascii
import json

from ansible_collections.seatwright.fleet.plugins.module_utils.images.registry import seat_digest_problem

DOCUMENTATION = r"""
name: pinned_digest_problem
author: seatwright
short_description: Why the image a seat runs is not proven to be the digest its recipe pins
description:
  - The digest is proven by the image's C(RepoDigests) (a node that pulled it) or by the node's record
    that the engine_image role writes after loading it over the fabric, for the same image id
    (images/registry.py C(seat_digest_problem)).
  - An empty string when it is proven, or when nothing is pinned.
options:
  _input:
    description: C(docker image inspect)'s object of the image on the node.
    type: dict
    required: true
  image_ref:
    description: The image the seat runs.
    type: str
    required: true
  digest:
    description: The pinned digest, or null.
    type: str
    required: true
  record:
    description: C(ansible.builtin.slurp)'s result for the record (a missing or unreadable file counts as none).
    type: dict
    required: true
  record_path:
    description: The record's path on the node, for the message.
    type: str
    required: true
"""

EXAMPLES = r"""
- name: Require the pinned digest
  ansible.builtin.assert:
    that: __seat_digest_problem | length == 0
    fail_msg: "{{ __seat_digest_problem }}"
  vars:
    __seat_digest_problem: >-
      {{ __seat_image | seatwright.fleet.pinned_digest_problem(__seat_image_ref, __seat_pinned,
         __seat_digest_record_read, __seat_digest_record_path) }}
"""

RETURN = r"""
_value:
  description: The problem, naming both ways the digest is proven and what to do; empty when there is none.
  type: str
"""


def _slurped(result):
    """The record slurp read, or None when there is no readable JSON object."""
    content = result.get("content") if isinstance(result, dict) else None
    if not content:
        return None
    try:
        data = json.loads(base64.b64decode(content).decode("utf-8"))
    except (binascii.Error, UnicodeDecodeError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def pinned_digest_problem(image, image_ref, digest, record, record_path):
    return seat_digest_problem(image_ref, digest, image, _slurped(record), record_path) or ""


class FilterModule:
    def filters(self):
        return {"pinned_digest_problem": pinned_digest_problem}
