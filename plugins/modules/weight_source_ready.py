#!/usr/bin/python
"""Confirm that the process listening at a weights source address is this run's source."""

DOCUMENTATION = r"""
---
module: weight_source_ready
short_description: Wait until this run's weight_source answers, and refuse any other listener
description:
  - Asks the listener at I(source_url) for its listing with a request authenticated under the
    run's secret I(token), and checks the listing's signature (HMAC-SHA256 over a fresh nonce and
    the listing bytes). Only the C(weight_source) started with the same secret can produce it.
  - Keeps asking until I(timeout_s) while nothing listens yet. Fails at once when something
    answers without a valid signature, such as a process that bound the port before the source
    started (the source then cannot bind, and no destination must connect).
  - Reads only; reports C(changed=false) and runs in check mode too.
options:
  source_url:
    description: C(http://<source fabric address>:<port>) where the run's C(weight_source) listens.
    type: str
    required: true
  token:
    description: The run's secret, as given to C(weight_source).
    type: str
    required: true
  timeout_s:
    description: Seconds to wait for a listener before giving up; a listener that answers slowly gets no longer.
    type: int
    default: 60
  client:
    description: Name this check uses in the source's statistics.
    type: str
    default: ready-check
notes:
  - "Check mode: Reads only; runs the same in check mode."
extends_documentation_fragment:
  - seatwright.fleet.attributes
  - seatwright.fleet.attributes.check_full
author:
  - seatwright
"""

EXAMPLES = r"""
- name: Confirm this run's source is the one listening before any node connects
  weight_source_ready:
    source_url: "http://10.77.0.11:8473"
    token: "{{ __weights_token }}"
  delegate_to: node-a
  run_once: true
"""

RETURN = r"""
listing:
  description: What the confirmed source serves.
  returned: success
  type: dict
  contains:
    name: {description: Checkpoint label., type: str}
    layout: {description: C(folder) or C(hf-cache)., type: str}
    revision: {description: Revision served., type: str}
    files: {description: Files listed., type: int}
    bytes: {description: Bytes listed., type: int}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatwrightError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights.staging_pull import source_ready


def main():
    module = AnsibleModule(
        argument_spec=dict(
            source_url=dict(type="str", required=True),
            token=dict(type="str", required=True, no_log=True),
            timeout_s=dict(type="int", default=60),
            client=dict(type="str", default="ready-check"),
        ),
        supports_check_mode=True,
    )
    try:
        result = source_ready(module.params)
    except SeatwrightError as exc:
        module.fail_json(msg=str(exc), **exc.details)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
