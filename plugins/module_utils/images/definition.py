"""Engine image definitions (images/<name>.yml), their patches, and the content tag of a build.

Pure: callers read the files and pass their text in. A definition says what goes into an image;
the tag is a hash of every input (the definition, the Dockerfile template, each patch, the lock,
extra CA certificates, local wheels, the base image's id), so an unchanged input set names an
image that already exists and nothing is built.
"""

import hashlib
import json
import re

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import ImageError

DEFINITION_FORMAT = 1
TEMPLATES = ("vllm-cpu", "vllm-cuda")
ENGINES = ("vllm", "sglang")
BASE_SOURCES = ("registry", "controller")
# Every line of a patch header, in order; the text after the colon must not be empty.
PATCH_FIELDS = ("why", "upstream", "gates")
_NAME = re.compile(r"^[a-z0-9][a-z0-9-]{0,62}$")
_REPOSITORY = re.compile(r"^[a-z0-9]+([._/-][a-z0-9]+)*$")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[A-Za-z0-9,._-]+\])?==([A-Za-z0-9.+!_-]+)$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_APT = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
_ARCH_LIST = re.compile(r"^[0-9]+\.[0-9]+(\+PTX)?( [0-9]+\.[0-9]+(\+PTX)?)*$")
_WHEEL = re.compile(r"^[A-Za-z0-9_.+-]+\.whl$")
_TAG_LENGTH = 16


def _where(source, field):
    return "%s: %s" % (source, field)


def _need(condition, source, field, expected, value):
    if not condition:
        raise ImageError("%s is %r; expected %s" % (_where(source, field), value, expected))


def _text(data, key, source, optional=False):
    value = data.get(key)
    if optional and value is None:
        return None
    _need(isinstance(value, str) and value.strip() != "", source, key, "a non-empty string", value)
    return value


def _list(data, key, source, pattern, expected):
    value = data.get(key, [])
    _need(isinstance(value, list), source, key, "a list", value)
    for position, item in enumerate(value):
        _need(isinstance(item, str) and pattern.match(item), source, "%s[%d]" % (key, position), expected, item)
    if len(set(value)) != len(value):
        raise ImageError("%s lists an entry twice: %s" % (_where(source, key), value))
    return list(value)


def pinned_name(requirement):
    """The package name of an exact pin ('ray[default]==2.60.0' -> 'ray'), lower case."""
    match = _PIN.match(requirement)
    return match.group(1).lower().replace("_", "-") if match else None


