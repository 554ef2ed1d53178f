"""Runs a qualification against a live endpoint: gates, the quality protocol and the soak, with
progress on stderr, then writes the evidence (qualification.json and qualification.md) through
the project's redactor. Every decision is made in qualify/; this file sends, times and writes.
"""

import datetime
import threading
import time

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import RunBoundError
from ansible_collections.seatwright.fleet.plugins.module_utils.evidence.qualification import qualification_markdown
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.openai_http import call
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.progress import emit
from ansible_collections.seatwright.fleet.plugins.module_utils.io.evidence.writer import (
    PROJECT_ROOT,
    evidence_redactor,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.io.evidence.writer import write_evidence as write_files
from ansible_collections.seatwright.fleet.plugins.module_utils.qualify import quality as quality_protocol
from ansible_collections.seatwright.fleet.plugins.module_utils.qualify import soak as soak_rules
from ansible_collections.seatwright.fleet.plugins.module_utils.qualify.gates import (
    GATE_FUNCTIONS,
    drive,
    reply_facts,
    reply_of,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.qualify.reading import read_responses
from ansible_collections.seatwright.fleet.plugins.module_utils.qualify.verdict import (
    INCOMPLETE,
    QUALIFIED,
    gate_records,
    overall,
)

RECORD_SCHEMA = "seatwright-qualification-1"
_KEEP_CHARS = 6000
# What one run may keep of its answers once parsed (openai_http.parsed_cost, summed over every
# exchange): `--parts gates` against a dense stream reached 4,015 MiB and died (issue 50).
MAX_RUN_COST = 384 * 2**20
# The soak's failed exchanges kept whole in the record.
MAX_SOAK_FAILURES = 20


class Kept:
    """The parsed cost of every answer this run has read (each is kept, or may be, in the record)."""

    def __init__(self, limit=None):
        self.limit, self.cost = limit or MAX_RUN_COST, 0
        self.lock = threading.Lock()

    def room(self, response):
        """Whether the run may keep this answer too (counted when it may); never raises, for threads."""
        with self.lock:
            cost = response.get("kept_cost") or 0
            if self.cost + cost > self.limit:
                return False
            self.cost += cost
            return True

    def add(self, response):
        with self.lock:
            self.cost += response.get("kept_cost") or 0
            if self.cost > self.limit:
                raise RunBoundError(
                    "the run's answers would take more than %d MiB once parsed: stopped (a bound on what one "
                    "run keeps)" % (self.limit >> 20)
                )


class Progress:
    """One line per event on stderr, stamped with the seconds since the run began."""

    def __init__(self, stream=None):
        self.stream = stream
        self.t0 = time.monotonic()

    def __call__(self, text):
        emit("[qualify %7.1fs] %s" % (time.monotonic() - self.t0, text), self.stream)


def utc_now():
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def shorten(value):
    """A copy with long strings cut to their head and tail (a 30K-token needle prompt stays readable)."""
    if isinstance(value, str) and len(value) > _KEEP_CHARS:
        head, tail = value[: _KEEP_CHARS // 2], value[-_KEEP_CHARS // 4 :]
        return "%s[... %d characters left out ...]%s" % (head, len(value) - len(head) - len(tail), tail)
    if isinstance(value, dict):
        return {k: shorten(v) for k, v in value.items()}
    if isinstance(value, list):
        return [shorten(v) for v in value]
    return value


def _kept_response(response):
    kept = dict(response)
    if kept.get("json") is not None:
        kept.pop("text", None)
    return kept


def _note_unread(unread, label, req, response):
    """Keep what went wrong on the wire for an exchange the seat cannot be judged on."""
    if response.get("transport_error"):
        unread.append("%s %s %s: %s" % (label, req["method"], req["path"], response["transport_error"]))


def _sender(endpoint, progress, label, unread, kept):
    count = [0]

    def send(req):
        count[0] += 1
        response = call(endpoint, req)
        _note_unread(unread, label, req, response)
        kept.add(response)
        status = response["status"] if response["error"] is None else response["error"]
        progress(
            "%s: request %d %s %s -> %s in %.2f s"
            % (label, count[0], req["method"], req["path"], status, response["elapsed_s"])
        )
        return response

    return send


def _exchange_record(exchange, thresholds, keep_stream=True):
    req, response = exchange["request"], exchange["response"]
    record = {"request": req, "response": _kept_response(response)}
    if not keep_stream and response.get("chunks") is not None:
        record["response"]["chunks"] = "%d chunks left out" % len(response["chunks"])
    if response.get("status") == 200 and req["path"] == "/chat/completions":
        record["reply"] = reply_facts(reply_of(response), thresholds)
    elif response.get("status") == 200 and req["path"] == "/responses":
        record["reply"] = reply_facts(read_responses(response.get("json")), thresholds)
    return shorten(record)


def run_gates(ctx, endpoint, progress, unread, kept):
    settings = ctx["settings"]
    results = {}
    for gate in settings["gates"]:
        progress("gate %s: start" % gate)
        result, exchanges = drive(GATE_FUNCTIONS[gate](ctx), _sender(endpoint, progress, "gate " + gate, unread, kept))
        result["exchanges"] = [_exchange_record(e, settings["degenerate"]) for e in exchanges]
        results[gate] = result
        progress("gate %s: %s - %s" % (gate, result["verdict"], result["reason"][:160]))
    return results


def run_quality(ctx, endpoint, progress, unread, kept):
    settings = ctx["settings"]
    runs = quality_protocol.plan(settings)
    results = []
    for index, (category, item, number, function) in enumerate(runs, 1):
        outcome, exchanges = drive(function(ctx), _sender(endpoint, lambda text: None, "quality", unread, kept))
        if "ok" not in outcome:  # drive() turned a failing item into a gate-style verdict
            outcome = {"ok": False, "verdict": outcome["verdict"], "reason": outcome["reason"], "detail": {}}
        entry = {"category": category, "item": item, "run": number}
        entry.update(outcome)
        if not outcome["ok"]:
            entry["exchanges"] = [_exchange_record(e, settings["degenerate"]) for e in exchanges]
        results.append(entry)
        progress(
            "quality %d/%d: %s %s run %d: %s - %s"
            % (index, len(runs), category, item, number, outcome["verdict"], outcome["reason"][:120])
        )
    summary = quality_protocol.tally(results, settings)
    summary["results"] = [shorten(r) for r in results]
    return summary


def run_soak(ctx, endpoint, progress, unread, kept, report_every_s=10.0):
    """Keep `concurrency` streams busy until `duration_s` has passed, then wait for those in flight."""
    settings = ctx["settings"]
    soak = settings["soak"]
    facts, failures = [], []
    lock = threading.Lock()
    counter = [0]
    deadline = time.monotonic() + soak["duration_s"]
    t0 = time.monotonic()

    def worker():
        while time.monotonic() < deadline:
            with lock:
                number = counter[0]
                counter[0] += 1
            req = soak_rules.soak_request(ctx["model"], settings, number)
            started = time.monotonic()
            response = call(endpoint, req)
            fact = soak_rules.exchange_facts(response, soak["stall_s"])
            with lock:
                _note_unread(unread, "soak", req, response)
                facts.append(dict(fact, number=number, started_s=round(started - t0, 3)))
                failed = not fact["ok"] or fact["stalled"] or not fact["answered"]
                if failed and len(failures) < MAX_SOAK_FAILURES and kept.room(response):
                    failures.append(_exchange_record({"request": req, "response": response}, settings["degenerate"]))
            if not fact["ok"]:
                time.sleep(1.0)  # a refusing server is counted, not hammered

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(soak["concurrency"])]
    for thread in threads:
        thread.start()
    progress(
        "soak: %d streams for %d s, stall threshold %s s" % (soak["concurrency"], soak["duration_s"], soak["stall_s"])
    )
    while any(thread.is_alive() for thread in threads):
        for thread in threads:
            thread.join(timeout=report_every_s / max(1, len(threads)))
        with lock:
            done = list(facts)
        elapsed = time.monotonic() - t0
        tokens = sum(f["output_tokens"] for f in done)
        thought = sum(f["reasoning_tokens"] for f in done)
        progress(
            "soak: %4.0f/%d s, %d requests, %d errors, %d unanswered (%d reasoning-exhausted), %d stalls, "
            "%.1f visible tok/s, %.1f reasoning tok/s%s"
            % (
                elapsed,
                soak["duration_s"],
                len(done),
                sum(1 for f in done if not f["ok"]),
                sum(1 for f in done if f["ok"] and not f["answered"]),
                sum(1 for f in done if f["state"] == soak_rules.STATE_REASONING_EXHAUSTED),
                sum(1 for f in done if f["stalled"]),
                tokens / elapsed if elapsed else 0.0,
                thought / elapsed if elapsed else 0.0,
                ", draining" if elapsed > soak["duration_s"] else "",
            )
        )
    summary = soak_rules.summarise(facts, settings, time.monotonic() - t0)
    summary["failures"] = failures
    summary["per_request"] = sorted(facts, key=lambda f: f["number"])
    return summary


def write_evidence(evidence_dir, record, hostnames=(), secrets=()):
    """qualification.json (the whole record) and qualification.md (the verdict table), redacted.

    Written through the evidence writer, whose redactor makes the checkout's paths project-relative
    (the recipe, the command line) and removes the run's `secrets` (the seat key an endpoint may
    echo) and `hostnames`.
    """
    clean = evidence_redactor(hostnames, secrets=secrets).redact(record)
    files = {"qualification.json": clean, "qualification.md": qualification_markdown(clean)}
    write_files(dir=evidence_dir, root=PROJECT_ROOT, files=files, hostnames=hostnames, secrets=secrets)
    return clean


def stopped_record(ctx, reason):
    """The record of a run that stopped on an unexpected error: incomplete, saying why; what it had
    measured is not kept (a MemoryError leaves nothing to trust)."""
    return {
        "schema": RECORD_SCHEMA,
        "started_at": utc_now(),
        "settings": (ctx or {}).get("settings"),
        "gates": [],
        "quality": None,
        "soak": None,
        "unread": {"count": 1, "first": [reason]},
        "verdict": INCOMPLETE,
        "passed": False,
        "reasons": [reason],
        "finished_at": utc_now(),
    }


def qualify(ctx, endpoint, parts, progress):
    """Run the parts asked for ("gates", "quality", "soak"); returns the record (not yet redacted)."""
    started, t0 = utc_now(), time.monotonic()
    record = {
        "schema": RECORD_SCHEMA,
        "started_at": started,
        "settings": ctx["settings"],
        "gates": {},
        "quality": None,
        "soak": None,
    }
    unread, kept = [], Kept()
    runners = (("gates", run_gates), ("quality", run_quality), ("soak", run_soak))
    for part, runner in runners:
        if part not in parts:
            continue
        try:
            record[part] = runner(ctx, endpoint, progress, unread, kept)
        except RunBoundError as exc:
            unread.append("%s: %s" % (part, exc))
            break
        except MemoryError:
            # What the part held is gone with its frames; the record says where the run stopped.
            unread.append("%s: the controller ran out of memory (MemoryError): the run stopped" % part)
            break
    skipped = [p for p in ("gates", "quality", "soak") if p not in parts]
    result = overall(
        record["gates"], ctx["settings"]["expect_fail"], record["quality"], record["soak"], skipped, unread
    )
    record["unread"] = {"count": len(unread), "first": unread[:20]}
    # Readers (evidence/record.py) take `passed` first: true only for a qualified seat.
    record.update(
        verdict=result["verdict"],
        passed=result["verdict"] == QUALIFIED,
        reasons=result["reasons"],
        gates=gate_records(record["gates"], ctx["settings"]["expect_fail"]),
    )
    record["finished_at"] = utc_now()
    record["wall_s"] = round(time.monotonic() - t0, 1)
    return record
