"""An HTTP server on a Unix socket, the Docker Engine API's transport, for the tests' stand-in engines."""

import socketserver
import threading


class _Server(socketserver.ThreadingMixIn, socketserver.UnixStreamServer):
    daemon_threads = True

    def get_request(self):
        # BaseHTTPRequestHandler wants a (host, port) client address; a Unix peer has none.
        request, _ = self.socket.accept()
        return request, ("local", 0)


def serve(path, handler):
    """Serve `handler` (a BaseHTTPRequestHandler class) on the socket `path` in a thread; stop() ends it."""
    server = _Server(path, handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def stop(server):
    server.shutdown()
    server.server_close()
