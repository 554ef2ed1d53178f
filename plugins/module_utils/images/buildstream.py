"""The Docker build API's JSON stream, read into progress: the current step, the image id, the failure.

POST /build answers one JSON object per line: {"stream": "Step 3/12 : RUN ..."} (the classic
builder's step lines and the commands' output), {"status": ..., "id": ...} while a base layer is
pulled, {"aux": {"ID": "sha256:..."}} once the image exists, and {"error": ..., "errorDetail": ...}
when a step fails. Pure: the caller feeds lines and a clock; nothing here touches a socket.
"""

import json
import re

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import ImageError

# "Step 3/12 : RUN pip install ..." as the classic builder writes each instruction.
_STEP = re.compile(r"^Step (\d+)/(\d+) : (.*)$")
# The classic builder's last words, kept for a stream that never sends the aux record.
_BUILT = re.compile(r"^Successfully built ([0-9a-f]{12,64})\s*$")
# How much of a failing build's output a failure quotes.
TAIL_LINES = 20
# The longest text of one step shown in a progress line.
STEP_CHARS = 160


def new_state(started):
    """The state of one build that started at `started` (seconds, the caller's clock)."""
    return {"started": started, "step": 0, "steps": 0, "instruction": None, "image_id": None, "error": None, "tail": []}


def _short(text, limit=STEP_CHARS):
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def read_line(state, line, now):
    """Fold one line of the stream into `state`; the progress event it makes, or None.

    An event is {'kind': 'step'|'pull'|'error'|'image', 'elapsed_s', 'text'} and, for a step, 'step'
    and 'steps'. A line that is not JSON is refused by name: the engine sent something else.
    """
    line = line.strip()
    if not line:
        return None
    try:
        record = json.loads(line)
    except ValueError:
        raise ImageError("the Docker build stream sent a line that is not JSON: %r" % _short(line, 200))
    if not isinstance(record, dict):
        raise ImageError("the Docker build stream sent %r, not a JSON object" % _short(line, 200))
    elapsed = round(now - state["started"], 1)
    if record.get("error") or record.get("errorDetail"):
        detail = record.get("error") or (record.get("errorDetail") or {}).get("message") or "unknown error"
        state["error"] = " ".join(str(detail).split())
        return {"kind": "error", "elapsed_s": elapsed, "text": state["error"]}
    aux = record.get("aux")
    if isinstance(aux, dict) and isinstance(aux.get("ID"), str):
        state["image_id"] = aux["ID"]
        return {"kind": "image", "elapsed_s": elapsed, "text": aux["ID"]}
    if isinstance(record.get("stream"), str):
        for text in record["stream"].splitlines():
            if text.strip():
                state["tail"] = (state["tail"] + [text.rstrip()])[-TAIL_LINES:]
        step = _STEP.match(record["stream"].strip())
        if step:
            state["step"], state["steps"] = int(step.group(1)), int(step.group(2))
            state["instruction"] = _short(step.group(3))
            return {
                "kind": "step",
                "elapsed_s": elapsed,
                "step": state["step"],
                "steps": state["steps"],
                "text": state["instruction"],
            }
        built = _BUILT.match(record["stream"].strip())
        if built and not state["image_id"]:
            state["image_id"] = built.group(1)
        return None
    if isinstance(record.get("status"), str):
        # A base layer pulled before the first step: one event per status, not per byte counter.
        if record.get("progressDetail"):
            return None
        text = record["status"] + (" %s" % record["id"] if record.get("id") else "")
        return {"kind": "pull", "elapsed_s": elapsed, "text": _short(text)}
    return None


def progress_text(event):
    """One line for a person watching: 'step 3/12 after 41 s: RUN pip install ...'."""
    clock = "%d s" % round(event["elapsed_s"])
    if event["kind"] == "step":
        return "step %d/%d after %s: %s" % (event["step"], event["steps"], clock, event["text"])
    if event["kind"] == "pull":
        return "pulling after %s: %s" % (clock, event["text"])
    if event["kind"] == "image":
        return "built after %s: %s" % (clock, event["text"])
    return "failed after %s: %s" % (clock, event["text"])


def outcome(state, reference, now):
    """{image_id, elapsed_s, steps} of a finished stream; ImageError when it failed or named no image.

    The failure quotes the builder's last lines, where a patch that no longer applies names itself.
    """
    elapsed = round(now - state["started"], 1)
    where = (
        "step %d/%d (%s)" % (state["step"], state["steps"], state["instruction"]) if state["steps"] else "before step 1"
    )
    tail = "\n".join(state["tail"])
    if state["error"]:
        raise ImageError(
            "the build of %s failed at %s after %d s: %s\nits last output:\n%s"
            % (reference, where, round(elapsed), state["error"], tail),
            reference=reference,
            step=state["step"],
            steps=state["steps"],
            output_tail=tail,
        )
    if not state["image_id"]:
        raise ImageError(
            "the build of %s ended at %s after %d s without an image id (no aux ID, no 'Successfully built'); "
            "the engine closed the stream early: see dockerd's log on the builder\nits last output:\n%s"
            % (reference, where, round(elapsed), tail),
            reference=reference,
            step=state["step"],
            steps=state["steps"],
            output_tail=tail,
        )
    return {"image_id": state["image_id"], "elapsed_s": elapsed, "steps": state["steps"]}


def waiting_progress(record, reference, timeout_s, now):
    """{done, failed, progress} for the role's waiting task, from a background build's progress record.

    `progress` is what callback seatwright.fleet.progress prints on each retry. No record yet (or one of
    another image) means the build has not written its first line: not done.
    """
    waiting_for = "the build of %s" % reference
    if not isinstance(record, dict) or record.get("reference") != reference:
        return {"done": False, "failed": None, "progress": {"waiting_for": waiting_for, "detail": "no output yet"}}
    elapsed = record.get("elapsed_s")
    if isinstance(record.get("started_epoch"), (int, float)) and not record.get("done"):
        elapsed = round(now - record["started_epoch"], 1)
    return {
        "done": bool(record.get("done")),
        "failed": record.get("failed"),
        "progress": {
            "waiting_for": waiting_for,
            "elapsed_s": elapsed,
            "timeout_s": timeout_s,
            "detail": record.get("line") or "packing the context",
        },
    }
