"""playbooks/plan.yml and the seat playbooks, run for real against inventory/example (no node reachable)."""

import json
import os
from pathlib import Path

import pytest
from conftest import PLAYBOOK, run_playbook
from seat_cases import ROOT, h200_gpus, lab_image_facts

pytestmark = pytest.mark.skipif(not os.path.exists(PLAYBOOK), reason="needs the project venv (scripts/bootstrap)")


def run(tmp_path, *args, inventory="inventory/example"):
    return run_playbook(tmp_path, inventory, *args)


def _last_words(result):
    """What a run ends with: the text between its last task header and the recap, on one line."""
    before = result.stdout.split("PLAY RECAP")[0]
    return " ".join(before.split("TASK [")[-1].split())


def test_seat_glm53_check_prints_plan_and_every_rank_and_ends_with_the_refusal_a_real_run_reaches(tmp_path):
    out = tmp_path / "glm53.json"
    result = run(tmp_path, "playbooks/seat-glm53.yml", "--check", "-e", "plan_out=%s" % out)
    # A real run refuses glm53 for its unknowns; check mode ends with that verdict, not 'would serve'.
    assert result.returncode != 0, result.stdout + result.stderr
    last = _last_words(result)
    assert "seat glm53 would be refused: model.revision: not given by the field" in last
    # Only the operator's two pins stand between the seat and a launch: no rule or engineering gap is open.
    refusal = last.split("would be refused: ")[1].split(" (check mode")[0]
    assert refusal == (
        "model.revision: not given by the field; pin the full 40-hex commit before bring-up; "
        "model.repo: the field does not name the checkpoint's repository."
    )
    # Issue 24: no example host has built vllm-sm120, so its flags are checked against the facts
    # recorded from the real build (images/facts/vllm-sm120.json).
    assert "image flags not checked" not in result.stdout
    assert "planned against those recorded from a real build in" in result.stdout
    assert "vllm 0.33.0, torch 2.14.0, FlashInfer 0.7.2.post1" in result.stdout
    assert "would serve" not in result.stdout
    assert "verdict: FITS" in result.stdout
    # The field's multiprocessing launch across nodes [000]: the server on node-a, a headless follower on node-b.
    assert "launch node rank 0 on node-a (server" in result.stdout
    assert "launch node rank 1 on node-b (headless" in result.stdout
    assert "--disable-custom-all-reduce" in result.stdout
    recap = result.stdout.split("PLAY RECAP")[1]
    assert "localhost" in recap and "node-a" not in recap and "node-b" not in recap
    assert not out.exists()


def test_seat_glm53_check_with_the_operators_pins_would_serve(tmp_path):
    pins = ["-e", "seat_model_repo=example-org/GLM-5.3-Flash-NVFP4", "-e", "seat_model_revision=" + "0a1b2c3d4e" * 4]
    result = run(tmp_path, "playbooks/seat-glm53.yml", "--check", *pins)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr
    assert "seat glm53 would serve" in result.stdout
    # Fix 2 is met by the image's facts: the patch and the in-image check recorded by make images.
    assert "patch sm120-nope-mla-fa2 applied; check nope-mla-sm120 passed" in result.stdout
    assert (
        "model.revision 0a1b2c3d4e" in result.stdout and "given by the operator (seat_model_revision)" in result.stdout
    )


def test_plan_writes_the_contract_json(tmp_path):
    out = tmp_path / "vendor.json"
    result = run(
        tmp_path,
        "playbooks/plan.yml",
        "-e",
        "seat=glm53-vendor",
        "-e",
        "plan_out=%s" % out,
        "-e",
        '{"rdma_fabric_mtu": 4200}',
    )
    assert result.returncode == 0, result.stdout + result.stderr
    plan = json.loads(out.read_text())
    assert plan["fits"] is True and plan["checkpoint_bytes"] == 204500000000
    assert [rank["host"] for rank in plan["ranks"]] == ["node-a", "node-b"]
    # Role settings reach the plan with their source: the inventory's value, else the labelled default.
    shown = {item["what"]: (item["value"], item["source"]) for item in plan["provenance"]}
    assert shown["fabric MTU (bytes) on node-a, node-b"] == (4200, "inventory")
    assert shown["NVIDIA driver branch on node-a, node-b"][0] == "580"
    assert "docs/field.md#driver" in shown["NVIDIA driver branch on node-a, node-b"][1]


