"""Engine image definitions (images/<name>.yml), their patches, and the content tag of a build.

Pure: callers read the files and pass their text in. A definition says what goes into an image;
the tag is a hash of every input (the definition, the Dockerfile template, each patch, the lock,
extra CA certificates, local wheels, the base image's id), so an unchanged input set names an
image that already exists and nothing is built.
"""

import hashlib
import json
import re

from ansible_collections.seatwright.fleet.plugins.module_utils.defaults import DNS_LABEL_PATTERN
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import ImageError
from ansible_collections.seatwright.fleet.plugins.module_utils.images.registry import validate_registry_definition
from ansible_collections.seatwright.fleet.plugins.module_utils.images.wheels import check_wheels, parse_wheel_name
from ansible_collections.seatwright.fleet.plugins.module_utils.versions import version_key

DEFINITION_FORMAT = 1
TEMPLATES = ("vllm-cpu", "engine-cuda")
ENGINES = ("vllm", "sglang")
BASE_SOURCES = ("registry", "controller")
# The packages FlashInfer ships as one set: vLLM checks at start-up that they are one version.
FLASHINFER_PACKAGES = ("flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache")
FLASHINFER_CHANNELS = ("pypi", "nightly")
FLASHINFER_FIELDS = ("version", "channel", "index_url", "build", "wheels")
# The machines an image may be built for; a base pulled from a registry says its platform.
PLATFORMS = ("linux/amd64",)
# Every line of a patch header, in order; the text after the colon must not be empty.
PATCH_FIELDS = ("why", "upstream", "gates")
# The label every build carries with its definition's name (templates/labels.Dockerfile.j2 writes it);
# a node finds all builds of one definition by it.
NAME_LABEL = "org.seatwright.image"
# One `# changes: file=<path> function=<name>` line per file the diff touches: what the patch claims
# to change, checked against the diff so a review can hold it to the installed source.
_CHANGES = re.compile(r"^file=(\S+) function=([A-Za-z_][A-Za-z0-9_.]*)$")
_NAME = re.compile(DNS_LABEL_PATTERN)
_REPOSITORY = re.compile(r"^[a-z0-9]+([._/-][a-z0-9]+)*$")
_PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[A-Za-z0-9,._-]+\])?==([A-Za-z0-9.+!_-]+)$")
_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_APT = re.compile(r"^[a-z0-9][a-z0-9+.-]+$")
_ARCH_LIST = re.compile(r"^[0-9]+\.[0-9]+(\+PTX)?( [0-9]+\.[0-9]+(\+PTX)?)*$")
_WHEEL = re.compile(r"^[A-Za-z0-9_.+-]+\.whl$")
_SHA256 = re.compile(r"^[0-9a-f]{64}$")
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


# The definition's key holding {local wheel file: sha256}.
LOCAL_PINS = "local_wheel_sha256"
_SHA256 = re.compile(r"^[0-9a-f]{64}$")


def _local_wheels(data, source):
    """{file: sha256} of local_wheels, each given as {file, sha256}: a wheel no index has is pinned
    by its bytes, so a swapped file in engine_image_local_wheels_dir is refused."""
    value = data.get("local_wheels", [])
    _need(isinstance(value, list), source, "local_wheels", "a list", value)
    pins = {}
    for position, item in enumerate(value):
        _need(
            isinstance(item, dict)
            and set(item) == {"file", "sha256"}
            and isinstance(item["file"], str)
            and _WHEEL.match(item["file"])
            and isinstance(item["sha256"], str)
            and _SHA256.match(item["sha256"]),
            source,
            "local_wheels[%d]" % position,
            "{file: <wheel file name>, sha256: <its 64 hex digits>} (sha256sum the wheel)",
            item,
        )
        if item["file"] in pins:
            raise ImageError("%s lists %s twice" % (_where(source, "local_wheels"), item["file"]))
        pins[item["file"]] = item["sha256"]
    return pins


