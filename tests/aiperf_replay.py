#!/usr/bin/env python3
"""Test equipment: stands in for the `aiperf` executable and replays one recorded AIPerf 0.13.0 run.

tools/seatwright-bench runs it (--aiperf) with AIPerf's own command line; it sends the seat the
same number of requests AIPerf would (so the seat's /metrics counters move as they do under load)
and writes the recorded profile_export.jsonl named by $SEATWRIGHT_AIPERF_REPLAY into
--artifact-dir. The unit tests use it where the real AIPerf (scripts/aiperf-venv) is not built;
tests/integration/test_bench_aiperf.py runs the real one against the same seat.
"""

import json
import os
import shutil
import sys
import urllib.request


def option(argv, name):
    return argv[argv.index(name) + 1] if name in argv else None


def main(argv):
    out = option(argv, "--artifact-dir")
    recorded = os.environ.get("SEATWRIGHT_AIPERF_REPLAY")
    if not out or not recorded:
        sys.stderr.write("aiperf_replay: needs --artifact-dir and $SEATWRIGHT_AIPERF_REPLAY\n")
        return 2
    body = json.dumps(
        {
            "model": option(argv, "--model"),
            "messages": [{"role": "user", "content": "replayed request"}],
            "max_tokens": int(option(argv, "--output-tokens-mean") or 8),
        }
    ).encode("utf-8")
    for _ in range(int(option(argv, "--request-count") or 1)):
        request = urllib.request.Request(
            option(argv, "--url") + "/v1/chat/completions", body, {"Content-Type": "application/json"}
        )
        with urllib.request.urlopen(request, timeout=30) as response:
            response.read()
    os.makedirs(out, exist_ok=True)
    shutil.copyfile(recorded, os.path.join(out, "profile_export.jsonl"))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
