#!/usr/bin/python
"""Pull a checkpoint from a weight_source onto this node, verified, resumable and idempotent."""

DOCUMENTATION = r"""
---
module: weight_stage
short_description: Stage a checkpoint onto this node from a weight_source, verifying every byte
description:
  - Fetches the listing from the C(weight_source) at I(source_url) and brings every file of the
    checkpoint into I(dest), several files at once (I(streams)).
  - Trusts nothing before the listing's signature checks out under the run's secret I(token)
    (HMAC-SHA256 bound to a fresh nonce; the secret itself is never sent). A listener that cannot
    sign it, such as a process that took the source's port first, is reported and nothing is
    written. The listing is then checked field by field (safe relative paths and ref names, refs
    equal to the pinned revision, types) before it is used.
  - Every path written is resolved and must stay under I(dest); transfers in progress are opened
    without following links (a leftover is removed first), and each file gets permission bits no
    wider than the source's copy.
  - Each stream hashes the bytes as they arrive (sha256; the git blob sha1 for small files of a
    cache entry), writes them under a temporary name, fsyncs, compares the digest with the one
    the source listed, and only then renames the file into place. Hashing while streaming costs
    no second read, and on a multi-core node the hashing of one stream overlaps the network and
    disk work of the others.
  - sha256 everywhere. Cache entries name their LFS blobs by sha256, so that digest is needed
    anyway; one hash keeps manifests comparable between nodes. Measured on the two-core lab it
    keeps verified staging at the plain-copy rate (see bench/results/staging.md).
  - An interrupted transfer (lost connection, killed run) leaves its temporary file; the next
    attempt hashes the bytes already there and asks the source for the rest with a Range
    request. A temporary file is named after the expected digest, so a new version never
    resumes an old one.
  - Files already in place are hashed (I(verify=full)) or taken on the word of the parity
    manifest when their size and modification time are unchanged (I(verify=quick)); verified
    files are skipped, so a second run moves nothing and reports no change. A corrupt file in
    place is fetched again. Bytes from the source that do not match the expected digest are
    reported and never replace anything.
  - The parity manifest C(.seatwright-manifest.json) (revision, each file's size, sha256 and
    modification time, verified_at) is written atomically in the checkpoint folder only after
    every file has verified, and rewritten only when its content changes.
  - A cache entry is staged as a cache entry (C(blobs/), C(snapshots/<revision>/) symlinks, and
    the refs that name the revision) so that an engine started offline finds it.
  - Progress (bytes done, rate, time left) is written every I(progress_interval_s) seconds to
    C(<state_dir>/progress-<name>.json) on the node.
  - Supports check mode (reads the source listing and the files in place, writes nothing) and
    diff (the manifest's file list before and after).
options:
  source_url:
    description: C(http://<source fabric address>:<port>) of the running C(weight_source).
    type: str
    required: true
  token:
    description: The run's token, as given to C(weight_source).
    type: str
    required: true
  dest:
    description: Destination folder, or cache entry folder (C(.../models--org--name)) for a cache entry.
    type: path
    required: true
  name:
    description: Label for progress and lock files; letters, digits, C(.), C(_) and C(-).
    type: str
    required: true
  revision:
    description: Pinned 40-hex commit id the source must serve; the run stops before writing if it does not.
    type: str
  client:
    description: This node's name in the source's statistics.
    type: str
    default: destination
  streams:
    description:
      - Files transferred at once; C(0) derives it from the cores this process may use (6 on a node
        of more than 4 cores, which receives pieces into buffers; one per two cores on a smaller
        node, which splices them into its files), no more than I(nic_mb_per_s) can fill, at least 4
        and at most 32.
    type: int
    default: 0
  nic_mb_per_s:
    description: This node's NIC speed in MB/s when known, capping the derived stream count; C(0) means unknown.
    type: float
    default: 0
  verify:
    description: How files already in place are trusted before being skipped.
    type: str
    choices: [full, quick]
    default: full
  direct_io:
    description:
      - Write with O_DIRECT, bypassing the page cache, and fall back to buffered writes where the
        filesystem refuses it. Staging hundreds of GB through the page cache evicts what running
        services keep cached, and on the lab's VM the cache's bookkeeping cost more CPU than hashing.
    type: bool
    default: true
  bandwidth_limit_mb_per_s:
    description: Cap on this node's total receive rate in MB/s (10^6 bytes); 0 means no cap.
    type: float
    default: 0
  state_dir:
    description: Where the lock and progress files live.
    type: path
    default: /var/lib/seatwright/staging
  connect_timeout_s:
    description: How long to keep trying to reach the source before giving up.
    type: int
    default: 60
  io_timeout_s:
    description:
      - Seconds without data after which a connection counts as lost (and the transfer resumes).
      - Also the most the listing exchange may take in all, since it is read before its signature
        proves who sent it; a listing also has at most 32 MiB.
    type: int
    default: 60
  retries:
    description: Resumes allowed per file after lost connections.
    type: int
    default: 3
  progress_interval_s:
    description: Seconds between progress file updates; 0 writes none.
    type: int
    default: 2
  source_label:
    description: Where the bytes came from, recorded in the manifest (a host name and path, not an address).
    type: str
    default: ""
  prune:
    description:
      - Remove files in the checkpoint folder that the listing does not name (shards of an earlier
        revision, files left by hand). They are always reported in C(extra_files); hidden files are
        left alone. Temporary files of interrupted runs are removed in any case.
      - Refused when I(dest) is reached through a link, which would aim the removal at the link's
        target; give the real folder.
    type: bool
    default: false
  peers:
    description:
      - The run's other destinations, each a dict with C(name) and C(url) (the peer's
        C(http://<fabric address>:<peer port>)). When the source lists pieces (its I(piece_mb)),
        this node fetches pieces from peers as well as from the source, verifies each against
        the signed listing, and serves what it verified to them; an entry whose name is
        I(client) is ignored. An empty list means the source alone.
      - A peer that sends a piece which does not hash to the listing's digest, or breaks the
        protocol, is not asked again in this run; the piece is fetched elsewhere.
    type: list
    elements: dict
    default: []
  rank:
    description: This destination's place among all I(ranks) of them (0-based); it spreads first requests.
    type: int
    default: 0
  ranks:
    description: How many destinations this run has.
    type: int
    default: 1
  serve_address:
    description: This node's fabric address, where it serves verified pieces to its peers.
    type: str
  serve_port:
    description: TCP port for serving pieces to peers.
    type: int
    default: 8475
  upload_limit_mb_per_s:
    description: Cap on what this node sends to its peers, in MB/s (10^6 bytes); 0 means no cap.
    type: float
    default: 0
  linger_s:
    description:
      - Once done, this node serves its peers until each of them said it is done, or until none
        has asked for anything for this many seconds (a peer that died does not hold it longer).
    type: int
    default: 15
  lifetime_s:
    description: Upper bound in seconds for serving peers after this node is done.
    type: int
    default: 7200
notes:
  - "Check mode: Predicts which files would be fetched or rewritten; writes nothing."
  - "Diff mode: The files that would be fetched, repaired or removed."
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_full_diff
author:
  - seatwright
"""

