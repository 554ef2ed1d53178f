"""Retiring superseded engine image builds: the decision (images/retention.py) case by case, and
engine_image_retire against a Docker API on a Unix socket that keeps its images in memory."""

import json
from urllib.parse import parse_qs, unquote, urlsplit

import engine_image_retire
import pytest
import unix_http
from ansible.module_utils.testing import patch_module_args
from ansible_collections.seatwright.fleet.plugins.module_utils.images.definition import NAME_LABEL
from ansible_collections.seatwright.fleet.plugins.module_utils.images.retention import repository, retirement
from conftest import ROOT

PLANNED = "seatwright/lab-vllm-cpu:e4e7cf7012a54b71"
ROLE_TEMPLATES = ROOT / "roles" / "engine_image" / "templates"


def build(tag, created, image_id=None, size=10**9):
    tags = [tag] if isinstance(tag, str) else list(tag)
    return {"id": image_id or "sha256:" + (tags[0] if tags else "none").split(":")[-1], "tags": tags,
            "created": created, "size_bytes": size}  # fmt: skip


@pytest.mark.parametrize(
    "reference, expected",
    [
        ("seatwright/lab-vllm-cpu:e4e7", "seatwright/lab-vllm-cpu"),
        ("registry.local:5000/seatwright/glm:abc", "registry.local:5000/seatwright/glm"),
        ("registry.local:5000/seatwright/glm", "registry.local:5000/seatwright/glm"),
        ("plain", "plain"),
    ],
)
def test_the_repository_of_a_reference_leaves_a_registry_port_alone(reference, expected):
    assert repository(reference) == expected


OLD1 = build("seatwright/lab-vllm-cpu:a5408a74dffc69eb", 300)
OLD2 = build("seatwright/lab-vllm-cpu:0f0f0f0f0f0f0f0f", 200)
OLD3 = build("seatwright/lab-vllm-cpu:1e1e1e1e1e1e1e1e", 100)
NOW = build(PLANNED, 400)


@pytest.mark.parametrize(
    "images, in_use, keep, retire, kept, held, foreign",
    [
        # Only the planned build: nothing to do.
        ([NOW], set(), 1, [], [], [], []),
        # keep 0: every superseded, unused build goes, newest first in the list.
        ([NOW, OLD3, OLD1, OLD2], set(), 0, [OLD1, OLD2, OLD3], [], [], []),
        # keep 1: the newest superseded build stays for a rollback.
        ([NOW, OLD3, OLD1, OLD2], set(), 1, [OLD2, OLD3], [OLD1], [], []),
        ([NOW, OLD1], set(), 2, [], [OLD1], [], []),
        # A build a container was made from stays, and does not use up `keep`.
        ([NOW, OLD1, OLD2, OLD3], {OLD1["id"]}, 1, [OLD3], [OLD2], [OLD1], []),
        # A build somebody tagged elsewhere, or one with no tag left, is not ours to drop.
        (
            [NOW, build(["seatwright/lab-vllm-cpu:aa", "me/experiment:1"], 50), build([], 40, "sha256:dangling")],
            set(),
            0,
            [],
            [],
            [],
            [build(["seatwright/lab-vllm-cpu:aa", "me/experiment:1"], 50), build([], 40, "sha256:dangling")],
        ),
        # The planned build is never retired, whatever else names it or uses it.
        ([build([PLANNED, "seatwright/lab-vllm-cpu:latest"], 10)], set(), 0, [], [], [], []),
        # Before the planned build exists (check mode ahead of a build), the rest is judged the same.
        ([OLD1, OLD2], set(), 1, [OLD2], [OLD1], [], []),
    ],
)
def test_which_builds_are_retired(images, in_use, keep, retire, kept, held, foreign):
    plan = retirement(images, PLANNED, in_use, keep)
    assert plan == {"retire": retire, "kept": kept, "in_use": held, "foreign": foreign}


def test_a_negative_keep_is_refused():
    with pytest.raises(ValueError, match="0 or more"):
        retirement([NOW], PLANNED, set(), -1)