def test_vendor_glm_on_one_node_fails_with_the_byte_comparison(tmp_path):
    result = run(tmp_path, "playbooks/seat.yml", "-e", "seat=glm53-vendor", "--check", "-e", "seat_hosts=node-a")
    assert result.returncode != 0
    assert (
        "cannot be launched: one node (node-a, 2 GPUs): checkpoint 204.5 GB (190.46 GiB) against 205.3 GB"
        in result.stdout
    )


def test_refused_recipe_stops_the_play_with_the_rule(tmp_path):
    recipe = ROOT / "tests" / "fixtures" / "seats" / "glm53-b12x-mtp.yml"
    result = run(
        tmp_path, "playbooks/plan.yml", "--check", "-e", "seat=glm53-b12x-mtp", "-e", "seat_recipe=%s" % recipe
    )
    assert result.returncode != 0
    assert "refused by rule no-cross-node-speculation" in result.stdout


def test_a_host_outside_the_inventory_is_named(tmp_path):
    result = run(tmp_path, "playbooks/plan.yml", "--check", "-e", "seat=qwen35-122b", "-e", "seat_hosts=node-z")
    assert result.returncode != 0
    assert "host node-z is not in the inventory" in result.stdout


def cache_facts(tmp_path, facts, host="node-a", inventory="inventory/example", stamped=True):
    """Put facts into the fact cache as a probe run through `inventory` leaves them (the preflight
    play stamps them with the node's fabric address; an unstamped cache predates the stamp)."""
    if stamped:
        facts = dict(facts, seatwright_facts_fabric_ip="{{ seatwright_node_fabric_ip }}")
    cache_play = tmp_path / "cache.yml"
    cache_play.write_text(
        "- hosts: %s\n  connection: local\n  gather_facts: false\n  tasks:\n"
        "    - ansible.builtin.set_fact:\n        cacheable: true\n%s"
        "      vars:\n        ansible_python_interpreter: '{{ ansible_playbook_python }}'\n"
        % (host, "".join("        %s: %s\n" % (name, json.dumps(value)) for name, value in facts.items()))
    )
    assert run(tmp_path, str(cache_play), inventory=inventory).returncode == 0


def plan_qwen(tmp_path):
    out = tmp_path / "qwen.json"
    result = run(tmp_path, "playbooks/plan.yml", "-e", "seat=qwen35-122b", "-e", "plan_out=%s" % out)
    assert result.returncode == 0, result.stdout + result.stderr
    return json.loads(Path(out).read_text())


def test_cached_gpu_facts_replace_the_declared_hardware(tmp_path):
    cache_facts(tmp_path, {"seatwright_gpus": h200_gpus()})
    plan = plan_qwen(tmp_path)
    assert plan["hosts"][0]["source"] == "facts"
    assert plan["node_vram_bytes"] == {"node-a": 2 * 143771 * 2**20}
    assert plan["rules"] == []


@pytest.mark.parametrize(
    "inventory, stamped",
    [
        # The lab's node-a (172.30.99.11) is another machine than the example fleet's node-a (10.77.0.11).
        ("inventory/lab", True),
        # Facts cached before the stamp existed say nothing about where they came from.
        ("inventory/example", False),
    ],
)
def test_cached_facts_of_another_inventory_are_not_this_hosts(tmp_path, inventory, stamped):
    cache_facts(tmp_path, {"seatwright_gpus": h200_gpus()}, inventory=inventory, stamped=stamped)
    plan = plan_qwen(tmp_path)
    assert plan["hosts"][0]["source"] == "inventory"
    assert plan["node_vram_bytes"] != {"node-a": 2 * 143771 * 2**20}


