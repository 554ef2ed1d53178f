"""report.md of one seat run, rendered from its record (pure: text in, text out).

The report leads with what a reader must know before any figure (qualification, whether the
benchmark is clean, the decision), then the launch exactly as it ran, the sweep with medians,
ranges and flags, the telemetry (labelled test equipment when emulated), the fleet cost, and ends
with the promotion decision and its reasons.
"""

import json

from ansible_collections.seatwright.fleet.plugins.module_utils.bench.analysis import DEFAULT_STABILITY_SPREAD
from ansible_collections.seatwright.fleet.plugins.module_utils.bench.field import field_comparison

PLOTS = (
    ("throughput.png", "Output throughput against concurrency (median of passes, range as error bars)"),
    ("ttft.png", "TTFT and time to first output against concurrency (p50, median of passes)"),
    ("power.png", "GPU power over the run, per node and GPU"),
)


def _num(value, digits=1):
    if value is None:
        return "—"
    if isinstance(value, float) and abs(value) >= 100:
        return "{:,.0f}".format(value)
    return ("{:,.%df}" % digits).format(value)


def _range(fig, digits=1):
    if not fig or fig.get("median") is None:
        return "—"
    if fig.get("min") is None or fig["min"] == fig["max"]:
        return _num(fig["median"], digits)
    return "%s (%s–%s)" % (_num(fig["median"], digits), _num(fig["min"], digits), _num(fig["max"], digits))


def _cell(text):
    return str(text).replace("|", "\\|").replace("\n", " ")


def stability_line(options):
    """The spread across passes a level was held to, and the fleet's reason where it is not the default."""
    spread = options.get("stability_spread", DEFAULT_STABILITY_SPREAD)
    reason = options.get("stability_reason") or ""
    text = "A level is stable when its passes spread at most %.0f %%" % (100 * spread)
    if reason:
        return text + " (the fleet's spread: %s)." % _cell(reason)
    return text + "."


