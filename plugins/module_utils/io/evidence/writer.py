"""Evidence folders on the controller: name them, write their files, assemble record.json and report.md.

Everything written here goes through the project's redactor first, with the checkout's paths made
project-relative. The decisions (the folder's name, what bringup.json and the record hold, what
the report says) are in evidence/; this file reads, validates, plots and writes. The
seat_evidence module and the tools (seatwright-qualify, -bench, -promote) all write through it.
"""

import datetime
import json
import os
import re
import time

from ansible_collections.seatwright.fleet.plugins.module_utils.defaults import SEAT_NAME_PATTERN
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import EvidenceError
from ansible_collections.seatwright.fleet.plugins.module_utils.evidence import record as rec
from ansible_collections.seatwright.fleet.plugins.module_utils.evidence.bringup import bringup_record
from ansible_collections.seatwright.fleet.plugins.module_utils.evidence.folder import (
    RUN_ID,
    evidence_dir,
    evidence_dir_parts,
    project_root_of,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.evidence.redact import Redactor, secrets_from_env
from ansible_collections.seatwright.fleet.plugins.module_utils.evidence.report import PLOTS, render
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.files import (
    atomic_write_bytes,
    atomic_write_json,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.jsondoc import finite

NON_FINITE_NOTE = "non_finite_values"


def _write_json(path, data):
    """Evidence JSON is standard JSON: a figure that is not finite becomes null, and a document
    (a mapping) lists where under NON_FINITE_NOTE, so nobody reads the null as a measured nothing."""
    clean, notes = finite(data)
    if notes and isinstance(clean, dict):
        clean[NON_FINITE_NOTE] = notes[:100] + (["and %d more" % (len(notes) - 100)] if len(notes) > 100 else [])
    atomic_write_json(path, clean)


# The checkout this file lies in (the tools' and tests' import path); a module run by Ansible is
# unpacked elsewhere, so the seat_evidence module finds the checkout from its evidence folder.
PROJECT_ROOT = os.path.realpath(os.path.join(os.path.dirname(os.path.realpath(__file__)), "..", "..", "..", ".."))
SCHEMA = os.path.join("schemas", "record.schema.json")
SCHEMA_PATH = os.path.join(PROJECT_ROOT, SCHEMA)


def _spellings(path):
    """A folder as given and as resolved, so a checkout reached through a link is found either way."""
    return [p for p in {path, path and os.path.realpath(path)} if p]


def evidence_redactor(hostnames=(), root=PROJECT_ROOT, secrets=(), secret_envs=()):
    """The redactor of one evidence folder: one numbering for its files, the checkout made relative
    and the home folder (where the AIPerf venv and caches live) written as ~.

    `secrets` are the run's own (the seat key, router keys); the values of this process's secret
    environment variables (HF_TOKEN, *_API_KEY...) and of the variables named in `secret_envs` (the
    one a tool was told holds its key) are added, so a caller cannot forget them.
    """
    found = set(secrets or ()) | secrets_from_env(os.environ, tuple(secret_envs or ()))
    return Redactor(hostnames, _spellings(root), _spellings(os.path.expanduser("~")), found)


def new_evidence_dir(seat, root=PROJECT_ROOT, now=None):
    """The folder of a seat run starting now, under the checkout's evidence/."""
    return evidence_dir(root, seat, time.time() if now is None else now)


def read_part(evidence_dir, part):
    path = os.path.join(evidence_dir, rec.part_file(part))
    if not os.path.exists(path):
        return None
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError) as exc:
        raise EvidenceError("%s is not readable JSON (%s): fix or remove it and re-run" % (path, exc))
    if os.path.getsize(path) == 0:
        raise EvidenceError("%s is empty: a zero-byte artefact is not evidence" % path)
    return data


def write_part(evidence_dir, part, data, redactor):
    """One part file, redacted (pass one Redactor per evidence folder so names stay consistent)."""
    _write_json(os.path.join(evidence_dir, rec.part_file(part)), redactor.redact(data))


def load_schema(root=PROJECT_ROOT):
    path = os.path.join(root, SCHEMA)
    try:
        with open(path, encoding="utf-8") as handle:
            return json.load(handle)
    except (OSError, ValueError) as exc:
        raise EvidenceError("cannot read the record schema %s (%s): is %s a seatwright checkout?" % (path, exc, root))


def _problems(schema, value):
    import jsonschema

    validator = jsonschema.Draft202012Validator(schema)
    return [
        "%s: %s" % ("/".join(str(p) for p in err.absolute_path) or "(top)", err.message)
        for err in sorted(validator.iter_errors(value), key=lambda e: list(e.absolute_path))
    ]


def validate_record(record, root=PROJECT_ROOT):
    """Schema errors of a record as sentences (empty when valid)."""
    return _problems(load_schema(root), record)


def validate_part(part, data, root=PROJECT_ROOT):
    """Schema errors of one part file against the record schema's definition of it (`$defs/<part>`)."""
    schema = load_schema(root)
    return _problems({"$defs": schema["$defs"], "$ref": "#/$defs/%s" % part}, data)


def write_evidence(
    dir=None, seat=None, root=None, files=None, plan=None, bringup=None, hostnames=(), secrets=(), check_mode=False
):
    """Write files into a run's evidence folder, naming the folder when `seat` is given instead of `dir`.

    `files` maps paths inside the folder to text or JSON-like values; `bringup` (with `plan`) is a
    bring-up's outcome, written as bringup.json after it is checked against the record schema.
    `hostnames` and `secrets` are the run's own, replaced in every file (see evidence/redact.py).
    Returns {dir, written}; in check mode nothing is written.
    """
    now = time.time()
    if seat:
        if not root:
            raise EvidenceError("to name a new evidence folder for seat %s, give the checkout (root)" % seat)
        folder = evidence_dir(os.path.abspath(root), seat, now)
    elif dir:
        folder = os.path.abspath(dir)
    else:
        raise EvidenceError("give the evidence folder (dir), or the seat whose new folder to name")
    root = os.path.abspath(root) if root else project_root_of(folder)
    contents = dict(files or {})
    if bringup is not None:
        if not root:
            raise EvidenceError("%s is not <checkout>/evidence/<seat>/<UTC>: give root to check bringup.json" % folder)
        name = (plan or {}).get("seat") or evidence_dir_parts(folder)[0]
        record = bringup_record(name, plan, bringup, now)
        problems = validate_part("bringup", record, root)
        if problems:
            raise EvidenceError(
                "bringup.json of %s does not match schemas/record.schema.json ($defs/bringup):\n  %s"
                % (name, "\n  ".join(problems[:20]))
            )
        contents["bringup.json"] = record
    redactor = evidence_redactor(hostnames, root, secrets)
    written = []
    for relative, content in sorted(contents.items()):
        # A file named after a node (ranks/<host>.json) must not carry the name the files do not.
        path = os.path.abspath(os.path.join(folder, redactor.text(relative)))
        if not path.startswith(folder + os.sep):
            raise EvidenceError("evidence file %r lies outside %s; give a path inside the folder" % (relative, folder))
        if not check_mode:
            try:
                if isinstance(content, str):
                    atomic_write_bytes(path, redactor.redact(content).encode("utf-8"))
                else:
                    _write_json(path, redactor.redact(content))
            except OSError as exc:
                raise EvidenceError("cannot write evidence file %s: %s" % (path, exc.strerror or exc))
        written.append(path)
    return {"dir": folder, "written": written}


def assemble(evidence_dir, redactor=None, plots=True, root=PROJECT_ROOT):
    """record.json and report.md (with plots) from whatever parts the folder holds; returns the record.
    `root` is the checkout whose record schema checks it (a module run by Ansible is unpacked elsewhere)."""
    seat, run_id = evidence_dir_parts(evidence_dir)
    parts = {part: read_part(evidence_dir, part) for part in rec.PARTS + tuple(rec.OPTIONAL_PARTS)}
    created = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    redactor = redactor or evidence_redactor()
    record = redactor.redact(rec.assemble(seat, run_id, parts, created))
    problems = validate_record(record, root)
    if problems:
        raise EvidenceError(
            "the assembled record of %s does not match schemas/record.schema.json:\n  %s"
            % (evidence_dir, "\n  ".join(problems[:20]))
        )
    atomic_write_json(os.path.join(evidence_dir, "record.json"), record)
    # Without plotting again, the report still shows the plots already beside it.
    written = (
        write_plots(evidence_dir, record, parts.get("telemetry"))
        if plots
        else [name for name, _caption in PLOTS if os.path.isfile(os.path.join(evidence_dir, name))]
    )
    report = redactor.redact(render(record, written))
    atomic_write_bytes(os.path.join(evidence_dir, "report.md"), report.encode("utf-8"))
    return record


def write_plots(evidence_dir, record, telemetry):
    """PNG plots beside the report; returns the names written (none without a benchmark)."""
    summary = (record.get("benchmark") or {}).get("summary") or []
    if not summary:
        return []
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot as plt

    written = []
    conc = [lv["concurrency"] for lv in summary]

    def med(key):
        return [lv["figures"][key]["median"] for lv in summary]

    def err(key):
        lows = [
            (lv["figures"][key]["median"] - lv["figures"][key]["min"])
            if lv["figures"][key]["median"] is not None
            else 0
            for lv in summary
        ]
        highs = [
            (lv["figures"][key]["max"] - lv["figures"][key]["median"])
            if lv["figures"][key]["median"] is not None
            else 0
            for lv in summary
        ]
        return [lows, highs]

    title = "%s %s" % (record.get("seat"), record.get("run_id"))
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.errorbar(
        conc,
        [v or 0 for v in med("output_tok_s")],
        yerr=err("output_tok_s"),
        marker="o",
        capsize=4,
        label="output tok/s (all streams)",
    )
    _concurrency_axes(ax, conc, "output tokens / s", title)
    written.append(_save(fig, evidence_dir, "throughput.png"))
    fig, ax = plt.subplots(figsize=(6, 4))
    ax.errorbar(
        conc,
        [v or 0 for v in med("ttft_ms_p50")],
        yerr=err("ttft_ms_p50"),
        marker="o",
        capsize=4,
        label="TTFT p50 (first visible)",
    )
    ax.plot(
        conc,
        [v or 0 for v in med("ttfo_ms_p50")],
        marker="x",
        linestyle="--",
        label="first output p50 (reasoning included)",
    )
    _concurrency_axes(ax, conc, "ms", title)
    written.append(_save(fig, evidence_dir, "ttft.png"))
    hosts = (telemetry or {}).get("hosts") or {}
    if hosts:
        emulated = any(series.get("emulated") for series in hosts.values())
        fig, ax = plt.subplots(figsize=(7, 4))
        t0 = min((s["t"] for series in hosts.values() for s in series.get("samples", [])), default=0)
        for host, series in sorted(hosts.items()):
            per_gpu = {}
            for sample in series.get("samples", []):
                for gpu in sample.get("gpus", []):
                    per_gpu.setdefault(gpu["index"], []).append((sample["t"] - t0, gpu.get("power_w")))
            for index, points in sorted(per_gpu.items()):
                ax.plot([p[0] for p in points], [p[1] for p in points], label="%s GPU %s" % (host, index))
        for level in (record.get("benchmark") or {}).get("levels") or []:
            if level.get("window"):
                ax.axvspan(level["window"][0] - t0, level["window"][1] - t0, alpha=0.08, color="grey")
        ax.set_xlabel("seconds since the first sample (shaded: measured levels)")
        ax.set_ylabel("power W")
        ax.set_title(title + (" — EMULATED test equipment, not a measurement" if emulated else ""), fontsize=9)
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize=7)
        written.append(_save(fig, evidence_dir, "power.png"))
    plt.close("all")
    return [name for name in written if name in dict(PLOTS)]


