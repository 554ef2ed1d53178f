"""Ansible's default screen output, with bounded waits printed as progress instead of as faults."""

from __future__ import annotations

import time

from ansible import constants as C
from ansible.plugins.callback.default import CallbackModule as DefaultCallbackModule

DOCUMENTATION = r"""
name: progress
type: stdout
short_description: Ansible's default output, with bounded waits shown as progress
description:
  - Prints everything as C(ansible.builtin.default) does, with the same options
    (C(callback_result_format) among them), except two lines of a wait.
  - When an C(until) loop tries again, the default prints C(FAILED - RETRYING ... N retries left),
    which reads as a fault to anyone watching a bring-up that takes minutes. This callback prints
    what the wait is for and how long it has been instead.
  - >-
    A retry whose result carries C(progress) (C(waiting_for), C(elapsed_s), C(timeout_s), C(detail),
    C(last_log); the seat_engine_probe module returns it) prints
    C([node-a] waiting for the engine to answer: 45 s of 360 s; no answer from /health yet; last log: "...").
  - >-
    Any other retry prints C([node-a] still waiting: TASK), then the attempt number, the seconds since
    the task started and the attempt's C(msg) when it has one.
  - >-
    An async task polled by Ansible prints C([node-a] still running: TASK) and its seconds instead of
    C(ASYNC POLL on node-a: jid=... started=1 finished=0).
  - Nothing else changes; the failure after the last retry prints as a failure, with its message.
extends_documentation_fragment:
  - default_callback
  - result_format_callback
requirements:
  - set as stdout_callback in configuration (ansible.cfg, or ANSIBLE_STDOUT_CALLBACK)
"""

# A message of a failed attempt (an HTTP error, a traceback) is cut here to keep one line per retry.
MSG_CHARS = 200


def _seconds(value):
    return "%d s" % round(value)


def _one_line(text, limit=MSG_CHARS):
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def progress_line(host_label, task_name, result, elapsed_s=None):
    """The line one retry of an `until` loop prints, from the result of the attempt that just ran.

    `elapsed_s` is the controller's time since the task started on the host (None: unknown); a
    probe that sends `progress` gives its own clock instead (e.g. since the engine started).
    """
    progress = result.get("progress")
    if isinstance(progress, dict) and progress.get("waiting_for"):
        parts = []
        if isinstance(progress.get("elapsed_s"), (int, float)):
            clock = _seconds(progress["elapsed_s"])
            if isinstance(progress.get("timeout_s"), (int, float)):
                clock += " of " + _seconds(progress["timeout_s"])
            parts.append(clock)
        if progress.get("detail"):
            parts.append(_one_line(progress["detail"]))
        if progress.get("last_log"):
            parts.append('last log: "%s"' % _one_line(progress["last_log"]))
        line = "[%s] waiting for %s" % (host_label, progress["waiting_for"])
        return line + (": " + "; ".join(parts) if parts else "")
    where = []
    if isinstance(result.get("attempts"), int) and isinstance(result.get("retries"), int):
        where.append("attempt %d of %d" % (result["attempts"], result["retries"]))
    if elapsed_s is not None:
        where.append(_seconds(elapsed_s) + " elapsed")
    line = "[%s] still waiting: %s" % (host_label, task_name)
    if where:
        line += " (%s)" % ", ".join(where)
    if isinstance(result.get("msg"), str) and result["msg"].strip():
        line += "; last try: " + _one_line(result["msg"])
    return line


class CallbackModule(DefaultCallbackModule):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "stdout"
    CALLBACK_NAME = "seatwright.fleet.progress"

    def __init__(self):
        super().__init__()
        # host name -> (task uuid, task name, monotonic start): the clock of the task each host runs.
        self._started = {}

    def _elapsed(self, host_name, task):
        started = self._started.get(host_name)
        if started is None or (task is not None and started[0] != task._uuid):
            return None
        return time.monotonic() - started[2]

    def v2_runner_on_start(self, host, task):
        self._started[host.get_name()] = (task._uuid, task.get_name(), time.monotonic())
        super().v2_runner_on_start(host, task)

    def v2_runner_retry(self, result):
        task_name = result.task_name or result.task
        elapsed = self._elapsed(result.host.get_name(), result.task)
        msg = progress_line(self.host_label(result), task_name, result.result, elapsed)
        if self._run_is_verbose(result, verbosity=2):
            msg += " Result was: %s" % self._dump_results(result.result)
        self._display.display(msg, color=C.COLOR_DEBUG)

    def v2_runner_on_async_poll(self, result):
        host_name = result.host.get_name()
        # The poll's result belongs to an internal async_status task; the name is the polled task's.
        started = self._started.get(host_name)
        task_name = started[1] if started else result.task_name
        msg = "[%s] still running: %s" % (self.host_label(result), task_name)
        if started:
            msg += " (%s elapsed)" % _seconds(time.monotonic() - started[2])
        if self._run_is_verbose(result, verbosity=1):
            msg += " jid=%s" % result.result.get("ansible_job_id")
        self._display.display(msg, color=C.COLOR_DEBUG)
