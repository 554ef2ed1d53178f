#!/usr/bin/env python3
"""Cost growth of staging on the six-node fleet lab: a checkpoint and an engine image archive to 1,
2, 3 and 5 destinations, every node's upload capped at one rate, with and without peers.

The fleet lab (`make fleet-lab`) must be up. fleet-1 holds the source copies; destinations are
fleet-2 .. fleet-6. Each run is the real role through `ansible-playbook playbooks/weights.yml`
(the image archive moves exactly as roles/engine_image/tasks/distribute.yml moves it: the weights
role on the folder holding the `docker save` archive). What is timed is the staging span: from
the first destination's transfer start to the last one's end, read from the progress files the
destinations write (started_epoch / updated_epoch); the play's wall time is kept beside it. Every
run ends with the role's closing check, so every destination is verified (parity) in every pass.

  .venv/bin/python bench/fleet_staging.py --passes 3 --upload-mb-s 25 --out bench/results/fleet

The ratio the issue asks for is median span at 5 destinations / at 1 (target <= 1.3); the same
ratio without peers (the one-source scheme) is measured in the same run for comparison.
"""

import argparse
import datetime
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIN = ROOT / ".venv" / "bin"
NODES = ["fleet-%d" % i for i in range(1, 7)]
ORIGIN = NODES[0]
STATE = "/var/lib/seatwright/staging"
WORK = "/srv/bench-fleet"
TARGET = 1.3


def log(text):
    print("[%s] %s" % (time.strftime("%H:%M:%S"), text), flush=True)


def sh(cmd, **kwargs):
    return subprocess.run(cmd, check=True, capture_output=True, text=True, **kwargs).stdout


def on(node, script):
    return sh(["docker", "exec", node, "sh", "-c", script])


def fleet_up():
    try:
        running = sh(["docker", "inspect", "-f", "{{.State.Running}}"] + NODES).split()
    except subprocess.CalledProcessError:
        return False
    return running == ["true"] * len(NODES)


def make_payloads(args, tmp):
    """The checkpoint (synthetic safetensors, a cache entry) and the image archive on fleet-1."""
    on(ORIGIN, "rm -rf %s && mkdir -p %s/image" % (WORK, WORK))
    sh(["docker", "cp", str(ROOT / "bench" / "staging" / "make_checkpoint.py"), "%s:%s/" % (ORIGIN, WORK)])
    made = json.loads(
        on(
            ORIGIN,
            "python3 %s/make_checkpoint.py --out %s/hf --layout hf-cache --shards %d --shard-mib %d"
            % (WORK, WORK, args.shards, args.shard_mib),
        )
    )
    archive = os.path.join(tmp, "image.tar")
    sh(["docker", "save", "-o", archive, args.image])
    sh(["docker", "cp", archive, "%s:%s/image/image.tar" % (ORIGIN, WORK)])
    image_bytes = os.path.getsize(archive)
    os.unlink(archive)
    return {
        "checkpoint": {
            "name": "bench-ckpt",
            "path": made["path"],
            "revision": made["revision"],
            "bytes": made["bytes"],
            "files": len(made["files"]),
            "what": "%d safetensors shards of %d MiB (a Hugging Face cache entry)" % (args.shards, args.shard_mib),
        },
        "image": {
            "name": "bench-image",
            "path": WORK + "/image",
            "revision": None,
            "bytes": image_bytes,
            "files": 1,
            "what": "docker save of %s" % args.image,
        },
    }


def playbook(args, payload, dests, peers, tmp, upload_mb_s=None, clean=True):
    """(command, env) of one staging run of `payload` onto `dests`, their old copies removed first when `clean`."""
    dest_path = "%s/dst-%s" % (WORK, payload["name"])
    for node in dests if clean else []:
        on(node, "rm -rf %s %s/progress-%s.json" % (dest_path + "*", STATE, payload["name"]))
    extra = {
        "weights_checkpoint_name": payload["name"],
        "weights_checkpoint_revision": payload["revision"],
        "weights_source_host": ORIGIN,
        "weights_source_path": payload["path"],
        "weights_dest_path": dest_path + (("/" + os.path.basename(payload["path"])) if payload["revision"] else ""),
        "weights_upload_limit_mb_per_s": args.upload_mb_s if upload_mb_s is None else upload_mb_s,
        "weights_piece_mb": args.piece_mb,
        "weights_peer_assist": peers,
        "weights_source_idle_timeout_s": 30,
        "weights_transfer_poll_s": 1,
    }
    varfile = os.path.join(tmp, "vars-%s.json" % payload["name"])
    with open(varfile, "w") as handle:
        json.dump(extra, handle)
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORKS="16")
    env["PATH"] = "%s:%s" % (BIN, env.get("PATH", ""))
    command = [
        str(BIN / "ansible-playbook"),
        "-i",
        args.inventory,
        "-l",
        ",".join(dests),
        "-e",
        "@" + varfile,
        str(ROOT / "playbooks" / "weights.yml"),
    ]
    return command, env


