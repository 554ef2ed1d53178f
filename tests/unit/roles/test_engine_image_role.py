"""The engine_image role's build: in the background with its progress shown, never a silent one-shot task."""

import yaml
from conftest import ROOT

BUILD = ROOT / "roles" / "engine_image" / "tasks" / "build.yml"


def tasks():
    found = []

    def walk(items):
        for task in items:
            found.append(task)
            for key in ("block", "rescue", "always"):
                walk(task.get(key, []))

    walk(yaml.safe_load(BUILD.read_text()))
    return found


def test_the_build_runs_in_the_background_and_a_wait_shows_its_step_and_elapsed_time():
    every = tasks()
    # community.docker.docker_image printed nothing until a build of many minutes ended.
    assert not [task["name"] for task in every if "community.docker.docker_image" in task]
    build = [t for t in every if t.get("seatwright.fleet.engine_image_build", {}).get("state", "built") == "built"]
    background = [t for t in build if t.get("async") and t.get("poll") == 0]
    assert len(background) == 1 and background[0]["when"] == "not ansible_check_mode"
    assert background[0]["seatwright.fleet.engine_image_build"]["progress_file"]
    # Check mode asks the same module, which builds nothing.
    assert [t for t in build if t.get("when") == "ansible_check_mode"]
    wait = [t for t in every if t.get("seatwright.fleet.engine_image_build", {}).get("state") == "progress"]
    assert len(wait) == 1 and wait[0]["until"] == "__engine_image_progress.done"
    assert wait[0]["delay"] == "{{ engine_image_build_poll_s }}"


def test_a_tag_already_on_the_builder_skips_the_whole_build_block():
    block = next(task for task in tasks() if task.get("block"))
    assert block["when"] == "__engine_image_on_builder.images | length == 0"
