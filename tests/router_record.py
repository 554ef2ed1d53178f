#!/usr/bin/env python3
"""Record real router exchanges into tests/fixtures/router/<impl>/ (test equipment, run by hand).

Talks to a router already running on 127.0.0.1 (see tests/fixtures/router/README.md for how each
was started, in front of two tests/router_backend.py seats) and saves every exchange as JSON:
{"step", "request": {"method", "path", "headers", "body"}, "response": {"status", "headers", "body"}}.
The admin key (ROUTER_ADMIN_KEY in the environment, never on argv) and a seat key given in a body
(ROUTER_SEAT_KEY, written in the JSON as $SEAT_KEY) are replaced by <redacted> before anything is
written.

    ROUTER_ADMIN_KEY=... python tests/router_record.py litellm http://127.0.0.1:14000 STEP METHOD PATH [JSON]
"""

import http.client
import json
import os
import sys
import urllib.parse
from pathlib import Path

OUT = Path(__file__).resolve().parent / "fixtures" / "router"
REDACTED = "<redacted>"
# Headers that change every run and say nothing about routing.
VOLATILE = {"date"}


def main():
    impl, base, step, method, path = sys.argv[1:6]
    body = sys.argv[6] if len(sys.argv) > 6 else None
    key = os.environ.get("ROUTER_ADMIN_KEY", "")
    seat_key = os.environ.get("ROUTER_SEAT_KEY", "")
    if body and seat_key:
        body = body.replace("$SEAT_KEY", seat_key)
    headers = {"Content-Type": "application/json"}
    if os.environ.get("RECORD_NO_AUTH") != "1":
        headers["Authorization"] = "Bearer " + key
    parts = urllib.parse.urlsplit(base)
    conn = http.client.HTTPConnection(parts.hostname, parts.port, timeout=60)
    conn.request(method, path, body=body.encode() if body else None, headers=headers)
    response = conn.getresponse()
    text = response.read().decode("utf-8", "replace")
    record = {
        "step": step,
        "request": {"method": method, "path": path, "headers": headers, "body": json.loads(body) if body else None},
        "response": {
            "status": response.status,
            "headers": [[k.lower(), v] for k, v in response.getheaders() if k.lower() not in VOLATILE],
            "body": text,
        },
    }
    dumped = json.dumps(record, indent=1)
    for secret in (key, seat_key):
        if secret:
            dumped = dumped.replace(secret, REDACTED)
    target = OUT / impl / ("%s.json" % step)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(dumped + "\n")
    print("%s %d %s" % (step, response.status, text[:300].replace("\n", " ")))


if __name__ == "__main__":
    main()
