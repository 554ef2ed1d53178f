"""Engine images the fleet does not build: a registry image pinned by digest, pulled once on one node.

Pure: the reference is parsed and judged here, the local tag it is kept under is named here, and
whether a node already holds it is decided here from what its Docker engine and its record say.
The builder pulls it once; every other node receives it over the fabric like a built image
(docker save/load), which keeps the image id but not the repo digest, so each node records the
digest it holds beside the image id (one small JSON file per digest).
"""

import json
import re

from ansible_collections.seatwright.fleet.plugins.module_utils.defaults import DNS_LABEL_PATTERN
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import ImageError

RECORD_FORMAT = 1
# The fields of a definition that names a registry image; the build fields do not apply.
REGISTRY_FIELDS = ("schema_version", "name", "title", "notes", "registry", "platform", "engine", "python")
PLATFORMS = ("linux/amd64",)
# The registry Docker names when a reference names none, and the names it answers to.
DOCKER_HUB = "docker.io"
_HUB_ALIASES = ("docker.io", "index.docker.io", "registry-1.docker.io")
_COMPONENT = re.compile(r"^[a-z0-9]+((\.|_|__|-+)[a-z0-9]+)*$")
_DOMAIN = re.compile(r"^([A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)(\.[A-Za-z0-9]([A-Za-z0-9-]*[A-Za-z0-9])?)*(:[0-9]+)?$")
_TAG = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_NAME = re.compile(DNS_LABEL_PATTERN)
# How often a long pull reports the bytes so far, between layer events.
PULL_REPORT_S = 10.0
TAIL_LINES = 10


def _find_digest_hint(text):
    return (
        "pin it by digest: <name>@sha256:<64 hex>. Find the digest of the amd64 image with "
        "`docker buildx imagetools inspect %s` (the Digest line of the index, or of linux/amd64) or "
        "`skopeo inspect --override-os linux --override-arch amd64 docker://%s` (its Digest field); "
        "a tag names whatever was pushed last, a digest names one image" % (text, text)
    )


def parse_reference(text, source="registry"):
    """{domain, path, familiar, tag, digest, pull_name, pinned, local} of a pinned registry reference.

    familiar is the name Docker keeps in RepoDigests (docker.io/ and library/ dropped); pinned is
    familiar@digest, what `docker image inspect` finds after a pull; local is the tag the fleet keeps
    it under, familiar:sha256-<64 hex>, which docker save/load carries to the other nodes.
    A reference without a digest is refused with how to find one.
    """
    if not isinstance(text, str) or not text.strip():
        raise ImageError(
            "%s is %r; expected a registry image pinned by digest, <name>@sha256:<64 hex>" % (source, text)
        )
    text = text.strip()
    name, at, digest = text.partition("@")
    tag = None
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        name, tag = name[: len(name) - len(last)] + last.split(":", 1)[0], last.split(":", 1)[1]
    if not at:
        raise ImageError("%s: %s names no digest; %s" % (source, text, _find_digest_hint(text)))
    if not _DIGEST.match(digest):
        raise ImageError(
            "%s: %s has digest %r; expected sha256:<64 lower-case hex>; %s"
            % (source, text, digest, _find_digest_hint(name))
        )
    if tag is not None and not _TAG.match(tag):
        raise ImageError("%s: %s has tag %r, which Docker does not accept" % (source, text, tag))
    parts = name.split("/")
    domain = None
    if len(parts) > 1 and ("." in parts[0] or ":" in parts[0] or parts[0] == "localhost"):
        domain = parts.pop(0)
        if not _DOMAIN.match(domain):
            raise ImageError("%s: %s has registry %r, which is not a host name[:port]" % (source, text, domain))
    bad = [part for part in parts if not _COMPONENT.match(part)]
    if not parts or bad:
        raise ImageError(
            "%s: %s has the repository %r; expected lower-case components of letters and digits separated "
            "by '/', '.', '_' or '-'" % (source, text, "/".join(parts))
        )
    hub = domain is None or domain in _HUB_ALIASES
    path = "/".join(parts)
    if hub and len(parts) == 1:
        path = "library/" + path
    familiar = path[len("library/") :] if hub and path.startswith("library/") and path.count("/") == 1 else path
    if not hub:
        familiar = "%s/%s" % (domain, path)
    return {
        "domain": DOCKER_HUB if hub else domain,
        "path": path,
        "familiar": familiar,
        "tag": tag,
        "digest": digest,
        "pull_name": "%s/%s" % (DOCKER_HUB if hub else domain, path),
        "pinned": "%s@%s" % (familiar, digest),
        "local": "%s:%s" % (familiar, local_tag(digest)),
    }


def local_tag(digest):
    """The tag a pulled image is kept under on every node: the whole digest, so the tag cannot lie."""
    return digest.replace(":", "-")


