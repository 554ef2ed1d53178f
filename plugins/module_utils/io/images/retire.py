"""Drop a node's superseded builds of one engine image; which ones is decided in images/retention.py."""

from ansible_collections.seatwright.fleet.plugins.module_utils.images.definition import NAME_LABEL
from ansible_collections.seatwright.fleet.plugins.module_utils.images.retention import retirement
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.docker_api import DockerEngine


def _brief(image):
    return {"id": image["id"], "tags": image["tags"], "size_bytes": image["size_bytes"]}


def retire_images(params, check_mode, engine=None):
    """Untag every superseded, unused build of params["name"] beyond params["keep"]; the module's result.

    In check mode nothing is removed; the result says what would be.
    """
    engine = engine or DockerEngine(params["docker_socket"])
    images = engine.labelled_images("%s=%s" % (NAME_LABEL, params["name"]))
    plan = retirement(images, params["reference"], engine.container_image_ids(), params["keep"])
    if not check_mode:
        for image in plan["retire"]:
            for tag in image["tags"]:
                engine.untag(tag)
    freed = sum(image["size_bytes"] or 0 for image in plan["retire"])
    return {
        "changed": bool(plan["retire"]),
        "retired": [_brief(image) for image in plan["retire"]],
        "kept": [_brief(image) for image in plan["kept"]],
        "in_use": [_brief(image) for image in plan["in_use"]],
        "foreign": [_brief(image) for image in plan["foreign"]],
        "freed_bytes": freed,
        "msg": "%s %d superseded build(s) of %s, %.1f GB"
        % ("would retire" if check_mode else "retired", len(plan["retire"]), params["name"], freed / 1e9)
        if plan["retire"]
        else "no superseded build of %s to retire" % params["name"],
    }
