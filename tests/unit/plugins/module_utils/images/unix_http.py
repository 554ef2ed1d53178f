"""An HTTP server on a Unix socket, the Docker Engine API's transport, for the tests' stand-in engines."""

import json
import socketserver
import threading
from http.server import BaseHTTPRequestHandler


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self):
        # BaseHTTPRequestHandler wants a (host, port) client address; a Unix peer has none.
        request, _ = self.socket.accept()
        return request, ("local", 0)


class JsonHandler(BaseHTTPRequestHandler):
    """What the Docker Engine stand-ins share: HTTP/1.1 keep-alive as dockerd speaks it, no request log,
    and a JSON reply; each stand-in adds its own do_GET/do_POST/do_DELETE."""

    protocol_version = "HTTP/1.1"

    def log_message(self, *args):
        pass

    def _json(self, code, body):
        payload = json.dumps(body).encode("utf-8")
        self.send_response(code)
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def serve(path, handler):
    """Serve `handler` (a BaseHTTPRequestHandler class) on the socket `path` in a thread; stop() ends it."""
    server = _Server(path, handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def stop(server):
    server.shutdown()
    server.server_close()