def test_the_glm53_dockerfile_renders_with_no_node(tmp_path):
    env_cache = tmp_path / "images"
    result = run(
        tmp_path,
        "playbooks/images.yml",
        "-e",
        "seat=glm53",
        "--check",
        "-e",
        "engine_image_controller_cache_dir=%s" % env_cache,
        inventory="localhost,",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    out = result.stdout
    # The lab's Debian base for amd64, two stages, FlashInfer by hash, the fix-2 patch (issue 48).
    assert "FROM --platform=linux/amd64 seatwright/lab-base:current AS engine" in out
    assert 'ENV TORCH_CUDA_ARCH_LIST="12.0"' in out
    # vLLM turns FlashInfer off unless nvcc is found (no flashinfer-cubin on PyPI for this set).
    assert "CUDA_HOME=/opt/vllm/lib/python3.11/site-packages/nvidia/cu13" in out
    assert "# FlashInfer 0.7.2.post1 as one set (flashinfer-python) from the pypi channel" in out
    assert (
        "'flashinfer-python==0.7.2.post1 --hash=sha256:bfdc18b9e1e4d8d0730fe4343dc0e284"
        "cd0c160086de80f99888bc4867922d49'" in out
    )
    # The packages come from the image's hashed lock, whole and by hash (issue 50), which pins them.
    assert "--no-deps --require-hashes -r /tmp/lock.txt" in out and "-c /tmp/lock.txt" not in out
    lock = (ROOT / "roles" / "engine_image" / "files" / "locks" / "vllm-sm120.txt").read_text()
    for pin in ("vllm==0.33.0", "ray==2.60.0", "py-spy==0.4.3"):
        assert "\n%s --hash=sha256:" % pin in lock, pin
    assert "RUN seatwright-apply-patches /opt/vllm/bin/python /tmp/seatwright-patches sm120-nope-mla-fa2\n" in out
    assert "# patch sm120-nope-mla-fa2" in out and "#   why: GLM-5.3-Flash is sparse MLA with no rotary part" in out
    assert "COPY --from=engine /opt/vllm /opt/vllm" in out and out.count("COPY wheelhouse/") == 1
    assert "node-a" not in out.split("PLAY RECAP")[1]
    assert not env_cache.exists()


def test_a_seat_with_unknowns_is_refused_before_any_node_is_touched(tmp_path):
    # inventory/example's nodes do not exist: any task on them would report them unreachable.
    result = run(tmp_path, "playbooks/seat-glm53.yml", "-e", "plan_out=%s" % (tmp_path / "glm53.json"))
    assert result.returncode != 0
    assert "seat glm53 is not brought up" in result.stdout
    assert "model.revision: not given by the field" in result.stdout
    assert "UNREACHABLE" not in result.stdout and "node-a" not in result.stdout.split("PLAY RECAP")[1]


@pytest.mark.parametrize(
    "playbook,expected",
    # The named glm53 playbook, and any other seat through playbooks/seat.yml -e seat=NAME.
    [
        # glm53 spans two nodes with vLLM's multiprocessing launch: rank 1 is the headless follower.
        (
            ["playbooks/seat-glm53.yml"],
            [
                "node rank 0 on node-a (server): container seatwright-glm53-rank0",
                "node rank 1 on node-b (headless): container seatwright-glm53-rank1",
                "--node-rank 1 --master-addr 10.77.0.11",
            ],
        ),
        # glm53-vendor runs on Ray: the head's Ray container first, the worker joins it.
        (
            ["playbooks/seat.yml", "-e", "seat=glm53-vendor"],
            [
                "node rank 0 on node-a (ray-head+server): container seatwright-glm53-vendor-rank0",
                "first: seatwright-glm53-vendor-rank0-ray-head: "
                "ray start --head --port=6379 --node-ip-address=10.77.0.11",
                "run: ray start --block --address=10.77.0.11:6379 --node-ip-address=10.77.0.12",
            ],
        ),
    ],
)
def test_check_mode_renders_every_ranks_launch_and_touches_no_node(tmp_path, playbook, expected):
    result = run(tmp_path, *playbook, "--check")
    # Both seats hold unknowns: check mode shows every launch, then ends with the refusal.
    assert result.returncode != 0 and "would be refused: " in _last_words(result), result.stdout + result.stderr
    text = " ".join(result.stdout.split())
    for fragment in expected:
        assert fragment in text, fragment
    recap = result.stdout.split("PLAY RECAP")[1]
    assert "UNREACHABLE" not in result.stdout and "node-a" not in recap and "node-b" not in recap


def _cache_image_facts(tmp_path, host="node-a"):
    """The lab image's facts as engine_image_facts cached them on node-a (recorded from the real image)."""
    facts = json.loads((ROOT / "tests" / "fixtures" / "engine_images" / "lab-vllm-cpu-facts.json").read_text())
    cache_facts(tmp_path, {"seatwright_engine_images": {"lab-vllm-cpu": facts}}, host=host, inventory="inventory/lab")


def test_a_flag_the_lab_image_does_not_know_is_refused_by_name(tmp_path):
    _cache_image_facts(tmp_path)
    recipe = ROOT / "tests" / "fixtures" / "seats" / "lab-stale-flag.yml"
    result = run(
        tmp_path,
        "playbooks/plan.yml",
        "--check",
        "-e",
        "seat=lab-stale-flag",
        "-e",
        "seat_recipe=%s" % recipe,
        "-e",
        "seat_hosts=node-a",
        inventory="inventory/lab",
    )
    assert result.returncode != 0
    assert "refused by rule image-flags: node rank 0 on node-a passes --num-scheduler-steps" in result.stdout
    assert "vllm 0.32.0+cpu in image seatwright/vllm-cpu:" in result.stdout


def test_the_lab_seat_plans_against_the_lab_image(tmp_path):
    _cache_image_facts(tmp_path)
    result = run(
        tmp_path,
        "playbooks/plan.yml",
        "--check",
        "-e",
        "seat=lab",
        "-e",
        "seat_hosts=node-a",
        inventory="inventory/lab",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "note: engine image seatwright/vllm-cpu:" in result.stdout
    assert "torch 2.13.0+cpu, FlashInfer absent, Ray 2.60.0" in result.stdout


def test_check_mode_of_a_seat_a_real_run_would_serve_says_so(tmp_path):
    # The lab seat with the lab image's facts read (flags and aliases) has nothing unknown.
    cache_facts(tmp_path, {"seatwright_engine_images": {"lab-vllm-cpu": lab_image_facts()}}, inventory="inventory/lab")
    result = run(
        tmp_path,
        "playbooks/seat.yml",
        "-e",
        "seat=lab",
        "-e",
        "seat_hosts=node-a",
        "--check",
        inventory="inventory/lab",
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "seat lab would serve (check mode: nothing was started) at http://" in " ".join(result.stdout.split())
    assert "would be refused" not in result.stdout
    assert "node-a" not in result.stdout.split("PLAY RECAP")[1]


def test_check_mode_of_the_lab_seat_without_its_image_facts_ends_refused(tmp_path):
    result = run(
        tmp_path,
        "playbooks/seat.yml",
        "-e",
        "seat=lab",
        "-e",
        "seat_hosts=node-a",
        "--check",
        inventory="inventory/lab",
    )
    assert result.returncode != 0
    assert "seat lab would be refused: image flags not checked: no facts of image lab-vllm-cpu" in _last_words(result)
