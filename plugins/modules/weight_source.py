#!/usr/bin/python
"""Serve one checkpoint read-only over the fabric for a bounded time, for weight_stage to pull."""

DOCUMENTATION = r"""
---
module: weight_source
short_description: Serve a checkpoint read-only to the nodes that stage it
description:
  - Lists the checkpoint at I(path) (a model folder, or a Hugging Face cache entry at I(revision)),
    checks it as C(checkpoint_facts) does in quick mode, and serves its files over HTTP on
    I(bind_address):I(port) to callers that authenticate each request under the run's secret
    I(token). Destinations run C(weight_stage).
  - Transport choice. Plain HTTP from the Python standard library runs on every node without
    installing anything; C(Range) requests give resume; C(socket.sendfile) moves file bytes from
    the page cache to the network without copying them through Python, so the source spends
    almost no CPU. Integrity does not rely on the transport; every destination hashes what it
    receives against the digest listed here, and the listing goes out signed (HMAC-SHA256 under
    the run's secret, bound to the destination's nonce), so a process that took the port first
    cannot pass for the source. The secret never crosses the network; each request carries a
    single-use MAC instead, and requests that fail the check are refused and do not count as
    activity or as a destination done. Only the listed files are served.
  - Hidden files (C(.git/), dotfiles) are not served; a link that resolves outside the folder
    (outside C(blobs/) in a cache entry) makes the source refuse the checkpoint. Each file's
    permission bits are listed, and destinations keep theirs no wider.
  - Each file's expected digest comes from its cache blob name, or else from the folder's parity
    manifest, or else from hashing the source file once (remembered per file identity under
    I(state_dir), so a later run does not read it again).
  - Meant to run as an async task (C(async), C(poll) 0). It stops when I(clients) destinations
    have reported done, after I(idle_timeout_s) without a request, or after I(lifetime_s).
  - A damaged source (missing, truncated or malformed files, wrong revision) is served as a
    listing of its problems, so every destination fails with the reason and writes nothing, and
    this module fails too.
  - Serving reads only; the module reports C(changed=false). Check mode serves as well, so that
    destinations in check mode can predict their changes, and writes no hash cache or pid file.
options:
  path:
    description: Model folder or Hugging Face cache entry on this host.
    type: path
    required: true
  revision:
    description: Pinned 40-hex commit id; required for a cache entry.
    type: str
  name:
    description: Label for the checkpoint in listings, progress and manifests.
    type: str
    required: true
  bind_address:
    description:
      - Address to listen on, the source's fabric address, as an IP address. The wildcard
        addresses (C(0.0.0.0), C(::), empty) are refused.
    type: str
    required: true
  port:
    description: TCP port to listen on.
    type: int
    default: 8473
  token:
    description: Per-run secret (16 characters or more) that signs the listing and authenticates requests; never sent.
    type: str
    required: true
  clients:
    description: Number of destinations; serving stops once this many have reported done.
    type: int
    default: 1
  idle_timeout_s:
    description: Stop after this many seconds with no request in flight.
    type: int
    default: 120
  lifetime_s:
    description: Stop after this many seconds in any case.
    type: int
    default: 7200
  state_dir:
    description: Where the pid file and the source hash cache live.
    type: path
    default: /var/lib/seatwright/staging
  hash_workers:
    description: Files hashed at once when a folder has no expected digests.
    type: int
    default: 4
  piece_mb:
    description:
      - List the sha256 of every piece of this many MiB beside each file's own digest, so that
        destinations verify pieces in parallel and serve them onward to each other (peer-assisted
        staging). Every file is read once for it (cached per file identity) and must match its
        expected digest. 0 lists whole files only.
    type: int
    default: 0
  upload_limit_mb_per_s:
    description: Cap on everything this source sends, in MB/s (10^6 bytes); 0 means no cap.
    type: float
    default: 0
notes:
  - "Check mode: Serves as well, so that destinations in check mode can predict their changes; writes no hash
    cache or pid file."
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_full
author:
  - seatwright
"""

EXAMPLES = r"""
- name: Serve the checkpoint from node-a while the other nodes pull it
  weight_source:
    path: /srv/hf/hub/models--zai-org--GLM-5.3-Flash
    revision: 0123456789abcdef0123456789abcdef01234567
    name: glm-5.3-flash
    bind_address: 10.77.0.11
    token: "{{ __weights_token }}"
    clients: 2
  async: 7200
  poll: 0
"""

RETURN = r"""
listing:
  description: What was served.
  returned: always
  type: dict
  contains:
    files: {description: Files listed., type: int}
    bytes: {description: Bytes listed., type: int}
    layout: {description: C(folder) or C(hf-cache)., type: str}
    revision: {description: Revision served., type: str}
stopped:
  description:
    - Why serving stopped. C(flooded:) when no destination asked for the idle timeout while connections that
      never authenticated were refused or ended (a stranger at the port); the module then warns.
  returned: success
  type: str
served_s:
  description: Seconds spent serving.
  returned: success
  type: float
bytes_by_client:
  description: Bytes of file data sent to each destination.
  returned: success
  type: dict
done_reports:
  description: What each destination reported when it finished (ok, bytes).
  returned: success
  type: dict
refused_requests:
  description: Requests refused because they were not authenticated for this run (or replayed).
  returned: success
  type: int
refused_connections:
  description: Connections closed at once because the source already served its most at a time.
  returned: success
  type: int
evicted_connections:
  description: Connections that had not authenticated, ended to make room for newer ones from the same address.
  returned: success
  type: int
handler_errors:
  description: Connections ended by a malformed request.
  returned: success
  type: int
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.defaults import STAGING_DIR
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights.staging_source import run_source


def main():
    module = AnsibleModule(
        argument_spec=dict(
            path=dict(type="path", required=True),
            revision=dict(type="str"),
            name=dict(type="str", required=True),
            bind_address=dict(type="str", required=True),
            port=dict(type="int", default=8473),
            token=dict(type="str", required=True, no_log=True),
            clients=dict(type="int", default=1),
            idle_timeout_s=dict(type="int", default=120),
            lifetime_s=dict(type="int", default=7200),
            state_dir=dict(type="path", default=STAGING_DIR),
            hash_workers=dict(type="int", default=4),
            piece_mb=dict(type="int", default=0),
            upload_limit_mb_per_s=dict(type="float", default=0),
        ),
        supports_check_mode=True,
    )
    try:
        result = run_source(module.params, module.check_mode)
    except SeatwrightError as exc:
        module.fail_json(msg=str(exc), **exc.details)
    if result.get("stopped", "").startswith("flooded"):
        module.warn(
            "the weights source stopped %s: destinations may have been turned away; find what connects to %s:%d "
            "without this run's credentials, and run again"
            % (result["stopped"], module.params["bind_address"], module.params["port"])
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
