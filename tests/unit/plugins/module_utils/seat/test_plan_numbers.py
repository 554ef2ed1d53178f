"""Issue 48 parts 2 to 4: the field's FlashInfer nightly, a plan's numbers equal to its launch, strict YAML,
and a container py-spy can attach to. Each test goes through today's entry points: rules.evaluate,
make_plan, recipe loading and the container spec with its read-back."""

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.seat import engine as io_engine
from ansible_collections.seatwright.fleet.plugins.module_utils.io.seat.plan import plan_seat
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.container import observed, read_back, shown_run
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.fit import FIELD_RUNTIME_RESERVE_BYTES
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.plan import make_plan, plan_lines
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.recipe import recipe_from_text, validate_recipe
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.rules import RULE_IDS, evaluate
from seat_cases import ROOT, SCHEMA, SEATS, example_nodes, mutated, profile_gpus, seat_data
from test_container import IMAGE_ENV, inspect_of, lab_node

_gpus = profile_gpus


SM120_X4 = _gpus("rtx-pro-6000-maxq", 2) + _gpus("rtx-pro-6000-ws", 2)


def _glm53(flashinfer):
    data = mutated(seat_data("glm53"), ("engine", "flashinfer_version"), flashinfer)
    return validate_recipe(data, SCHEMA, "seats/glm53.yml", RULE_IDS)


# ------------------------------------------------------------------ the field's FlashInfer nightly


@pytest.mark.parametrize(
    "version,case",
    [("0.6.18.dev20260828", "dated nightly"), ("0.6.18", "release"), ("0.6.19.dev20260901", "dated nightly")],
)
def test_the_fields_nightly_and_the_release_meet_the_flashinfer_rule(version, case):
    result = evaluate(_glm53(version), SM120_X4, "seats/glm53.yml")
    entry = next(item for item in result["applied"] if item["id"] == "nope-mla-flashinfer")
    assert entry["details"][0].startswith("engine.flashinfer_version: %s (%s: %s is " % (version, case, version))
    assert not any("nope-mla-flashinfer" in line for line in result["unverified"])


@pytest.mark.parametrize(
    "version,case",
    [
        ("0.6.18.dev20260801", "too-early nightly"),
        ("0.6.17", "older release"),
        ("0.6.18rc1", "pre-release"),
        ("0.6.18.dev7", "undated dev build"),
    ],
)
def test_earlier_builds_are_refused_saying_which_case_was_seen(version, case):
    with pytest.raises(SeatError) as caught:
        evaluate(_glm53(version), SM120_X4, "seats/glm53.yml")
    message = str(caught.value)
    assert "seats/glm53.yml: rule nope-mla-flashinfer: engine.flashinfer_version is %r" % version in message
    assert "or a nightly of that line or later dated 2026-08-28 or after; seen: %s (" % case in message


# ------------------------------------------------------------ py-spy can attach: SYS_PTRACE, rendered, read back


def _spec_and_inspect(seat, nodes):
    plan = make_plan(seat_data(seat), SCHEMA, seat, nodes, "seats/%s.yml" % seat)
    spec = plan["ranks"][0]["container_spec"]
    return plan, spec, inspect_of(spec)


@pytest.mark.parametrize("seat", ["lab", "glm53"])
def test_sys_ptrace_is_in_the_rendered_spec_the_docker_run_and_the_read_back(monkeypatch, tmp_path, seat):
    nodes = [lab_node("node-a"), lab_node("node-b")] if seat == "lab" else example_nodes()
    plan, spec, inspect = _spec_and_inspect(seat, nodes)
    assert "SYS_PTRACE" in spec["cap_add"]
    for rank in plan["ranks"]:
        for each in (rank["container_spec"], rank["setup_container_spec"]):
            assert each is None or "SYS_PTRACE" in each["cap_add"]
    shown = shown_run(spec)
    assert shown[shown.index("SYS_PTRACE") - 1] == "--cap-add"
    # The io side starts the container with exactly docker_run_argv: the capability reaches Docker.
    ran = []
    monkeypatch.setattr(io_engine, "docker", lambda *argv, **_: ran.append(argv) or (0, "cid\n", ""))
    io_engine.run_spec(spec, str(tmp_path / "x.env"))
    assert ran[0][ran[0].index("SYS_PTRACE") - 1] == "--cap-add"
    # Read back as Docker reports it, with or without the kernel's CAP_ prefix, in any order.
    assert read_back(spec, inspect, image_env=IMAGE_ENV) == []
    inspect["HostConfig"]["CapAdd"] = ["CAP_" + cap for cap in reversed(spec["cap_add"])]
    assert observed(inspect)["cap_add"] == list(reversed(spec["cap_add"]))
    assert read_back(spec, inspect, image_env=IMAGE_ENV) == []
    inspect["HostConfig"]["CapAdd"] = [cap for cap in spec["cap_add"] if cap != "SYS_PTRACE"] or None
    assert read_back(spec, inspect, image_env=IMAGE_ENV) == [
        "%s: cap_add: %s, the plan says %s"
        % (spec["name"], json.dumps([c for c in spec["cap_add"] if c != "SYS_PTRACE"]), json.dumps(spec["cap_add"]))
    ]