def validate_registry_definition(data, source):
    """A checked definition naming a registry image: registry, platform, and engine/python when facts are read."""
    unknown = sorted(set(data) - set(REGISTRY_FIELDS))
    if unknown:
        raise ImageError(
            "%s: field%s %s do%s not apply to a registry image (nothing is built); a registry image has %s"
            % (
                source,
                "s" if len(unknown) > 1 else "",
                ", ".join(unknown),
                "" if len(unknown) > 1 else "es",
                ", ".join(REGISTRY_FIELDS),
            )
        )
    if data.get("schema_version") != 1:
        raise ImageError("%s: schema_version is %r; expected 1" % (source, data.get("schema_version")))
    name = data.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        raise ImageError("%s: name is %r; expected lower-case letters, digits and '-'" % (source, name))
    title = data.get("title")
    if not isinstance(title, str) or not title.strip():
        raise ImageError("%s: title is %r; expected a non-empty string" % (source, title))
    reference = parse_reference(data.get("registry"), "%s: registry" % source)
    platform = data.get("platform", "linux/amd64")
    if platform not in PLATFORMS:
        raise ImageError(
            "%s: platform is %r; expected %s (the fleet is amd64: the pull asks for this platform of the digest)"
            % (source, platform, " or ".join(PLATFORMS))
        )
    engine = data.get("engine")
    python = data.get("python")
    if engine is not None:
        if not isinstance(engine, dict) or engine.get("name") not in ("vllm", "sglang"):
            raise ImageError(
                "%s: engine is %r; expected a mapping with name (vllm or sglang), version and device, or no engine "
                "(then no facts are read)" % (source, engine)
            )
        version = engine.get("version")
        if not isinstance(version, str) or not version.strip():
            raise ImageError("%s: engine.version is %r; expected the engine's version, quoted" % (source, version))
        if engine.get("device") not in ("cpu", "cuda"):
            raise ImageError("%s: engine.device is %r; expected cpu or cuda" % (source, engine.get("device")))
        if not isinstance(python, str) or not (python.startswith("/") or python in ("python3", "python")):
            raise ImageError(
                "%s: python is %r; the facts probe runs the engine's interpreter: an absolute path, or python3"
                % (source, python)
            )
        engine = {"name": engine["name"], "version": engine["version"], "device": engine["device"]}
    return {
        "name": name,
        "title": title,
        "notes": list(data.get("notes") or []),
        "registry": reference,
        "platform": platform,
        "engine": engine,
        "python": python,
        "template": None,
        "patches": [],
    }


def registry_plan(definition):
    """What engine_image_plan answers for a registry image: no build inputs, the local tag as reference."""
    reference = definition["registry"]
    return {
        "definition": definition,
        "patches": [],
        "tag": local_tag(reference["digest"]),
        "reference": reference["local"],
        "wheelhouse_key": None,
        "lock_path": None,
        "wheel_platforms": [],
        "local_wheels": [],
        "ca_certificates": [],
        "pull": dict(reference, platform=definition["platform"]),
    }


def record_name(reference):
    """The node's record file of one pinned digest, under <images state dir>/registry/."""
    return "registry/%s.json" % local_tag(reference["digest"])


def new_record(reference, image_id, how):
    """What a node records once it holds the pinned image: the digest and the image id it has there."""
    return {
        "format": RECORD_FORMAT,
        "pinned": reference["pinned"],
        "digest": reference["digest"],
        "reference": reference["local"],
        "image_id": image_id,
        "how": how,
    }


def holding(reference, local, pinned, record):
    """('held' | 'tag' | 'pull', image id or None): what a node must do to hold the pinned image.

    local and pinned are the engine's answers for the local tag and for familiar@digest ({id,
    repo_digests} or None); record is the node's record of this digest (or None). The local tag
    counts only when the engine or the record ties its id to the digest: a tag alone proves nothing.
    A node that pulled the digest itself (by hand, or an earlier run) only needs the local tag.
    """
    if local:
        if reference["pinned"] in (local.get("repo_digests") or []):
            return "held", local["id"]
        if is_recorded(record, reference, local["id"]):
            return "held", local["id"]
    if pinned:
        return "tag", pinned["id"]
    return "pull", None


def is_recorded(record, reference, image_id):
    """Whether the node's record says image_id is the pinned digest."""
    return (
        isinstance(record, dict)
        and record.get("format") == RECORD_FORMAT
        and record.get("pinned") == reference["pinned"]
        and record.get("digest") == reference["digest"]
        and bool(image_id)
        and record.get("image_id") == image_id
    )


def seat_reference(image_ref, digest, source="engine.image"):
    """The parsed reference a seat's pin names: the image it runs (its own digest dropped) at the pinned digest."""
    name = image_ref.partition("@")[0] if isinstance(image_ref, str) else image_ref
    return parse_reference("%s@%s" % (name, digest), source)


