"""engine_image_build's I/O: build one image through the Docker socket and say how far it got.

Each step, pull and the end go out as a progress line (io/common/progress.emit) and into a small
JSON file that the role's waiting task reads back while the build runs in the background, so the
person at the terminal sees 'step 7/19 after 312 s: RUN ...' instead of silence.
"""

import os
import tarfile
import time

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import ImageError
from ansible_collections.seatwright.fleet.plugins.module_utils.images.buildstream import (
    new_state,
    outcome,
    progress_text,
    read_line,
    waiting_progress,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.docker_api import DockerEngine
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.files import atomic_write_json, read_json
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.progress import emit


def _context(path):
    """The packed build context (a tar with its Dockerfile at the root), streamed to the engine as it is.

    The API takes the context as a tar body, so the node keeps one copy of it, never an unpacked
    folder beside a repacked tar (a CUDA image's wheelhouse is GBs).
    """
    if not os.path.isfile(path):
        raise ImageError("no build context at %s; copy the packed context (engine_image_context) there first" % path)
    try:
        with tarfile.open(path) as archive:
            for member in archive:
                if member.name in ("Dockerfile", "./Dockerfile") and member.isfile():
                    return path
    except (tarfile.TarError, OSError) as exc:
        raise ImageError("the build context %s is not a readable tar (%s); pack it again" % (path, exc))
    raise ImageError("the build context %s has no Dockerfile at its root; pack it again" % path)


def _record(params, state, event, now, done=False, failed=None):
    if params.get("progress_file"):
        atomic_write_json(
            params["progress_file"],
            {
                "reference": params["reference"],
                "started_epoch": state["started"],
                "elapsed_s": round(now - state["started"], 1),
                "step": state["step"],
                "steps": state["steps"],
                "line": progress_text(event) if event else None,
                "done": done,
                "failed": failed,
            },
            mode=0o600,
        )


def build_image(params, check_mode, engine=None, clock=time.time):
    """Build params['reference'] from the packed context params['context_tar'] unless the engine already holds that tag.

    The tag is a content hash, so an image present under it is the image these inputs make: no rebuild.
    """
    engine = engine or DockerEngine(params["docker_socket"])
    reference = params["reference"]
    state = new_state(clock())
    try:
        return _build(params, check_mode, engine, clock, state)
    except BaseException as exc:
        # The role's wait reads this file: any end, a traceback included, must reach it or it waits to its timeout.
        if not check_mode:
            first = (str(exc).splitlines() or [type(exc).__name__])[0]
            _record(params, state, None, clock(), done=True, failed="%s: %s" % (reference, first))
        raise


def _build(params, check_mode, engine, clock, state):
    reference = params["reference"]
    present = engine.image(reference)
    if present:
        if not check_mode:
            _record(params, state, {"kind": "image", "elapsed_s": 0.0, "text": present["id"]}, clock(), done=True)
        return {"changed": False, "built": False, "reference": reference, "image_id": present["id"]}
    if check_mode:
        return {"changed": True, "built": False, "reference": reference, "msg": "%s would be built" % reference}
    _record(params, state, None, state["started"])
    context_tar = _context(params["context_tar"])
    query = {"t": reference, "rm": 1, "forcerm": 1, "pull": 0}
    for line in engine.build_lines(context_tar, query, params["idle_timeout_s"]):
        now = clock()
        event = read_line(state, line, now)
        if event:
            emit("%s: %s" % (reference, progress_text(event)))
            _record(params, state, event, now)
        if now - state["started"] > params["timeout_s"]:
            raise ImageError(
                "the build of %s ran longer than %d s (at step %d/%d); raise engine_image_build_timeout_s"
                % (reference, params["timeout_s"], state["step"], state["steps"])
            )
    result = outcome(state, reference, clock())
    image = engine.image(reference)
    if image is None:
        raise ImageError(
            "the build of %s reported %s but the engine holds no such tag" % (reference, result["image_id"])
        )
    _record(params, state, {"kind": "image", "elapsed_s": result["elapsed_s"], "text": image["id"]}, clock(), done=True)
    return dict(result, changed=True, built=True, reference=reference, image_id=image["id"])


def build_progress(params, clock=time.time):
    """{done, failed, progress} from the file a background build writes: what the waiting task shows."""
    record = read_json(params["progress_file"]) if params.get("progress_file") else None
    return waiting_progress(record, params["reference"], params["timeout_s"], clock())
