"""The seat's qualification verdict from its gates, quality protocol and soak, and the table people read.

A gate listed in `expect_fail` (test equipment, e.g. a random-weight model on degenerate-output)
counts as met when it does not pass, and as a finding when it passes. A part that was not run
(the soak skipped on the command line) leaves the verdict `incomplete`, never `qualified`.
"""

from ansible_collections.seatwright.fleet.plugins.module_utils.qualify.gates import PASS

QUALIFIED, NOT_QUALIFIED, INCOMPLETE = "qualified", "not-qualified", "incomplete"


def gate_met(gate, result, expect_fail):
    """(met, note) for one gate's verdict under the recipe's expectations."""
    passed = result["verdict"] == PASS
    if gate in expect_fail:
        return (not passed), ("expected to fail and did" if not passed else "expected to fail but passed")
    return passed, ""


def overall(gate_results, expect_fail, quality=None, soak=None, skipped=(), unread=()):
    """{"verdict", "reasons"} over every part that ran; `skipped` names parts left out on purpose.

    `unread` names exchanges whose answer could not be read as HTTP to its end (malformed, a
    redirect, a size limit, the deadline, no connection): the seat was not judged on them, so the
    run is incomplete whatever else happened, with those reasons first.
    """
    if unread:
        shown = list(unread[:5]) + (["and %d more" % (len(unread) - 5)] if len(unread) > 5 else [])
        return {"verdict": INCOMPLETE, "reasons": ["the endpoint's answer could not be read: %s" % u for u in shown]}
    # A gate that failed in seatwright's own code judged nothing: the run is incomplete.
    internal = [
        "gate %s: %s" % (gate, result["reason"])
        for gate, result in gate_results.items()
        if (result.get("detail") or {}).get("internal")
    ]
    if internal:
        return {"verdict": INCOMPLETE, "reasons": internal}
    reasons = []
    for gate, result in gate_results.items():
        met, note = gate_met(gate, result, expect_fail)
        if not met:
            reasons.append("gate %s: %s%s" % (gate, result["verdict"], " (%s)" % note if note else ""))
    for name, part in (("quality", quality), ("soak", soak)):
        if part is not None and part["verdict"] != PASS:
            reasons.append("%s: %s" % (name, part["reason"]))
    if reasons:
        return {"verdict": NOT_QUALIFIED, "reasons": reasons}
    if skipped:
        return {"verdict": INCOMPLETE, "reasons": ["not run: %s" % ", ".join(skipped)]}
    return {"verdict": QUALIFIED, "reasons": []}


def gate_records(gate_results, expect_fail):
    """The gates as qualification.json lists them, in the order they ran: each with its id, whether
    it met the recipe (`passed`, expected failures included), its raw verdict, a note and the rest."""
    records = []
    for gate, result in gate_results.items():
        met, note = gate_met(gate, result, expect_fail)
        entry = {"id": gate, "passed": met, "note": note}
        entry.update(result)
        records.append(entry)
    return records


def _cell(text, limit=110):
    text = " ".join(str(text).split()).replace("|", "\\|")
    return text if len(text) <= limit else text[: limit - 3] + "..."


def verdict_table(record):
    """Markdown lines: one row per gate, per quality category, the soak, then the verdict."""
    lines = ["| part | verdict | what happened |", "|---|---|---|"]
    for gate in record["gates"]:
        shown = gate["verdict"] + (" (%s)" % gate["note"] if gate["note"] else "")
        lines.append("| gate %s | %s | %s |" % (gate["id"], shown, _cell(gate["reason"])))
    quality = record.get("quality")
    if quality:
        for name, entry in sorted(quality["categories"].items()):
            first = entry["failures"][0] if entry["failures"] else ""
            lines.append("| quality %s | %d/%d | %s |" % (name, entry["passed"], entry["runs"], _cell(first)))
    soak = record.get("soak")
    if soak:
        lines.append(
            "| soak c%d %ss | %s | %s; latency p50 %s s p95 %s s; %s visible tok/s, %s reasoning tok/s |"
            % (
                soak["concurrency"],
                soak["duration_s"],
                soak["verdict"],
                _cell(soak["reason"]),
                soak["latency_s"]["p50"],
                soak["latency_s"]["p95"],
                soak["output_tok_s"],
                soak.get("reasoning_tok_s", "—"),
            )
        )
    lines.append("")
    lines.append(
        "verdict: **%s**%s" % (record["verdict"], (" - " + "; ".join(record["reasons"])) if record["reasons"] else "")
    )
    return lines
