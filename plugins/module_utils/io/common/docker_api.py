"""The node's Docker engine through its API socket: inspect an image, run it once, build one.

Stdlib only (http.client over a Unix socket), so a node needs nothing installed beyond Docker to
answer engine_image_facts or run engine_image_build.
"""

import http.client
import json
import os
import socket
import struct
import time
from urllib.parse import quote, urlencode

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import ImageError

DEFAULT_SOCKET = "/var/run/docker.sock"


class _UnixConnection(http.client.HTTPConnection):
    def __init__(self, path, timeout):
        http.client.HTTPConnection.__init__(self, "localhost", timeout=timeout)
        self.socket_path = path

    def connect(self):
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        sock.connect(self.socket_path)
        self.sock = sock


class DockerEngine:
    """A few calls of the Docker Engine API, each answering parsed JSON or raising ImageError."""

    def __init__(self, socket_path=DEFAULT_SOCKET, timeout_s=60):
        self.socket_path = socket_path
        self.timeout_s = timeout_s

    def _call(self, method, path, body=None, timeout_s=None, expect=(200, 201, 204)):
        connection = _UnixConnection(self.socket_path, timeout_s or self.timeout_s)
        try:
            payload = json.dumps(body).encode("utf-8") if body is not None else None
            headers = {"Content-Type": "application/json"} if payload is not None else {}
            connection.request(method, path, body=payload, headers=headers)
            response = connection.getresponse()
            data = response.read()
        except (OSError, http.client.HTTPException) as exc:
            raise ImageError(
                "the Docker engine at %s did not answer %s %s (%s); is dockerd running?"
                % (self.socket_path, method, path.split("?")[0], exc)
            )
        finally:
            connection.close()
        if response.status not in expect:
            message = data.decode("utf-8", "replace").strip()
            try:
                message = json.loads(message).get("message", message)
            except (ValueError, AttributeError):
                pass
            raise ImageError("the Docker engine refused %s %s: %s" % (method, path.split("?")[0], message))
        return response.status, data

    def image(self, reference):
        """{id, reference, size_bytes, created, labels, repo_tags}, or None when the engine lacks it."""
        status, body = self._call("GET", "/images/%s/json" % quote(reference, safe=""), expect=(200, 404))
        if status == 404:
            return None
        data = json.loads(body)
        return {
            "id": data["Id"],
            "reference": reference,
            "size_bytes": data.get("Size"),
            "created": data.get("Created"),
            "labels": (data.get("Config") or {}).get("Labels") or {},
            "repo_tags": data.get("RepoTags") or [],
            "repo_digests": data.get("RepoDigests") or [],
        }

    def labelled_images(self, label):
        """[{id, tags, created, size_bytes}] of every image carrying `label` (key=value)."""
        query = urlencode({"filters": json.dumps({"label": [label]})})
        _, body = self._call("GET", "/images/json?" + query)
        return [
            {
                "id": data["Id"],
                "tags": [tag for tag in data.get("RepoTags") or [] if tag != "<none>:<none>"],
                "created": data.get("Created") or 0,
                "size_bytes": data.get("Size"),
            }
            for data in json.loads(body)
        ]

    def container_image_ids(self):
        """Ids of the images every container, running or stopped, was made from."""
        _, body = self._call("GET", "/containers/json?" + urlencode({"all": 1}))
        return {data["ImageID"] for data in json.loads(body) if data.get("ImageID")}

    def untag(self, reference):
        """Remove the tag `reference`; the image goes with its last tag (never forced off a container)."""
        self._call("DELETE", "/images/%s" % quote(reference, safe=""))

    def tag(self, source, repository, tag):
        """Tag the image `source` as repository:tag (moves the tag if another image held it)."""
        query = urlencode({"repo": repository, "tag": tag, "force": 1})
        self._call("POST", "/images/%s/tag?%s" % (quote(source, safe=""), query))

    def pull_lines(self, name, digest, platform, timeout_s):
        """The lines of POST /images/create as they come: the pull of name@digest for `platform`.

        `timeout_s` bounds each wait for the next bytes, not the pull.
        """
        connection = _UnixConnection(self.socket_path, timeout_s)
        path = "/images/create?" + urlencode({"fromImage": name, "tag": digest, "platform": platform})
        try:
            connection.request("POST", path)
            response = connection.getresponse()
            if response.status != 200:
                message = response.read().decode("utf-8", "replace").strip()
                try:
                    message = json.loads(message).get("message", message)
                except (ValueError, AttributeError):
                    pass
                raise ImageError("the Docker engine refused the pull of %s@%s: %s" % (name, digest, message))
            while True:
                line = response.readline()
                if not line:
                    return
                yield line.decode("utf-8", "replace")
        except (OSError, http.client.HTTPException) as exc:
            raise ImageError(
                "the Docker engine at %s stopped answering the pull of %s@%s (%s); is dockerd running, or did "
                "the registry stay silent longer than %d s?" % (self.socket_path, name, digest, exc, timeout_s)
            )
        finally:
            connection.close()

    def build_lines(self, context_tar, query, timeout_s):
        """The lines of POST /build as they come, for a build context packed in the file `context_tar`.

        `timeout_s` bounds each wait for the next bytes (a step may be silent for minutes), not the build.
        """
        connection = _UnixConnection(self.socket_path, timeout_s)
        path = "/build?" + urlencode(query)
        try:
            with open(context_tar, "rb") as body:
                size = os.fstat(body.fileno()).st_size
                connection.request(
                    "POST", path, body=body, headers={"Content-Type": "application/x-tar", "Content-Length": str(size)}
                )
                response = connection.getresponse()
            if response.status != 200:
                message = response.read().decode("utf-8", "replace").strip()
                try:
                    message = json.loads(message).get("message", message)
                except (ValueError, AttributeError):
                    pass
                raise ImageError("the Docker engine refused POST /build: %s" % message)
            while True:
                line = response.readline()
                if not line:
                    return
                yield line.decode("utf-8", "replace")
        except (OSError, http.client.HTTPException) as exc:
            raise ImageError(
                "the Docker engine at %s stopped answering POST /build (%s); is dockerd running, or did a "
                "step stay silent longer than %d s?" % (self.socket_path, exc, timeout_s)
            )
        finally:
            connection.close()

    def run_once(self, reference, argv, env=None, timeout_s=600):
        """(exit code, stdout, stderr) of argv run in a fresh container of the image, removed after.

        No network, no entrypoint: the command runs as given, and nothing of it is left behind.
        """
        created = json.loads(
            self._call(
                "POST",
                "/containers/create",
                body={
                    "Image": reference,
                    "Entrypoint": [argv[0]],
                    "Cmd": list(argv[1:]),
                    "Env": ["%s=%s" % item for item in sorted((env or {}).items())],
                    "Tty": False,
                    "AttachStdout": True,
                    "AttachStderr": True,
                    "Labels": {"org.seatwright.purpose": "image-probe"},
                    "HostConfig": {"NetworkMode": "none"},
                },
            )[1]
        )
        container = created["Id"]
        try:
            self._call("POST", "/containers/%s/start" % container)
            started = time.time()
            try:
                waited = json.loads(self._call("POST", "/containers/%s/wait" % container, timeout_s=timeout_s)[1])
            except ImageError:
                if time.time() - started >= timeout_s - 1:
                    raise ImageError(
                        "image %s: %s ran longer than %d s; raise the probe timeout"
                        % (reference, " ".join(argv[:3]), timeout_s)
                    )
                raise
            logs = self._call("GET", "/containers/%s/logs?stdout=1&stderr=1" % container)[1]
            stdout, stderr = demultiplex(logs)
            return waited.get("StatusCode"), stdout, stderr
        finally:
            try:
                self._call("DELETE", "/containers/%s?force=1&v=1" % container)
            except ImageError:
                pass


def demultiplex(data):
    """(stdout, stderr) text from the API's framed log stream (8-byte header per frame)."""
    out, err = [], []
    position = 0
    while position + 8 <= len(data):
        kind, size = struct.unpack(">BxxxL", data[position : position + 8])
        chunk = data[position + 8 : position + 8 + size]
        (err if kind == 2 else out).append(chunk)
        position += 8 + size
    if position < len(data):
        out.append(data[position:])
    return b"".join(out).decode("utf-8", "replace"), b"".join(err).decode("utf-8", "replace")
