"""Apply GPU settings on the node: read, plan, set, read back, record. Shared by the gpu_settings
module and the boot unit, which runs this same code from a bundle the module writes.

The boot unit runs `python3 <bundle> <settings file>`: the bundle is a zip of this file and the
module_utils it imports, written by the module from the very sources it runs, so the boot unit and
the module cannot drift apart.
"""

import ast
import io
import json
import os
import platform
import shutil
import subprocess
import sys
import zipfile

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import GpuInputError, ProbeUnavailable
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.files import atomic_write_bytes, read_json
from ansible_collections.seatwright.fleet.plugins.module_utils.io.node.gpu_probe import (
    read_gpus,
    set_clock_lock,
    set_persistence,
    set_power_limit,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.node.gpu_settings import (
    boot_settings,
    check_clock_lock,
    plan_settings,
    request_from_boot_settings,
    settings_diff,
    settings_readback_failures,
)

_PACKAGE = "ansible_collections.seatwright.fleet.plugins.module_utils"
_ZIP_TIME = (2020, 1, 1, 0, 0, 0)
_BUNDLE_MAIN = (
    "import sys\n"
    "from ansible_collections.seatwright.fleet.plugins.module_utils.io.node.gpu_settings import boot_main\n"
    "sys.exit(boot_main(sys.argv[1:]))\n"
)


class CommandRunner:
    """What the probes need from AnsibleModule (run_command, get_bin_path), for the boot unit."""

    def run_command(self, argv):
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
        return proc.returncode, proc.stdout, proc.stderr

    def get_bin_path(self, name, required=False, opt_dirs=()):
        path = shutil.which(name) or next(
            (shutil.which(name, path=folder) for folder in opt_dirs if shutil.which(name, path=folder)), None
        )
        if path is None and required:
            raise ProbeUnavailable("%s is not on PATH" % name)
        return path


def _applied_clock_lock(record_path):
    record = read_json(record_path) if record_path else None
    return record.get("clock_lock") if isinstance(record, dict) else None


def _json_bytes(data):
    return (json.dumps(data, indent=2, sort_keys=True) + "\n").encode("utf-8")


def _differs(path, content):
    try:
        with open(path, "rb") as handle:
            return handle.read() != content
    except OSError:
        return True


def _module_source(dotted):
    """The source text of one seatwright module, from wherever this process imported it
    (a plain folder in tests and the boot bundle, AnsiballZ's zip under Ansible)."""
    name = "%s.%s" % (_PACKAGE, dotted)
    __import__(name)
    module = sys.modules[name]
    loader = getattr(module, "__loader__", None)
    source = loader.get_source(name) if loader is not None and hasattr(loader, "get_source") else None
    if source is None:
        with open(module.__file__, encoding="utf-8") as handle:
            source = handle.read()
    return source


def _seatwright_imports(source):
    """The seatwright modules one source imports at its top level ('io.files', 'errors', ...)."""
    found = set()
    for node in ast.parse(source).body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith(_PACKAGE + "."):
            found.add(node.module[len(_PACKAGE) + 1 :])
    return found


def bundle_modules(start="io.node.gpu_settings"):
    """`start` and every seatwright module it imports, directly or not: what the boot unit runs."""
    sources, pending = {}, [start]
    while pending:
        dotted = pending.pop()
        if dotted in sources:
            continue
        sources[dotted] = _module_source(dotted)
        pending.extend(_seatwright_imports(sources[dotted]) - set(sources))
    return sources


def bundle_bytes():
    """A deterministic zip: the seatwright modules the boot unit needs, and a __main__ that runs it."""
    files = {"__main__.py": _BUNDLE_MAIN}
    for dotted, source in sorted(bundle_modules().items()):
        parts = _PACKAGE.split(".") + dotted.split(".")
        for depth in range(1, len(parts)):
            files["%s/__init__.py" % "/".join(parts[:depth])] = ""
        files["%s.py" % "/".join(parts)] = source
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", zipfile.ZIP_DEFLATED) as archive:
        for path in sorted(files):
            info = zipfile.ZipInfo(path, _ZIP_TIME)
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = 0o644 << 16
            archive.writestr(info, files[path])
    return buffer.getvalue()


# The module parameters that make the request; the rest say where to read and what to write.
REQUEST_KEYS = ("power_limit_w", "power_overrides", "power_state", "gpus", "persistence", "clock_lock")


def apply_settings(module, want_diff=False):
    """The gpu_settings module's run: its parameters handed to converge(), with a diff on request."""
    params = module.params
    host = params["host"] or platform.node()
    request = {key: params[key] for key in REQUEST_KEYS}
    result = converge(
        module,
        host,
        request,
        params["backend"],
        params["record_path"],
        params["settings_file"],
        params["boot_bundle"],
        module.check_mode,
        boot_unit_write(params["boot_unit"]),
    )
    if want_diff:
        result["diff"] = settings_diff(result)
    return result


def boot_unit_write(unit):
    """(path, bytes, enabled_link) of the boot_unit parameter ({path, content, enabled_link}), or
    None; GpuInputError when malformed."""
    if not unit:
        return None
    path, content, link = unit.get("path"), unit.get("content"), unit.get("enabled_link")
    if not isinstance(path, str) or not path.startswith("/") or not isinstance(content, str):
        raise GpuInputError("boot_unit: expected an absolute path and the unit's text as content, got %r" % (unit,))
    if link is not None and not (isinstance(link, str) and link.startswith("/")):
        raise GpuInputError("boot_unit: enabled_link must be an absolute path, got %r" % (link,))
    return path, content.encode("utf-8"), link


def converge(
    module,
    host,
    request,
    backend="auto",
    record_path=None,
    settings_path=None,
    bundle_path=None,
    check_mode=False,
    unit=None,
):
    """Plan, apply, read back and record GPU settings; returns the result, raises GpuInputError or
    ProbeUnavailable with a message for people. `unit`: boot_unit_write()'s (path, bytes, enabled_link)."""
    request = dict(request)
    request["clock_lock"] = check_clock_lock(host, request.get("clock_lock"))
    try:
        reading = read_gpus(module, backend, with_links=False)
    except ProbeUnavailable as exc:
        raise ProbeUnavailable("host %s: cannot read the GPUs: %s" % (host, exc))
    plan = plan_settings(host, reading["devices"], request, _applied_clock_lock(record_path))
    writes = []
    if settings_path:
        writes.append((settings_path, _json_bytes(boot_settings(plan, request)), 0o644))
    if bundle_path:
        writes.append((bundle_path, bundle_bytes(), 0o644))
    if record_path:
        writes.append((record_path, _json_bytes({"clock_lock": request["clock_lock"]}), 0o644))
    if unit:
        writes.append(unit[:2] + (0o644,))
    pending = [(path, content, mode) for path, content, mode in writes if _differs(path, content)]
    result = dict(plan, backend=reading["source"], files=[path for path, _, _ in pending])
    if unit and unit[2]:
        # Read here, so the role runs `systemctl enable` only when the link is missing (issue 25).
        result["boot_unit_enabled"] = os.path.islink(unit[2]) and os.path.realpath(unit[2]) == os.path.realpath(unit[0])
    result["changed"] = plan["changed"] or bool(pending)
    if check_mode or not result["changed"]:
        return result

    source = reading["source"]
    for item in plan["persistence"]:
        if item["changed"]:
            set_persistence(module, source, item["index"], item["after"])
    for item in plan["limits"]:
        if item["changed"]:
            try:
                set_power_limit(module, source, item["index"], item["after_w"])
            except ProbeUnavailable as exc:
                raise ProbeUnavailable(
                    "host %s: setting GPU %d to %.2f W failed: %s" % (host, item["index"], item["after_w"], exc)
                )
    if plan["clocks"]["changed"]:
        for item in plan["limits"]:
            set_clock_lock(module, source, item["index"], plan["clocks"]["after"])
    if plan["changed"]:
        after = read_gpus(module, source, with_links=False)
        failures = settings_readback_failures(host, plan, after["devices"])
        if failures:
            raise GpuInputError("\n".join(failures))
    for path, content, mode in pending:
        folder = os.path.dirname(path)
        if folder and not os.path.isdir(folder):
            os.makedirs(folder, 0o755)
        atomic_write_bytes(path, content, mode)
    return result


def boot_main(argv):
    """The boot unit: re-apply the settings file's request with the same code; 0 on success."""
    if len(argv) != 1:
        sys.stderr.write("usage: python3 gpu-settings.pyz SETTINGS_FILE\n")
        return 2
    host = os.uname()[1]
    try:
        request = request_from_boot_settings(read_json(argv[0]))
        result = converge(CommandRunner(), host, request)
    except (GpuInputError, ProbeUnavailable) as exc:
        sys.stderr.write("seatwright-gpu-settings: %s\n" % exc)
        return 1
    sys.stdout.write(
        "seatwright-gpu-settings: %s\n"
        % json.dumps(
            {
                "changed": result["changed"],
                "backend": result["backend"],
                "limits_w": dict((p["index"], p["after_w"]) for p in result["limits"]),
                "persistence": dict((p["index"], p["after"]) for p in result["persistence"]),
                "clock_lock": result["clocks"]["after"],
            },
            sort_keys=True,
        )
    )
    return 0