def pinned_name(requirement):
    """The package name of an exact pin ('ray[default]==2.60.0' -> 'ray'), lower case."""
    match = _PIN.match(requirement)
    return match.group(1).lower().replace("_", "-") if match else None


def _wheel_target(data, source):
    """The interpreter and platform the wheelhouse is downloaded for: the image's, never the controller's."""
    target = data.get("wheel_target")
    _need(
        isinstance(target, dict) and set(target) == {"python_version", "platform"},
        source,
        "wheel_target",
        "a mapping with python_version (the image's Python, e.g. '3.12') and platform (its glibc and "
        "machine, e.g. manylinux_2_36_x86_64); the wheels are downloaded for these, not for the controller",
        target,
    )
    _need(
        re.match(r"^3\.[0-9]{1,2}$", str(target["python_version"])),
        source,
        "wheel_target.python_version",
        "a Python version such as '3.12' (quote it in YAML)",
        target["python_version"],
    )
    _need(
        re.match(r"^manylinux_2_[0-9]+_(x86_64|aarch64)$", str(target["platform"])),
        source,
        "wheel_target.platform",
        "manylinux_2_<glibc minor>_<machine>, e.g. manylinux_2_36_x86_64",
        target["platform"],
    )
    return {"python_version": str(target["python_version"]), "platform": target["platform"]}


def flashinfer_set(data, source, wheel_target):
    """A checked FlashInfer set: one version for every package, a sha256 per wheel; None when absent.

    channel pypi: a release from PyPI (no build string). channel nightly: the nightly index's URL
    and the build string of the exact nightly, which its version must carry. Every wheel must be a
    FlashInfer package at the set's version and fit the image's Python and platform.
    """
    if data is None:
        return None
    _need(isinstance(data, dict), source, "", "a mapping with %s" % ", ".join(FLASHINFER_FIELDS), data)
    unknown = sorted(set(data) - set(FLASHINFER_FIELDS))
    if unknown:
        raise ImageError(
            "%s: unknown field %s; a FlashInfer set has %s" % (source, ", ".join(unknown), ", ".join(FLASHINFER_FIELDS))
        )
    version = _text(data, "version", source)
    _need(version_key(version) is not None, source, "version", "a PEP 440 version", version)
    channel = data.get("channel")
    _need(channel in FLASHINFER_CHANNELS, source, "channel", "one of %s" % ", ".join(FLASHINFER_CHANNELS), channel)
    index_url = _text(data, "index_url", source)
    _need(index_url.startswith("https://"), source, "index_url", "an https:// package index", index_url)
    build = data.get("build")
    if channel == "nightly":
        _need(
            isinstance(build, str) and build.strip() and build in version,
            source,
            "build",
            "the nightly's build string, which its version carries (e.g. version 0.6.18.dev20260820, build "
            "dev20260820); an unpinned nightly is a different FlashInfer every day",
            build,
        )
    else:
        _need(build is None, source, "build", "null for a PyPI release (build strings are for nightlies)", build)
    wheels = data.get("wheels")
    _need(
        isinstance(wheels, list) and wheels,
        source,
        "wheels",
        "a list of {file, sha256}, one per FlashInfer package (flashinfer-python at least)",
        wheels,
    )
    checked, versions = [], {}
    for position, wheel in enumerate(wheels):
        where = "%s: wheels[%d]" % (source, position)
        _need(
            isinstance(wheel, dict) and set(wheel) == {"file", "sha256"},
            where,
            "",
            "a mapping with file and sha256",
            wheel,
        )
        _need(
            isinstance(wheel["sha256"], str) and _SHA256.match(wheel["sha256"]),
            where,
            "sha256",
            "64 hex digits",
            wheel["sha256"],
        )
        parsed = parse_wheel_name(str(wheel["file"]))
        _need(parsed is not None, where, "file", "a wheel file name", wheel["file"])
        _need(
            parsed["name"] in FLASHINFER_PACKAGES,
            where,
            "file",
            "a wheel of %s" % ", ".join(FLASHINFER_PACKAGES),
            wheel["file"],
        )
        if parsed["name"] in versions:
            raise ImageError("%s: %s has two wheels; a set holds one per package" % (source, parsed["name"]))
        versions[parsed["name"]] = parsed["version"]
        checked.append(
            {"file": wheel["file"], "sha256": wheel["sha256"], "name": parsed["name"], "version": parsed["version"]}
        )
    if "flashinfer-python" not in versions:
        raise ImageError("%s: the set has no flashinfer-python wheel; the other packages only add to it" % source)
    disagree = sorted((name, have) for name, have in versions.items() if version_key(have) != version_key(version))
    if disagree:
        raise ImageError(
            "%s: the FlashInfer packages disagree in version: the set is %s but %s; vLLM refuses to start when "
            "flashinfer-python, flashinfer-cubin and flashinfer-jit-cache differ, so pin every one at %s "
            "(and pick an engine version whose whole set the channel carries)"
            % (source, version, ", ".join("%s is %s" % item for item in disagree), version)
        )
    check_wheels([wheel["file"] for wheel in checked], wheel_target, source)
    return {
        "version": version,
        "channel": channel,
        "index_url": index_url,
        "build": build,
        "packages": sorted(versions),
        "wheels": checked,
    }


