"""Wheel file names judged against the Python and platform an image runs (PEP 427 / PEP 425 tags).

Pure. A wheelhouse is downloaded on the controller for the image's own interpreter and glibc
(the definition's wheel_target); a wheel built for another Python (cp311 in a cp312 image) or
another machine (aarch64 in an amd64 image) does not install there, so it is refused before any
build, by name.
"""

import re

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import ImageError

_WHEEL_NAME = re.compile(
    r"^(?P<name>[A-Za-z0-9_.]+)-(?P<version>[A-Za-z0-9_.!+]+)(?:-(?P<build>[0-9][A-Za-z0-9_.]*))?"
    r"-(?P<python>[A-Za-z0-9_.]+)-(?P<abi>[A-Za-z0-9_.]+)-(?P<platform>[A-Za-z0-9_.]+)\.whl$"
)
_MANYLINUX = re.compile(r"^manylinux_([0-9]+)_([0-9]+)_([a-z0-9_]+)$")
_LEGACY = {"manylinux1": (2, 5), "manylinux2010": (2, 12), "manylinux2014": (2, 17)}


def normal_name(name):
    """PEP 503's normal form of a distribution name: flashinfer_python -> flashinfer-python."""
    return re.sub(r"[-_.]+", "-", name).lower()


def parse_wheel_name(filename):
    """{name, version, build, python, abi, platform} of a wheel file name (tags as sets); None if not one."""
    match = _WHEEL_NAME.match(filename)
    if not match:
        return None
    return {
        "file": filename,
        "name": normal_name(match.group("name")),
        "version": match.group("version"),
        "build": match.group("build"),
        "python": set(match.group("python").split(".")),
        "abi": set(match.group("abi").split(".")),
        "platform": set(match.group("platform").split(".")),
    }


def _glibc_arch(platform):
    """((major, minor), arch) of a manylinux tag, legacy aliases included; None for others."""
    match = _MANYLINUX.match(platform)
    if match:
        return (int(match.group(1)), int(match.group(2))), match.group(3)
    for alias, glibc in _LEGACY.items():
        if platform.startswith(alias + "_"):
            return glibc, platform[len(alias) + 1 :]
    return None


def _python_fits(wheel, python_version):
    major, minor = (int(part) for part in python_version.split("."))
    cp = "cp%d%d" % (major, minor)
    for tag in wheel["python"]:
        if tag == "py%d" % major or (tag == cp and wheel["abi"] & {cp, "none", "abi3"}):
            return True
        # pyXY: pure Python for X.Y and later, as pip reads it (interegular's py37 runs on 3.11).
        generic = re.match(r"^py%d([0-9]+)$" % major, tag)
        if generic and int(generic.group(1)) <= minor:
            return True
        # cp38-abi3: one build for every CPython from 3.8 on.
        found = re.match(r"^cp3([0-9]+)$", tag)
        if found and "abi3" in wheel["abi"] and int(found.group(1)) <= minor and major == 3:
            return True
    return False


def _platform_fits(wheel, target_platform):
    if "any" in wheel["platform"]:
        return True
    target = _glibc_arch(target_platform)
    if target is None:
        return target_platform in wheel["platform"]
    for tag in wheel["platform"]:
        found = _glibc_arch(tag)
        if found and found[1] == target[1] and found[0] <= target[0]:
            return True
    return False


def wheel_misfit(filename, wheel_target):
    """Why a wheel does not install on wheel_target ({python_version, platform}); None when it does."""
    wheel = parse_wheel_name(filename)
    if wheel is None:
        return "%s is not a wheel file name (name-version-python-abi-platform.whl)" % filename
    if not _python_fits(wheel, str(wheel_target["python_version"])):
        return "%s is built for Python %s, and the image runs Python %s" % (
            filename,
            ".".join(sorted(wheel["python"])),
            wheel_target["python_version"],
        )
    if not _platform_fits(wheel, wheel_target["platform"]):
        return "%s is built for %s, and the image runs on %s" % (
            filename,
            ".".join(sorted(wheel["platform"])),
            wheel_target["platform"],
        )
    return None