def seat_digest_problem(image_ref, digest, image, record, record_path):
    """Why the image a seat runs is not the digest its recipe pins, or None when it is (or nothing is pinned).

    image is `docker image inspect`'s object of image_ref on the node; record the node's record of
    the digest (record_name), read from record_path, or None. Either proves the digest: the engine's
    RepoDigests (a node that pulled it) or a record tying this image id to it (a node that loaded it
    over the fabric, which keeps the id but not the repo digest).
    """
    if not digest:
        return None
    try:
        reference = seat_reference(image_ref, digest)
    except ImageError as exc:
        return "the pinned digest cannot be checked: %s" % exc
    image = image if isinstance(image, dict) else {}
    image_id = image.get("Id")
    if reference["pinned"] in (image.get("RepoDigests") or []):
        return None
    if is_recorded(record, reference, image_id):
        return None
    listed = "do not list it" if image.get("RepoDigests") else "are empty"
    ways = "its RepoDigests, where a pull by digest lists %s, %s" % (reference["pinned"], listed)
    if isinstance(record, dict) and record.get("image_id") and record.get("image_id") != image_id:
        ways += ", and the node's record %s ties the digest to image %s, not this one" % (
            record_path,
            record["image_id"],
        )
    elif record is not None:
        ways += ", and the node's record %s does not name this digest and image (format %d)" % (
            record_path,
            RECORD_FORMAT,
        )
    else:
        ways += ", and the node has no record %s (the engine_image role writes it after loading the image)" % (
            record_path
        )
    return (
        "image %s (%s) is not proven to be the pinned digest %s: %s; run the engine_image role for the registry "
        "image %s, which pulls it once on the builder, loads it on every node and records the digest there"
        % (image_ref, image_id or "no id", digest, ways, reference["pinned"])
    )


def new_pull_state(started):
    """The state of one pull that started at `started` (seconds, the caller's clock)."""
    return {"started": started, "layers": {}, "error": None, "digest": None, "tail": [], "reported": started}


def pull_text(state):
    """'4.20 of 12.80 GB, 3/11 layers done' for the layers the stream has named so far."""
    layers = state["layers"].values()
    got = sum(layer["current"] for layer in layers)
    total = sum(layer["total"] for layer in layers)
    done = sum(1 for layer in layers if layer["done"])
    total_text = "%.2f" % (total / 1e9) if total else "?"
    return "%.2f of %s GB, %d/%d layers done" % (got / 1e9, total_text, done, len(state["layers"]))


def read_pull_line(state, line, now):
    """Fold one line of POST /images/create into `state`; the progress event it makes, or None.

    Events (shaped like the build's, kind 'pull') come when a layer completes and every
    PULL_REPORT_S seconds while bytes arrive, so a 30 GB pull says how far it is.
    """
    line = line.strip()
    if not line:
        return None
    try:
        data = json.loads(line)
    except ValueError:
        raise ImageError("the Docker engine answered the pull with something that is not JSON: %r" % line[:200])
    if not isinstance(data, dict):
        return None
    elapsed = round(now - state["started"], 1)
    if data.get("error") or data.get("errorDetail"):
        state["error"] = data.get("error") or (data.get("errorDetail") or {}).get("message") or "unknown error"
        return {"kind": "error", "elapsed_s": elapsed, "text": state["error"]}
    status = str(data.get("status") or "")
    state["tail"] = (state["tail"] + [status])[-TAIL_LINES:]
    if status.startswith("Digest: "):
        state["digest"] = status[len("Digest: ") :].strip()
    layer_id = data.get("id")
    if not layer_id or status.startswith("Pulling from"):
        return None
    layer = state["layers"].setdefault(layer_id, {"current": 0, "total": 0, "done": False})
    detail = data.get("progressDetail") or {}
    if status == "Downloading" and isinstance(detail.get("total"), int):
        layer["total"] = max(layer["total"], detail["total"])
        layer["current"] = max(layer["current"], int(detail.get("current") or 0))
    if status in ("Download complete", "Pull complete") and layer["total"]:
        layer["current"] = layer["total"]
    if status in ("Pull complete", "Already exists") and not layer["done"]:
        layer["done"] = True
        state["reported"] = now
        return {"kind": "pull", "elapsed_s": elapsed, "text": pull_text(state)}
    if now - state["reported"] >= PULL_REPORT_S:
        state["reported"] = now
        return {"kind": "pull", "elapsed_s": elapsed, "text": pull_text(state)}
    return None


def pull_outcome(state, reference, now):
    """{elapsed_s, layers} of a finished pull; ImageError naming what to do when it failed."""
    elapsed = round(now - state["started"], 1)
    if state["error"]:
        error = state["error"]
        hint = "see dockerd's log on the builder"
        lowered = error.lower()
        if "manifest unknown" in lowered or "not found" in lowered:
            hint = (
                "the registry has no image of that digest for %s: check the digest "
                "(docker buildx imagetools inspect %s@<digest>)" % (reference["platform"], reference["pull_name"])
            )
        elif "unauthorized" in lowered or "denied" in lowered:
            hint = (
                "log the builder's Docker engine in to %s (docker login) or pick a public image" % reference["domain"]
            )
        raise ImageError(
            "the pull of %s failed after %d s: %s; %s" % (reference["pinned"], round(elapsed), error, hint),
            reference=reference["pinned"],
            output_tail="\n".join(state["tail"]),
        )
    if state["digest"] and state["digest"] != reference["digest"]:
        raise ImageError(
            "the pull of %s reported digest %s; the registry answered another image than the pinned one"
            % (reference["pinned"], state["digest"])
        )
    return {"elapsed_s": elapsed, "layers": len(state["layers"])}