def validate_definition(data, source):
    """A checked, normalised copy of one image definition; ImageError names the bad field."""
    if not isinstance(data, dict):
        raise ImageError("%s: an image definition is a mapping, found %s" % (source, type(data).__name__))
    if "registry" in data:
        # An image the fleet does not build: pulled once by digest, then distributed like a built one.
        return validate_registry_definition(data, source)
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
        "flashinfer_overrides",
        "cuda_arch_list",
        "cuda_home",
        "patches",
        "wheel_target",
        "registry",
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
    platform = base.get("platform", "linux/amd64")
    _need(
        platform in PLATFORMS,
        source,
        "base.platform",
        "%s: the fleet is amd64; a digest taken from an arm64 deployment (a DGX Spark) runs nothing here"
        % " or ".join(PLATFORMS),
        platform,
    )
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
    target = _wheel_target(data, source)
    flashinfer = flashinfer_set(data.get("flashinfer"), source + ": flashinfer", target)
    overrides = data.get("flashinfer_overrides") or {}
    _need(isinstance(overrides, dict), source, "flashinfer_overrides", "a mapping of override name to a set", overrides)
    checked_overrides = {}
    for override, body in sorted(overrides.items()):
        where = "%s: flashinfer_overrides.%s" % (source, override)
        _need(
            _NAME.match(str(override)),
            source,
            "flashinfer_overrides",
            "names of lower-case letters, digits and '-'",
            override,
        )
        _need(
            isinstance(body, dict) and body.get("reason"), where, "reason", "why the override exists (a sentence)", body
        )
        fields = dict((key, value) for key, value in body.items() if key != "reason")
        checked_overrides[override] = dict(flashinfer_set(fields, where, target), reason=body["reason"])
    flashinfer_pins = {}
    for pin in packages:
        pin_name = pinned_name(pin)
        if pin_name in FLASHINFER_PACKAGES:
            if flashinfer is not None:
                raise ImageError(
                    "%s: %s is pinned in packages and the flashinfer set pins FlashInfer too; keep FlashInfer in "
                    "the flashinfer mapping only, one version with a hash per wheel" % (source, pin)
                )
            flashinfer_pins[pin_name] = pin.split("==", 1)[1]
    if len(set(flashinfer_pins.values())) > 1:
        raise ImageError(
            "%s: the FlashInfer packages disagree in version (%s); they are one set: pin them at one version "
            "(vLLM refuses to start on a mismatch)"
            % (source, ", ".join("%s %s" % item for item in sorted(flashinfer_pins.items())))
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
    # Where the image's CUDA toolkit (nvcc) is: FlashInfer's JIT and vLLM's check for it read CUDA_HOME.
    cuda_home = data.get("cuda_home")
    _need(
        cuda_home is None or (engine["device"] == "cuda" and isinstance(cuda_home, str) and cuda_home.startswith("/")),
        source,
        "cuda_home",
        "an absolute path in the image holding bin/nvcc (a CUDA image only), or unset",
        cuda_home,
    )
    dist_info = data.get("dist_info")
    if dist_info is not None:
        _need(
            isinstance(dist_info, dict) and set(dist_info) == {"name", "version"},
            source,
            "dist_info",
            "a mapping with name and version",
            dist_info,
        )
    local_pins = _local_wheels(data, source)
    local_wheels = list(local_pins)
    check_wheels(local_wheels, target, source + ": local_wheels")
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
        "base": {
            "reference": base["reference"],
            "digest": digest,
            "from": base["from"],
            "platform": platform,
            "note": base.get("note"),
        },
        "packages": packages,
        "lock": _text(data, "lock", source, optional=True),
        "local_wheels": local_wheels,
        # Each local wheel's sha256, checked when it is read and packed (not in the content tag, which
        # takes the file's own hash).
        LOCAL_PINS: local_pins,
        "remove_packages": _list(data, "remove_packages", source, _APT, "a package name"),
        "apt_packages": _list(data, "apt_packages", source, _APT, "a Debian package name"),
        "dist_info": dist_info,
        "flashinfer": flashinfer,
        "flashinfer_overrides": checked_overrides,
        "cuda_arch_list": arch,
        "cuda_home": cuda_home,
        "patches": _list(data, "patches", source, _NAME, "a patch id (files/patches/<id>.patch)"),
        "wheel_target": target,
    }


