"""Evidence in Python, one shape: bringup.json of both outcomes through the seat_evidence module,
checked against schemas/record.schema.json; one function names an evidence folder; one redactor;
no controller path in an evidence file."""

import ast
import datetime
import io
import json
import re

import pytest
import seat_evidence
import seat_plan
from ansible.module_utils.testing import patch_module_args
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import EvidenceError
from ansible_collections.seatwright.fleet.plugins.module_utils.evidence import folder
from ansible_collections.seatwright.fleet.plugins.module_utils.evidence.redact import (
    Redactor,
    redact_env,
    secret_name,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.io.evidence import writer
from ansible_collections.seatwright.fleet.plugins.module_utils.io.qualify.run import write_evidence
from ansible_collections.seatwright.fleet.plugins.module_utils.seat.running import compare_running
from seat_cases import ROOT, SEATS, example_nodes

RUN = "20261201T150000Z"


def run_module(capsys, module, args, check_mode=False):
    if check_mode:
        args = dict(args, _ansible_check_mode=True)
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            module.main()
    return json.loads(capsys.readouterr().out)


def plan_of(capsys):
    out = run_module(
        capsys,
        seat_plan,
        {
            "seat": "glm53",
            "recipe_path": str(SEATS / "glm53.yml"),
            "schema_path": str(ROOT / "schemas" / "seat.schema.json"),
            "nodes": example_nodes(),
        },
    )
    return out["plan"]


def rank_record(plan_rank):
    """One rank's record as roles/seat/tasks/verify.yml keeps it (argv and env read back)."""
    return {
        "host": plan_rank["host"],
        "rank": plan_rank["rank"],
        "role": plan_rank["role"],
        "container": "seatwright-glm53-rank%d" % plan_rank["rank"],
        "argv": plan_rank["argv"],
        "env": redact_env(dict(plan_rank["env"], VLLM_API_KEY="k-live-123")),
        "matches_plan": True,
    }


def outcomes(plan):
    """The two outcomes as the playbooks hand them over: bringup.yml served, failed.yml failed."""
    ranks = [rank_record(r) for r in plan["ranks"]]
    evicted = [{"host": "node-b", "name": "embedder", "kind": "container"}]
    served = {
        "state": "serving",
        "image_id": "sha256:" + "ab" * 32,
        "ready": {"state": "ready", "elapsed_s": 412.5},
        "ray": {"state": "ready", "alive": 2},
        "answer": {
            "choices": [{"index": 0, "message": {"content": "Paris."}, "finish_reason": "stop"}],
            "usage": {"completion_tokens": 3},
        },
        "started_at_epoch": "1796050000.5",
        "ranks": ranks,
        "evicted": evicted,
    }
    failed = {
        "state": "failed",
        "reason": "the engine on node-a exited during start-up (exit 1)",
        "image_id": None,
        "ready": {"state": "dead", "exit_code": 1},
        "started_at_epoch": 1796050000.5,
        "ranks": [None, None],
        "evicted": evicted,
        "log_tails": {"node-a": [{"name": "seatwright-glm53-rank0", "log_tail": ["CUDA error"]}], "node-b": []},
        "restored": {"node-a": [], "node-b": [{"name": "embedder", "action": "started"}]},
    }
    return {"served": served, "failed": failed}


def seat_folder(tmp_path, seat="glm53"):
    path = tmp_path / "checkout" / "evidence" / seat / RUN
    (tmp_path / "checkout" / "schemas").mkdir(parents=True)
    (tmp_path / "checkout" / "schemas" / "record.schema.json").write_text(
        (ROOT / "schemas" / "record.schema.json").read_text()
    )
    return path


@pytest.mark.parametrize("outcome", ["served", "failed"])
def test_both_outcomes_write_a_bringup_json_that_matches_the_record_schema(capsys, tmp_path, outcome):
    plan = plan_of(capsys)
    path = seat_folder(tmp_path)
    out = run_module(
        capsys,
        seat_evidence,
        {"dir": str(path), "plan": plan, "bringup": outcomes(plan)[outcome], "files": {"plan.json": plan}},
    )
    assert out.get("failed") is not True, out.get("msg")
    written = json.loads((path / "bringup.json").read_text())
    assert writer.validate_part("bringup", written) == []
    assert written["state"] == {"served": "serving", "failed": "failed"}[outcome]
    # The fabric address is redacted like every private address; the port and path stay.
    assert written["endpoint"] == Redactor().text("http://%s/v1" % plan["ranks"][0]["serve"])
    assert written["model_revision"] == plan["model"]["revision"]
    assert "k-live-123" not in (path / "bringup.json").read_text()
    # The folder then assembles into a record that matches the whole schema.
    record = writer.assemble(str(path), plots=False)
    assert writer.validate_record(record) == []
    # A failed bring-up knows no running image: the record names the image the plan checked the launch against.
    checked = (plan["engine"].get("image_checked") or {}).get("id")
    assert record["launch"]["image_id"] == (written["image_id"] or checked)


def test_a_served_and_a_failed_bringup_have_one_shape(capsys, tmp_path):
    plan = plan_of(capsys)
    shapes = []
    for name, outcome in outcomes(plan).items():
        path = seat_folder(tmp_path / name)
        run_module(capsys, seat_evidence, {"dir": str(path), "plan": plan, "bringup": outcome})
        shapes.append(sorted(json.loads((path / "bringup.json").read_text())))
    assert shapes[0] == shapes[1]


def test_the_old_jinja_shapes_do_not_match_the_schema():
    # What playbooks/bringup.yml and roles/seat/tasks/failed.yml used to assemble in Jinja.
    old_served = {"seat": "lab", "state": "serving", "image": {"reference": "x"}, "image_id": None, "ranks": []}
    old_failed = {"seat": "lab", "state": "failed", "reason": "dead", "verdict": {}, "log_tails": {}, "restored": {}}
    assert writer.validate_part("bringup", old_served)
    assert writer.validate_part("bringup", old_failed)


@pytest.mark.parametrize(
    "change, message",
    [
        ({"state": "failed", "reason": ""}, "must say why"),
        ({"state": "up"}, "state 'up' is not one of"),
        ({"verdict": {}}, "verdict not known"),
        ({"started_at_epoch": "yesterday"}, "not a time in epoch seconds"),
        ({"ranks": [{"host": "node-a", "rank": "zero", "argv": [], "env": {}}]}, "does not match"),
    ],
)
def test_a_bad_outcome_is_refused_with_a_sentence(capsys, tmp_path, change, message):
    plan = plan_of(capsys)
    path = seat_folder(tmp_path)
    outcome = dict(outcomes(plan)["served"], **change)
    out = run_module(capsys, seat_evidence, {"dir": str(path), "plan": plan, "bringup": outcome})
    assert out["failed"] is True and message in out["msg"] and "Traceback" not in out["msg"]
    assert not (path / "bringup.json").exists()


def test_the_module_names_a_new_folder_and_writes_nothing_in_check_mode(capsys, tmp_path):
    out = run_module(capsys, seat_evidence, {"seat": "lab", "root": str(tmp_path), "files": {"a.txt": "x"}}, True)
    assert re.fullmatch(re.escape(str(tmp_path)) + r"/evidence/lab/\d{8}T\d{6}Z", out["dir"])
    assert out["changed"] is False and out["written"] == [out["dir"] + "/a.txt"]
    assert not (tmp_path / "evidence").exists()
    out = run_module(capsys, seat_evidence, {"seat": "Lab Seat", "root": str(tmp_path)})
    assert out["failed"] is True and "cannot name an evidence folder" in out["msg"]


def test_a_file_outside_the_folder_is_refused(capsys, tmp_path):
    out = run_module(capsys, seat_evidence, {"dir": str(seat_folder(tmp_path)), "files": {"../x.json": {}}})
    assert out["failed"] is True and "lies outside" in out["msg"]


# ---------------------------------------------------------------- no controller path in evidence


def test_evidence_files_carry_project_relative_paths(capsys, tmp_path):
    path = seat_folder(tmp_path)
    checkout = str(tmp_path / "checkout")
    files = {
        "notes.txt": "recipe %s/seats/lab.yml, run from %s" % (checkout, checkout),
        "ranks/node-a.json": {"tokenizer": checkout + "/.cache/tokenizers/lab", "model": "/models/lab"},
    }
    run_module(capsys, seat_evidence, {"dir": str(path), "files": files})
    text = (path / "notes.txt").read_text()
    assert text == "recipe seats/lab.yml, run from ."
    rank = json.loads((path / "ranks" / "node-a.json").read_text())
    # The node's own paths (inside the container) are kept; only the controller's checkout goes.
    assert rank == {"tokenizer": ".cache/tokenizers/lab", "model": "/models/lab"}


def test_qualification_md_does_not_print_the_checkout(tmp_path):
    record = {
        "seat": "lab",
        "recipe": str(writer.PROJECT_ROOT) + "/seats/lab.yml",
        "base_url": "http://127.0.0.1:8000/v1",
        "model": "lab",
        "started_at": "2026-12-01T15:00:00Z",
        "finished_at": "2026-12-01T15:05:00Z",
        "verdict": "qualified",
        "reasons": [],
        "gates": [],
        "command": ["tools/seatwright-qualify", "--evidence-dir", str(writer.PROJECT_ROOT) + "/evidence/lab/" + RUN],
    }
    write_evidence(str(tmp_path), record)
    for name in ("qualification.md", "qualification.json"):
        text = (tmp_path / name).read_text()
        assert str(writer.PROJECT_ROOT) not in text, name
    assert "`seats/lab.yml`" not in (tmp_path / "qualification.md").read_text()
    assert "seats/lab.yml against" in (tmp_path / "qualification.md").read_text()


def test_the_redactor_makes_only_the_checkout_relative():
    redactor = Redactor(root="/home/me/seatwright")
    assert redactor.text("/home/me/seatwright/seats/lab.yml") == "seats/lab.yml"
    assert redactor.text("cd /home/me/seatwright && ls") == "cd . && ls"
    assert redactor.text("/home/me/seatwright-old/x /srv/home/me/seatwright/x") == (
        "/home/me/seatwright-old/x /srv/home/me/seatwright/x"
    )
    assert Redactor(root="/").text("/etc/hosts") == "/etc/hosts"


def test_the_home_folder_is_written_as_a_tilde_and_the_checkout_inside_it_stays_relative():
    redactor = Redactor(root="/home/me/seatwright", home="/home/me")
    text = "/home/me/.cache/seatwright/aiperf-1a2b/bin/aiperf --tokenizer /home/me/seatwright/.cache/tok"
    assert redactor.text(text) == "~/.cache/seatwright/aiperf-1a2b/bin/aiperf --tokenizer .cache/tok"


def test_the_evidence_redactor_knows_the_checkout_and_home(monkeypatch, tmp_path):
    monkeypatch.setenv("HOME", str(tmp_path))
    redactor = writer.evidence_redactor()
    assert redactor.text(str(writer.PROJECT_ROOT) + "/seats/lab.yml") == "seats/lab.yml"
    assert redactor.text(str(tmp_path) + "/.cache/x") == "~/.cache/x"


# ---------------------------------------------------------------- one redactor


def test_secret_env_names_are_the_redactors():
    assert all(secret_name(n) for n in ("VLLM_API_KEY", "SGLANG_API_KEY", "HF_TOKEN", "WANDB_API_KEY"))
    assert not any(secret_name(n) for n in ("HF_HUB_OFFLINE", "NCCL_SOCKET_IFNAME", "MAX_NUM_BATCHED_TOKENS"))
    assert redact_env({"WANDB_API_KEY": "w", "A": "1"}) == {"WANDB_API_KEY": "<redacted>", "A": "1"}
    # An API key the old fixed list did not name is still never shown in a difference.
    found = compare_running("node-a", ["vllm"], ["vllm"], {"OPENAI_API_KEY": "a"}, {"OPENAI_API_KEY": "b"})
    assert found == ["node-a: env OPENAI_API_KEY differs from the plan (value not shown)"]


def test_no_second_redactor_in_the_code():
    placeholder = re.compile(r"""["']<redacted>["']""")
    others = [
        str(path.relative_to(ROOT))
        for path in sorted((ROOT / "plugins").rglob("*.py")) + sorted((ROOT / "tools").glob("seatwright-*"))
        if path.name != "redact.py" and (placeholder.search(path.read_text()) or "SECRET_ENV" in path.read_text())
    ]
    assert others == []


# ---------------------------------------------------------------- one folder name


def test_one_function_names_the_folder_and_the_stamp():
    assert folder.run_id(datetime.datetime(2026, 12, 1, 15, 0, tzinfo=datetime.UTC)) == RUN
    assert folder.run_id(1796050000) == "20261130T144640Z"
    assert folder.evidence_dir("/srv/sw", "lab", 1796050000) == "/srv/sw/evidence/lab/20261130T144640Z"
    assert folder.evidence_dir_parts("/srv/sw/evidence/lab/%s/" % RUN) == ("lab", RUN)
    assert folder.project_root_of("/srv/sw/evidence/lab/" + RUN) == "/srv/sw"
    assert folder.project_root_of("evidence/lab/" + RUN) is None
    with pytest.raises(EvidenceError, match="time zone"):
        folder.run_id(datetime.datetime(2026, 12, 1))
    with pytest.raises(EvidenceError, match="evidence/<seat>/<UTC"):
        folder.evidence_dir_parts("/srv/sw/evidence/lab/manual")


STAMP_IN_CODE = re.compile(r"""strftime\(\s*["']%Y%m%dT|fmt=["']%Y%m%dT|["']/evidence/["']\s*~|\d\{8\}T\\d\{6\}Z""")


def test_nothing_else_names_an_evidence_folder():
    sources = (
        sorted((ROOT / "plugins").rglob("*.py"))
        + sorted((ROOT / "tools").glob("seatwright-*"))
        + sorted((ROOT / "playbooks").rglob("*.yml"))
        + sorted((ROOT / "roles").rglob("*.yml"))
    )
    naming = [
        str(p.relative_to(ROOT)) for p in sources if p.name != "folder.py" and STAMP_IN_CODE.search(p.read_text())
    ]
    assert naming == []
    # The playbooks that start a run ask the seat_evidence module (which calls folder.evidence_dir).
    # bringup.yml's opening steps are shared with the drain's bring-back (tasks/bringup_open.yml).
    for playbook in ("tasks/bringup_open.yml", "qualify.yml"):
        text = (ROOT / "playbooks" / playbook).read_text()
        assert "seatwright.fleet.seat_evidence:" in text and "seat: \"{{ omit if" in text, playbook
    # The tools check a folder's name with the same module.
    for tool in ("seatwright-bench", "seatwright-promote"):
        text = (ROOT / "tools" / tool).read_text()
        assert "evidence.folder import evidence_dir_parts" in text and "def evidence_dir_parts" not in text, tool


# ---------------------------------------------------------------- a thin module


def test_seat_evidence_is_thin():
    source = (ROOT / "plugins" / "modules" / "seat_evidence.py").read_text()
    tree = ast.parse(source)
    returns = [n for n in tree.body if isinstance(n, ast.Assign) and getattr(n.targets[0], "id", "") == "RETURN"]
    after = source.splitlines()[returns[0].end_lineno :]
    assert len([line for line in after if line.strip()]) <= 40


def test_the_progress_log_in_the_evidence_folder_names_no_controller_path(tmp_path, monkeypatch):
    from ansible_collections.seatwright.fleet.plugins.module_utils.io.common import progress

    log = tmp_path / "qualify.progress.log"
    monkeypatch.setenv(progress.ENV, str(log))
    monkeypatch.setitem(progress._STATE, "redactor", None)
    progress.emit("evidence: %s/evidence/lab/%s/qualification.json" % (writer.PROJECT_ROOT, RUN), io.StringIO())
    assert log.read_text() == "evidence: evidence/lab/%s/qualification.json\n" % RUN
