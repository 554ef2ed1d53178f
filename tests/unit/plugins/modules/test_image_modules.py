"""engine_image_plan, engine_image_context and engine_image_facts through their main().

The plan reads the lab image's real definition and templates; the facts probe talks to the
Docker Engine API stand-in of test_images.py on a Unix socket.
"""

import json
import tarfile

import engine_image_context
import engine_image_facts
import engine_image_plan
import pytest
from ansible.module_utils.testing import patch_module_args
from test_images import IMAGE, _FakeEngine, _options, _probe_line


def run(capsys, module, args, check_mode=False):
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            module.main()
    return json.loads(capsys.readouterr().out)


def test_plan_returns_the_content_tag_and_the_build_inputs(capsys, tmp_path):
    result = run(capsys, engine_image_plan, _options(tmp_path))
    assert result.get("failed") is not True, result
    assert result["changed"] is False and result["tag"]
    again = run(capsys, engine_image_plan, _options(tmp_path, extra_patches=["example-mla-gate"]))
    assert again["tag"] != result["tag"]


def test_plan_refuses_an_unknown_patch_by_name(capsys, tmp_path):
    result = run(capsys, engine_image_plan, _options(tmp_path, extra_patches=["no-such-patch"]))
    assert result["failed"] is True and "no-such-patch" in result["msg"]


def test_context_is_written_once_and_check_mode_writes_nothing(capsys, tmp_path):
    dockerfile = tmp_path / "Dockerfile"
    dockerfile.write_text("FROM scratch\n")
    args = {"dest": str(tmp_path / "ctx.tar"), "files": {"Dockerfile": str(dockerfile)}}
    predicted = run(capsys, engine_image_context, args, check_mode=True)
    assert predicted["changed"] is True and not (tmp_path / "ctx.tar").exists()
    assert run(capsys, engine_image_context, args)["changed"] is True
    with tarfile.open(tmp_path / "ctx.tar") as archive:
        assert "Dockerfile" in archive.getnames()
    assert run(capsys, engine_image_context, args)["changed"] is False


def test_context_names_what_is_missing(capsys, tmp_path):
    result = run(capsys, engine_image_context, {"dest": str(tmp_path / "c.tar"), "files": {"a": str(tmp_path / "x")}})
    assert result["failed"] is True and result["msg"].endswith("x missing on the controller")


def test_facts_are_keyed_by_the_definition_name(capsys, tmp_path):
    socket_path = str(tmp_path / "docker.sock")
    engine = _FakeEngine(socket_path, _probe_line())
    args = {
        "name": "lab-vllm-cpu",
        "image": "seatwright/vllm-cpu:abc",
        "engine": "vllm",
        "cache_dir": str(tmp_path / "facts"),
        "docker_socket": socket_path,
    }
    try:
        result = run(capsys, engine_image_facts, args)
        missing = run(capsys, engine_image_facts, dict(args, image="seatwright/other:1"))
    finally:
        engine.close()
    facts = result["ansible_facts"]["seatwright_engine_images"]["lab-vllm-cpu"]
    assert (result["changed"], result["cached"], facts["id"]) == (False, False, IMAGE["id"])
    assert missing["failed"] is True
    assert missing["msg"].startswith("lab-vllm-cpu: image seatwright/other:1 is not in this node's Docker engine")


def test_facts_without_an_engine_fail_with_the_name(capsys, tmp_path):
    args = {"name": "lab", "image": "x:1", "engine": "vllm", "docker_socket": str(tmp_path / "none.sock")}
    result = run(capsys, engine_image_facts, dict(args, cache_dir=str(tmp_path)))
    assert result["failed"] is True and result["msg"].startswith("lab: ") and "is dockerd running" in result["msg"]
