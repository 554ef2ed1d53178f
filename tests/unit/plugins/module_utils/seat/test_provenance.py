"""Provenance that holds up (issue 21 item 9).

Every fact says where it came from: a field report, an upstream item the project read, or a project
choice; a rule is required only where its source saw it; the field's negative results and its
mitigation of the RDMA fault are recorded, the mitigation as a declared NCCL knob.

The field reports are not part of the repository, so the check that a number belongs to a report
is encoded here: UPSTREAM holds every issue or PR number docs/field.md may cite, with the label the
project checked by hand (which report names it, or that the project read it upstream itself).
"""

import json
import re

import nccl_env_render
import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.seatwright.fleet.plugins.module_utils.node.hardware import GPU_PROFILES
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.plan import make_plan
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.recipe import validate_recipe
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.rules import RULE_IDS, RULES, evaluate, table_rows
from conftest import ROOT
from seat_cases import SCHEMA, example_nodes, seat_data

FIELD = (ROOT / "docs" / "field.md").read_text(encoding="utf-8")
LABELS = ("field report", "upstream, read", "project choice")

# number -> (project, label in docs/field.md). "named in [00x]": the report cites it; "upstream, read":
# no report names it, the project found and read it. Checked against the reports and the items.
UPSTREAM = {
    "47751": ("vllm-project/vllm", "upstream, read"),
    "31089": ("vllm-project/vllm", "named in [001]"),
    "16975": ("sgl-project/sglang", "named in [001]"),
    "14311": ("sgl-project/sglang", "upstream, read"),
    "1147": ("flashinfer-ai/flashinfer", "named in [001]"),
    "2166": ("flashinfer-ai/flashinfer", "named in [001]"),
    "1570": ("kvcache-ai/ktransformers", "upstream, read"),
    "1999": ("NVIDIA/nccl", "upstream, read"),
    "2079": ("NVIDIA/nccl", "upstream, read"),
}


def section(title):
    start = FIELD.index(title)
    return FIELD[start : FIELD.index("\n## ", start + 1)]


def entry_at(text, at):
    """The list entry of `text` that starts at `at`, on one line, without emphasis marks."""
    end = text.find("\n- ", at)
    return " ".join(text[at : end if end >= 0 else len(text)].replace("**", "").split())


# ------------------------------------------------------------------ every source labelled


@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_every_rule_source_is_labelled_report_upstream_or_project_in_the_rules_table(rule_id):
    row = next(row for row in table_rows() if row["id"] == rule_id)
    rule = next(rule for rule in RULES if rule["id"] == rule_id)
    cited = set(rule["sources"]) | {source for scope in rule["seen"] for source in scope["sources"]}
    for source in cited:
        shown = "[%s]" % source if source.isdigit() else source
        labels = re.findall(r"\[%s\]\([^)]*\) \(([^)]*)\)" % re.escape(shown), row["source"] + " " + row["seen"])
        assert labels and set(labels) <= set(LABELS), (rule_id, source, row["source"])
        # A report key is labelled a field report; anything else is not.
        assert set(labels) == {"field report"} if source.isdigit() else "field report" not in labels


# The figures each field report gives that rules quote, checked against the reports by hand. A rule
# that quotes a figure must cite a report listed here with it, so a number cannot drift from its report.
REPORT_FIGURES = {
    # 28: the day of the nine NVFP4 attempts, the FlashInfer nightly among them (28 August) [000] section 4.
    "000": {"256", "0.75", "0.78", "73.98", "74.11", "1152", "2304", "400", "0.6.17", "0.6.18", "64", "28"},
    "001": {"3,740", "236", "1,024"},
    "004": {"1,867", "236"},
}
# Numbers in rule texts that are names, not figures: report keys, sections, models, GPUs, capabilities.
NAMES = re.compile(
    r"\[\d{3}\]|section \d+|GLM-5(?:\.3)?|Nemotron 3|RTX PRO 6000|\bTP\s?=?\s?\d|\bsm_?\d+x?|capability \d+|#\d+"
    r"|PEP \d+",
    re.IGNORECASE,
)
# A figure stands alone: the 4 of NVFP4 or the 2 of FA2 is part of a name.
FIGURE = re.compile(r"(?<![A-Za-z\d.,])\d[\d,]*(?:\.\d+)*(?![A-Za-z\d])")