EXAMPLES = r"""
- name: Pull the checkpoint from node-a
  weight_stage:
    source_url: "http://10.77.0.11:8473"
    token: "{{ __weights_token }}"
    dest: /srv/hf/hub/models--zai-org--GLM-5.3-Flash
    name: glm-5.3-flash
    revision: 0123456789abcdef0123456789abcdef01234567
    client: "{{ inventory_hostname }}"
    streams: 4
  async: 7200
  poll: 10
"""

from ansible_collections.seatwright.fleet.plugins.module_utils.defaults import STAGING_DIR  # noqa: E402

# Declared before RETURN so that the module's code after it stays short (test_module_layout).
ARGUMENT_SPEC = dict(
    source_url=dict(type="str", required=True),
    token=dict(type="str", required=True, no_log=True),
    dest=dict(type="path", required=True),
    name=dict(type="str", required=True),
    revision=dict(type="str"),
    client=dict(type="str", default="destination"),
    streams=dict(type="int", default=0),
    nic_mb_per_s=dict(type="float", default=0),
    verify=dict(type="str", choices=["full", "quick"], default="full"),
    direct_io=dict(type="bool", default=True),
    bandwidth_limit_mb_per_s=dict(type="float", default=0),
    state_dir=dict(type="path", default=STAGING_DIR),
    connect_timeout_s=dict(type="int", default=60),
    io_timeout_s=dict(type="int", default=60),
    retries=dict(type="int", default=3),
    progress_interval_s=dict(type="int", default=2),
    source_label=dict(type="str", default=""),
    prune=dict(type="bool", default=False),
    peers=dict(type="list", elements="dict", default=[]),
    rank=dict(type="int", default=0),
    ranks=dict(type="int", default=1),
    serve_address=dict(type="str"),
    serve_port=dict(type="int", default=8475),
    upload_limit_mb_per_s=dict(type="float", default=0),
    linger_s=dict(type="int", default=15),
    lifetime_s=dict(type="int", default=7200),
)

