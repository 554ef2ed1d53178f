"""engine_image_pull's I/O: pull a pinned registry image once, tag it, and record the digest a node holds.

The decisions (the reference, the local tag, whether a node holds the image) are in
images/registry.py. The pull reports like a build: progress lines and a small JSON file the
role's waiting task reads back while the pull runs in the background.
"""

import os
import time

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import ImageError
from ansible_collections.seatwright.fleet.plugins.module_utils.images.buildstream import progress_text, waiting_progress
from ansible_collections.seatwright.fleet.plugins.module_utils.images.registry import (
    holding,
    is_recorded,
    new_pull_state,
    new_record,
    parse_reference,
    pull_outcome,
    read_pull_line,
    record_name,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.docker_api import DockerEngine
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.files import atomic_write_json, read_json
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.progress import emit


def _reference(params):
    return dict(parse_reference(params["registry"], "registry"), platform=params["platform"])


def _record_path(params, reference):
    return os.path.join(params["state_dir"], record_name(reference))


def _write_record(params, reference, image_id, how, check_mode):
    """Record the digest beside the id the node holds; True when the record changed."""
    path = _record_path(params, reference)
    if is_recorded(read_json(path), reference, image_id):
        return False
    if not check_mode:
        atomic_write_json(path, new_record(reference, image_id, how))
    return True


def _progress(params, reference, state, event, now, done=False, failed=None):
    if params.get("progress_file"):
        atomic_write_json(
            params["progress_file"],
            {
                "reference": reference["local"],
                "started_epoch": state["started"],
                "elapsed_s": round(now - state["started"], 1),
                "line": progress_text(event) if event else None,
                "done": done,
                "failed": failed,
            },
            mode=0o600,
        )


def _tag(engine, reference, source):
    repository, _, tag = reference["local"].rpartition(":")
    engine.tag(source, repository, tag)


def hold_image(params, check_mode, engine=None, clock=time.time):
    """Make the node hold the pinned image under its local tag: nothing, a tag, or (allow_pull) one pull.

    Without allow_pull a node that lacks it is reported (held false), for the fabric to bring it.
    """
    engine = engine or DockerEngine(params["docker_socket"])
    reference = _reference(params)
    local = engine.image(reference["local"])
    pinned = engine.image(reference["pinned"])
    action, image_id = holding(reference, local, pinned, read_json(_record_path(params, reference)))
    result = {"reference": reference["local"], "pinned": reference["pinned"], "action": action}
    if action == "held":
        changed = _write_record(params, reference, image_id, "found", check_mode)
        return dict(result, changed=changed, held=True, pulled=False, image_id=image_id)
    if action == "tag":
        if not check_mode:
            _tag(engine, reference, reference["pinned"])
        _write_record(params, reference, image_id, "tagged", check_mode)
        return dict(result, changed=True, held=True, pulled=False, image_id=image_id)
    if not params["allow_pull"]:
        return dict(result, changed=False, held=False, pulled=False, image_id=None)
    if check_mode:
        return dict(result, changed=True, held=False, pulled=False, msg="%s would be pulled" % reference["pinned"])
    state = new_pull_state(clock())
    try:
        return dict(result, **_pull(params, engine, reference, state, clock))
    except BaseException as exc:
        # The role's wait reads this file: any end must reach it or it waits to its timeout.
        first = (str(exc).splitlines() or [type(exc).__name__])[0]
        _progress(params, reference, state, None, clock(), done=True, failed=first)
        raise


def _pull(params, engine, reference, state, clock):
    _progress(params, reference, state, None, state["started"])
    lines = engine.pull_lines(
        reference["pull_name"], reference["digest"], reference["platform"], params["idle_timeout_s"]
    )
    for line in lines:
        now = clock()
        event = read_pull_line(state, line, now)
        if event:
            emit("%s: %s" % (reference["pinned"], progress_text(event)))
            _progress(params, reference, state, event, now)
        if now - state["started"] > params["timeout_s"]:
            raise ImageError(
                "the pull of %s ran longer than %d s; raise engine_image_build_timeout_s"
                % (reference["pinned"], params["timeout_s"])
            )
    done = pull_outcome(state, reference, clock())
    pinned = engine.image(reference["pinned"])
    if pinned is None:
        raise ImageError(
            "the pull of %s ended but the engine holds no image of that digest; see dockerd's log" % reference["pinned"]
        )
    _tag(engine, reference, reference["pinned"])
    _write_record(params, reference, pinned["id"], "pulled", False)
    _progress(
        params,
        reference,
        state,
        {"kind": "image", "elapsed_s": done["elapsed_s"], "text": pinned["id"]},
        clock(),
        done=True,
    )
    return dict(done, changed=True, held=True, pulled=True, image_id=pinned["id"])


def record_loaded(params, check_mode, engine=None):
    """After a load: require the local tag at params['image_id'] (the builder's) and record the digest."""
    engine = engine or DockerEngine(params["docker_socket"])
    reference = _reference(params)
    local = engine.image(reference["local"])
    if local is None or local["id"] != params["image_id"]:
        raise ImageError(
            "%s is %s on this node, the builder's is %s: the loaded image is not the pinned one, so its digest "
            "is not recorded; see the node's dockerd log"
            % (reference["local"], local["id"] if local else "absent", params["image_id"])
        )
    changed = _write_record(params, reference, local["id"], "loaded", check_mode)
    return {"changed": changed, "held": True, "reference": reference["local"], "image_id": local["id"]}


def pull_progress(params, clock=time.time):
    """{done, failed, progress} from the file a background pull writes: what the waiting task shows."""
    reference = _reference(params)
    record = read_json(params["progress_file"]) if params.get("progress_file") else None
    answer = waiting_progress(record, reference["local"], params["timeout_s"], clock())
    answer["progress"]["waiting_for"] = "the pull of %s" % reference["pinned"]
    if isinstance(record, dict) and record.get("reference") == reference["local"] and not record.get("line"):
        answer["progress"]["detail"] = "asking the registry"
    return answer
