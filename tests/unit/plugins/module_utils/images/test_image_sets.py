"""Issue 24: a FlashInfer set that disagrees, or wheels resolved for another Python, stop before any build.

Through the entry points the role calls first: engine_image_plan (the definition, before the
wheelhouse is downloaded) and engine_image_context (the downloaded wheelhouse, before it is
packed and sent to the builder). The definitions are written here, from PyPI's real file names.
"""

import hashlib
import json
import tarfile

import engine_image_context
import engine_image_plan
import pytest
import yaml
from ansible.module_utils.testing import patch_module_args
from ansible_collections.seatwright.fleet.plugins.module_utils.images.wheels import wheel_misfit
from conftest import ROOT

ROLE = ROOT / "roles" / "engine_image"
# What every wheel file these tests write holds, and its sha256.
WHEEL_BYTES_SHA256 = hashlib.sha256(b"wheel").hexdigest()
HASH = {
    "flashinfer_python-0.7.0.post1-py3-none-any.whl": "c7adf826568d61fc1b7d3aadd4cae387a35a138b"
    "fc08e2deca2f34ecfa280716",
    "flashinfer_python-0.7.4-py3-none-any.whl": "a" * 64,
    "flashinfer_cubin-0.6.13-py3-none-any.whl": "41e4848c2d09d220e8394489b2fb6cfec6b6ad09f897b5ab8b39fc23055f6c24",
    "flashinfer_cubin-0.7.0.post1-py3-none-any.whl": "b" * 64,
    "flashinfer_jit_cache-0.7.0.post1-cp311-cp311-manylinux_2_28_x86_64.whl": "c" * 64,
}


def _definition(flashinfer_files, python_version="3.12", local_wheels=()):
    return {
        "schema_version": 1,
        "name": "vllm-sm120",
        "title": "vLLM for SM120",
        "repository": "seatwright/vllm-sm120",
        "template": "engine-cuda",
        "engine": {"name": "vllm", "version": "0.33.0", "device": "cuda"},
        "python": "/opt/vllm/bin/python",
        "base": {"reference": "seatwright/lab-base:current", "digest": None, "from": "controller"},
        "packages": ["vllm==0.33.0", "ray[default]==2.60.0", "py-spy==0.4.3"],
        "flashinfer": {
            "version": "0.7.0.post1",
            "channel": "pypi",
            "index_url": "https://pypi.org/simple/",
            "build": None,
            "wheels": [{"file": name, "sha256": HASH[name]} for name in flashinfer_files],
        },
        "local_wheels": [{"file": name, "sha256": WHEEL_BYTES_SHA256} for name in local_wheels],
        "wheel_target": {"python_version": python_version, "platform": "manylinux_2_36_x86_64"},
        "cuda_arch_list": "12.0",
        "patches": [],
    }


def _plan(capsys, tmp_path, data):
    path = tmp_path / "images" / "vllm-sm120.yml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    wheels = tmp_path / "wheels"
    wheels.mkdir(exist_ok=True)
    for wheel in data["local_wheels"]:
        (wheels / (wheel["file"] if isinstance(wheel, dict) else wheel)).write_bytes(b"wheel")
    args = {
        "definition_path": str(path),
        "template_paths": [str(ROLE / "templates" / "vllm-cpu.Dockerfile.j2")],
        "apply_script_path": str(ROLE / "files" / "apply-patches"),
        "patch_dirs": [str(ROLE / "files" / "patches")],
        "locks_dir": str(ROLE / "files" / "locks"),
        "local_wheels_dir": str(wheels),
        "base_image_id": "sha256:" + "1" * 64,
    }
    return _run(capsys, engine_image_plan, args)


