"""The operator's pins for a seat's checkpoint, given at run time instead of written in the recipe.

A field report often names neither the checkpoint's repository nor its commit; only the operator can
give them. `-e seat_model_repo=ORG/NAME -e seat_model_revision=<40-hex>` pins them for one run: the
recipe stays as the field left it, and the plan records where the pin came from.
"""

import copy
import re

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError

# The variables an operator sets; the plan and its errors name them.
REPO_VARIABLE = "seat_model_repo"
REVISION_VARIABLE = "seat_model_revision"


def _pattern(schema, field):
    """The recipe schema's own pattern for model.<field>: the pins are held to what a recipe is."""
    return re.compile(schema["$defs"]["model"]["properties"][field]["pattern"])


def pin_model(data, schema, repo=None, revision=None):
    """(recipe data with the given pins applied, notes); SeatError naming the variable when a pin is malformed.

    The notes are also appended to the recipe's own, which the plan shows.
    """
    repo = repo.strip() if isinstance(repo, str) else repo
    revision = revision.strip() if isinstance(revision, str) else revision
    if not repo and not revision:
        return data, []
    if repo and not _pattern(schema, "repo").match(repo):
        raise SeatError("%s is %r; give the checkpoint's Hugging Face repository as ORG/NAME" % (REPO_VARIABLE, repo))
    if revision and not _pattern(schema, "revision").match(revision):
        raise SeatError(
            "%s is %r; give the checkpoint's full 40-hex commit, lowercase (git rev-parse of the revision "
            "you staged), not a branch or a short hash" % (REVISION_VARIABLE, revision)
        )
    pinned = copy.deepcopy(data)
    model = pinned.get("model") if isinstance(pinned, dict) else None
    if not isinstance(model, dict):
        return data, []
    notes = []
    for field, value, variable in (("repo", repo, REPO_VARIABLE), ("revision", revision, REVISION_VARIABLE)):
        if not value:
            continue
        before = model.get(field)
        if before and before != value:
            notes.append("%s %s replaces the recipe's model.%s %s" % (variable, value, field, before))
        else:
            notes.append("model.%s %s given by the operator (%s)" % (field, value, variable))
        model[field] = value
    if revision:
        model["revision_status"] = "pinned"
        model["revision_note"] = "pinned by the operator at run time (%s)" % REVISION_VARIABLE
    # The plan shows the recipe's notes: the pins' provenance goes there.
    pinned["notes"] = list(pinned.get("notes") or []) + notes
    return pinned, notes