def parse_patch(text, patch_id, source):
    """{id, why, upstream, gates, files, changes} of a patch file; ImageError when its header is incomplete.

    The header is comment lines before the diff: `# patch: <id>`, then `# why:`, `# upstream:`
    and `# gates:` (which capabilities or seats it exists for), and one `# changes: file=<path>
    function=<name>` per file the diff changes. A patch with no reason, or whose diff touches a
    file its header does not name (or names a file it does not touch), is refused.
    """
    header, files, last, changes = {}, [], None, []
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
        if key == "changes":
            match = _CHANGES.match(value.strip())
            if not match:
                raise ImageError(
                    "%s: patch %s: '# changes:%s' must read 'file=<path in the package tree> "
                    "function=<function or Class.method>'" % (source, patch_id, value)
                )
            changes.append({"file": match.group(1), "function": match.group(2)})
            continue
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
    named = sorted({change["file"] for change in changes})
    if named != sorted(set(files)):
        raise ImageError(
            "%s: patch %s: its '# changes: file=... function=...' lines name %s but the diff changes %s; "
            "name each file the diff changes and the function it changes there"
            % (source, patch_id, ", ".join(named) or "no file", ", ".join(sorted(set(files))))
        )
    return {
        "id": patch_id,
        "why": header["why"],
        "upstream": header["upstream"],
        "gates": header["gates"],
        "files": files,
        "changes": changes,
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


def with_flashinfer_override(definition, override):
    """The definition with its FlashInfer set replaced by the named override (None: unchanged).

    The override's name stays in the definition (flashinfer_override), so the content tag, the
    image's labels and its facts say which set was built.
    """
    if not override:
        return dict(definition, flashinfer_override=None)
    known = definition.get("flashinfer_overrides") or {}
    if override not in known:
        raise ImageError(
            "image %s has no FlashInfer override %r; its overrides are %s"
            % (definition["name"], override, ", ".join(sorted(known)) or "none")
        )
    chosen = dict(known[override])
    return dict(definition, flashinfer=chosen, flashinfer_override=override)


def wheelhouse_key(definition, lock_text, local_wheel_hashes):
    """Name of the controller's wheelhouse for this package set and target: the same pins share one download."""
    return content_tag(
        {
            "packages": definition["packages"],
            "lock": lock_text,
            "local_wheels": local_wheel_hashes,
            "flashinfer": definition["flashinfer"],
            "wheel_target": definition["wheel_target"],
        }
    )
