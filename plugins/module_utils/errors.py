"""Every exception seatwright raises, in one place.

A module catches `SeatwrightError` (or one of its kinds) and hands the message to `fail_json`;
messages are written for people: they name the host, file or field, what was expected and what to
do. The kinds that judge input also derive from ValueError, so callers that validate with
`except ValueError` keep working.
"""


class SeatwrightError(Exception):
    """Base of every seatwright error; the message is for people. Keyword arguments are details a
    module returns beside the message (fail_json(msg=str(error), **error.details))."""

    def __init__(self, message="", **details):
        super().__init__(message)
        self.details = details


# ---------------------------------------------------------------- input that cannot be judged


class SeatError(SeatwrightError):
    """A recipe, an inventory or a plan request that cannot be planned."""


class GpuInputError(SeatwrightError, ValueError):
    """GPU input a person must fix; the message names host, GPU, value and what is allowed."""


class DriverError(SeatwrightError, ValueError):
    """A driver request that cannot be planned; the message says what to change."""


class FabricError(SeatwrightError, ValueError):
    """Fabric input that cannot be judged; the message says what was wrong and what to do."""


class NcclError(SeatwrightError, ValueError):
    """NCCL input that cannot be rendered or judged; the message says what to do."""


class PlatformError(SeatwrightError, ValueError):
    """PCI platform readings (IOMMU, ACS, bridges) that cannot be decoded."""


class CheckpointError(SeatwrightError, ValueError):
    """Input that cannot describe a checkpoint; the message says what was expected."""


class NodeContractError(SeatwrightError, ValueError):
    """Node or fleet inventory variables that break the contract; the message names host and field."""


class QualifyError(SeatwrightError, ValueError):
    """Qualification input that cannot be used (command line, recipe block, a missing package)."""


class DrainError(SeatwrightError, ValueError):
    """Drain input that cannot be judged (a change, a live seat or an alias table of the wrong
    shape); the message names the node or seat, what was expected and what to do."""


class ImageError(SeatwrightError, ValueError):
    """An engine image definition, patch or probe result that cannot be used; the message says why."""


class DuplicateKeyError(SeatwrightError, ValueError):
    """A YAML mapping gives one key twice (strict_yaml.py); `key`, `first_line` and `line` (1-based) say which
    and where, so the reader can name the file too."""

    def __init__(self, key, first_line, line):
        super().__init__("key %r is given twice (lines %d and %d); keep one" % (key, first_line, line))
        self.key, self.first_line, self.line = key, first_line, line


# ---------------------------------------------------------------- runs that cannot go on


class StagingError(SeatwrightError):
    """A staging run that cannot go on; the message names the file and what to do."""


class ServiceError(SeatwrightError):
    """A container or unit call on a node that failed or overran; the message says which and what it printed."""


class ProbeUnavailable(SeatwrightError):
    """A reader cannot answer on this host; the message says why."""


class Interrupted(SeatwrightError):
    """A transfer's connection broke mid-file; what arrived is kept and the transfer resumes."""


class WorkerLost(Interrupted):
    """A stream's fetch worker process is gone: its piece goes back to the other streams and the stream ends."""


class BadPiece(SeatwrightError):
    """A sender broke the staging protocol or sent a piece that does not hash to the listing's digest."""


# ---------------------------------------------------------------- benchmark and evidence


class MetricsFormatError(SeatwrightError, ValueError):
    """An engine's /metrics text that is not Prometheus exposition format; the message names the line."""


class BenchError(SeatwrightError):
    """A benchmark that cannot run; the message says what to fix."""


class TransportError(SeatwrightError):
    """An exchange with an engine or router could not be read as HTTP to its end; the text says
    what happened (io/common/openai_http.py turns it into the response record's transport_error)."""


class RunBoundError(SeatwrightError):
    """A qualification run has kept as much of its parsed answers as it may (io/qualify/run.py
    MAX_RUN_COST): it stops, and is incomplete."""


class BenchIncomplete(BenchError):
    """The sweep could not finish against this endpoint (load generator past its bound, a page that
    cannot be read as HTTP): the benchmark is recorded as incomplete with this reason."""


class EvidenceError(SeatwrightError):
    """An evidence folder or part that is unusable; the message names the file."""


# ---------------------------------------------------------------- router


class RouterError(SeatwrightError):
    """A router that refused or could not do what seatwright asked; the message names the router,
    the call, what it answered and what to do. It never holds the router's admin key."""


class DeadRouter(RouterError):
    """A router process that exited while it was waited for: no point waiting longer."""


# ---------------------------------------------------------------- monitoring


class MonitoringError(SeatwrightError, ValueError):
    """A monitoring setting, target or rule input that cannot be used; the message names the
    variable or seat and what was expected."""
