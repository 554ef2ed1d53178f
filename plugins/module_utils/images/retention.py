"""Which earlier builds of an engine image a node may drop: pure, so each rule is unit-tested.

Every build of a definition carries the label org.seatwright.image=<name> and a content tag, so a
node that followed the definition through several changes holds one 20-40 GB image per change.
A build is dropped only when it is not the planned one, no container (running or stopped) was
made from it, it carries no tag outside the planned reference's repository (someone else named
it), and `keep` newer superseded builds are kept before it (a rollback may want the last one).
"""


def repository(reference):
    """The repository part of name:tag (a registry host's port is not the tag)."""
    head, _, tail = reference.rpartition(":")
    return head if head and "/" not in tail else reference


def retirement(images, reference, in_use_ids, keep):
    """{"retire": [...], "kept": [...], "in_use": [...], "foreign": [...]} for the labelled `images`.

    `images`: [{id, tags, created, size_bytes}] of one definition (one label value); `reference`
    the planned build's name:tag; `in_use_ids` image ids that containers were made from; `keep`
    how many superseded, unused builds to keep, newest first. Each list holds the images it names,
    "retire" oldest last; the planned build appears in none.
    """
    if keep < 0:
        raise ValueError("keep must be 0 or more, not %d" % keep)
    ours = repository(reference)
    result = {"retire": [], "kept": [], "in_use": [], "foreign": []}
    candidates = []
    for image in images:
        if reference in image["tags"]:
            continue
        if image["id"] in in_use_ids:
            result["in_use"].append(image)
        elif any(repository(tag) != ours for tag in image["tags"]) or not image["tags"]:
            result["foreign"].append(image)
        else:
            candidates.append(image)
    candidates.sort(key=lambda image: (image["created"], image["id"]), reverse=True)
    result["kept"], result["retire"] = candidates[:keep], candidates[keep:]
    return result
