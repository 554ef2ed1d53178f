"""Documentation fragment seatwright.fleet.attributes: what check mode and diff mode mean for every
module, and the support each module states, by the sub-fragment it extends (after community.docker's
attributes fragment, https://github.com/ansible-collections/community.docker/blob/main/plugins/doc_fragments/attributes.py).
A module says what its own check mode does in its notes."""


class ModuleDocFragment:
    # What the two attributes mean; every module extends this.
    DOCUMENTATION = r"""
options: {}
attributes:
  check_mode:
    description: Can run in check mode and say what would change, without changing the target.
  diff_mode:
    description: Returns what changed (in check mode, what would change) when run with C(--diff).
"""

    # A module whose check mode runs everything it can without changing anything, and returns no diff.
    CHECK_FULL = r"""
options: {}
attributes:
  check_mode:
    support: full
  diff_mode:
    support: none
"""

    # The same, with each change shown before and after.
    CHECK_FULL_DIFF = r"""
options: {}
attributes:
  check_mode:
    support: full
  diff_mode:
    support: full
"""

    # A module whose check mode runs some steps as usual and only reports the others (its notes say which).
    CHECK_PARTIAL = r"""
options: {}
attributes:
  check_mode:
    support: partial
  diff_mode:
    support: none
"""
