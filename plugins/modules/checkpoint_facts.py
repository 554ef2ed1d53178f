#!/usr/bin/python
"""Facts about a model checkpoint on disk: files, safetensors headers, index, parity."""

DOCUMENTATION = r"""
---
module: checkpoint_facts
short_description: Judge a model checkpoint folder or Hugging Face cache entry
description:
  - Reads a model folder, or a Hugging Face cache entry (C(models--org--name)) at a pinned 40-hex
    revision, and reports its files and sizes, safetensors header checks (a file must be
    8 + header length + the largest data offset bytes), tensor bytes by dtype and in total,
    consistency with C(model.safetensors.index.json), the expected digest of each file and whether
    the checkpoint is complete (nothing missing, truncated or mismatched) and verified.
  - Expected digests come from cache blob names (an LFS blob is named by its sha256, a small file
    by its git blob sha1) and from the parity manifest C(.seatwright-manifest.json) that
    C(weight_stage) writes once every file has verified.
  - With I(require_complete) (and I(require_verified)) this is the check a seat makes before it
    starts an engine offline. It never changes the host.
options:
  path:
    description: Model folder, or Hugging Face cache entry folder (the one holding C(snapshots/) and C(blobs/)).
    type: path
    required: true
  revision:
    description:
      - Pinned 40-hex commit id. Required for a cache entry (it selects the snapshot); for a folder
        it is compared with the revision its parity manifest records.
    type: str
  mode:
    description:
      - C(quick) reads headers and sizes only and takes parity from the manifest.
      - C(full) also hashes every file (sha256, and the git blob sha1 where a blob name needs it).
    type: str
    choices: [quick, full]
    default: quick
  require_complete:
    description: Fail, naming the files, unless the checkpoint is complete and at the pinned revision.
    type: bool
    default: false
  require_verified:
    description:
      - Fail unless every file also has parity evidence, a manifest entry it still matches
        (C(quick)) or a matching digest (C(full)). Implies I(require_complete).
    type: bool
    default: false
  hash_workers:
    description: Files hashed at once in C(full) mode.
    type: int
    default: 4
notes:
  - "Check mode: Reads only; runs the same in check mode."
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_full
author:
  - seatwright
"""

EXAMPLES = r"""
- name: Read a staged checkpoint
  checkpoint_facts:
    path: /srv/hf/hub/models--zai-org--GLM-5.3-Flash
    revision: 0123456789abcdef0123456789abcdef01234567

- name: Refuse to start a seat unless the pinned revision is complete and verified
  checkpoint_facts:
    path: "{{ seat_checkpoint_path }}"
    revision: "{{ seat_model_revision }}"
    require_verified: true

- name: Hash every file against its blob name
  checkpoint_facts:
    path: /srv/hf/hub/models--zai-org--GLM-5.3-Flash
    revision: 0123456789abcdef0123456789abcdef01234567
    mode: full
"""

RETURN = r"""
ansible_facts:
  description: Facts set by this module.
  returned: always
  type: dict
  contains:
    seatwright_checkpoint:
      description: The checkpoint's report.
      type: dict
      contains:
        path: {description: The path read., type: str}
        layout: {description: C(folder) or C(hf-cache)., type: str}
        revision: {description: The revision asked for., type: str}
        mode: {description: C(quick) or C(full)., type: str}
        files:
          description: One entry per file, with path, size, expected_size, status
            (ok, missing, truncated, oversized, bad-header, hash-mismatch), problems, the expected digests
            (expected_sha256, expected_git_sha1) and where they come from (hash_source); sha256 too in
            full mode.
          type: list
          elements: dict
        file_count: {description: Files present., type: int}
        total_bytes: {description: Bytes on disk over all files., type: int}
        safetensors:
          description: files, tensors, tensor_bytes and bytes_by_dtype over readable safetensors headers.
          type: dict
        index:
          description: shards, total_size, errors and warnings from the shard index, or null without one.
          type: dict
        missing: {description: Files expected but absent., type: list, elements: str}
        truncated:
          description: Files shorter or longer than their header or manifest says, or malformed.
          type: list
          elements: str
        mismatched:
          description: Files whose digest contradicts the expected one (full mode).
          type: list
          elements: str
        extra: {description: Files present but not in the parity manifest., type: list, elements: str}
        unverified: {description: Files with no parity evidence., type: list, elements: str}
        errors: {description: Checkpoint-wide problems (revision, index)., type: list, elements: str}
        warnings: {description: Findings that do not stop a loader., type: list, elements: str}
        complete: {description: Nothing missing, truncated, mismatched, and the revision is the pinned one., type: bool}
        verified: {description: Complete, and every file has parity evidence., type: bool}
        parity: {description: C(hashed), C(manifest) or C(none)., type: str}
        manifest: {description: present, revision and verified_at of the parity manifest., type: dict}
        refs: {description: Cache refs and the commits they name (cache entries only)., type: dict}
        model_config:
          description: The values of the checkpoint's config.json the plan needs (layers, heads, head_dim,
            kv_lora_rank, qk_rope_head_dim, max_position_embeddings, torch_dtype, ...), or null without one.
          type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights.checkpoint_scan import checkpoint_facts


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            revision=dict(type="str"),
            mode=dict(type="str", choices=["quick", "full"], default="quick"),
            require_complete=dict(type="bool", default=False),
            require_verified=dict(type="bool", default=False),
            hash_workers=dict(type="int", default=4),
        ),
        supports_check_mode=True,
    )
    try:
        result = checkpoint_facts(module.params)
    except SeatwrightError as exc:
        module.fail_json(msg=str(exc), **exc.details)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
