"""The benchmark's I/O: AIPerf runs, `/metrics` scrapes, artefacts on disk, progress on stderr.

Every decision (what a level means, whether it is stable, what is flagged) is in bench/; this file
only drives AIPerf (its own venv, see scripts/aiperf-venv) once per concurrency level and pass,
reads the engine's counters right before and right after each run, and hands the records over.
"""

import hashlib
import json
import os
import shutil
import signal
import subprocess
import time

from ansible_collections.seatwright.fleet.plugins.module_utils.bench import analysis, counters, pairing, records
from ansible_collections.seatwright.fleet.plugins.module_utils.bench import workload as wl
from ansible_collections.seatwright.fleet.plugins.module_utils.bench.stats import figure_text
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import BenchError, BenchIncomplete
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common import openai_http
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.files import atomic_write_json
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.progress import emit

AIPERF_REQUIREMENTS = "requirements-aiperf.txt"


def aiperf_venv_dir(project_root):
    """Where AIPerf's own venv lives: a per-user cache keyed by the hash of requirements-aiperf.txt.

    Shared by every checkout of the project on the machine; a changed pin makes a new venv.
    """
    with open(os.path.join(project_root, AIPERF_REQUIREMENTS), "rb") as handle:
        digest = hashlib.sha256(handle.read()).hexdigest()[:12]
    cache = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(cache, "seatwright", "aiperf-" + digest)


def aiperf_binary(project_root):
    """$SEATWRIGHT_AIPERF, else the cached venv's aiperf (scripts/aiperf-venv makes it)."""
    return os.environ.get("SEATWRIGHT_AIPERF") or os.path.join(aiperf_venv_dir(project_root), "bin", "aiperf")


# AIPerf 0.13 takes the key only as --api-key (it expands no ${VAR} on its command line): this
# launcher, run by AIPerf's own Python, moves the key from its environment into sys.argv inside
# the process, where `ps` and /proc/PID/cmdline (readable by every local user) never show it.
# /proc/PID/environ is readable by the owner alone.
AIPERF_KEY_ENV = "SEATWRIGHT_AIPERF_API_KEY"
_KEY_LAUNCHER = (
    "import os, runpy, sys; key = os.environ.pop(%r); "
    "sys.argv = sys.argv[1:] + ['--api-key', key]; runpy.run_path(sys.argv[0], run_name='__main__')" % AIPERF_KEY_ENV
)


def script_interpreter(path):
    """The interpreter argv of a script's #! line; BenchError when `path` is not a script."""
    try:
        with open(path, "rb") as handle:
            first = handle.readline(512)
    except OSError as exc:
        raise BenchError("cannot read AIPerf at %s: %s; run scripts/aiperf-venv" % (path, exc.strerror))
    if not first.startswith(b"#!") or b"python" not in first:
        raise BenchError(
            "AIPerf at %s is not a Python script: the seat's API key is handed to AIPerf inside its own "
            "process, never on a command line; use the aiperf that scripts/aiperf-venv installs" % path
        )
    return first[2:].decode("utf-8", "replace").split()


def keyed_launch(argv, api_key, base_env=None):
    """(argv, env) that run AIPerf's `argv` with `api_key` added in-process, off every command line."""
    env = dict(os.environ if base_env is None else base_env)
    if not api_key:
        return list(argv), env
    env[AIPERF_KEY_ENV] = api_key
    return script_interpreter(argv[0]) + ["-c", _KEY_LAUNCHER] + list(argv), env


def log(msg):
    emit("[seatwright-bench %s] %s" % (time.strftime("%H:%M:%S"), msg))


def server_root(base_url):
    """http://host:port/v1 -> http://host:port (where vLLM and SGLang serve /metrics)."""
    url = base_url.rstrip("/")
    return url[:-3] if url.endswith("/v1") else url


def scrape_metrics(base_url, api_key=None, timeout=10):
    """The engine's /metrics text, or None (with a logged reason) when it has none.

    A page that cannot be read as HTTP (malformed, a redirect, over MAX_METRICS_BYTES, past the
    deadline) is the endpoint misbehaving, not a seat without counters: BenchIncomplete.
    """
    url = server_root(base_url) + "/metrics"
    page = openai_http.get_text(url, api_key, timeout)
    if page["problem"] is not None and page["answered"]:
        raise BenchIncomplete("reading %s: %s" % (url, page["problem"]))
    failure = openai_http.page_failure(page)
    if failure:
        log("could not read %s: %s" % (url, failure))
        return None
    return page["text"]


