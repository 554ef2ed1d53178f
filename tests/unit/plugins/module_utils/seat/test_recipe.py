"""Recipe loading and validation (plugins/module_utils/seat/recipe.py) against schemas/seat.schema.json."""

import datetime

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import SeatError
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.recipe import (
    field_path,
    parse_size,
    recipe_from_text,
    validate_recipe,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.rules import RULE_IDS
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator
from seat_cases import FIXTURE_SEATS, SCHEMA, SEAT_NAMES, mutated, seat_data

SOURCE = "seats/test.yml"


def validate(data):
    return validate_recipe(data, SCHEMA, SOURCE, RULE_IDS)


def test_schema_is_a_valid_json_schema():
    Draft202012Validator.check_schema(SCHEMA)


def test_every_seat_the_issue_lists_has_a_recipe():
    assert SEAT_NAMES == sorted(
        [
            "deepseek-v4-flash",
            "glm53",
            "glm53-community",
            "glm53-fp8",
            "glm53-vendor",
            "inkling-small",
            "lab-allcores",
            "lab-fp8",
            "lab",
            "lab-seqs4",
            "lab-tp2",
            "laguna-s21",
            "nemotron3-super",
            "nemotron3-ultra",
            "qwen35-122b",
            "qwen38-flash-next",
        ]
    )


@pytest.mark.parametrize("name", SEAT_NAMES)
def test_every_recipe_validates_and_is_named_after_its_file(name):
    recipe = validate(seat_data(name))
    assert recipe["name"] == name
    assert isinstance(recipe["serving"]["extra_args"], list)


@pytest.mark.parametrize("name", SEAT_NAMES)
def test_unknown_revisions_are_null_never_invented(name):
    model = validate(seat_data(name))["model"]
    if model["revision_status"] == "pinned":
        assert len(model["revision"]) == 40
    else:
        assert model["revision"] is None


def test_refusal_fixture_is_a_valid_recipe():
    assert validate(seat_data("glm53-b12x-mtp", FIXTURE_SEATS))["serving"]["speculation"]["method"] == "mtp"


@pytest.mark.parametrize(
    "text,expected",
    [
        (0, 0),
        (204500000000, 204500000000),
        ("204.5 GB", 204500000000),
        ("190.20 GB", 190200000000),
        ("20.9 GiB", 22441204122),
        ("86 GiB", 86 * 2**30),
        ("97887 MiB", 97887 * 2**20),
        ("512B", 512),
        (None, None),
    ],
)
def test_parse_size(text, expected):
    assert parse_size(text) == expected


@pytest.mark.parametrize("text", ["204.5", "GB", "1e9 GB", "-1 GB", "12 gb"])
def test_parse_size_rejects_what_is_not_a_size(text):
    with pytest.raises(ValueError):
        parse_size(text)


@pytest.mark.parametrize(
    "parts,expected",
    [
        (("serving", "extra_args", 2), "serving.extra_args[2]"),
        (("model",), "model"),
        ((), "(the recipe itself)"),
    ],
)
def test_field_path(parts, expected):
    assert field_path(parts) == expected


GLM = seat_data("glm53")


@pytest.mark.parametrize(
    "path,value,fragments",
    [
        (
            ("topology", "tensor_parallel"),
            "four",
            ["topology.tensor_parallel: 'four' is not valid", "nodes x gpus_per_node"],
        ),
        (("topology", "tensor_parallel"), 4.0, ["topology.tensor_parallel: 4.0 is not valid"]),
        (("engine", "name"), "vlm", ["engine.name: 'vlm' is not valid", "vllm, sglang, or unknown"]),
        (("model", "revision"), "abc123", ["model.revision: 'abc123' is not valid", "40-hex commit"]),
        (("model", "checkpoint", "bytes"), "190 gigabytes", ["model.checkpoint.bytes", "'204.5 GB'"]),
        (("serving", "gpu_memory_utilization"), 1.5, ["serving.gpu_memory_utilization: 1.5", "0 to 1"]),
        (("serving", "gpu_memory_utilization"), float("nan"), ["serving.gpu_memory_utilization: NaN"]),
        (
            ("serving", "speculation"),
            {"method": "medusa", "num_speculative_tokens": 3},
            ["serving.speculation.method: 'medusa' is not valid", "mtp, eagle or ngram"],
        ),
        (("serving", "env"), {"lowercase": "x"}, ["serving.env: key 'lowercase' is not allowed"]),
        (("serving", "env"), {"NCCL_DEBUG": 1}, ["serving.env.NCCL_DEBUG: 1 is not valid"]),
        (("qualification", "gates"), ["smoke", "vibes"], ["qualification.gates[1]: 'vibes'"]),
        (("sources",), "000", ["sources: '000' is not valid"]),
        (
            ("model", "checkpoint", "bytes_source"),
            datetime.date(2026, 8, 28),
            ["model.checkpoint.bytes_source: datetime.date(2026, 8, 28) is not valid"],
        ),
    ],
)
def test_bad_value_is_named_with_its_path_and_expectation(path, value, fragments):
    with pytest.raises(SeatError) as caught:
        validate(mutated(GLM, path, value))
    for fragment in fragments:
        assert fragment in str(caught.value)
    assert str(caught.value).startswith(SOURCE + ": ")


def test_missing_required_field_is_named():
    data = mutated(GLM, ("topology",), {k: v for k, v in GLM["topology"].items() if k != "nodes"})
    with pytest.raises(SeatError, match=r"topology\.nodes: missing; expected how many nodes the seat spans"):
        validate(data)


def test_misspelt_field_gets_a_suggestion():
    serving = dict(GLM["serving"], max_num_seq=4)
    with pytest.raises(SeatError, match=r"serving\.max_num_seq: unknown field \(did you mean max_num_seqs\?\)"):
        validate(mutated(GLM, ("serving",), serving))


@pytest.mark.parametrize(
    "path,value,fragment",
    [
        (("model", "revision_status"), "pinned", "model.revision: is null but model.revision_status says pinned"),
        (
            ("engine", "image", "digest"),
            "sha256:" + "a" * 64,
            "engine.image.digest: is given but engine.image.status is 'local'",
        ),
        (
            ("model", "checkpoint", "bytes_status"),
            "unknown",
            "model.checkpoint.bytes: 190200000000 disagrees with model.checkpoint.bytes_status 'unknown'",
        ),
        (
            ("topology", "gpus_per_node"),
            4,
            "topology.tensor_parallel: 4 does not equal topology.nodes (2) x topology.gpus_per_node (4)",
        ),
        (("topology", "expert_parallel"), 2, "topology.expert_parallel: 2 must be 1 or equal topology.tensor_parallel"),
        (("engine", "device"), "cpu", "topology: a CPU seat (engine.device: cpu) has topology.gpus_per_node 0"),
        (("serving", "max_num_seqs"), 4, "qualification.concurrency: 16 streams exceed serving.max_num_seqs 4"),
        (
            ("serving", "quantization"),
            "fp8_per_block",
            "serving.quantization: 'fp8_per_block' quantizes a full-precision checkpoint as it loads, but "
            "model.checkpoint.quantization is",
        ),
        (
            ("overrides",),
            [{"rule": "custom-allreduce-of", "reason": "a reason long enough"}],
            "overrides[0].rule: 'custom-allreduce-of' is not a rule id (did you mean custom-allreduce-off?)",
        ),
        (
            ("qualification", "expect_fail"),
            ["responses-api"],
            "qualification.expect_fail[0]: 'responses-api' is not in qualification.gates",
        ),
    ],
)
def test_fields_that_must_agree(path, value, fragment):
    with pytest.raises(SeatError) as caught:
        validate(mutated(GLM, path, value))
    assert fragment in str(caught.value)


def test_sglang_seat_cannot_name_an_executor():
    data = mutated(seat_data("inkling-small"), ("topology", "executor"), "ray")
    with pytest.raises(SeatError, match="topology.executor: 'ray' is a vLLM setting"):
        validate(data)


@pytest.mark.parametrize(
    "text,fragment",
    [
        ("name: [unclosed", "not valid YAML at line 1"),
        ("a: 1\n b: 2\n", "not valid YAML at line 2"),
        ("", "the file is empty"),
    ],
)
def test_yaml_errors_name_the_file_and_line(text, fragment):
    with pytest.raises(SeatError) as caught:
        recipe_from_text(text, "seats/x.yml")
    assert str(caught.value).startswith("seats/x.yml: ")
    assert fragment in str(caught.value)


@pytest.mark.parametrize("data", [[1, 2], "glm53", 42, True])
def test_a_recipe_that_is_not_a_mapping_is_rejected(data):
    with pytest.raises(SeatError, match="a recipe is a YAML mapping of fields"):
        validate(data)


# --- property tests: malformed recipes never escape as anything but a SeatError naming the field ---


def _paths(value, prefix=()):
    """Every path into a recipe: mappings by key, lists by index."""
    found = []
    if isinstance(value, dict):
        for key, item in value.items():
            found.append(prefix + (key,))
            found.extend(_paths(item, prefix + (key,)))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            found.append(prefix + (index,))
            found.extend(_paths(item, prefix + (index,)))
    return found


RECIPES = {name: seat_data(name) for name in SEAT_NAMES}
CASES = [(name, path) for name, data in RECIPES.items() for path in _paths(data)]
JSONISH = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(min_value=-(2**70), max_value=2**70)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.text(max_size=30),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=12) | st.integers(min_value=-5, max_value=5), inner, max_size=4)
    ),
    max_leaves=12,
)
# Values no recipe field accepts: YAML dates, mappings keyed by numbers, NaN.
NEVER_VALID = st.sampled_from([datetime.date(2026, 9, 9), {7: [None]}, float("nan"), float("-inf")])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(case=st.sampled_from(CASES), value=JSONISH)
def test_any_replacement_is_accepted_or_rejected_as_seat_error(case, value):
    name, path = case
    try:
        validate(mutated(RECIPES[name], path, value))
    except SeatError as exc:
        assert str(exc).startswith(SOURCE + ": ")


