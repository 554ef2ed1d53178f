"""Reading everything that goes into an engine image on the controller, and writing its build context.

The decisions (what a definition may say, how the tag is made) are in images/definition.py;
this file reads the files they judge and packs the context the node's Docker engine builds from.
"""

import hashlib
import os
import tarfile
import tempfile

import yaml
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import ImageError
from ansible_collections.seatwright.fleet.plugins.module_utils.images.definition import (
    LOCAL_PINS,
    content_tag,
    parse_patch,
    validate_definition,
    wheel_platforms,
    wheelhouse_key,
    with_flashinfer_override,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.images.registry import registry_plan
from ansible_collections.seatwright.fleet.plugins.module_utils.images.wheels import (
    check_wheels,
    lock_hashed,
    normal_name,
    pack_selection,
    parse_lock,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.files import file_sha256


def _read(path, what):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read()
    except OSError as exc:
        raise ImageError("%s %s cannot be read (%s)" % (what, path, exc.strerror or exc))


def _find_patch(patch_id, patch_dirs):
    for folder in patch_dirs:
        path = os.path.join(folder, patch_id + ".patch")
        if os.path.isfile(path):
            return path
    raise ImageError(
        "patch %s: no %s.patch in %s; add the file (with its why/upstream/gates/changes header) or drop "
        "the id from the image definition" % (patch_id, patch_id, ", ".join(patch_dirs))
    )


def build_inputs(options):
    """The build plan of one image: checked definition, patches, tag and the files that go in.

    options: definition_path, template_paths, apply_script_path, patch_dirs, extra_patches,
    locks_dir, local_wheels_dir, ca_certificates, base_image_id, offline, flashinfer_override.
    """
    source = options["definition_path"]
    try:
        data = yaml.safe_load(_read(source, "image definition"))
    except yaml.YAMLError as exc:
        raise ImageError("%s is not valid YAML: %s" % (source, exc))
    definition = validate_definition(data, source)
    if definition.get("registry"):
        # Nothing is built: no template, patch, lock or wheel is read; the builder pulls the digest.
        if options.get("flashinfer_override"):
            raise ImageError(
                "%s names a registry image, which is pulled as it is; unset engine_image_flashinfer_override" % source
            )
        return registry_plan(definition)
    definition = with_flashinfer_override(definition, options.get("flashinfer_override"))
    patch_ids = definition["patches"] + [p for p in options["extra_patches"] if p not in definition["patches"]]
    patches = []
    for patch_id in patch_ids:
        path = _find_patch(patch_id, options["patch_dirs"])
        text = _read(path, "patch")
        patches.append(
            dict(parse_patch(text, patch_id, path), path=path, sha256=hashlib.sha256(text.encode("utf-8")).hexdigest())
        )
    lock_text, lock_path = "", None
    if definition["lock"]:
        lock_path = os.path.join(options["locks_dir"], definition["lock"])
        lock_text = _read(lock_path, "package lock of %s" % definition["name"])
    local_wheels = []
    for name in definition["local_wheels"]:
        path = os.path.join(options["local_wheels_dir"], name)
        if not os.path.isfile(path):
            raise ImageError(
                "%s: local wheel %s is not in engine_image_local_wheels_dir (%s); put it there or point "
                "the variable at the folder that holds it" % (source, name, options["local_wheels_dir"])
            )
        digest = file_sha256(path)
        if digest != definition[LOCAL_PINS][name]:
            raise ImageError(
                "%s: local wheel %s in %s has sha256 %s, not the pinned %s: put the pinned wheel there, or pin "
                "the new one after checking where it came from"
                % (source, name, path, digest, definition[LOCAL_PINS][name])
            )
        local_wheels.append({"name": name, "path": path, "sha256": digest})
    certificates = []
    for path in options["ca_certificates"]:
        text = _read(path, "CA certificate")
        if "BEGIN CERTIFICATE" not in text:
            raise ImageError("engine_image_ca_certificates: %s holds no PEM certificate" % path)
        certificates.append(
            {
                "path": path,
                "name": "seatwright-%02d.crt" % len(certificates),
                "sha256": hashlib.sha256(text.encode("utf-8")).hexdigest(),
            }
        )
    if definition["base"]["from"] == "controller" and not options.get("base_image_id"):
        raise ImageError(
            "%s: the base %s comes from the controller's Docker engine, which does not have it; "
            "build it (bash scripts/lab-image) or load it there" % (source, definition["base"]["reference"])
        )
    if definition["local_wheels"] and not options["offline"]:
        raise ImageError(
            "%s: local wheels need an offline build from the controller's wheelhouse; set "
            "engine_image_offline: true" % source
        )
    wheel_hashes = [wheel["sha256"] for wheel in local_wheels]
    inputs = {
        # The pins are checked above; the tag takes each local wheel's own hash (local_wheels below).
        "definition": {key: value for key, value in definition.items() if key != LOCAL_PINS},
        "templates": [_read(path, "Dockerfile template") for path in options["template_paths"]],
        "apply_script": _read(options["apply_script_path"], "patch script"),
        "patches": [[patch["id"], patch["sha256"]] for patch in patches],
        "lock": lock_text,
        "local_wheels": wheel_hashes,
        "ca_certificates": [cert["sha256"] for cert in certificates],
        "base_image_id": options.get("base_image_id") if definition["base"]["from"] == "controller" else None,
        "offline": options["offline"],
    }
    tag = content_tag(inputs)
    return {
        "definition": definition,
        "patches": patches,
        "tag": tag,
        "reference": "%s:%s" % (definition["repository"], tag),
        "wheelhouse_key": wheelhouse_key(definition, lock_text, wheel_hashes) if options["offline"] else None,
        "lock_path": lock_path,
        # Every package of the lock names its wheels' sha256: the wheelhouse downloads with --require-hashes.
        "lock_hashed": lock_hashed(parse_lock(lock_text)),
        "wheel_platforms": wheel_platforms((definition["wheel_target"] or {}).get("platform")),
        "local_wheels": local_wheels,
        "ca_certificates": certificates,
        "pull": None,
    }


def write_context(dest, files, wheelhouse=None, wheels=None):
    """Pack a build context tar at `dest` (atomically): {arcname: source path} plus a wheelhouse/
    (only `wheels`, file names in it, when given).

    Returns False when `dest` already exists: its name carries the content tag, so it is complete.
    """
    if os.path.exists(dest):
        return False
    folder = os.path.dirname(os.path.abspath(dest))
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".%s." % os.path.basename(dest), dir=folder)
    os.close(fd)
    try:
        with tarfile.open(tmp, "w") as archive:
            for arcname, path in sorted(files.items()):
                archive.add(path, arcname=arcname, recursive=False, filter=_plain)
            if wheelhouse:
                for name in sorted(os.listdir(wheelhouse) if wheels is None else wheels):
                    if name.endswith(".whl"):
                        archive.add(os.path.join(wheelhouse, name), arcname="wheelhouse/" + name, filter=_plain)
        os.chmod(tmp, 0o644)
        os.replace(tmp, dest)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return True


def _plain(info):
    """Owner root, fixed times: the same inputs give the same context bytes (and build cache hits)."""
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    info.mtime = 0
    if info.isfile():
        info.mode = 0o755 if info.mode & 0o111 else 0o644
    return info


def _selection(wheelhouse, names, lock, local_wheels, named_wheels):
    """pack_selection over the wheelhouse's wheels, each hashed; None packs every wheel (no pins)."""
    if not (lock or local_wheels or named_wheels):
        return None
    found = [{"file": name, "sha256": file_sha256(os.path.join(wheelhouse, name))} for name in names]
    named = {}
    for wheel in named_wheels or ():
        pin = named.setdefault(normal_name(wheel["name"]), {"version": str(wheel["version"]), "hashes": set()})
        pin["hashes"].add(wheel["sha256"])
    return pack_selection(found, parse_lock(_read(lock, "package lock")) if lock else None, local_wheels, named)


def build_context(
    dest, files, wheelhouse=None, check_mode=False, wheel_target=None, lock=None, local_wheels=None, named_wheels=None
):
    """The engine_image_context module's run: the context tar at `dest`, written once per content tag.

    Only the wheels the resolution named go in (images/wheels.py pack_selection): the lock's
    packages, the local wheels and `named_wheels`, each with its pinned bytes where it has a pin.
    ImageError naming what is missing on the controller, a wheel of the wheelhouse that does not
    fit the image's wheel_target (checked before anything is packed or built), a wheel whose bytes
    differ from its pin, or why the tar could not be written.
    """
    missing = sorted(
        path for path in list(files.values()) + ([wheelhouse] if wheelhouse else []) if not os.path.exists(path)
    )
    if missing:
        raise ImageError("engine image context %s: %s missing on the controller" % (dest, ", ".join(missing)))
    if wheelhouse and wheel_target:
        names = sorted(name for name in os.listdir(wheelhouse) if name.endswith(".whl"))
        check_wheels(names, wheel_target, "wheelhouse %s" % wheelhouse)
    if check_mode or os.path.exists(dest):
        return dict(changed=not os.path.exists(dest), dest=dest)
    selected = None
    if wheelhouse:
        names = sorted(name for name in os.listdir(wheelhouse) if name.endswith(".whl"))
        selected = _selection(wheelhouse, names, lock, local_wheels, named_wheels)
    try:
        changed = write_context(dest, files, wheelhouse, selected["pack"] if selected else None)
    except OSError as exc:
        raise ImageError("engine image context %s could not be written: %s" % (dest, exc))
    return dict(changed=changed, dest=dest, wheels_left_out=selected["left_out"] if selected else [])
