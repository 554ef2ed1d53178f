"""Progress lines reach stderr (unless quiet) and a progress log when SEATWRIGHT_PROGRESS_LOG names one,
redacted before either (issue 50)."""

import io

from ansible_collections.seatwright.fleet.plugins.module_utils.io.common import progress
from ansible_collections.seatwright.fleet.plugins.module_utils.io.qualify.run import Progress


def test_lines_go_redacted_to_the_stream_and_the_log(tmp_path, monkeypatch):
    log = tmp_path / "qualify.progress.log"
    monkeypatch.setenv(progress.ENV, str(log))
    stream = io.StringIO()
    Progress(stream)("gate smoke: start against http://10.77.0.11:8000/v1")
    Progress(stream)("gate smoke: pass")
    assert "10.77.0.11" not in stream.getvalue() and "192.0.2." in stream.getvalue()
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


KEY = "sk-progress-Zq8Ww2LmR4tY7uPa9XcV1bN3"


def test_a_key_an_endpoint_echoes_reaches_neither_stream(tmp_path, monkeypatch):
    # Issue 50 item 2: at -v the seat key was on stderr 8 times (a unicode-escaped echo too).
    log = tmp_path / "qualify.progress.log"
    monkeypatch.setenv(progress.ENV, str(log))
    monkeypatch.delenv(progress.QUIET_ENV, raising=False)
    progress.use_redactor(progress.evidence_redactor(secrets=[KEY]))
    try:
        stream = io.StringIO()
        escaped = "".join("\\u%04x" % ord(c) for c in KEY)
        Progress(stream)("gate smoke: request 1 -> HTTP 200 but the body is not JSON: 'bad key %s %s'" % (KEY, escaped))
        Progress(stream)("gate smoke: fail - %s" % ("x" * 140 + KEY)[:160])
        for text in (stream.getvalue(), log.read_text()):
            assert KEY not in text and escaped not in text and KEY[:12] not in text, text
    finally:
        progress.use_redactor(None)


def test_quiet_progress_goes_to_the_log_alone(tmp_path, monkeypatch, capsys):
    log = tmp_path / "bench.progress.log"
    monkeypatch.setenv(progress.ENV, str(log))
    monkeypatch.setenv(progress.QUIET_ENV, "1")
    progress.emit("level 4: pass 1/3")
    assert capsys.readouterr().err == "" and log.read_text() == "level 4: pass 1/3\n"