class _Engine:
    """GET /images/json (label filter), GET /containers/json, DELETE /images/<tag>, over a Unix socket."""

    def __init__(self, path, images, containers):
        engine = self
        self.images, self.containers, self.deleted, self.filters = images, containers, [], []

        class Handler(unix_http.JsonHandler):
            def do_GET(self):
                url = urlsplit(self.path)
                if url.path == "/images/json":
                    engine.filters.append(json.loads(parse_qs(url.query)["filters"][0]))
                    self._json(200, [
                        {"Id": i["id"], "RepoTags": i["tags"] or ["<none>:<none>"], "Created": i["created"],
                         "Size": i["size_bytes"]}
                        for i in engine.images
                    ])  # fmt: skip
                elif url.path == "/containers/json":
                    self._json(200, [{"Id": "c%d" % n, "ImageID": i} for n, i in enumerate(engine.containers)])
                else:
                    self._json(404, {"message": "page not found"})

            def do_DELETE(self):
                tag = unquote(urlsplit(self.path).path[len("/images/") :])
                image = next((i for i in engine.images if tag in i["tags"]), None)
                if image is None:
                    self._json(404, {"message": "No such image: %s" % tag})
                    return
                engine.deleted.append(tag)
                image["tags"].remove(tag)
                if not image["tags"]:
                    engine.images.remove(image)
                self._json(200, [{"Untagged": tag}])

        self.server = unix_http.serve(path, Handler)

    def close(self):
        unix_http.stop(self.server)


def run(capsys, args, check_mode=False):
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            engine_image_retire.main()
    return json.loads(capsys.readouterr().out)


@pytest.fixture
def engine(tmp_path):
    images = [build(PLANNED, 400), build("seatwright/lab-vllm-cpu:a5408a74dffc69eb", 300),
              build("seatwright/lab-vllm-cpu:0f0f0f0f0f0f0f0f", 200, size=2 * 10**9)]  # fmt: skip
    made = _Engine(str(tmp_path / "docker.sock"), images, containers=[])
    yield made
    made.close()


def _args(tmp_path, **extra):
    socket_path = str(tmp_path / "docker.sock")
    return dict({"name": "lab-vllm-cpu", "reference": PLANNED, "keep": 0, "docker_socket": socket_path}, **extra)


def test_check_mode_says_what_would_go_and_removes_nothing(capsys, tmp_path, engine):
    result = run(capsys, _args(tmp_path), check_mode=True)
    assert result["changed"] is True
    assert [r["tags"] for r in result["retired"]] == [
        ["seatwright/lab-vllm-cpu:a5408a74dffc69eb"],
        ["seatwright/lab-vllm-cpu:0f0f0f0f0f0f0f0f"],
    ]
    assert result["freed_bytes"] == 3 * 10**9 and "would retire 2" in result["msg"]
    assert engine.deleted == [] and len(engine.images) == 3
    assert engine.filters == [{"label": ["org.seatwright.image=lab-vllm-cpu"]}]


def test_retiring_removes_by_tag_and_a_second_run_changes_nothing(capsys, tmp_path, engine):
    first = run(capsys, _args(tmp_path, keep=1))
    assert first["changed"] is True
    assert engine.deleted == ["seatwright/lab-vllm-cpu:0f0f0f0f0f0f0f0f"]
    assert [r["tags"] for r in first["kept"]] == [["seatwright/lab-vllm-cpu:a5408a74dffc69eb"]]
    again = run(capsys, _args(tmp_path, keep=1))
    assert again["changed"] is False and again["retired"] == []
    assert "no superseded build" in again["msg"]


def test_a_build_a_container_was_made_from_is_kept(capsys, tmp_path, engine):
    engine.containers.append(engine.images[1]["id"])
    result = run(capsys, _args(tmp_path))
    assert [r["tags"] for r in result["in_use"]] == [["seatwright/lab-vllm-cpu:a5408a74dffc69eb"]]
    assert engine.deleted == ["seatwright/lab-vllm-cpu:0f0f0f0f0f0f0f0f"]


def test_no_docker_engine_is_a_clear_failure(capsys, tmp_path):
    result = run(capsys, _args(tmp_path, docker_socket=str(tmp_path / "absent.sock")))
    assert result["failed"] is True
    assert "is dockerd running?" in result["msg"]


def test_a_negative_keep_fails_naming_it(capsys, tmp_path):
    result = run(capsys, _args(tmp_path, keep=-2))
    assert result["failed"] is True and "keep is -2" in result["msg"]


def test_the_label_retirement_looks_for_is_the_one_every_build_is_given():
    template = ROLE_TEMPLATES / "labels.Dockerfile.j2"
    assert template.read_text().startswith('LABEL %s="{{ __engine_image_plan.definition.name }}"' % NAME_LABEL)
