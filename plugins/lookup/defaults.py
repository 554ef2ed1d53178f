"""Lookup plugin seatwright.fleet.defaults: seatwright's shared values, from their one definition."""

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase
from ansible_collections.seatwright.fleet.plugins.module_utils.bench.workload import (
    DEFAULT_PROFILE,
    DEFAULTS,
    SWEEP_DEFAULTS,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.defaults import FOR_ANSIBLE, rebased
from ansible_collections.seatwright.fleet.plugins.module_utils.node.contract import COLLECT_PATTERN

DOCUMENTATION = r"""
name: defaults
author: seatwright
short_description: seatwright's shared values (folders, paths, patterns, benchmark defaults)
description:
  - Returns values defined once in plugins/module_utils/defaults.py (C(FOR_ANSIBLE)) and, under
    the prefix C(bench_), the benchmark's workload and sweep defaults in
    plugins/module_utils/bench/workload.py.
  - The common role's defaults read them, so roles and plays derive their paths from one definition
    instead of spelling the values again.
options:
  _terms:
    description: Names of the values, e.g. C(state_dir), C(seat_name_pattern), C(bench_passes).
    required: true
  config_dir:
    description: The configuration folder in effect; a path under the default one is moved under it.
    type: path
  state_dir:
    description: The state folder in effect; a path under the default one is moved under it.
    type: path
"""

EXAMPLES = r"""
- name: Where seatwright keeps its state on a node
  ansible.builtin.debug:
    msg: "{{ lookup('seatwright.fleet.defaults', 'state_dir') }}"

- name: The staging folder under the state folder the inventory chose
  ansible.builtin.debug:
    msg: "{{ lookup('seatwright.fleet.defaults', 'staging_dir', state_dir=seatwright_state_dir) }}"
"""

RETURN = r"""
_raw:
  description: One value per name, in the order asked (with wantlist, a list).
  type: list
"""


def shared_values():
    """Every name the lookup answers, with its value."""
    values = dict(FOR_ANSIBLE, contract_pattern=COLLECT_PATTERN)
    values.update(("bench_" + key, value) for key, value in DEFAULTS.items())
    values.update(("bench_" + key, value) for key, value in SWEEP_DEFAULTS.items())
    values["bench_profile"] = DEFAULT_PROFILE
    return values


class LookupModule(LookupBase):
    def run(self, terms, variables=None, **kwargs):
        unknown = sorted(set(kwargs) - {"config_dir", "state_dir"})
        if unknown:
            raise AnsibleLookupError(
                "seatwright.fleet.defaults takes config_dir and state_dir, not %s" % ", ".join(unknown)
            )
        folders = {name: kwargs.get(name) for name in ("config_dir", "state_dir")}
        values = shared_values()
        unknown = [term for term in terms if term not in values]
        if unknown:
            raise AnsibleLookupError(
                "seatwright.fleet.defaults has no value named %s; known: %s"
                % (", ".join(map(str, unknown)), ", ".join(sorted(values)))
            )
        return [rebased(values[term], **folders) for term in terms]