def read_counters(base_url, model, api_key=None):
    text = scrape_metrics(base_url, api_key)
    if text is None:
        return {}
    try:
        return counters.engine_counters(counters.parse_exposition(text), model)
    except counters.MetricsFormatError as exc:
        log("ignoring /metrics: %s" % exc)
        return {}


def turns_problem(base_url, model, api_key=None):
    """Why the seat at `base_url` cannot be measured in turns (None when it serves `model`)."""
    page = openai_http.get_text(base_url.rstrip("/") + "/models", api_key, timeout_s=10.0)
    return pairing.incumbent_problem(page["status"], page["text"], model, page["problem"])


class AIPerfRunner:
    """One AIPerf profile per call, against one endpoint, with the counters read around it."""

    def __init__(
        self,
        aiperf,
        base_url,
        model,
        tokenizer,
        workdir,
        load,
        api_key=None,
        timeout_s=900,
        poll_hz=wl.CLOSED_LOOP_POLL_HZ,
    ):
        self.aiperf = aiperf
        self.base_url = base_url
        self.model = model
        self.tokenizer = tokenizer
        self.workdir = workdir
        self.load = load
        self.api_key = api_key or None
        self.timeout_s = timeout_s
        self.poll_hz = poll_hz
        self.commands = []

    def command(self, concurrency, requests, seed, out_dir):
        load = self.load
        argv = [
            self.aiperf,
            "profile",
            "--model",
            self.model,
            "--url",
            server_root(self.base_url),
            "--endpoint-type",
            load["endpoint"],
            "--tokenizer",
            self.tokenizer,
            "--concurrency",
            str(concurrency),
            "--request-count",
            str(requests),
            "--synthetic-input-tokens-mean",
            str(load["input_tokens"]),
            "--synthetic-input-tokens-stddev",
            "0",
            "--output-tokens-mean",
            str(load["output_tokens"]),
            "--output-tokens-stddev",
            "0",
            "--cache-bust",
            load["cache_bust"],
            "--random-seed",
            str(seed),
            "--export-level",
            "raw",
            "--no-gpu-telemetry",
            "--ui",
            "none",
            "--artifact-dir",
            out_dir,
            # Keep the load generator light: seatwright reads /metrics itself before and after the level
            # (AIPerf's own polling would load the engine's API server during the measurement), and one
            # asyncio worker per 32 streams keeps AIPerf's processes off the cores the seat may share.
            "--no-server-metrics",
            "--workers-max",
            str(max(1, concurrency // 32)),
            "--record-processors",
            "1",
            # One warm-up request per stream opens the connections before the measured requests, as vLLM's
            # own benchmark does with its test request: otherwise the first wave's TTFT is TCP setup.
            "--warmup-request-count",
            str(concurrency),
        ]
        if self.poll_hz:
            # A closed loop still: the rate only paces the check for a free stream (workload.CLOSED_LOOP_POLL_HZ).
            argv += ["--request-rate", str(self.poll_hz), "--arrival-pattern", "constant"]
        if load["streaming"]:
            argv.append("--streaming")
        if load["ignore_eos"]:
            argv += ["--extra-inputs", "ignore_eos:true"]
        # The key, when the seat has one, is added by keyed_launch inside AIPerf's process.
        return argv

    def run(self, label, concurrency, requests, seed):
        """Run one level; returns its request records, counters before/after and duration."""
        out_dir = os.path.join(self.workdir, label)
        if os.path.isdir(out_dir):
            shutil.rmtree(out_dir)
        os.makedirs(out_dir)
        argv = self.command(concurrency, requests, seed, out_dir)
        self.commands.append(argv)
        before = read_counters(self.base_url, self.model, self.api_key)
        started = time.time()
        with open(os.path.join(out_dir, "aiperf.log"), "wb") as logfile:
            launch, env = keyed_launch(argv, self.api_key)
            returncode = run_bounded(launch, logfile, self.timeout_s, env=env)
        if returncode is None:
            raise BenchIncomplete(
                "AIPerf ran past %d s at concurrency %d (%s) and was stopped with its workers: see %s/aiperf.log"
                % (self.timeout_s, concurrency, label, out_dir)
            )
        after = read_counters(self.base_url, self.model, self.api_key)
        wall = time.time() - started
        export = os.path.join(out_dir, "profile_export.jsonl")
        if returncode != 0 or not os.path.exists(export):
            tail = _tail(os.path.join(out_dir, "aiperf.log"))
            raise BenchIncomplete(
                "AIPerf exited %d at concurrency %d (%s) without per-request records; last lines:\n%s"
                % (returncode, concurrency, label, tail)
            )
        raw_path = os.path.join(out_dir, "profile_export_raw.jsonl")
        texts = {}
        if os.path.exists(raw_path):
            with open(raw_path, encoding="utf-8") as handle:
                texts = records.texts_from_raw_export(handle.read())
            os.unlink(raw_path)  # prompts and full streams: large, and the text is kept only for the loop check
        for bulky in ("inputs.json",):
            path = os.path.join(out_dir, bulky)
            if os.path.exists(path):
                os.unlink(path)
        with open(export, encoding="utf-8") as handle:
            reqs = records.parse_profile_export(handle.read(), texts)
        span = records.window(reqs)
        duration = (span[1] - span[0]) if span else None
        return {
            "records": reqs,
            "before": before,
            "after": after,
            "duration_s": duration,
            "window": list(span) if span else None,
            "wall_s": wall,
            "artefacts": out_dir,
        }


def run_bounded(argv, logfile, timeout_s, grace_s=5.0, env=None):
    """Run a load generator in its own process group; its exit status, or None when it ran past
    `timeout_s` and the whole group (AIPerf's worker processes too) was stopped."""
    try:
        proc = subprocess.Popen(argv, env=env, stdout=logfile, stderr=subprocess.STDOUT, start_new_session=True)
    except OSError as exc:
        raise BenchError("could not start AIPerf (%s): %s; run scripts/aiperf-venv" % (argv[0], exc))
    try:
        return proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        pass
    for sig, wait_s in ((signal.SIGTERM, grace_s), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            break
        try:
            proc.wait(timeout=wait_s)
            if sig == signal.SIGTERM:
                os.killpg(proc.pid, signal.SIGKILL)  # workers that outlived their parent
            break
        except subprocess.TimeoutExpired:
            continue
        except ProcessLookupError:
            break
    return None


def _tail(path, lines=15):
    try:
        with open(path, encoding="utf-8", errors="replace") as handle:
            return "".join(handle.readlines()[-lines:])
    except OSError:
        return "(no log)"


def run_sweep(runner, levels, passes, warmup_max, base_seed, options, progress=log, incumbent=None):
    """Warm up until stable (or report it unstable), then every level in every pass, in sweep order.

    With `incumbent` (a runner on the incumbent seat), both seats are warmed up and every level of
    every pass runs on both, back to back with the same seed, in pairing.turn_order.
    Returns (warm-up, levels, incomplete, turns): `incomplete` is None, or why the sweep stopped early
    (BenchIncomplete); `turns` is None, or the incumbent's warm-up and levels. What finished is kept.
    """
    seats = {pairing.CANDIDATE: runner}
    if incumbent is not None:
        seats[pairing.INCUMBENT] = incumbent
    warms = {side: _new_warmup(levels, warmup_max) for side in seats}
    results = {side: [] for side in seats}
    incomplete = None
    try:
        for side in sorted(seats, key=lambda s: s != pairing.CANDIDATE):
            prefix = "%s: " % side if incumbent is not None else ""
            _warm_up(seats[side], levels, warmup_max, base_seed, options, _prefixed(progress, prefix), warms[side])
        _measure(seats, levels, passes, base_seed, options, progress, results)
    except BenchIncomplete as exc:
        progress("stopped: %s" % exc)
        incomplete = str(exc)
    turns = None
    if incumbent is not None:
        turns = {"warmup": warms[pairing.INCUMBENT], "levels": results[pairing.INCUMBENT]}
    return warms[pairing.CANDIDATE], results[pairing.CANDIDATE], incomplete, turns


def _prefixed(progress, prefix):
    return (lambda line: progress(prefix + line)) if prefix else progress


def _new_warmup(levels, warmup_max):
    return {
        "concurrency": max(levels),
        "output_tok_s": [],
        "generated_tok_s": [],
        "settled": False,
        "max_passes": warmup_max,
    }


def _warm_up(runner, levels, warmup_max, base_seed, options, progress, warm):
    load = runner.load
    top = max(levels)
    for attempt in range(1, warmup_max + 1):
        result = runner.run(
            "warmup-%d" % attempt, top, wl.requests_for(load, top), wl.seed_for(base_seed, 900 + attempt, top)
        )
        level = analysis.analyse_level(
            top, -attempt, result["records"], result["before"], result["after"], result["duration_s"], options
        )
        # Settling is judged on the raw rate of everything generated: a figure the analysis invalidated
        # (a loop) still shows drift, and a seat that only reasons settles too (its visible rate stays 0).
        ok = [r for r in result["records"] if r.get("ok")]
        duration = result["duration_s"]
        raw = sum(r.get("generated_tokens") or r.get("output_tokens") or 0 for r in ok) / duration if duration else None
        warm["generated_tok_s"].append(raw)
        warm["output_tok_s"].append(sum(r.get("output_tokens") or 0 for r in ok) / duration if duration else None)
        progress(
            "warm-up %d/%d at c=%d: %s generated tok/s (%s visible)%s"
            % (
                attempt,
                warmup_max,
                top,
                figure_text(raw),
                figure_text(warm["output_tok_s"][-1]),
                "" if level["figures"]["output_tok_s"] is not None else " (raw: this level's figures are invalidated)",
            )
        )
        if analysis.warmup_settled(
            warm["generated_tok_s"], options.get("stability_spread", analysis.DEFAULT_STABILITY_SPREAD)
        ):
            warm["settled"] = True
            break
    if not warm["settled"]:
        progress("warm-up did not settle in %d passes: measuring anyway, the record will say unstable" % warmup_max)


def _measure(seats, levels, passes, base_seed, options, progress, results):
    paired = len(seats) > 1
    total, done = passes * len(levels) * len(seats), 0
    for pass_index in range(1, passes + 1):
        for concurrency in levels:
            requests = wl.requests_for(seats[pairing.CANDIDATE].load, concurrency)
            for side in pairing.turn_order(pass_index) if paired else (pairing.CANDIDATE,):
                done += 1
                progress(
                    "[%d/%d] pass %d, c=%d%s: %d requests"
                    % (done, total, pass_index, concurrency, ", " + side if paired else "", requests)
                )
                label = "pass%d-c%d" % (pass_index, concurrency)
                result = seats[side].run(
                    label if side == pairing.CANDIDATE else "%s-%s" % (side, label),
                    concurrency,
                    requests,
                    wl.seed_for(base_seed, pass_index, concurrency),
                )
                level = analysis.analyse_level(
                    concurrency,
                    pass_index,
                    result["records"],
                    result["before"],
                    result["after"],
                    result["duration_s"],
                    options,
                )
                level["window"] = result["window"]
                level["records"] = records.strip_text(result["records"])
                level["artefacts"] = os.path.basename(result["artefacts"])
                results[side].append(level)
                figs = level["figures"]
                progress(
                    "    %s visible tok/s, %s reasoning tok/s, TTFT p50 %s ms, %d failed, prefix-cache hits %s%s"
                    % (
                        figure_text(figs["output_tok_s"]),
                        figure_text(figs["reasoning_tok_s"]),
                        figure_text(figs["ttft_ms_p50"]),
                        level["failed"],
                        "n/a"
                        if level["prefix_cache"]["hit_rate"] is None
                        else "%.1f %%" % (100 * level["prefix_cache"]["hit_rate"]),
                        "" if not level["flags"] else " — flags: " + ", ".join(f["id"] for f in level["flags"]),
                    )
                )


def write_json(path, data):
    atomic_write_json(path, data)


def load_json(path):
    with open(path, encoding="utf-8") as handle:
        return json.load(handle)
