"""Progress lines of long controller-side work (qualification, benchmark).

Each line goes to stderr for the person at the terminal. Ansible shows a command's output only when
it ends, so when SEATWRIGHT_PROGRESS_LOG names a file the same line is also appended there,
redacted, and the roles tell the person watching to follow it with `tail -f`.
"""

import os
import sys
import threading

from ansible_collections.seatwright.fleet.plugins.module_utils.io.evidence.writer import evidence_redactor

ENV = "SEATWRIGHT_PROGRESS_LOG"

_LOCK = threading.Lock()
_STATE = {"redactor": None, "broken": None}


def use_redactor(redactor):
    """The redactor of the run's progress log, told the run's secrets and host names (a tool calls
    this once it knows them; until then the evidence redactor without them is used)."""
    with _LOCK:
        _STATE["redactor"] = redactor


def emit(line, stream=None):
    """Write one progress line to `stream` (stderr) and to the progress log when one is set."""
    with _LOCK:
        out = stream or sys.stderr
        out.write(line + "\n")
        out.flush()
        path = os.environ.get(ENV)
        if not path or _STATE["broken"] == path:
            return
        if _STATE["redactor"] is None:
            # The log lies in the evidence folder: the same redactor, paths made project-relative.
            _STATE["redactor"] = evidence_redactor()
        try:
            with open(path, "a", encoding="utf-8") as handle:
                handle.write(_STATE["redactor"].text(line) + "\n")
        except OSError as exc:
            # The run matters more than its progress log: say so once and go on.
            _STATE["broken"] = path
            out.write("progress log %s cannot be written (%s); progress stays on stderr only\n" % (path, exc))
