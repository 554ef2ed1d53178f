"""What an engine image really holds, and the checks a seat's plan makes against it.

Pure: the probe's output comes in as text. The plan trusts the image over the recipe: the
FlashInfer version and the patches a rule needs are read from the image's facts, and the engine's
flags and their aliases from its own --help, against which seat/imageflags.py checks every launch.
"""

import json
import re

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import ImageError
from ansible_collections.seatwright.fleet.plugins.module_utils.images.checks import parse_check
from ansible_collections.seatwright.fleet.plugins.module_utils.images.kernels import arch_order, runs_on
from ansible_collections.seatwright.fleet.plugins.module_utils.node.hardware import sm_of

PROBE_MARK = "SEATWRIGHT-IMAGE-PROBE "
# /2: the facts carry the --help's aliases (every spelling of an option -> its first long name).
# /3: the engine's import is tried on its own, and its kernels are read from its kernel packages.
# /4: the engine's in-image checks (images/checks.py) run and are judged.
FACTS_FORMAT = "seatwright-image-facts/4"
# Where each engine's compiled kernels live: SGLang's own package is Python; its CUDA kernels ship
# in sglang-kernel (module sgl_kernel). torch is read beside them.
KERNEL_PACKAGES = {"vllm": ["vllm"], "sglang": ["sgl_kernel", "sglang"]}


def engine_kernel_archs(image):
    """Sorted architectures of the engine's own kernels in an image's facts; None when not read."""
    image = image or {}
    read = image.get("kernel_archs") or {}
    packages = KERNEL_PACKAGES.get((image.get("engine") or {}).get("name"), [])
    found = [read[package] for package in packages if package in read]
    if not found:
        return None
    return sorted({arch for archs in found for arch in archs}, key=arch_order)


# An option line of argparse's help: two spaces, then the option strings.
_OPTION_LINE = re.compile(r"^  (-{1,2}[A-Za-z0-9][^ ]*(?: [^ ,]+)?(?:, -{1,2}[A-Za-z0-9][^ ]*(?: [^ ,]+)?)*)")
_FLAG = re.compile(r"^--[A-Za-z0-9][A-Za-z0-9_-]*$")


def help_flags(text):
    """Sorted long flags (--name) that an argparse --help lists, with '_' spelled '-'."""
    flags = set()
    for line in text.splitlines():
        match = _OPTION_LINE.match(line)
        if not match:
            continue
        for option in match.group(1).split(", "):
            word = option.split(" ")[0]
            if word.startswith("--") and _FLAG.match(word):
                flags.add(normal_flag(word))
    return sorted(flags)


def help_aliases(text):
    """{spelling: first long name} of every option an argparse --help lists, long names dashed.

    One help line is one option: '--tensor-parallel-size N, -tp N' makes -tp read as
    --tensor-parallel-size, '--enforce-eager, --no-enforce-eager' makes the negation read as the
    flag it turns off.
    """
    aliases = {}
    for line in text.splitlines():
        match = _OPTION_LINE.match(line)
        if not match:
            continue
        words = [option.split(" ")[0] for option in match.group(1).split(", ")]
        spellings = [normal_flag(word) if word.startswith("--") else word for word in words]
        longs = [word for word in spellings if word.startswith("--") and _FLAG.match(word)]
        if not longs:
            continue
        for word in spellings:
            aliases[word] = longs[0]
    return aliases


def normal_flag(flag):
    """vLLM's parser accepts --max_model_len for --max-model-len; compare in the dashed form."""
    return "--" + flag[2:].split("=", 1)[0].replace("_", "-")


