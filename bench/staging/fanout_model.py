#!/usr/bin/env python3
"""A model of one fan-out: N destinations pull a payload's pieces from one origin and from each other.

It drives the project's own piece choice (weights/pieces.py choose) in small time steps, with
what the fleet lab has and what choose cannot see: every node's upload capped and shared by its
open uploads, each destination's streams, and views of the peers that are as old as the poll that
made them (swarm.py POLL_S). No sockets, no files, no hashing: what it measures is the schedule,
so a change to the choice shows what it does to time-to-N / time-to-1 and to the bytes the origin
sends, in seconds of CPU instead of a fleet lab run.

    python3 bench/staging/fanout_model.py                # the fleet lab's payloads, 1 and 5 destinations
    python3 bench/staging/fanout_model.py --pieces 209 --piece-mb 1.05 --destinations 2,3,5

The fleet lab itself (bench/fleet_staging.py) is the measurement; this is the quick check beside it.
"""

import argparse
import random
import statistics
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from shim import link_shim  # noqa: E402  (bench/staging/shim.py)

ROOT = Path(__file__).resolve().parents[2]
# swarm.py POLL_S: seconds between a destination's looks at its peers' holdings.
POLL_S = 0.2
STEP_S = 0.005


def pieces_module():
    """weights/pieces.py of this tree, imported through a shim folder."""
    import hashlib
    import tempfile

    folder = Path(tempfile.gettempdir()) / ("seatwright-shim-%s" % hashlib.sha256(str(ROOT).encode()).hexdigest()[:12])
    sys.path.insert(0, str(link_shim(folder, ROOT)))
    from ansible_collections.seatwright.fleet.plugins.module_utils.weights import pieces

    return pieces


def simulate(pieces, destinations, count, piece_mb, streams=4, cap_mb_s=25.0, seed=0, limit_s=600.0):
    """(seconds until every destination holds every piece, copies of the payload the origin sent).

    pieces: the weights/pieces.py module whose choose is modelled. Each node's upload is shared
    evenly by its open uploads; each destination polls its peers every POLL_S from a random phase.
    """
    rnd = random.Random(seed)
    # Trees before 3b118a3 kept the source's name in swarm.py: the model runs on them too, for a before/after.
    origin = getattr(pieces, "ORIGIN", "origin")
    everything = [("payload", index) for index in range(count)]
    names = ["dest-%d" % rank for rank in range(destinations)]
    nodes = {}
    for rank, name in enumerate(names):
        nodes[name] = {
            "order": pieces.walk_order(everything, rank, destinations),
            "needed": set(everything),
            "held": set(),
            "local": {},
            "views": {other: None for other in names if other != name},
            "waiting": {},
            "next_poll": rnd.random() * POLL_S,
            "streams": [None] * streams,
        }
    moving = []  # [destination, stream, piece, sender, MB left]
    now, origin_mb = 0.0, 0.0
    while any(node["needed"] or node["local"] for node in nodes.values()):
        if now > limit_s:
            raise RuntimeError("the model did not finish in %.0f s" % limit_s)
        uploads = {}
        for move in moving:
            uploads[move[3]] = uploads.get(move[3], 0) + 1
        for name, node in nodes.items():
            if now >= node["next_poll"]:
                node["next_poll"] = now + POLL_S
                for other in node["views"]:
                    peer = nodes[other]
                    node["views"][other] = {
                        "held": {"payload": {index for _, index in peer["held"]}},
                        "fetching": {"payload": {index for _, index in peer["local"]}},
                        "uploading": uploads.get(other, 0),
                        "at": now,
                    }
            for slot in range(streams):
                if node["streams"][slot] is not None or not node["needed"]:
                    continue
                decision = pieces.choose(
                    node["order"], node["needed"], node["local"], node["views"], {}, now, node["waiting"]
                )
                if decision[0] in ("wait", "done"):
                    continue
                piece = decision[-1]
                sender = decision[1] if decision[0] == "peer" else origin
                node["local"][piece] = sender
                node["needed"].discard(piece)
                move = [name, slot, piece, sender, piece_mb]
                moving.append(move)
                node["streams"][slot] = move
                uploads[sender] = uploads.get(sender, 0) + 1
        finished = []
        for move in moving:
            moved = min(move[4], cap_mb_s / uploads[move[3]] * STEP_S)
            move[4] -= moved
            if move[3] == origin:
                origin_mb += moved
            if move[4] <= 1e-9:
                finished.append(move)
        for move in finished:
            moving.remove(move)
            node = nodes[move[0]]
            node["streams"][move[1]] = None
            node["local"].pop(move[2])
            node["held"].add(move[2])
        now += STEP_S
    return now, origin_mb / (count * piece_mb)


def fan_out(pieces, destinations, count, piece_mb, seeds=5, **kwargs):
    """{'to_1_s', 'to_n_s', 'ratio', 'origin_copies'}: medians over `seeds` poll phases."""
    one = simulate(pieces, 1, count, piece_mb, **kwargs)[0]
    runs = [simulate(pieces, destinations, count, piece_mb, seed=seed, **kwargs) for seed in range(seeds)]
    to_n = statistics.median(seconds for seconds, _ in runs)
    return {
        "to_1_s": round(one, 2),
        "to_n_s": round(to_n, 2),
        "ratio": round(to_n / one, 3),
        "origin_copies": round(statistics.median(copies for _, copies in runs), 3),
    }


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pieces", type=int, default=0, help="one payload of this many pieces (default: the lab's)")
    parser.add_argument("--piece-mb", type=float, default=1.05)
    parser.add_argument("--destinations", default="5")
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--cap-mb-s", type=float, default=25.0, help="every node's upload cap")
    parser.add_argument("--seeds", type=int, default=5)
    args = parser.parse_args(argv)
    pieces = pieces_module()
    # The fleet lab's payloads (bench/fleet_staging.py): the image in 1 MiB pieces, the checkpoint in 2 MiB.
    payloads = [("image", 209, 1.05), ("checkpoint", 131, 2.05)]
    if args.pieces:
        payloads = [("given", args.pieces, args.piece_mb)]
    print("| payload | pieces | destinations | to 1 s | to N s | N ÷ 1 | origin copies |")
    print("|---|---|---|---|---|---|---|")
    for label, count, piece_mb in payloads:
        for destinations in (int(n) for n in args.destinations.split(",")):
            result = fan_out(
                pieces, destinations, count, piece_mb, seeds=args.seeds, streams=args.streams, cap_mb_s=args.cap_mb_s
            )
            cells = (label, count, destinations, result["to_1_s"], result["to_n_s"], result["ratio"])
            print("| %s | %d | %d | %.2f | %.2f | %.3f | %.3f |" % (cells + (result["origin_copies"],)))


if __name__ == "__main__":
    main()