def run_once(args, payload, dests, peers, tmp, clean=True):
    """One staging run onto `dests`; {span_s, wall_s, source_share, per-node records}."""
    command, env = playbook(args, payload, dests, peers, tmp, clean=clean)
    started = time.monotonic()
    with subprocess.Popen(
        command, cwd=str(ROOT), env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    ) as proc:
        try:
            stdout, stderr = proc.communicate()
        except BaseException:
            # A stopped benchmark must not leave a staging run going on the fleet behind it.
            proc.kill()
            raise
    wall = time.monotonic() - started
    if proc.returncode:
        sys.exit("staging %s onto %s failed:\n%s" % (payload["name"], dests, stdout[-4000:] + stderr[-2000:]))
    nodes = {}
    for node in dests:
        progress = json.loads(on(node, "cat %s/progress-%s.json" % (STATE, payload["name"])))
        if progress["state"] != "done" or (clean and progress["bytes_done"] != payload["bytes"]):
            sys.exit(
                "%s on %s: progress says %s with %s of %s bytes"
                % (payload["name"], node, progress["state"], progress["bytes_done"], payload["bytes"])
            )
        nodes[node] = {
            "started_epoch": progress["started_epoch"],
            "ended_epoch": progress["updated_epoch"],
            "seconds": round(progress["updated_epoch"] - progress["started_epoch"], 3),
            "bytes_done": progress["bytes_done"],
            "bytes_from_peers": progress.get("bytes_from_peers", 0),
        }
    span = max(n["ended_epoch"] for n in nodes.values()) - min(n["started_epoch"] for n in nodes.values())
    from_peers = sum(n["bytes_from_peers"] for n in nodes.values())
    return {
        "span_s": round(span, 3),
        "wall_s": round(wall, 3),
        "nodes": nodes,
        "source_share": round(1 - from_peers / float(sum(n["bytes_done"] for n in nodes.values()) or 1), 3),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--inventory", default=str(ROOT / "inventory" / "fleet" / "hosts.yml"))
    parser.add_argument("--dests", default="1,2,3,5")
    parser.add_argument("--passes", type=int, default=3)
    parser.add_argument("--upload-mb-s", type=float, default=25.0, help="cap on every node's upload, MB/s")
    parser.add_argument("--piece-mb", type=int, default=64, help="weights_piece_mb: the largest piece")
    parser.add_argument("--shards", type=int, default=8)
    parser.add_argument("--shard-mib", type=int, default=32)
    parser.add_argument("--image", default="seatwright/lab-base:current")
    parser.add_argument("--out", default=str(ROOT / "bench" / "results" / "fleet"))
    parser.add_argument("--label", default="lab")
    args = parser.parse_args(argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit("stopped"))
    if not fleet_up():
        sys.exit("the fleet lab is not up (fleet-1 .. fleet-6): run `make fleet-lab` first")
    counts = [int(c) for c in args.dests.split(",")]
    if max(counts) > len(NODES) - 1:
        sys.exit("at most %d destinations: fleet-1 is the source" % (len(NODES) - 1))
    tmp = tempfile.mkdtemp(prefix="fleet-staging-")
    log("payloads: writing the checkpoint on %s and exporting %s" % (ORIGIN, args.image))
    payloads = make_payloads(args, tmp)
    for key, payload in payloads.items():
        log("%s: %s, %d bytes" % (key, payload["what"], payload["bytes"]))
    # (payload, destinations, peers) in one order per pass, rotated so that no case always runs first.
    cases = [(key, n, True) for key in payloads for n in counts] + [(key, max(counts), False) for key in payloads]
    runs = []
    for index in range(1, args.passes + 1):
        shift = (index - 1) % len(cases)
        for key, n, peers in cases[shift:] + cases[:shift]:
            dests = NODES[1 : n + 1]
            log("pass %d: %s to %d destination(s)%s ..." % (index, key, n, "" if peers else " from the source alone"))
            result = run_once(args, payloads[key], dests, peers, tmp)
            result.update(payload=key, destinations=n, peers=peers, **{"pass": index})
            runs.append(result)
            log(
                "pass %d: %s to %d: span %.2f s (%.1f MB/s per node), %.0f%% of the bytes from the source, play %.1f s"
                % (
                    index,
                    key,
                    n,
                    result["span_s"],
                    payloads[key]["bytes"] / result["span_s"] / 1e6,
                    100 * result["source_share"],
                    result["wall_s"],
                )
            )
    for node in NODES[1:]:
        on(node, "rm -rf %s" % WORK)
    on(ORIGIN, "rm -rf %s" % WORK)
    table = []
    for key in payloads:
        for peers in (True, False):
            for n in counts if peers else [max(counts)]:
                mine = [r for r in runs if r["payload"] == key and r["destinations"] == n and r["peers"] == peers]
                table.append(
                    {
                        "payload": key,
                        "destinations": n,
                        "peers": peers,
                        "span_s": statistics.median(r["span_s"] for r in mine),
                        "spans": [r["span_s"] for r in mine],
                        "wall_s": statistics.median(r["wall_s"] for r in mine),
                        "source_share": statistics.median(r["source_share"] for r in mine),
                    }
                )
    ratios = {}
    for key in payloads:
        one = next(r["span_s"] for r in table if r["payload"] == key and r["destinations"] == 1 and r["peers"])
        many = next(
            r["span_s"] for r in table if r["payload"] == key and r["destinations"] == max(counts) and r["peers"]
        )
        alone = next(r["span_s"] for r in table if r["payload"] == key and not r["peers"])
        ratios[key] = {"with_peers": round(many / one, 3), "source_alone": round(alone / one, 3)}
    doc = {
        "command": "python3 bench/fleet_staging.py " + " ".join(argv if argv is not None else sys.argv[1:]),
        "recorded_at": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "host": {"cores": os.cpu_count(), "loadavg": [round(x, 2) for x in os.getloadavg()]},
        "upload_cap_mb_per_s": args.upload_mb_s,
        "piece_mib": args.piece_mb,
        "payloads": payloads,
        "table": table,
        "ratios": ratios,
        "target": TARGET,
        "runs": runs,
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = "staging-" + args.label
    (out / (stem + ".json")).write_text(json.dumps(doc, indent=2) + "\n")
    (out / (stem + ".md")).write_text(markdown(doc))
    print(markdown(doc))


def markdown(doc):
    lines = [
        "# Staging cost growth on the fleet lab",
        "",
        "Command: `%s` (%s, %d-core host)" % (doc["command"], doc["recorded_at"], doc["host"]["cores"]),
        "",
        "Every node's upload (the source's and every peer's) capped at %.0f MB/s; weights_piece_mb %d (the source "
        "cuts a checkpoint into 128 pieces or more, down to 1 MiB: weights/pieces.py piece_size). Payloads:"
        % (doc["upload_cap_mb_per_s"], doc["piece_mib"]),
        "",
    ]
    for key, payload in doc["payloads"].items():
        lines.append("- %s: %s, %d bytes in %d file(s)" % (key, payload["what"], payload["bytes"], payload["files"]))
    lines += [
        "",
        "Span: from the first destination's transfer start to the last one's end (progress files); "
        "median of the passes. "
        "Every run ended with the role's closing check on every destination.",
        "",
        "| payload | destinations | peers | span s (median) | spans | share from the source | play wall s |",
        "|---|---|---|---|---|---|---|",
    ]
    for row in doc["table"]:
        lines.append(
            "| %s | %d | %s | %.2f | %s | %.2f | %.1f |"
            % (
                row["payload"],
                row["destinations"],
                "yes" if row["peers"] else "no (source alone)",
                row["span_s"],
                ", ".join("%.2f" % s for s in row["spans"]),
                row["source_share"],
                row["wall_s"],
            )
        )
    lines += [
        "",
        "| payload | 5 ÷ 1 with peers (target <= %.1f) | 5 ÷ 1 from the source alone |" % doc["target"],
        "|---|---|---|",
    ]
    for key, ratio in doc["ratios"].items():
        lines.append("| %s | **%.3f** | %.3f |" % (key, ratio["with_peers"], ratio["source_alone"]))
    lines.append("")
    return "\n".join(lines)


if __name__ == "__main__":
    main()