def parse_probe(output, image, errors=""):
    """Facts from the probe's stdout: the JSON after PROBE_MARK, checked; ImageError if absent.

    `image` is the inspected image ({id, reference, size_bytes, created, labels}); the result
    keeps it beside what ran inside.
    """
    found = None
    for line in output.splitlines():
        if line.startswith(PROBE_MARK):
            found = line[len(PROBE_MARK) :]
    if found is None:
        tail = (output.strip() + "\n" + errors.strip()).strip().splitlines()[-5:]
        raise ImageError(
            "image %s: the probe printed no result line; is the image's python right? Last "
            "output: %s" % (image.get("reference"), " | ".join(tail) or "(none)")
        )
    try:
        probe = json.loads(found)
    except ValueError as exc:
        raise ImageError("image %s: the probe's result is not JSON (%s)" % (image.get("reference"), exc))
    if not isinstance(probe, dict) or not isinstance(probe.get("versions"), dict):
        raise ImageError("image %s: the probe's result has no versions mapping" % image.get("reference"))
    versions = probe["versions"]
    engine_name = probe.get("engine")
    engine_version = versions.get(engine_name) if engine_name else None
    help_text = probe.get("help") or ""
    flags = help_flags(help_text)
    notes = list(probe.get("notes") or [])
    flashinfer_packages = {
        name: versions.get(name)
        for name in ("flashinfer-python", "flashinfer-cubin", "flashinfer-jit-cache")
        if versions.get(name)
    }
    if len(set(flashinfer_packages.values())) > 1:
        notes.append(
            "the FlashInfer packages disagree: %s; vLLM refuses to start on a mismatch"
            % ", ".join("%s %s" % item for item in sorted(flashinfer_packages.items()))
        )
    override = (probe.get("flashinfer_set") or {}).get("override")
    if override:
        notes.append("FlashInfer was built from the override %s, not the definition's own set" % override)
    imported = probe.get("import") or {}
    if imported and imported.get("exit") != 0:
        notes.append("import %s failed in the image: %s" % (engine_name, imported.get("tail") or "no output"))
    if not flags:
        notes.append(
            "the engine's --help listed no flags (exit %s); launch flags cannot be checked" % probe.get("help_exit")
        )
    checks = {
        name: parse_check(name, (ran or {}).get("output"), (ran or {}).get("exit"))
        for name, ran in sorted((probe.get("checks") or {}).items())
    }
    notes.extend(
        "in-image check %s failed: %s" % (name, "; ".join(check["problems"]))
        for name, check in checks.items()
        if not check["passed"]
    )
    return {
        "format": FACTS_FORMAT,
        "id": image["id"],
        "reference": image.get("reference"),
        "size_bytes": image.get("size_bytes"),
        "created": image.get("created"),
        "labels": image.get("labels") or {},
        "python": probe.get("python"),
        "python_version": probe.get("python_version"),
        "engine": {"name": engine_name, "version": engine_version},
        "versions": versions,
        "torch": versions.get("torch"),
        "torch_cuda": probe.get("torch_cuda"),
        "flashinfer": versions.get("flashinfer-python") or versions.get("flashinfer"),
        "ray": versions.get("ray"),
        "py_spy": versions.get("py-spy"),
        "flashinfer_packages": flashinfer_packages,
        "flashinfer_override": (probe.get("flashinfer_set") or {}).get("override"),
        "kernel_archs": probe.get("kernel_archs") or {},
        "engine_import": imported,
        "cuda_arch_list": probe.get("cuda_arch_list"),
        "torch_arch_list": probe.get("torch_arch_list"),
        "patches": list(probe.get("patches") or []),
        "help_command": probe.get("help_command"),
        "flags": flags,
        "flag_count": len(flags),
        "aliases": help_aliases(help_text),
        "checks": checks,
        "notes": notes,
    }


def argv_flags(argv):
    """The long flags a launch passes, in order, without values or repeats (dashed form)."""
    seen = []
    for word in argv:
        if isinstance(word, str) and word.startswith("--") and len(word) > 2:
            flag = normal_flag(word)
            if flag not in seen:
                seen.append(flag)
    return seen


def recipe_with_image(recipe, image):
    """(recipe with engine facts read from the image, notes); unchanged when no facts are cached.

    The rules then judge what the image holds: FlashInfer's version and the applied patches come
    from the image, whatever the recipe declares.
    """
    if not image:
        return recipe, []
    engine = dict(recipe["engine"])
    notes = []
    declared = (engine.get("flashinfer_version"), sorted(engine.get("patches") or []))
    engine["flashinfer_version"] = image.get("flashinfer")
    engine["patches"] = list(image.get("patches") or [])
    # The in-image checks' results; facts older than the checks carry none ({}), which is not a pass.
    engine["image_checks"] = dict(image.get("checks") or {})
    if image.get("engine", {}).get("version"):
        engine["version"] = image["engine"]["version"]
    read = (engine["flashinfer_version"], sorted(engine["patches"]))
    notes.append(
        "engine image %s (%s): %s %s, torch %s, FlashInfer %s, Ray %s, patches %s; the rules read "
        "these, not the recipe"
        % (
            image.get("reference"),
            (image.get("id") or "")[:19],
            image["engine"].get("name"),
            image["engine"].get("version"),
            image.get("torch"),
            image.get("flashinfer") or "absent",
            image.get("ray") or "absent",
            ", ".join(engine["patches"]) or "none",
        )
    )
    if declared != read:
        notes.append(
            "the recipe declares FlashInfer %s and patches %s; the image holds FlashInfer %s and "
            "patches %s"
            % (
                declared[0] or "unknown",
                ", ".join(declared[1]) or "none",
                read[0] or "absent",
                ", ".join(read[1]) or "none",
            )
        )
    return dict(recipe, engine=engine), notes


def kernel_refusal(image, seat_gpus):
    """A refusal when the image's engine kernels, read from its binaries, cannot run on a seat GPU.

    None when the facts carry no kernel architectures (an older probe) or every GPU is covered.
    """
    archs = engine_kernel_archs(image)
    if archs is None:
        return None
    missing = sorted({gpu["compute_capability"] for gpu in seat_gpus if not runs_on(archs, gpu["compute_capability"])})
    if not missing:
        return None
    return {
        "id": "image-kernel-archs",
        "reason": "a kernel built for another architecture does not load: the engine fails at its "
        "first CUDA call, after the weights are read",
        "detail": "image %s's %s kernels are built for %s (read from its libraries), none for %s"
        % (
            image.get("reference"),
            image["engine"]["name"],
            ", ".join(archs) or "no architecture",
            ", ".join("%s (capability %s)" % (sm_of(cc), cc) for cc in missing),
        ),
        "remedy": "build an image for this GPU (images/vllm-sm120.yml or images/sglang-sm120.yml on SM120) "
        "and pin the seat to it",
    }
