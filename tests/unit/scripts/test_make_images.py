"""make images: the real images it builds exist as definitions, and make test never runs it."""

import re
import subprocess
import sys

from conftest import ROOT

MAKEFILE = (ROOT / "Makefile").read_text()


def test_make_images_builds_each_real_image_one_at_a_time_through_the_recorder():
    found = re.search(r"^IMAGES := (.+)$", MAKEFILE, re.M)
    assert found, "the Makefile names no IMAGES for make images"
    names = found.group(1).split()
    assert names == ["vllm-sm120", "sglang-sm120"]
    assert all((ROOT / "images" / ("%s.yml" % name)).is_file() for name in names)
    dry = subprocess.run(["make", "-n", "images"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    assert "scripts/images-record $name --out bench/results/images" in dry
    assert "playbooks/images.yml -e engine_image_name=$name --syntax-check" in dry


def test_make_test_does_not_build_the_real_images():
    prerequisites = re.search(r"^test:(.*)$", MAKEFILE, re.M).group(1).split()
    assert "images" not in prerequisites and prerequisites


def test_the_recorder_refuses_an_unknown_image_before_touching_the_lab():
    done = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "images-record"), "no-such-image"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 1 and "no images/no-such-image.yml" in done.stderr
