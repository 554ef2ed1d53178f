"""How a staging destination and its source prove to each other that they belong to one run.

Pure and standard-library only (hmac, hashlib, os.urandom for nonces): the benchmark's plain
copy loads this file by path on lab nodes that have no Ansible, so the wire format and the chunk
size have this one home.

Design: every run has a random secret that the role hands to the source and to each destination
(as a no_log module argument, never on a command line). It never travels on the fabric.

- Requests. Each request carries `Authorization: Seatwright-HMAC client=..., nonce=..., mac=...`,
  the mac being HMAC-SHA256 under a key derived from the secret over the method, the path, the
  client name, a fresh 128-bit nonce, the body's sha256 and the name of the server it is for
  (server_name: its fabric address and port), so that a request made for one peer is refused by
  every other peer and by the source, and a squatter cannot relay it to the server it copies.
  The source accepts each nonce once, so a request captured by a process squatting on the port
  cannot be replayed against the real source, and it cannot be turned into a request for another
  file. Requests that fail the check
  are answered 403 and count for nothing (not for the idle timer, not as a destination done).
- Listing. The source answers `GET /listing` (a peer `GET /have`) with `X-Seatwright-Signature`:
  HMAC-SHA256, under a second derived key, over the server's name, the destination's nonce and
  the exact bytes: an answer relayed from another server does not check. A destination
  checks it before it parses a single field, so only a process that knows the secret can tell a
  destination which files to write, where, and what they must hash to. Every file's bytes are
  then checked against that signed digest before they are renamed into place, which carries the
  authentication from the listing to every byte without signing the bulk data itself.

Why not TLS with a pinned per-run certificate: it would authenticate the same things, but it
needs a certificate made per run on the source, and the stdlib server would have to encrypt every
byte in Python's ssl layer instead of handing the file to the kernel with sendfile. On the
two-core lab node that costs more than the whole verification pipeline, and the weights it would
hide are not secrets on the private fabric. HMAC keeps sendfile and costs microseconds per
request (bench/results/staging.md reports the rate with and without the check).
"""

import hashlib
import hmac
import ipaddress
import os
import re

# Bytes one destination stream reads, hashes and writes at a time (and the benchmark's plain copy).
CHUNK_BYTES = 4 * 1024 * 1024
# The most listing bytes a destination reads before the signature is checked (about 90,000 files).
MAX_LISTING_BYTES = 32 * 1024 * 1024
# How long the source keeps a destination's idle connection; a destination reuses one idle for less.
KEEPALIVE_IDLE_S = 300

SCHEME = "Seatwright-HMAC"
SIGNATURE_HEADER = "X-Seatwright-Signature"
PROTOCOL = b"seatwright-staging/3"
MIN_SECRET_CHARS = 16
_FIELD = re.compile(r'(\w+)="([^"]*)"')
_CLIENT = re.compile(r"^[A-Za-z0-9._:@-]{1,128}$")
_NONCE = re.compile(r"^[0-9a-f]{32}$")
_MAC = re.compile(r"^[0-9a-f]{64}$")


def _key(secret, purpose):
    return hmac.new(secret.encode("utf-8"), PROTOCOL + b" " + purpose, hashlib.sha256).digest()


def new_nonce():
    return os.urandom(16).hex()


def server_name(host, port):
    """The name a request and a signed answer are bound to: the server's address, in one spelling, and port."""
    host = (host or "").strip("[]")
    try:
        host = str(ipaddress.ip_address(host))
    except ValueError:
        host = host.lower()
    return "%s:%d" % (host, int(port))


def _request_mac(secret, method, path, client, nonce, body, server):
    message = b"\n".join(
        [
            method.encode("ascii"),
            path.encode("utf-8"),
            client.encode("utf-8"),
            nonce.encode("ascii"),
            hashlib.sha256(body or b"").hexdigest().encode("ascii"),
            server.encode("utf-8"),
        ]
    )
    return hmac.new(_key(secret, b"request"), message, hashlib.sha256).hexdigest()


def authorization(secret, method, path, client, body=b"", nonce=None, server=""):
    """(header value, nonce) that authenticates one request to the server named `server` (server_name)."""
    nonce = nonce or new_nonce()
    mac = _request_mac(secret, method, path, client, nonce, body, server)
    return '%s client="%s", nonce="%s", mac="%s"' % (SCHEME, client, nonce, mac), nonce


def check_request(secret, method, path, header, body=b"", server=""):
    """(client, nonce) when `header` authenticates this request to this server, else None.

    Replays are the caller's to refuse.
    """
    if not isinstance(header, str) or not header.startswith(SCHEME + " "):
        return None
    fields = dict(_FIELD.findall(header[len(SCHEME) + 1 :]))
    client, nonce, mac = fields.get("client", ""), fields.get("nonce", ""), fields.get("mac", "")
    if not (_CLIENT.match(client) and _NONCE.match(nonce) and _MAC.match(mac)):
        return None
    if not hmac.compare_digest(mac, _request_mac(secret, method, path, client, nonce, body, server)):
        return None
    return client, nonce


def valid_client_name(client):
    return isinstance(client, str) and bool(_CLIENT.match(client))


def listing_signature(secret, nonce, body, server=""):
    """What a server named `server` sends beside the bytes it answers a request with `nonce` (a listing, a /have)."""
    message = server.encode("utf-8") + b"\n" + nonce.encode("ascii") + b"\n" + body
    return hmac.new(_key(secret, b"listing"), message, hashlib.sha256).hexdigest()


def listing_signed(secret, nonce, body, signature, server=""):
    """True only when `signature` is the run's signature of exactly these bytes, for this nonce, from this server."""
    if not isinstance(signature, str) or not _MAC.match(signature):
        return False
    return hmac.compare_digest(signature, listing_signature(secret, nonce, body, server))