def validate_definition(data, source):
    """A checked, normalised copy of one image definition; ImageError names the bad field."""
    if not isinstance(data, dict):
        raise ImageError("%s: an image definition is a mapping, found %s" % (source, type(data).__name__))
    known = {
        "schema_version",
        "name",
        "title",
        "notes",
        "repository",
        "template",
        "engine",
        "python",
        "base",
        "packages",
        "lock",
        "local_wheels",
        "remove_packages",
        "apt_packages",
        "dist_info",
        "flashinfer",
        "cuda_arch_list",
        "patches",
        "wheel_target",
    }
    unknown = sorted(set(data) - known)
    if unknown:
        raise ImageError(
            "%s: unknown field%s %s; the fields are %s"
            % (source, "s" if len(unknown) > 1 else "", ", ".join(unknown), ", ".join(sorted(known)))
        )
    _need(
        data.get("schema_version") == DEFINITION_FORMAT,
        source,
        "schema_version",
        "%d" % DEFINITION_FORMAT,
        data.get("schema_version"),
    )
    name = _text(data, "name", source)
    _need(_NAME.match(name), source, "name", "lower-case letters, digits and '-'", name)
    repository = _text(data, "repository", source)
    _need(_REPOSITORY.match(repository), source, "repository", "a Docker repository name, lower case", repository)
    template = data.get("template")
    _need(template in TEMPLATES, source, "template", "one of %s" % ", ".join(TEMPLATES), template)

    engine = data.get("engine")
    _need(isinstance(engine, dict), source, "engine", "a mapping with name, version and device", engine)
    _need(engine.get("name") in ENGINES, source, "engine.name", "one of %s" % ", ".join(ENGINES), engine.get("name"))
    _text(engine, "version", source + ": engine")
    _need(engine.get("device") in ("cpu", "cuda"), source, "engine.device", "cpu or cuda", engine.get("device"))
    _need(
        (engine["device"] == "cpu") == (template == "vllm-cpu"),
        source,
        "template",
        "vllm-cpu exactly when engine.device is cpu",
        template,
    )

    base = data.get("base")
    _need(isinstance(base, dict), source, "base", "a mapping with reference, digest and from", base)
    _text(base, "reference", source + ": base")
    _need(base.get("from") in BASE_SOURCES, source, "base.from", "registry or controller", base.get("from"))
    digest = base.get("digest")
    if base["from"] == "registry":
        _need(
            isinstance(digest, str) and _DIGEST.match(digest),
            source,
            "base.digest",
            "sha256:<64 hex>: an image pulled from a registry is pinned by digest, never by tag alone",
            digest,
        )
    else:
        _need(
            digest is None or (isinstance(digest, str) and _DIGEST.match(digest)),
            source,
            "base.digest",
            "null or sha256:<64 hex>",
            digest,
        )

    packages = _list(data, "packages", source, _PIN, "an exact pin, name==version")
    flashinfer = data.get("flashinfer")
    if flashinfer is not None:
        _need(isinstance(flashinfer, dict), source, "flashinfer", "a mapping with version and index_url", flashinfer)
        _text(flashinfer, "version", source + ": flashinfer")
        _text(flashinfer, "index_url", source + ": flashinfer")
        wheel_hash = flashinfer.get("sha256")
        _need(
            wheel_hash is None or (isinstance(wheel_hash, str) and re.match(r"^[0-9a-f]{64}$", wheel_hash)),
            source,
            "flashinfer.sha256",
            "null or 64 hex digits",
            wheel_hash,
        )
        if "flashinfer-python" in [pinned_name(p) for p in packages]:
            raise ImageError(
                "%s: flashinfer-python is pinned both in packages and in flashinfer; keep the "
                "flashinfer mapping only" % source
            )
    arch = data.get("cuda_arch_list")
    if engine["device"] == "cuda":
        _need(
            isinstance(arch, str) and _ARCH_LIST.match(arch),
            source,
            "cuda_arch_list",
            "space-separated capabilities such as '12.0' (TORCH_CUDA_ARCH_LIST)",
            arch,
        )
    else:
        _need(arch is None, source, "cuda_arch_list", "null for a CPU image", arch)
    dist_info = data.get("dist_info")
    if dist_info is not None:
        _need(
            isinstance(dist_info, dict) and set(dist_info) == {"name", "version"},
            source,
            "dist_info",
            "a mapping with name and version",
            dist_info,
        )
    target = data.get("wheel_target")
    if target is not None:
        _need(
            isinstance(target, dict) and set(target) == {"python_version", "platform"},
            source,
            "wheel_target",
            "a mapping with python_version (e.g. '3.11') and platform (e.g. manylinux_2_28_x86_64)",
            target,
        )
        _need(
            re.match(r"^3\.[0-9]{1,2}$", str(target["python_version"])),
            source,
            "wheel_target.python_version",
            "a Python version such as '3.11'",
            target["python_version"],
        )
    python = _text(data, "python", source)
    _need(
        python.startswith("/") or python in ("python3", "python"),
        source,
        "python",
        "an absolute path, or python3",
        python,
    )
    return {
        "name": name,
        "title": _text(data, "title", source),
        "notes": list(data.get("notes") or []),
        "repository": repository,
        "template": template,
        "engine": {"name": engine["name"], "version": engine["version"], "device": engine["device"]},
        "python": python,
        "base": {"reference": base["reference"], "digest": digest, "from": base["from"], "note": base.get("note")},
        "packages": packages,
        "lock": _text(data, "lock", source, optional=True),
        "local_wheels": _list(data, "local_wheels", source, _WHEEL, "a wheel file name"),
        "remove_packages": _list(data, "remove_packages", source, _APT, "a package name"),
        "apt_packages": _list(data, "apt_packages", source, _APT, "a Debian package name"),
        "dist_info": dist_info,
        "flashinfer": flashinfer,
        "cuda_arch_list": arch,
        "patches": _list(data, "patches", source, _NAME, "a patch id (files/patches/<id>.patch)"),
        "wheel_target": target,
    }


