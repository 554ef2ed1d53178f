"""The one name of a seat run's evidence folder: evidence/<seat>/<UTC %Y%m%dT%H%M%SZ>/ (pure).

Every writer calls these: the seat playbooks (through the seat_evidence module), the
qualification and benchmark tools and the promotion decision. The time stamp is the run id the
record carries, so its format lives here and nowhere else.
"""

import datetime
import posixpath
import re

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import EvidenceError

EVIDENCE = "evidence"
STAMP_FORMAT = "%Y%m%dT%H%M%SZ"
RUN_ID = re.compile(r"^\d{8}T\d{6}Z$")
SEAT_NAME = re.compile(r"^[a-z0-9][a-z0-9._-]*$")


def run_id(now):
    """The run id of a run that starts at `now` (an aware datetime, or epoch seconds)."""
    if isinstance(now, (int, float)):
        now = datetime.datetime.fromtimestamp(now, datetime.UTC)
    if now.tzinfo is None:
        raise EvidenceError("an evidence time stamp needs a time zone; got the naive time %s" % now.isoformat())
    return now.astimezone(datetime.UTC).strftime(STAMP_FORMAT)


def evidence_dir(root, seat, now):
    """<root>/evidence/<seat>/<run id>: the folder of a seat run that starts at `now`."""
    if not isinstance(seat, str) or not SEAT_NAME.match(seat):
        raise EvidenceError(
            "seat %r cannot name an evidence folder: use the recipe's name (lower-case letters, digits, "
            "'.', '_' or '-')" % (seat,)
        )
    return posixpath.join(root, EVIDENCE, seat, run_id(now))


def evidence_dir_parts(path):
    """(seat, run id) of evidence/<seat>/<UTC>/, refused with a sentence when the name is not one."""
    parts = posixpath.normpath(str(path).rstrip("/")).split("/")
    seat, stamp = (parts[-2], parts[-1]) if len(parts) >= 2 else ("", parts[-1])
    if not RUN_ID.match(stamp) or not seat or seat in (".", ".."):
        raise EvidenceError(
            "%s: the evidence folder must be evidence/<seat>/<UTC %s>/, and %r is not such a time"
            % (path, STAMP_FORMAT, stamp)
        )
    return seat, stamp


def project_root_of(path):
    """The checkout a folder <root>/evidence/<seat>/<UTC> lies in, or None when it lies elsewhere."""
    parts = posixpath.normpath(str(path).rstrip("/")).split("/")
    if len(parts) >= 4 and parts[-3] == EVIDENCE and RUN_ID.match(parts[-1]) and posixpath.isabs(str(path)):
        return "/".join(parts[:-3]) or "/"
    return None
