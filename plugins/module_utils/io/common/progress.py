"""Progress lines of long controller-side work (qualification, benchmark).

Each line is redacted (the run's secrets, host names, private addresses) before it reaches either
stream, then goes to stderr for the person at the terminal. Ansible shows a command's output only
when it ends, so when SEATWRIGHT_PROGRESS_LOG names a file the same line is also appended there,
and the roles tell the person watching to follow it with `tail -f`. With SEATWRIGHT_PROGRESS_QUIET=1
(the roles set it) the lines go to the log alone: a command's stderr is part of its task result,
which `ansible-playbook -v` prints.
"""

import os
import sys
import threading

from ansible_collections.seatwright.fleet.plugins.module_utils.io.evidence.writer import evidence_redactor

ENV = "SEATWRIGHT_PROGRESS_LOG"
QUIET_ENV = "SEATWRIGHT_PROGRESS_QUIET"

_LOCK = threading.Lock()
_STATE = {"redactor": None, "broken": None}


def use_redactor(redactor):
    """The redactor of the run's progress log, told the run's secrets and host names (a tool calls
    this once it knows them; until then the evidence redactor without them is used)."""
    with _LOCK:
        _STATE["redactor"] = redactor


def redacted(line):
    """`line` through the run's redactor (the evidence redactor until a tool names its secrets)."""
    with _LOCK:
        if _STATE["redactor"] is None:
            # The log lies in the evidence folder: the same redactor, paths made project-relative.
            _STATE["redactor"] = evidence_redactor()
        return _STATE["redactor"].text(line)


def emit(line, stream=None):
    """Write one progress line, redacted, to `stream` (stderr, unless quiet) and to the progress log."""
    line = redacted(line)
    with _LOCK:
        out = stream or sys.stderr
        path = os.environ.get(ENV)
        if stream is not None or os.environ.get(QUIET_ENV) != "1" or not path:
            out.write(line + "\n")
            out.flush()
        if not path or _STATE["broken"] == path:
            return
        try:
            with open(path, "a", encoding="utf-8") as handle:
                handle.write(line + "\n")
        except OSError as exc:
            # The run matters more than its progress log: say so once and go on.
            _STATE["broken"] = path
            out.write("progress log %s cannot be written (%s); progress stays on stderr only\n" % (path, exc))
