#!/usr/bin/env python3
"""weight_stage's own pipeline (staging_pull.stage) run directly on a lab node, to price authentication.

The benchmark copies the project's module_utils to the node under a shim folder (bench/staging/
shim.py; the node has no Ansible) and runs this twice per pass: as weight_stage runs it, and with the
destination's listing-signature check replaced by "accept" (--no-signature-check). Requests are
authenticated in both, as the source requires. It also times every authentication call (request
MACs and the signature check), so the cost is shown both as a rate difference and as seconds.

  stage_direct.py --shim /opt/sw --url http://172.30.98.11:8473 --token-file /run/token \
      --dest /srv/bench/x/models--org--name --revision REV [--no-signature-check]
"""

import argparse
import json
import sys
import time


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--shim", required=True, help="folder holding ansible_collections/seatwright/fleet/plugins/module_utils"
    )
    parser.add_argument("--url", required=True)
    parser.add_argument("--token-file", required=True)
    parser.add_argument("--dest", required=True)
    parser.add_argument("--revision", required=True)
    parser.add_argument("--streams", type=int, default=4)
    parser.add_argument("--no-signature-check", action="store_true")
    args = parser.parse_args(argv)
    sys.path.insert(0, args.shim)
    from ansible_collections.seatwright.fleet.plugins.module_utils.defaults import STAGING_DIR
    from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights import staging_pull, transport

    spent = {"seconds": 0.0, "calls": 0}

    def timed(function):
        def wrapper(*a, **k):
            started = time.perf_counter()
            try:
                return function(*a, **k)
            finally:
                spent["seconds"] += time.perf_counter() - started
                spent["calls"] += 1

        return wrapper

    # The transport signs every request and checks every signed answer, for the whole-file pull and the swarm.
    transport.authorization = timed(transport.authorization)
    transport.listing_signed = timed((lambda *a: True) if args.no_signature_check else transport.listing_signed)
    with open(args.token_file) as handle:
        secret = handle.read().strip()
    result = staging_pull.stage(
        dict(
            dest=args.dest,
            source_url=args.url,
            token=secret,
            client="direct",
            name="bench-direct",
            revision=args.revision,
            streams=args.streams,
            verify="full",
            direct_io=True,
            bandwidth_limit_bytes_s=0,
            state_dir=STAGING_DIR,
            connect_timeout_s=30,
            io_timeout_s=60,
            retries=3,
            progress_interval_s=0,
            source_label="bench",
            prune=False,
        )
    )
    json.dump(
        {
            "seconds": result["elapsed_s"],
            "bytes": result["bytes_transferred"],
            "auth_seconds": round(spent["seconds"], 6),
            "auth_calls": spent["calls"],
            "direct_io": all(t["direct_io"] for t in result["transfers"]),
        },
        sys.stdout,
    )
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