def _concurrency_axes(ax, conc, ylabel, title):
    """The axes every per-concurrency plot shares: levels on a log2 scale, labelled as run."""
    ax.set_xlabel("concurrency")
    ax.set_ylabel(ylabel)
    ax.set_xscale("log", base=2)
    ax.set_xticks(conc, [str(c) for c in conc])
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend()


def _save(fig, evidence_dir, name):
    path = os.path.join(evidence_dir, name)
    tmp = path + ".tmp.png"
    fig.savefig(tmp, dpi=100, bbox_inches="tight")
    os.replace(tmp, path)
    return name


def check_seat_names(names):
    """Refuse names that are not seats' names before any becomes a folder under the evidence root."""
    odd = [name for name in names if not isinstance(name, str) or not re.match(SEAT_NAME_PATTERN, name)]
    if odd:
        raise EvidenceError(
            "incumbents must be seat names (seats/<name>.yml: lowercase letters, digits and '-', "
            "at most 63), got %s" % ", ".join(repr(name) for name in odd)
        )


def latest_record(evidence_root, seat, exclude=None):
    """The newest assembled record of a seat under evidence/<seat>/ (by run id), with its folder.

    The seat must be a seat's name and every folder read must resolve inside the evidence root: a
    name such as '../x' or 'c?nd', or a link out of the root, is refused, never followed or globbed.
    A record.json that is not a readable JSON object is refused with its path, not skipped.
    """
    check_seat_names([seat])
    root = os.path.realpath(evidence_root)
    seat_dir = os.path.join(evidence_root, seat)
    if not os.path.isdir(seat_dir):
        return None, None
    _inside(root, seat_dir)
    candidates = []
    for run_id in os.listdir(seat_dir):
        folder = os.path.join(seat_dir, run_id)
        if not RUN_ID.match(run_id) or (exclude and os.path.abspath(folder) == exclude):
            continue
        if os.path.isfile(os.path.join(folder, "record.json")):
            candidates.append((run_id, folder))
    for _run_id, folder in sorted(candidates, reverse=True):
        path = os.path.join(folder, "record.json")
        _inside(root, path)
        try:
            with open(path, encoding="utf-8") as handle:
                data = json.load(handle)
        except (OSError, ValueError) as exc:
            raise EvidenceError(
                "%s is not readable JSON (%s): re-assemble it (tools/seatwright-bench --evidence-dir %s "
                "--assemble-only) or remove the run" % (path, exc, folder)
            )
        if not isinstance(data, dict):
            raise EvidenceError(
                "%s holds a JSON %s, not a record: re-assemble it or remove the run" % (path, type(data).__name__)
            )
        bench = data.get("benchmark")
        # A run without a benchmark is skipped; one of the wrong shape is the decision's to refuse.
        if bench is not None and (not isinstance(bench, dict) or bench.get("summary")):
            return data, folder
    return None, None


def _inside(root, path):
    """Refuse a path that resolves outside the evidence root (a link planted under it)."""
    resolved = os.path.realpath(path)
    if resolved != root and not resolved.startswith(root.rstrip(os.sep) + os.sep):
        raise EvidenceError(
            "%s resolves to %s, outside the evidence root %s: evidence is read only from inside the root; "
            "remove the link" % (path, resolved, root)
        )