def check_wheels(filenames, wheel_target, where):
    """ImageError naming every wheel that does not fit the image's Python and platform."""
    misfits = [reason for reason in (wheel_misfit(name, wheel_target) for name in filenames) if reason]
    if misfits:
        raise ImageError(
            "%s: %d wheel%s resolved for another interpreter or machine: %s. Download the wheelhouse for "
            "the image's wheel_target (pip download --python-version %s --platform %s --only-binary=:all:), "
            "never for the controller's own Python"
            % (
                where,
                len(misfits),
                "s" if len(misfits) > 1 else "",
                "; ".join(misfits),
                wheel_target["python_version"],
                wheel_target["platform"],
            )
        )


_LOCK_LINE = re.compile(r"^(?P<name>[A-Za-z0-9][A-Za-z0-9._-]*)(?:\[[^\]]*\])?==(?P<version>[^\s;\\]+)(?P<rest>.*)$")
_HASH = re.compile(r"--hash=sha256:([0-9a-f]{64})\b")


def _same_version(left, right):
    return str(left).lower().replace("-", "_") == str(right).lower().replace("-", "_")


def parse_lock(text):
    """{normal name: {"version", "hashes"}} of a package lock: `name==version` lines, each with any
    `--hash=sha256:H` (pip's hash-checking form; a line may continue with a backslash)."""
    joined = re.sub(r"\\\n", " ", text or "")
    found = {}
    for raw in joined.splitlines():
        line = raw.split("#", 1)[0].strip()
        match = _LOCK_LINE.match(line)
        if match:
            found[normal_name(match.group("name"))] = {
                "version": match.group("version"),
                "hashes": set(_HASH.findall(match.group("rest"))),
            }
    return found


def hashed_lock_text(text, wheels, target=None):
    """The lock `text` with each `name==version` line given `--hash=sha256:H` of its wheels in `wheels`
    ([{file, sha256}], a downloaded wheelhouse), comments and order kept; lines already hashed are
    hashed again from the wheelhouse. With `target` ({python_version, platform}), a wheel that does not
    install there is not a candidate.

    ImageError naming every pin that has no wheel in the wheelhouse: a lock with some lines hashed is
    one pip refuses whole (--require-hashes), so nothing is written half done.
    """
    by_pin = {}
    for wheel in wheels:
        parsed = parse_wheel_name(wheel["file"])
        if parsed is None or (target and wheel_misfit(wheel["file"], target)):
            continue
        by_pin.setdefault((parsed["name"], parsed["version"].lower().replace("-", "_")), []).append(wheel["sha256"])
    lines, missing = [], []
    for raw in (text or "").splitlines():
        body, _, comment = raw.partition("#")
        match = _LOCK_LINE.match(body.strip())
        if not match:
            lines.append(raw)
            continue
        name, version = normal_name(match.group("name")), match.group("version")
        hashes = sorted(set(by_pin.get((name, version.lower().replace("-", "_")), [])))
        if not hashes:
            missing.append("%s==%s" % (name, version))
            continue
        head = body.strip().split()[0]
        tail = ("  # " + comment.strip()) if comment.strip() else ""
        lines.append(" ".join([head] + ["--hash=sha256:%s" % digest for digest in hashes]) + tail)
    if missing:
        raise ImageError(
            "%d pin%s of the lock have no wheel in the wheelhouse: %s. Download the lock's wheels for the image's "
            "wheel_target first (the engine_image role's wheelhouse step), then hash it again"
            % (len(missing), "s" if len(missing) > 1 else "", ", ".join(missing))
        )
    return "\n".join(lines) + "\n"