def _run(capsys, module, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            module.main()
    return json.loads(capsys.readouterr().out)


@pytest.mark.parametrize(
    "files, words",
    [
        # PyPI today: flashinfer-python reaches 0.7.4 while flashinfer-cubin stops at 0.6.13.
        (
            ["flashinfer_python-0.7.0.post1-py3-none-any.whl", "flashinfer_cubin-0.6.13-py3-none-any.whl"],
            "the FlashInfer packages disagree in version: the set is 0.7.0.post1 but flashinfer-cubin is 0.6.13",
        ),
        (
            ["flashinfer_python-0.7.4-py3-none-any.whl", "flashinfer_cubin-0.7.0.post1-py3-none-any.whl"],
            "flashinfer-python is 0.7.4",
        ),
    ],
)
def test_a_flashinfer_set_that_disagrees_in_version_is_refused_before_any_build(capsys, tmp_path, files, words):
    result = _plan(capsys, tmp_path, _definition(files))
    assert result.get("failed") is True, result
    assert words in result["msg"] and "pin every one at 0.7.0.post1" in result["msg"]


@pytest.mark.parametrize(
    "files, local_wheels, words",
    [
        (
            ["flashinfer_python-0.7.0.post1-py3-none-any.whl", list(HASH)[4]],
            (),
            "flashinfer_jit_cache-0.7.0.post1-cp311-cp311-manylinux_2_28_x86_64.whl is built for Python cp311, "
            "and the image runs Python 3.12",
        ),
        (
            ["flashinfer_python-0.7.0.post1-py3-none-any.whl"],
            ["ray-2.60.0-cp311-cp311-manylinux2014_x86_64.whl"],
            "ray-2.60.0-cp311-cp311-manylinux2014_x86_64.whl is built for Python cp311, and the image runs Python 3.12",
        ),
        (
            ["flashinfer_python-0.7.0.post1-py3-none-any.whl"],
            ["vllm-0.33.0-cp38-abi3-manylinux_2_28_aarch64.whl"],
            "is built for manylinux_2_28_aarch64, and the image runs on manylinux_2_36_x86_64",
        ),
    ],
)
def test_wheels_resolved_for_another_python_are_refused_before_any_build(capsys, tmp_path, files, local_wheels, words):
    result = _plan(capsys, tmp_path, _definition(files, local_wheels=local_wheels))
    assert result.get("failed") is True, result
    assert words in result["msg"] and "--python-version 3.12" in result["msg"]


def test_a_whole_set_for_the_images_python_is_planned(capsys, tmp_path):
    files = ["flashinfer_python-0.7.0.post1-py3-none-any.whl", "flashinfer_cubin-0.7.0.post1-py3-none-any.whl"]
    result = _plan(capsys, tmp_path, _definition(files, python_version="3.11", local_wheels=[list(HASH)[4]]))
    assert result.get("failed") is not True, result
    assert result["definition"]["flashinfer"]["packages"] == ["flashinfer-cubin", "flashinfer-python"]


def test_a_wheelhouse_downloaded_for_the_controllers_python_is_refused_before_packing(capsys, tmp_path):
    house = tmp_path / "wheelhouse"
    house.mkdir()
    for name in ("ray-2.60.0-cp311-cp311-manylinux2014_x86_64.whl", "py_spy-0.4.3-py2.py3-none-manylinux1_x86_64.whl"):
        (house / name).write_bytes(b"wheel")
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM scratch\n")
    dest = tmp_path / "ctx.tar"
    args = {
        "dest": str(dest),
        "files": {"Dockerfile": str(dockerfile)},
        "wheelhouse": str(house),
        "wheel_target": {"python_version": "3.12", "platform": "manylinux_2_36_x86_64"},
    }
    result = _run(capsys, engine_image_context, args)
    assert result.get("failed") is True, result
    assert "ray-2.60.0-cp311-cp311-manylinux2014_x86_64.whl is built for Python cp311" in result["msg"]
    assert "py_spy" not in result["msg"] and not dest.exists()
    args["wheel_target"]["python_version"] = "3.11"
    assert _run(capsys, engine_image_context, args).get("failed") is not True


@pytest.mark.parametrize(
    "filename, fits",
    [
        # Names from the lab wheelhouse pip downloaded for Python 3.11 on manylinux_2_36_x86_64.
        ("interegular-0.3.3-py37-none-any.whl", True),
        ("py_spy-0.4.3-py2.py3-none-manylinux1_x86_64.whl", True),
        ("vllm-0.33.0-cp38-abi3-manylinux_2_28_x86_64.whl", True),
        ("sglang-0.5.23-cp311-cp311-manylinux_2_34_x86_64.whl", True),
        ("sglang-0.5.23-cp312-cp312-manylinux_2_34_x86_64.whl", False),
        ("numpy-2.3.0-cp310-cp310-manylinux_2_28_x86_64.whl", False),
        ("future_only-1.0-py312-none-any.whl", False),
        ("sglang-0.5.23-cp311-cp311-manylinux_2_38_x86_64.whl", False),
    ],
)
def test_a_wheel_fits_the_images_python_as_pip_reads_its_tags(filename, fits):
    target = {"python_version": "3.11", "platform": "manylinux_2_36_x86_64"}
    assert (wheel_misfit(filename, target) is None) is fits, wheel_misfit(filename, target)


# ---------------------------------------------------------------- issue 50 item 4: what goes into the context

RAY = "ray-2.60.0-cp311-cp311-manylinux2014_x86_64.whl"
PYSPY = "py_spy-0.4.3-py2.py3-none-manylinux1_x86_64.whl"
TARGET = {"python_version": "3.11", "platform": "manylinux_2_36_x86_64"}


def _pack(capsys, tmp_path, wheels, lock_text, **extra):
    house = tmp_path / "wheelhouse"
    house.mkdir()
    for name, data in wheels.items():
        (house / name).write_bytes(data)
    lock = tmp_path / "lock.txt"
    lock.write_text(lock_text)
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM scratch\n")
    dest = tmp_path / "ctx.tar"
    args = dict(
        {"dest": str(dest), "files": {"Dockerfile": str(dockerfile)}, "wheelhouse": str(house)},
        wheel_target=TARGET,
        lock=str(lock),
        **extra,
    )
    result = _run(capsys, engine_image_context, args)
    packed = sorted(tarfile.open(dest).getnames()) if dest.exists() else None
    return result, packed


def _sha(data):
    return hashlib.sha256(data).hexdigest()


def test_a_swapped_wheel_is_refused_before_packing(capsys, tmp_path):
    lock = "ray==2.60.0 --hash=sha256:%s\npy-spy==0.4.3 --hash=sha256:%s\n" % (_sha(b"ray"), _sha(b"py-spy"))
    result, packed = _pack(capsys, tmp_path, {RAY: b"someone else's ray", PYSPY: b"py-spy"}, lock)
    assert result.get("failed") is True and packed is None, result
    assert RAY in result["msg"] and "does not name" in result["msg"]


@pytest.mark.parametrize("hashed", [True, False], ids=["lock with hashes", "lock without hashes"])
def test_an_extra_wheel_with_a_higher_build_tag_of_a_pinned_package_is_not_packed(capsys, tmp_path, hashed):
    # pip prefers the higher build tag: ray-2.60.0-1-... would have been installed over the named wheel.
    extra = "ray-2.60.0-1-cp311-cp311-manylinux2014_x86_64.whl"
    lock = "ray==2.60.0%s\n" % (" --hash=sha256:%s" % _sha(b"ray") if hashed else "")
    result, packed = _pack(capsys, tmp_path, {RAY: b"ray", extra: b"a ray of another build"}, lock)
    assert result.get("failed") is True and packed is None, result
    assert extra in result["msg"]


def test_only_what_the_resolution_named_goes_into_the_context(capsys, tmp_path):
    lock = "ray==2.60.0 --hash=sha256:%s\n" % _sha(b"ray")
    result, packed = _pack(capsys, tmp_path, {RAY: b"ray", PYSPY: b"not in the lock"}, lock)
    assert result.get("failed") is not True, result
    assert packed == ["Dockerfile", "wheelhouse/" + RAY] and result["wheels_left_out"] == [PYSPY]


def test_a_swapped_local_wheel_is_refused(capsys, tmp_path):
    data = _definition(["flashinfer_python-0.7.0.post1-py3-none-any.whl"], "3.11", [RAY])
    data["local_wheels"][0]["sha256"] = _sha(b"the wheel that was pinned")
    result = _plan(capsys, tmp_path, data)
    assert result.get("failed") is True and "not the pinned" in result["msg"], result


def test_a_local_wheel_named_without_its_sha256_is_refused(capsys, tmp_path):
    data = _definition(["flashinfer_python-0.7.0.post1-py3-none-any.whl"], "3.11", [RAY])
    data["local_wheels"] = [RAY]
    result = _plan(capsys, tmp_path, data)
    assert result.get("failed") is True and "sha256" in result["msg"], result