# ------------------------------------------------------------------ a key given twice is refused, not dropped


def test_a_recipe_with_a_key_given_twice_is_refused_naming_the_file_and_the_key(tmp_path):
    text = (SEATS / "glm53-fp8.yml").read_text()
    assert "\nserving:\n" in text
    doubled = text.replace("\nserving:\n", "\nserving:\n  max_model_len: 65536\n", 1)
    recipe = tmp_path / "glm53-fp8.yml"
    recipe.write_text(doubled)
    with pytest.raises(SeatError) as caught:
        plan_seat("glm53-fp8", str(recipe), str(ROOT / "schemas" / "seat.schema.json"), example_nodes())
    message = str(caught.value)
    assert "glm53-fp8.yml: key 'max_model_len' is given twice in one mapping (lines " in message
    assert message.endswith("keep one")
    # The recipe as checked in loads: only the doubled key is refused.
    assert recipe_from_text(text, "seats/glm53-fp8.yml")["serving"]["max_model_len"] == 131072


def test_an_inventory_with_a_key_given_twice_is_refused_by_the_projects_ansible_cfg(tmp_path):
    inventory = tmp_path / "inventory"
    shutil.copytree(ROOT / "inventory" / "example", inventory)
    host_vars = inventory / "host_vars" / "node-b.yml"
    host_vars.write_text(host_vars.read_text() + "seatwright_node_gpu_count: 4\n")
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"))
    env.pop("ANSIBLE_DUPLICATE_YAML_DICT_KEY", None)
    command = [str(Path(sys.executable).parent / "ansible-inventory"), "-i", str(inventory / "hosts.yml")]
    ran = subprocess.run(command + ["--host", "node-b"], env=env, cwd=str(ROOT), capture_output=True, text=True)
    assert ran.returncode != 0, ran.stdout
    assert "Found duplicate mapping key 'seatwright_node_gpu_count'" in ran.stderr
    # The same inventory without the doubled key reads.
    host_vars.write_text(host_vars.read_text().replace("seatwright_node_gpu_count: 4\n", ""))
    ran = subprocess.run(command + ["--host", "node-b"], env=env, cwd=str(ROOT), capture_output=True, text=True)
    assert ran.returncode == 0, ran.stderr
    assert json.loads(ran.stdout)["seatwright_node_gpu_count"] == 2


# ------------------------------------------------------------------ the context the engines derive, not max x factor

LLAMA31 = {
    "max_position_embeddings": 131072,
    "rope_scaling": {
        "rope_type": "llama3",
        "factor": 8.0,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
        "original_max_position_embeddings": 8192,
    },
}
YARN_STRETCHED = {"max_position_embeddings": 65536, "rope_scaling": {"type": "yarn", "factor": 2.0}}


def _planned_with_config(seat, config, max_model_len):
    nodes = example_nodes()[:1] if seat_data(seat)["topology"]["nodes"] == 1 else example_nodes()
    revision = "a" * 40
    data = mutated(seat_data(seat), ("model", "revision"), revision)
    data = mutated(data, ("model", "revision_status"), "pinned")
    data = mutated(data, ("serving", "max_model_len"), max_model_len)
    nodes[0]["seatwright_checkpoint"] = {"revision": revision, "model_config": config}
    return make_plan(data, SCHEMA, seat, nodes, "seats/%s.yml" % seat)