@settings(max_examples=400, deadline=None)
@given(case=st.sampled_from(CASES), value=NEVER_VALID)
def test_never_valid_value_is_rejected_naming_its_field(case, value):
    name, path = case
    with pytest.raises(SeatError) as caught:
        validate(mutated(RECIPES[name], path, value))
    assert field_path(path) in str(caught.value)


def _schema_node(parts):
    """The schema describing the field at `parts` (follows $ref and the object branch of oneOf)."""
    node = SCHEMA
    for part in (None,) + tuple(parts):
        if part is not None:
            node = node["items"] if isinstance(part, int) else node.get("properties", {}).get(part, {})
        while "$ref" in node or ("oneOf" in node and "properties" not in node):
            if "$ref" in node:
                target = SCHEMA
                for key in node["$ref"].lstrip("#/").split("/"):
                    target = target[key]
                node = target
            else:
                node = next((o for o in node["oneOf"] if "$ref" in o or "properties" in o), {})
    return node


REQUIRED_CASES = [
    (name, path)
    for name, path in CASES
    if isinstance(path[-1], str) and path[-1] in _schema_node(path[:-1]).get("required", ())
]


def test_required_cases_cover_every_section():
    assert {path[0] for _, path in REQUIRED_CASES} >= {"model", "engine", "topology", "serving", "qualification"}


@settings(max_examples=300, deadline=None)
@given(case=st.sampled_from(REQUIRED_CASES))
def test_deleting_a_required_field_names_it(case):
    name, path = case
    parent = _get(RECIPES[name], path[:-1])
    data = (
        mutated(RECIPES[name], path[:-1], {k: v for k, v in parent.items() if k != path[-1]})
        if path[:-1]
        else {k: v for k, v in parent.items() if k != path[-1]}
    )
    with pytest.raises(SeatError) as caught:
        validate(data)
    assert "%s: missing" % field_path(path) in str(caught.value)


@settings(max_examples=300, deadline=None)
@given(case=st.sampled_from(CASES), key=st.text(alphabet="abcdefghijklmnopqrstuvwxyz_", min_size=1, max_size=16))
def test_an_unknown_field_in_any_mapping_is_named(case, key):
    name, path = case
    target = _get(RECIPES[name], path)
    if not isinstance(target, dict) or path[-1] == "env" or key in target:
        return
    with pytest.raises(SeatError) as caught:
        validate(mutated(RECIPES[name], path, dict(target, **{key: 1})))
    assert "%s: unknown field" % field_path(path + (key,)) in str(caught.value)


def _get(data, path):
    for key in path:
        data = data[key]
    return data
