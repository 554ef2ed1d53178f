"""Progress lines reach stderr always, and a progress log (redacted) when SEATWRIGHT_PROGRESS_LOG names one."""

import io

from ansible_collections.seatwright.fleet.plugins.module_utils.io.common import progress
from ansible_collections.seatwright.fleet.plugins.module_utils.io.qualify.run import Progress


def test_lines_go_to_the_stream_and_redacted_to_the_log(tmp_path, monkeypatch):
    log = tmp_path / "qualify.progress.log"
    monkeypatch.setenv(progress.ENV, str(log))
    stream = io.StringIO()
    Progress(stream)("gate smoke: start against http://10.77.0.11:8000/v1")
    Progress(stream)("gate smoke: pass")
    assert "10.77.0.11" in stream.getvalue()
    lines = log.read_text().splitlines()
    assert len(lines) == 2 and "10.77.0.11" not in lines[0] and "192.0.2." in lines[0]
    assert lines[1].endswith("gate smoke: pass")


def test_no_log_without_the_variable(tmp_path, monkeypatch):
    monkeypatch.delenv(progress.ENV, raising=False)
    stream = io.StringIO()
    progress.emit("soak: 10/120 s", stream)
    assert stream.getvalue() == "soak: 10/120 s\n" and not list(tmp_path.iterdir())


def test_an_unwritable_log_is_said_once_and_the_run_goes_on(tmp_path, monkeypatch):
    monkeypatch.setenv(progress.ENV, str(tmp_path / "missing" / "bench.log"))
    stream = io.StringIO()
    progress.emit("one", stream)
    progress.emit("two", stream)
    out = stream.getvalue()
    assert out.count("cannot be written") == 1 and out.endswith("two\n")