def _context_refusal(plan):
    return next((item for item in plan["refusals"] if item["id"] == "context-within-model"), None)


@pytest.mark.parametrize(
    "seat,engine,words",
    [
        ("glm53-vendor", "vLLM", "'User-specified max_model_len (262144) is greater than the derived max_model_len')"),
        (
            "inkling-small",
            "SGLang",
            "'User-specified context_length (262144) is greater than the derived context_length')",
        ),
    ],
)
def test_a_llama31_config_serving_twice_its_length_is_refused_with_the_engines_reason(seat, engine, words):
    plan = _planned_with_config(seat, LLAMA31, 262144)
    refusal = _context_refusal(plan)
    assert refusal is not None, "a 131,072 config with llama3 x8 scaling must not serve 262,144"
    assert plan["launchable"] is False
    detail = refusal["detail"]
    assert detail.startswith(
        "serving.max_model_len 262,144 is above the model's own 131,072 tokens (%s derives" % engine
    )
    assert "%s refuses it at start (%s" % (engine, words) in detail
    assert "_ALLOW_" in refusal["remedy"]
    # At the config's own length the plan accepts it.
    assert _context_refusal(_planned_with_config(seat, LLAMA31, 131072)) is None


def test_yarn_over_the_original_length_follows_each_engine():
    # vLLM 0.33.0 counts YaRN as already in max_position_embeddings; SGLang 0.5.23 multiplies rope_scaling's
    # factor when it gives no original_max_position_embeddings.
    vllm = _context_refusal(_planned_with_config("glm53-vendor", YARN_STRETCHED, 131072))
    assert vllm is not None and "yarn rope scaling is already counted in it" in vllm["detail"]
    assert _context_refusal(_planned_with_config("inkling-small", YARN_STRETCHED, 131072)) is None
    with_original = dict(
        YARN_STRETCHED, rope_scaling=dict(YARN_STRETCHED["rope_scaling"], original_max_position_embeddings=32768)
    )
    assert _context_refusal(_planned_with_config("inkling-small", with_original, 131072)) is not None


# ------------------------------------------------------------------ a resident seat plans on what its co-tenants leave


def _fraction_on_launch(plan):
    argv = plan["ranks"][0]["argv"]
    return float(argv[argv.index("--gpu-memory-utilization") + 1]) if "--gpu-memory-utilization" in argv else None


def _nodes_without_cotenant_memory(how):
    nodes = example_nodes()
    if how == "memory-left-out":
        nodes[1]["seatwright_node_cotenants"] = [
            {key: value for key, value in item.items() if key not in ("memory", "memory_source")}
            for item in nodes[1]["seatwright_node_cotenants"]
        ]
    else:
        for node in nodes:
            node.pop("seatwright_node_cotenants", None)
    return nodes


@pytest.mark.parametrize("how", ["memory-left-out", "none-declared"])
def test_glm53_fp8_without_cotenant_memory_is_not_fits_and_names_one_fraction(how):
    plan = make_plan(
        seat_data("glm53-fp8"), SCHEMA, "glm53-fp8", _nodes_without_cotenant_memory(how), "seats/glm53-fp8.yml"
    )
    assert plan["verdict"] != "fits" and plan["launchable"] is False
    fraction = _fraction_on_launch(plan)
    # One fraction: the launch, the fit, the rule that set it, and every rank's budget.
    assert fraction == 0.75
    assert plan["fit_inputs"]["utilization"]["value"] == fraction
    rule = next(item for item in plan["rules"] if item["id"] == "gpu-memory-cotenants")
    assert rule["details"][0].startswith("serving.gpu_memory_utilization: unset -> 0.75 (")
    assert "topology.resident_fraction 0.75" in rule["details"][0]
    for rank in plan["per_rank"]:
        assert rank["budget_bytes"] == int(rank["total_bytes"] * fraction)
    for line in plan_lines(plan):
        if "of each card" in line or "utilisation" in line or "--gpu-memory-utilization" in line:
            named = {float(x) for x in re.findall(r"(?<![\d.])0\.\d\d(?![\d])", line)}
            assert named <= {0.75, 0.78, 0.9}, line  # 0.78 aborted in the field; 0.90: the run's engine default
    assert "--gpu-memory-utilization 0.9 " not in " ".join(plan_lines(plan))