def sweep_table(summary):
    lines = [
        "| c | passes | visible tok/s | reasoning tok/s | visible share | TTFT p50 ms | TTFT p95 / p99 ms "
        "| first output p50 ms | decode tok/s/stream p50 | visible tok/s/stream p50 | prefill tok/s p50 "
        "| prefix-cache hits | failed | stable |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for level in summary:
        figs = level["figures"]
        hit = level["prefix_cache_hit_rate"].get("median")
        prefill = (
            _range(figs["prefill_tok_s_p50"], 0)
            if level["prefill_valid"]
            else "invalid (cache)"
            if hit is not None
            else "unverified"
        )
        share = (figs.get("visible_share") or {}).get("median")
        lines.append(
            "| %d | %d | %s | %s | %s | %s | %s / %s | %s | %s | %s | %s | %s | %d of %d | %s |"
            % (
                level["concurrency"],
                level["passes"],
                _range(figs["output_tok_s"]),
                _range(figs.get("reasoning_tok_s")),
                "—" if share is None else "%.0f %%%s" % (100 * share, "" if _answers(level) else " **reasoning-only**"),
                _range(figs["ttft_ms_p50"]),
                _num(figs["ttft_ms_p95"]["median"]),
                _num(figs["ttft_ms_p99"]["median"]),
                _range(figs["ttfo_ms_p50"]),
                _range(figs["decode_tok_s_p50"]),
                _range(figs["visible_tok_s_p50"]),
                prefill,
                "—" if hit is None else "%.1f %%" % (100 * hit),
                level["failed"],
                level["requests"],
                ("yes, in turns (host drift)" if level.get("drift") else "yes") if level["stable"] else "**no**",
            )
        )
    return lines


def _answers(level):
    return not any(f["id"] == "reasoning-only" for f in level.get("flags") or [])


def field_lines(comparison):
    """The recipe's field figures beside the run's, with the ratio and the source; or one line saying why not."""
    if not comparison["comparable"]:
        if not comparison["count"]:
            return ["- none: %s." % comparison["reason"]]
        return [
            "- not comparable: %d field figure(s) in the recipe, but %s." % (comparison["count"], comparison["reason"])
        ]
    lines = [
        "Measured on workload profile %s, as this run was; ratio = this run / the field." % comparison["run_profile"],
        "",
        "| figure | c | context tokens | field | this run | ratio | source |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in comparison["rows"]:
        lines.append(
            "| %s | %s | %s | %s | %s | %s | %s |"
            % (
                row["label"],
                row["concurrency"] or "—",
                _num(row["context_tokens"], 0) if row["context_tokens"] else "—",
                _num(float(row["field"])),
                _num(row["run"]) if row["run"] is not None else "— (%s)" % row["note"],
                "x%s" % _num(row["ratio"], 2) if row["ratio"] is not None else "—",
                _cell(row["source"]),
            )
        )
    return lines


def telemetry_lines(telemetry):
    if not telemetry or not telemetry.get("hosts"):
        return ["No GPU telemetry was sampled during this run."]
    lines = []
    if telemetry.get("emulated"):
        lines.append(
            "**Emulated test equipment:** these readings come from the lab's nvidia-smi emulator. "
            "They show the sampling works; they are not measurements of any GPU."
        )
        lines.append("")
    lines.append(
        "Medians during the highest concurrency level (source: %s, every %.1f s):"
        % (telemetry.get("source") or "unknown", telemetry.get("interval_s") or 0)
    )
    lines.append("")
    lines.append("| node | GPU | power W | cap W | SM clock MHz (max) | utilisation % | temperature °C |")
    lines.append("|---|---|---|---|---|---|---|")
    for host, gpus in sorted((telemetry.get("full_load") or {}).items()):
        for index, r in sorted(gpus.items()):
            lines.append(
                "| %s | %s | %s | %s | %s (%s) | %s | %s |"
                % (
                    _cell(host),
                    index,
                    _num(r.get("power_w")),
                    _num(r.get("power_limit_w"), 0),
                    _num(r.get("sm_clock_mhz"), 0),
                    _num(r.get("sm_clock_max_mhz"), 0),
                    _num(r.get("util_pct"), 0),
                    _num(r.get("temp_c"), 0),
                )
            )
    verdict = telemetry.get("verdict") or {}
    lines.append("")
    lines.append(
        "Power verdict: **%s** — %s" % (verdict.get("verdict", "not judged"), "; ".join(verdict.get("reasons", [])))
    )
    return lines


def level_lines(promotion):
    """Each judged level's win or loss against each incumbent, and the candidate's TTFT p95 against the
    fleet's bound: one line each (the CLI prints these; the report shows them as a table)."""
    lines = []
    bound = (promotion.get("policy") or {}).get("ttft_p95_ms")
    for level in promotion.get("levels") or []:
        if not level.get("measured"):
            lines.append(
                "c=%d: not measured by the candidate (a level the fleet serves): blocks" % level["concurrency"]
            )
        elif bound is not None:
            lines.append(
                "c=%d: TTFT p95 %s ms against the fleet's %s ms bound: %s"
                % (level["concurrency"], _num(level.get("ttft_ms_p95")), _num(float(bound)), level.get("ttft_verdict"))
            )
    for comp in promotion.get("comparisons") or []:
        for row in comp.get("levels") or []:
            lines.append(
                "c=%d against %s: x%s, candidate %s tok/s, incumbent %s (%s): %s"
                % (
                    row["concurrency"],
                    comp["incumbent"],
                    _num(row.get("ratio"), 2),
                    _num(row.get("candidate")),
                    _num(row.get("incumbent")),
                    _turns_or_lowest(row),
                    row["verdict"] if row.get("in_incumbent") else "the incumbent has no such level",
                )
            )
        if comp.get("throughput_ratio") is not None:
            lines.append(
                "summary against %s: geometric mean x%s over the judged levels (needs x%s)"
                % (comp["incumbent"], _num(comp["throughput_ratio"], 2), _num(comp.get("required_ratio"), 2))
            )
    return lines


def turns_lines(turns):
    """The incumbent measured in turns with the seat: output tok/s of both per pass and their ratio."""
    if not turns:
        return []
    lines = [
        "",
        "In turns with incumbent **%s** (%s): output tok/s, this seat / the incumbent, per pass."
        % (_cell(turns.get("seat")), _cell(turns.get("order"))),
        "",
        "| c | pass by pass | ratio median (range) | ratios stable |",
        "|---|---|---|---|",
    ]
    for row in turns.get("pairs") or []:
        fig = row["figures"]["output_tok_s"]
        lines.append(
            "| %d | %s | x%s (%s-%s) | %s |"
            % (
                row["concurrency"],
                ", ".join("%s / %s" % (_num(t["candidate"]), _num(t["incumbent"])) for t in fig["turns"]),
                _num(fig["ratio"]["median"], 2),
                _num(fig["ratio"]["min"], 2),
                _num(fig["ratio"]["max"], 2),
                "no: %s" % ", ".join(row["unstable"]) if row["unstable"] else "yes",
            )
        )
    return lines


def _turns_or_lowest(row):
    if "turn_ratios" in row:
        return "ratios turn by turn %s" % ", ".join(_num(v, 2) for v in row["turn_ratios"])
    return "lowest pass %s" % _num(row.get("incumbent_lowest"))


def _verdict_cell(row):
    if row["verdict"] == "loss":
        return "**loss**"
    return _cell(row["verdict"] + (" beyond the noise" if row.get("beyond_noise") else ""))


def decision_lines(promotion):
    if not promotion:
        return ["No promotion decision yet (`tools/seatwright-promote --evidence-dir ...`)."]
    lines = ["**Decision: %s.**" % promotion["decision"], ""]
    lines.extend("- %s" % _cell(reason) for reason in promotion.get("reasons", []))
    for action in promotion.get("actions", []):
        lines.append("- to do: %s" % _cell(action))
    for comp in promotion.get("comparisons", []):
        lines.append("")
        in_turns = comp.get("basis") == "turns"
        lines.append(
            "Against incumbent **%s** (%s)%s:"
            % (
                comp["incumbent"],
                "measured in turns with the candidate in its own run"
                if in_turns
                else "run %s" % (comp.get("run") or "none"),
                "" if comp["comparable"] else " — not comparable, marked for re-measurement",
            )
        )
        if comp.get("incumbent_flags"):
            lines.extend(
                [
                    "",
                    "The incumbent's own benchmark is flagged (%s): its figures below carry that noise."
                    % _cell(", ".join(comp["incumbent_flags"])),
                ]
            )
        cost = comp.get("cost") or {}
        lines.append("")
        lines.append("| | candidate | incumbent |")
        lines.append("|---|---|---|")
        for label, key in (("nodes", "node_count"), ("services evicted", "evicted_count")):
            lines.append(
                "| %s | %s | %s |"
                % (label, (cost.get("candidate") or {}).get(key), (cost.get("incumbent") or {}).get(key))
            )
        if comp.get("levels"):
            bound = (promotion.get("policy") or {}).get("ttft_p95_ms")
            ttft = {lv["concurrency"]: lv.get("ttft_ms_p95") for lv in promotion.get("levels") or []}
            lines.append("")
            lines.append(
                "Each level the fleet serves (a loss is %s, a win beyond the noise %s; TTFT p95 bound: %s):"
                % (
                    "the candidate slower in every turn"
                    if in_turns
                    else "every candidate pass below the incumbent's slowest",
                    "faster in every turn" if in_turns else "every candidate pass above the incumbent's fastest",
                    "%s ms" % _num(float(bound)) if bound is not None else "none declared",
                )
            )
            lines.append("")
            lines.append(
                "| c | output ratio | candidate median tok/s | incumbent median %s tok/s | "
                "candidate TTFT p95 ms | verdict |" % ("(ratio per turn)" if in_turns else "/ lowest pass")
            )
            lines.append("|---|---|---|---|---|---|")
            for row in comp["levels"]:
                lines.append(
                    "| %d | x%s | %s | %s | %s | %s |"
                    % (
                        row["concurrency"],
                        _num(row.get("ratio"), 2),
                        _num(row.get("candidate")),
                        "%s (%s)" % (_num(row.get("incumbent")), ", ".join(_num(v, 2) for v in row["turn_ratios"]))
                        if in_turns
                        else "%s / %s" % (_num(row.get("incumbent")), _num(row.get("incumbent_lowest"))),
                        _num(ttft.get(row["concurrency"])),
                        _verdict_cell(row),
                    )
                )
            if comp.get("throughput_ratio") is not None:
                lines.append("")
                lines.append(
                    "Summary: geometric mean of the output ratios x%s (needs x%s); a loss at any level blocks "
                    "whatever the mean, and a win needs one level beyond the noise."
                    % (_num(comp["throughput_ratio"], 2), _num(comp.get("required_ratio"), 2))
                )
        if comp.get("rows"):
            lines.append("")
            lines.append(
                "| c | output tok/s cand. / inc. (ratio) | TTFT p50 ms cand. / inc. | "
                "decode tok/s/stream cand. / inc. |"
            )
            lines.append("|---|---|---|---|")
            for row in comp["rows"]:
                out, ttft, dec = row["output_tok_s"], row["ttft_ms_p50"], row["decode_tok_s_p50"]
                lines.append(
                    "| %d | %s / %s (x%s) | %s / %s | %s / %s |"
                    % (
                        row["concurrency"],
                        _num(out["candidate"]),
                        _num(out["incumbent"]),
                        _num(out["ratio"], 2),
                        _num(ttft["candidate"]),
                        _num(ttft["incumbent"]),
                        _num(dec["candidate"]),
                        _num(dec["incumbent"]),
                    )
                )
    return lines


def transport_text(transport):
    """The seat's transport as bring-up read it from the ranks' logs, against what the plan required."""
    if not transport:
        return "one node, or not recorded"
    seen = (
        "%s (%s, from %s)" % (transport["kind"], transport.get("backend") or "?", transport.get("source"))
        if transport.get("kind")
        else "not shown in any rank's log"
    )
    channels = sorted(
        {"%s: %s" % (rank.get("host"), ", ".join(sorted(rank.get("channels") or {}))) for rank in transport["ranks"]}
    )
    return "%s; required %s (%s: %s)%s" % (
        seen,
        transport.get("required"),
        transport.get("required_source"),
        transport.get("required_reason"),
        "; channels " + "; ".join(channels) if any((r.get("channels") for r in transport["ranks"])) else "",
    )


def render(record, plots=()):
    """The markdown report of a record; `plots` names the PNG files written beside it."""
    summary = record.get("summary") or {}
    bench = record.get("benchmark") or {}
    launch = record.get("launch") or {}
    cost = record.get("fleet_cost") or {}
    lines = [
        "# Seat %s — run %s" % (record.get("seat"), record.get("run_id")),
        "",
        "- Qualification: **%s**%s"
        % (
            summary.get("qualification"),
            (" (%s)" % ", ".join(summary.get("qualification_failures")))
            if summary.get("qualification_failures")
            else "",
        ),
        "- Benchmark: **%s**%s"
        % (
            summary.get("benchmark"),
            (" (%s)" % ", ".join(summary.get("benchmark_flags"))) if summary.get("benchmark_flags") else "",
        ),
        "- Decision: **%s**" % (summary.get("decision") or "not decided"),
        "- Evidence parts: %s"
        % ", ".join("%s %s" % (k, "yes" if v else "missing") for k, v in sorted((record.get("parts") or {}).items())),
        "",
        "## Launch",
        "",
        "- Image id: `%s`" % (launch.get("image_id") or "unknown"),
        "- Model revision: `%s`" % (launch.get("model_revision") or "unknown"),
        "- From: %s" % (launch.get("source") or "no plan or bring-up record"),
        "- Transport: %s" % transport_text((record.get("bringup") or {}).get("transport")),
        "",
    ]
    for rank in launch.get("ranks") or []:
        lines.append("Rank %s on %s:" % (rank.get("rank"), rank.get("host")))
        lines.append("")
        lines.append("```")
        lines.append(" ".join(str(a) for a in (rank.get("argv") or [])))
        for key, value in sorted((rank.get("env") or {}).items()):
            lines.append("%s=%s" % (key, value))
        lines.append("```")
        lines.append("")
    lines += ["## Benchmark", ""]
    if not bench:
        lines.append("No benchmark in this run.")
    else:
        harness = bench.get("harness") or {}
        workload = bench.get("workload") or {}
        lines.append(
            "Harness %s %s (load from %s); workload profile **%s**, workload `%s`: %s."
            % (
                harness.get("name"),
                harness.get("version"),
                harness.get("load_generator"),
                record.get("workload_profile") or "not recorded",
                bench.get("workload_id"),
                json.dumps(workload, sort_keys=True),
            )
        )
        warm = bench.get("warmup") or {}
        if warm:
            lines.append("")
            lines.append(
                "Warm-up at c=%s: %d pass(es), generated tok/s %s (visible %s) — %s."
                % (
                    warm.get("concurrency"),
                    len(warm.get("output_tok_s", [])),
                    ", ".join(_num(v) for v in warm.get("generated_tok_s", warm.get("output_tok_s", []))),
                    ", ".join(_num(v) for v in warm.get("output_tok_s", [])),
                    "settled" if warm.get("settled") else "**did not settle**",
                )
            )
        lines.append("")
        lines.append(
            "Figures are medians over passes with their range; p95/p99 are medians of each pass's "
            "percentile. Visible and reasoning tok/s are counted apart from the streamed text with the "
            "served tokenizer; decode is per stream with reasoning tokens included, visible excludes them."
        )
        lines.append("")
        lines.extend(sweep_table(bench.get("summary") or []))
        lines.extend(turns_lines(bench.get("turns")))
        if bench.get("turns_skipped"):
            lines.extend(["", "Not in turns: %s." % _cell(bench["turns_skipped"])])
        lines.append("")
        lines.append(stability_line(bench.get("options") or {}))
        reasons = (bench.get("verdict") or {}).get("reasons") or []
        lines.append("")
        lines.append("Flags: %s" % ("none" if not reasons else ""))
        lines.extend("- %s" % _cell(r) for r in reasons)
        lines += ["", "The field's figures:", ""]
        lines.extend(field_lines(field_comparison(record)))
        for name, caption in PLOTS:
            if name in plots:
                lines.append("")
                lines.append("![%s](%s)" % (caption, name))
        lines += ["", "## Telemetry", ""]
        lines.extend(telemetry_lines(record.get("telemetry")))
    lines += [
        "",
        "## Fleet cost",
        "",
        "- Nodes: %s" % (", ".join(cost.get("nodes") or []) or "unknown"),
        "- Co-tenant services evicted: %s"
        % (
            ", ".join(_evicted_name(e) for e in cost.get("evicted") or [])
            or ("none" if cost.get("evicted_known") else "not recorded")
        )
        + (" (from %s)" % cost["source"] if cost.get("source") else ""),
        "- Stopped by this bring-up: %s"
        % (
            "not recorded"
            if cost.get("stopped_at_bringup") is None
            else ", ".join(_evicted_name(e) for e in cost["stopped_at_bringup"]) or "none (nothing was running)"
        ),
        "",
        "## Decision",
        "",
    ]
    lines.extend(decision_lines(record.get("promotion")))
    if record.get("rollout"):
        lines += [""] + rollout_lines(record["rollout"])
    return "\n".join(lines) + "\n"


def rollout_lines(rollout_doc):
    """The report's rollout section, from promotion-rollout.json (playbooks/promote.yml): each step's
    targets, seconds and verdict, and the rollback's measured time."""
    if not rollout_doc:
        return []
    lines = [
        "## Rollout",
        "",
        "Alias **%s** on %s: **%s** (from %s to %s)."
        % (
            rollout_doc.get("alias"),
            rollout_doc.get("router"),
            rollout_doc.get("outcome"),
            rollout_doc.get("incumbent"),
            rollout_doc.get("candidate"),
        ),
    ]
    if rollout_doc.get("refusal"):
        lines += ["", "Refused: %s" % rollout_doc["refusal"]]
    if rollout_doc.get("rollback_s") is not None:
        lines += [
            "",
            "Rolled back in %.2f s (gate failure to the previous targets confirmed serving)."
            % rollout_doc["rollback_s"],
        ]
    steps = rollout_doc.get("steps") or []
    if steps:
        lines += [
            "",
            "| step | targets | seconds | verdict | answers (failed) | TTFT p95 ms | visible tok/s p50 "
            "| judged against |",
            "|---|---|---|---|---|---|---|---|",
        ]
    for step in steps:
        figs = (step.get("verdict") or {}).get("figures") or {}
        targets = (
            ", ".join("%s %s" % kv for kv in sorted((step.get("targets") or {}).items())) or step.get("seat") or ""
        )
        span = step.get("ended_at_epoch", 0) - step.get("started_at_epoch", 0) if step.get("started_at_epoch") else None
        lines.append(
            "| %s | %s | %s | %s | %s | %s | %s | %s |"
            % (
                step.get("step"),
                targets,
                _num(span),
                (step.get("verdict") or {}).get("verdict", step.get("status", "done")),
                "%s (%s)" % (figs["all_requests"], figs.get("all_failed")) if "all_requests" in figs else "",
                _num(figs.get("ttft_ms_p95")),
                _num(figs.get("visible_tok_s_p50")),
                _against(figs),
            )
        )
        for reason in (step.get("verdict") or {}).get("reasons") or []:
            if (step.get("verdict") or {}).get("verdict") == "fail":
                lines.append("")
                lines.append("- %s: %s" % (step.get("step"), reason))
    return lines + [""]


def _against(figures):
    """What a hold's visible tok/s was judged against: the figure and whose it is (or why it was not)."""
    if figures.get("visible_not_judged"):
        return "not judged: %s" % figures["visible_not_judged"]
    if figures.get("expected_visible_tok_s_p50") is None:
        return ""
    return "%s (%s)" % (_num(figures["expected_visible_tok_s_p50"]), figures.get("expected_from") or "benchmark")


def _evicted_name(entry):
    if isinstance(entry, dict):
        return "%s on %s" % (entry.get("name"), entry.get("host", "?"))
    return str(entry)