def parse_patch(text, patch_id, source):
    """{id, why, upstream, gates, files} of a patch file; ImageError when its header is incomplete.

    The header is comment lines before the diff: `# patch: <id>`, then `# why:`, `# upstream:`
    and `# gates:` (which capabilities or seats it exists for). A patch with no reason is refused.
    """
    header, files, last = {}, [], None
    for line in text.splitlines():
        if line.startswith("+++ "):
            path = line[4:].split("\t")[0].strip()
            files.append(path[2:] if path.startswith("b/") else path)
        if not line.startswith("#"):
            last = None
            continue
        if line.startswith("#  ") and last:
            header[last] += " " + line[1:].strip()
            continue
        key, _, value = line[1:].partition(":")
        key = key.strip().lower()
        last = None
        if key in PATCH_FIELDS + ("patch",) and value.strip():
            # The id is one word; only the prose fields continue on indented lines.
            header[key], last = value.strip(), (key if key in PATCH_FIELDS else None)
    if header.get("patch") != patch_id:
        raise ImageError(
            "%s: the first header line must be '# patch: %s' (found %r); the id names the "
            "patch in failures and facts" % (source, patch_id, header.get("patch"))
        )
    missing = [field for field in PATCH_FIELDS if not header.get(field)]
    if missing:
        raise ImageError(
            "%s: patch %s has no %s line in its header; every patch says why it exists, the "
            "upstream issue or PR, and which capabilities it gates"
            % (source, patch_id, " / ".join("# %s:" % field for field in missing))
        )
    if not files:
        raise ImageError(
            "%s: patch %s changes no file (no '+++ b/<path>' line); is it a unified diff?" % (source, patch_id)
        )
    return {
        "id": patch_id,
        "why": header["why"],
        "upstream": header["upstream"],
        "gates": header["gates"],
        "files": files,
    }


def wheel_platforms(platform):
    """pip download's --platform values for a manylinux_2_<N>_<arch> target: every glibc it runs.

    pip takes --platform literally (a manylinux2014 wheel is not picked for manylinux_2_28), so the
    older glibc tags and their legacy aliases are listed too.
    """
    match = re.match(r"^manylinux_2_([0-9]+)_([a-z0-9_]+)$", platform or "")
    if not match:
        return [platform] if platform else []
    newest, arch = int(match.group(1)), match.group(2)
    tags = ["manylinux_2_%d_%s" % (minor, arch) for minor in range(newest, 4, -1)]
    aliases = {17: "manylinux2014", 12: "manylinux2010", 5: "manylinux1"}
    return tags + ["%s_%s" % (alias, arch) for minor, alias in sorted(aliases.items(), reverse=True) if minor <= newest]


def content_tag(inputs):
    """The image tag for a set of inputs: the first 16 hex digits of a sha256 over all of them."""
    blob = json.dumps(inputs, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(blob.encode("utf-8")).hexdigest()[:_TAG_LENGTH]


def wheelhouse_key(definition, lock_text, local_wheel_hashes):
    """Name of the controller's wheelhouse for this package set: the same pins share one download."""
    return content_tag(
        {
            "packages": definition["packages"],
            "lock": lock_text,
            "local_wheels": local_wheel_hashes,
            "flashinfer": definition["flashinfer"],
        }
    )