def test_without_a_recorded_fraction_the_seat_is_refused_asking_for_the_cotenants_memory():
    data = seat_data("glm53-fp8")
    data["topology"].pop("resident_fraction", None)
    data["topology"].pop("resident_fraction_source", None)
    plan = make_plan(data, SCHEMA, "glm53-fp8", _nodes_without_cotenant_memory("none-declared"), "seats/glm53-fp8.yml")
    refusals = [item for item in plan["refusals"] if item["id"] == "gpu-memory-cotenants"]
    assert refusals, "a resident seat with undeclared co-tenants and no recorded fraction must be refused"
    refusal = refusals[0]
    assert (
        "host node-a sets no seatwright_node_cotenants; host node-b sets no seatwright_node_cotenants"
        in (refusal["detail"])
    )
    assert "seatwright_node_cotenants" in refusal["remedy"] and "topology.resident_fraction" in refusal["remedy"]
    # No share is guessed: nothing rendered, nothing fitted.
    assert plan["verdict"] == "unknown" and _fraction_on_launch(plan) is None
    assert plan["fit_inputs"] == {}


def test_cotenant_memory_larger_than_a_card_is_refused_naming_the_inventory_entry():
    nodes = example_nodes()
    nodes[1]["seatwright_node_cotenants"] = [
        {"name": "embedder", "kind": "container", "gpus": [1], "memory": "2 GiB"},
        dict(nodes[1]["seatwright_node_cotenants"][0], memory="120 GiB"),
    ]
    plan = make_plan(seat_data("glm53-fp8"), SCHEMA, "glm53-fp8", nodes, "seats/glm53-fp8.yml")
    refusals = [item for item in plan["refusals"] if item["id"] == "gpu-memory-cotenants"]
    assert refusals, "co-tenants larger than the card must refuse the seat"
    refusal = refusals[0]
    assert refusal["detail"] == (
        "resident co-tenants leave the engine nothing: host node-b gpu 0: seatwright_node_cotenants[1] (omni) "
        "120.00 GiB declares its whole memory or more, and the card has 95.59 GiB; host node-b gpu 1: "
        "seatwright_node_cotenants[0] (embedder) 2.00 GiB + seatwright_node_cotenants[1] (omni) 120.00 GiB declare "
        "its whole memory or more, and the card has 95.59 GiB"
    )
    assert "seatwright_node_cotenants" in refusal["remedy"]
    assert plan["verdict"] != "fits" and plan["launchable"] is False
    assert not any(arg.startswith("-") and arg[1:2].isdigit() for rank in plan["ranks"] for arg in rank["argv"])


# ------------------------------------------------------------------ one derivation of the non-weight runtime


def test_the_glm53_runtime_is_one_derivation_cited_as_derived():
    fp8 = seat_data("glm53-fp8")
    observed = fp8["model"]["observed"]
    # The derivation of [000] section 3's run, from the recipe's own record, is the family figure: 10.21 GiB.
    # (fit.reserve_from_run: the engine setting x the card, less the weights and the KV cache.)
    card = observed["gpu_memory_mib"] * 2**20
    weights = int(float(observed["per_rank_weight_bytes"].split()[0]) * 10**9)
    derived = int(card * 0.9) - weights - observed["kv_tokens"] * fp8["fit"]["kv_bytes_per_token"]
    assert derived == FIELD_RUNTIME_RESERVE_BYTES and round(derived / 2**30, 2) == 10.21
    nvfp4 = make_plan(seat_data("glm53"), SCHEMA, "glm53", example_nodes(), "seats/glm53.yml")
    fp8_plan = make_plan(fp8, SCHEMA, "glm53-fp8", example_nodes(), "seats/glm53-fp8.yml")
    # The fit of both seats and the NVFP4 one-node check use that one figure, with one source.
    for plan in (nvfp4, fp8_plan):
        reserve = plan["fit_inputs"]["runtime_reserve"]
        assert reserve["value"] == derived and reserve["source"].startswith("GLM-5.3 on vLLM: derived from")
    one_node = nvfp4["one_node"]["reasons"][0]
    assert "below the 11.0 GB (10.21 GiB) non-weight runtime (GLM-5.3 on vLLM: derived from the field's" in one_node
    assert "18.4 GB" not in one_node and "[000][002]" not in one_node