@pytest.mark.parametrize("rule_id", RULE_IDS)
def test_figures_a_rule_quotes_are_figures_of_the_reports_it_cites(rule_id):
    rule = next(rule for rule in RULES if rule["id"] == rule_id)
    reports = [source for source in rule["sources"] if source.isdigit()]
    known = set().union(*(REPORT_FIGURES.get(key, set()) for key in reports)) if reports else set()
    for text in [rule["reason"]] + [scope["text"] for scope in rule["seen"]]:
        figures = set(FIGURE.findall(NAMES.sub(" ", text)))
        assert figures <= known, (rule_id, sorted(figures - known), reports)


@pytest.mark.parametrize("number", sorted(re.findall(r"#(\d{3,6})", FIELD), key=int))
def test_every_issue_or_pr_number_in_field_md_is_one_the_project_checked(number):
    assert number in UPSTREAM, (
        "docs/field.md cites #%s, which is in no report the project checked and was not read upstream" % number
    )


@pytest.mark.parametrize("number,project_label", sorted(UPSTREAM.items()))
def test_upstream_references_carry_the_label_of_where_they_came_from(number, project_label):
    project, label = project_label
    refs = section("### Upstream references")
    link = re.search(
        r"\[#%s\]\(https://github\.com/%s/(?:issues|pull)/%s\)" % (number, re.escape(project), number), refs
    )
    assert link, "#%s is not linked to %s under Upstream references" % (number, project)
    entry = entry_at(refs, link.start())
    assert "*%s*" % label in entry, (number, entry)


def test_the_reports_are_not_said_to_be_the_source_of_every_number():
    assert "Issue and PR numbers come from the" not in FIELD
    # NCCL #2079 concerns RTX 5880 Ada cards, not RTX PRO 6000.
    refs = section("### Upstream references")
    entry = entry_at(refs, refs.index("[#2079]"))
    assert "RTX 5880 Ada" in entry and "not RTX PRO 6000" in entry


def test_the_fields_negative_results_are_recorded():
    text = section("### no-gain-tunings") if "### no-gain-tunings" in FIELD else ""
    for tried in ("NCCL tuning", "--num-continuous-decode-steps 4", "flashinfer_trtllm", "SBO/TBO"):
        assert tried in text, tried
    assert "none gave a meaningful gain [001]" in text
    # [004] lists overlap scheduling as a next step; no report gives its outcome.
    assert "no report gives an outcome for SBO/TBO" in text


# ------------------------------------------------------------------ rules scoped to what their source saw


def sm120(count):
    spec = GPU_PROFILES["rtx-pro-6000-maxq"]
    return [
        {"index": i, "name": spec["name"], "compute_capability": spec["compute_capability"], "memory_total_mib": 1}
        for i in range(count)
    ]


@pytest.mark.parametrize(
    "name,required",
    [
        # The seat [000] section 2 gives the one-hour timeout for.
        ("nemotron3-ultra", True),
        # Other cross-node vLLM seats: the report gives them no timeout.
        ("glm53", False),
        ("glm53-vendor", False),
        ("glm53-community", False),
        ("glm53-fp8", False),
    ],
)
def test_the_one_hour_timeout_is_required_only_for_the_seat_its_source_gave_it_for(name, required):
    data = seat_data(name)
    data["serving"]["distributed_timeout_s"] = None
    result = evaluate(validate_recipe(data, SCHEMA, name, RULE_IDS), sm120(4), name)
    applied = [entry["id"] for entry in result["applied"]]
    warned = [entry["id"] for entry in result["warnings"]]
    assert ("distributed-timeout" in applied) is required
    assert ("distributed-timeout" in warned) is not required
    assert result["settings"]["serving"]["distributed_timeout_s"] == (3600 if required else None)