RETURN = r"""
name: {description: The checkpoint's label., returned: success, type: str}
revision: {description: Revision staged., returned: success, type: str}
layout: {description: C(folder) or C(hf-cache)., returned: success, type: str}
dest: {description: Destination root., returned: success, type: str}
manifest: {description: Path of the parity manifest., returned: success, type: str}
manifest_written: {description: Whether the manifest was (re)written., returned: success, type: bool}
verified: {description: Every file verified and the manifest describes them., returned: success, type: bool}
bytes_total: {description: Bytes of the checkpoint., returned: success, type: int}
streams: {description: Files pulled at once (derived from the node unless given)., returned: success, type: int}
bytes_transferred: {description: Bytes moved over the fabric by this run., returned: success, type: int}
piece_hash:
  description: The piece digest checked (C(blake3) where the node's Python has the blake3 package, else C(sha256)).
  returned: when the source listed pieces and something was pulled
  type: str
bytes_reused: {description: Bytes of interrupted transfers that were kept and resumed., returned: success, type: int}
files_skipped: {description: Files already in place and verified., returned: success, type: int}
files_fetched: {description: Files transferred from the start., returned: success, type: int}
files_resumed: {description: Files whose interrupted transfer was resumed., returned: success, type: int}
transfer_s: {description: Seconds from the start of the run to the last verified file., returned: success, type: float}
throughput_mb_per_s: {description: Bytes moved per second over transfer_s, in MB/s., returned: success, type: float}
elapsed_s: {description: Seconds for the whole run., returned: success, type: float}
plan:
  description: For each file (cache blob or folder path), the action (skip, fetch, resume) and why.
  returned: success
  type: dict
transfers:
  description: For each file moved, bytes, bytes_reused, seconds, mb_per_s, sha256, interruptions and direct_io.
  returned: success
  type: list
  elements: dict
extra_files:
  description: Files in the checkpoint folder that the listing does not name.
  returned: success
  type: list
  elements: str
pruned:
  description: The extra files removed because I(prune) was set.
  returned: success
  type: list
  elements: str
modes_narrowed:
  description: Files already in place whose permissions were narrowed to the source's.
  returned: success
  type: list
  elements: str
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights.staging_pull import run_stage


def main():
    module = AnsibleModule(
        argument_spec=ARGUMENT_SPEC,
        supports_check_mode=True,
    )
    try:
        result = run_stage(module.params, module.check_mode, module._diff)
    except SeatwrightError as exc:
        module.fail_json(msg=str(exc), **exc.details)
    except Exception as exc:  # noqa: BLE001 (the play always gets JSON it can show, never a bare traceback)
        module.fail_json(
            msg="staging %s into %s failed on this host: %s: %s"
            % (module.params["name"], module.params["dest"], type(exc).__name__, exc)
        )
    warnings = result.pop("warnings", [])
    for warning in warnings:
        module.warn(warning)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