def lock_from_wheels(wheels, target, header=""):
    """A whole lock written from a downloaded wheelhouse: one `name==version --hash=sha256:H ...` line per
    distribution of `wheels` ([{file, sha256}]) that installs on `target` ({python_version, platform}),
    every fitting wheel's hash on its line (pip takes any of them), sorted by name, under `header`
    (each of its lines made a comment).

    Returns {"text", "left_out": [why, per wheel that does not fit]}. ImageError naming every
    distribution with wheels of two versions: a wheelhouse is one resolution, and a lock pins one
    version, so such a folder mixes downloads (remove it and download again).
    """
    pins, left_out = {}, []
    for wheel in sorted(wheels, key=lambda item: item["file"]):
        misfit = wheel_misfit(wheel["file"], target)
        if misfit:
            left_out.append(misfit)
            continue
        parsed = parse_wheel_name(wheel["file"])
        pin = pins.setdefault(parsed["name"], {})
        pin.setdefault(parsed["version"], set()).add(wheel["sha256"])
    if not pins:
        raise ImageError(
            "no wheel of the wheelhouse installs on Python %s, %s: download it for the image's wheel_target "
            "first (the engine_image role's wheelhouse step)" % (target["python_version"], target["platform"])
        )
    mixed = ["%s (%s)" % (name, ", ".join(sorted(pins[name]))) for name in sorted(pins) if len(pins[name]) > 1]
    if mixed:
        raise ImageError(
            "the wheelhouse holds two versions of %d distribution%s: %s. One download resolves one version "
            "of each; remove the wheelhouse folder and download it again for the image's wheel_target"
            % (len(mixed), "s" if len(mixed) > 1 else "", "; ".join(mixed))
        )
    lines = ["# " + line if line.strip() else "#" for line in (header or "").splitlines()]
    for name in sorted(pins):
        ((version, hashes),) = pins[name].items()
        lines.append(" ".join(["%s==%s" % (name, version)] + ["--hash=sha256:%s" % h for h in sorted(hashes)]))
    return {"text": "\n".join(lines) + "\n", "left_out": left_out}


def lock_hashed(lock):
    """Whether every package of a parsed lock names its wheels' sha256 (pip's --require-hashes can use it)."""
    return bool(lock) and all(pin["hashes"] for pin in lock.values())


def pack_selection(wheels, lock=None, local_pins=None, named=None):
    """Which wheels of a wheelhouse go into a build context: those the resolution named, each the
    bytes it named. `wheels` [{file, sha256}]; `lock` parse_lock's; `local_pins` {file: sha256} of
    the definition's local wheels; `named` more pins like the lock's (the FlashInfer set).

    Returns {"pack": [file], "left_out": [file]}: with a lock, a wheel of no named package and version
    is left out (pip would take an extra wheel of a pinned package with a higher build tag over the
    named one); with none, the unpinned wheels go in as downloaded. ImageError for a wheel whose
    sha256 differs from its pin (swapped), and, where the pin names no hash, for two wheels of one
    pinned package and version.
    """
    pins = dict(lock or {})
    pins.update(named or {})
    local_pins = local_pins or {}
    pack, left_out, problems, by_pin = [], [], [], {}
    for wheel in sorted(wheels, key=lambda item: item["file"]):
        name = wheel["file"]
        if name in local_pins:
            if wheel["sha256"] != local_pins[name]:
                problems.append(
                    "local wheel %s has sha256 %s, not the pinned %s" % (name, wheel["sha256"], local_pins[name])
                )
            pack.append(name)
            continue
        parsed = parse_wheel_name(name)
        pin = pins.get(parsed["name"]) if parsed else None
        if pin is None or not _same_version(pin["version"], parsed["version"]):
            # No lock: no resolution to judge the rest by, so it goes in as downloaded.
            (pack if lock is None else left_out).append(name)
        elif pin["hashes"] and wheel["sha256"] not in pin["hashes"]:
            problems.append(
                "%s has sha256 %s, which the lock does not name for %s==%s"
                % (name, wheel["sha256"], parsed["name"], pin["version"])
            )
        else:
            by_pin.setdefault((parsed["name"], pin["version"], bool(pin["hashes"])), []).append(name)
            pack.append(name)
    for (package, version, hashed), files in sorted(by_pin.items()):
        if not hashed and len(files) > 1:
            problems.append(
                "%s==%s has %d wheels (%s): pip would take the highest build tag, which the lock did not name"
                % (package, version, len(files), ", ".join(files))
            )
    if problems:
        raise ImageError(
            "the wheelhouse holds wheels the resolution did not name: %s. Remove the wheelhouse folder and "
            "download it again; lock every wheel by hash (--hash=sha256:) so a changed one is refused"
            % "; ".join(problems)
        )
    return {"pack": pack, "left_out": left_out}