def test_single_node_custom_allreduce_off_rests_on_the_upstream_pr_not_the_field():
    result = evaluate(validate_recipe(seat_data("qwen35-122b"), SCHEMA, "q", RULE_IDS), sm120(2), "q")
    entry = next(entry for entry in result["applied"] if entry["id"] == "custom-allreduce-off")
    assert entry["sources"] == ["vLLM PR #47751"]
    row = next(row for row in table_rows() if row["id"] == "custom-allreduce-off")
    assert "[vLLM PR #47751](https://github.com/vllm-project/vllm/pull/47751) (upstream, read)" in row["seen"]


# ------------------------------------------------------------------ the RDMA fault's mitigation as a knob


def roce_facts(path="PHB"):
    return {
        "rdma_devices": [
            {"name": "mlx5_0", "ports": [{"port": 1, "active": True, "link_layer": "Ethernet", "roce_v2_gid_index": 3}]}
        ],
        "roce_devices": ["mlx5_0"],
        "fabric_iface": {"name": "enp65s0f0np0", "present": True},
        "gpudirect": {"available": True},
        "gpu_nic_path": path,
        "acs": {"state": "off", "reason": "recorded", "redirecting_bridges": []},
    }


def rank_envs(mitigation, path="PHB"):
    nodes = example_nodes()
    for node in nodes:
        node["seatwright_fabric"] = roce_facts(path)
        if mitigation is not None:
            node["nccl_env_rdma_mitigation"] = mitigation
    plan = make_plan(seat_data("nemotron3-ultra"), SCHEMA, "nemotron3-ultra", nodes, "seats/nemotron3-ultra.yml")
    assert len(plan["ranks"]) == 2
    return [rank["env"] for rank in plan["ranks"]]


@pytest.mark.parametrize(
    "mitigation,path,expected",
    [
        # Off by default: the env is what the facts decide.
        (None, "PHB", {"NCCL_NET_GDR_LEVEL": "PHB"}),
        ("none", "PXB", {}),
        # DMA-BUF registration off, the first mitigation [002] names.
        ("dmabuf-off", "PHB", {"NCCL_DMABUF_ENABLE": "0", "NCCL_NET_GDR_LEVEL": "PHB"}),
        # A lower GPUDirect level, the second: one step nearer than the facts would give.
        ("lower-gdr-level", "PHB", {"NCCL_NET_GDR_LEVEL": "PXB"}),
        ("lower-gdr-level", "PXB", {"NCCL_NET_GDR_LEVEL": "PIX"}),
    ],
)
def test_the_declared_rdma_mitigation_reaches_every_ranks_nccl_env(mitigation, path, expected):
    for env in rank_envs(mitigation, path):
        shown = {k: env[k] for k in ("NCCL_DMABUF_ENABLE", "NCCL_NET_GDR_LEVEL") if k in env}
        assert shown == expected


def node_files(capsys, **extra):
    args = {"host": "node-a", "fabric": roce_facts(), "socket_ifname": "enp65s0f0np0", "rdma_devices": []}
    args.update(extra)
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            nccl_env_render.main()
    return json.loads(capsys.readouterr().out)


def test_the_node_files_carry_the_mitigation_with_its_source(capsys):
    result = node_files(capsys, rdma_mitigation="dmabuf-off")
    assert result.get("failed") is not True, result
    assert "NCCL_DMABUF_ENABLE=0" in result["env_file"].splitlines()
    entry = next(e for e in result["env"] if e["name"] == "NCCL_DMABUF_ENABLE")
    assert "docs/field.md#rdma-fault" in entry["reason"] and "[002]" in entry["reason"]


def test_a_mitigation_on_a_node_without_rdma_is_refused_with_what_to_do(capsys):
    facts = roce_facts()
    facts["rdma_devices"], facts["roce_devices"] = [], []
    result = node_files(capsys, fabric=facts, rdma_mitigation="lower-gdr-level")
    assert result["failed"] is True
    assert "no active RDMA port" in result["msg"] and "set it to none" in result["msg"]
