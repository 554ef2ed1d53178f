"""The converge record: when a node may skip the node roles (plugins/module_utils/node/converge_record.py)."""

import json
import os
import subprocess

import pytest
from ansible.errors import AnsibleFilterError
from ansible_collections.seatwright.fleet.plugins.filter.converge_decisions import converge_decisions
from ansible_collections.seatwright.fleet.plugins.filter.converge_record import converge_record
from ansible_collections.seatwright.fleet.plugins.module_utils.node import converge_record as cr

INPUTS = "a" * 64
BOOT = "848bb2e1-d391-4a57-902e-d181405dfb08"
PATHS = {
    "/etc/seatwright": ["d", "755", "", "", ""],
    "/etc/seatwright/nccl.env": ["f", "644", "162", "1796239255.1494566460", ""],
    "/etc/systemd/system/multi-user.target.wants/seatwright-gpu-power.service": [
        "l", "777", "50", "1796239256.0", "/etc/systemd/system/seatwright-gpu-power.service",
    ],
}  # fmt: skip


ADDED = ["f", "600", "9", "1.0", ""]
MODE_600 = ["f", "600", "162", "1796239255.1494566460", ""]


def output(record, paths=PATHS, boot=BOOT, now=1796240000):
    """What snapshot_command prints on a node: the record (None: no file) and the paths' lines."""
    lines = ["#boot", boot, "#now", str(now), "#record"]
    lines += [] if record is None else [record if isinstance(record, str) else json.dumps(record)]
    lines += ["", "#paths"] + ["\t".join([path] + state) for path, state in paths.items()]
    return "\n".join(lines) + "\n"


def converge_reason(stdout, inputs, state_dir=None):
    return cr.stale_reason(cr.parse_snapshot(stdout, state_dir), inputs) or ""


def record(**changes):
    base = {"schema": 1, "inputs": INPUTS, "boot_id": BOOT, "written_at": 1796239300, "paths": PATHS}
    return dict(base, **changes)


@pytest.mark.parametrize(
    "stdout, inputs, expected",
    [
        (output(record()), INPUTS, ""),
        (output(None), INPUTS, "no converge record"),
        (output("{not json"), INPUTS, "unreadable"),
        (output(record(schema=0)), INPUTS, "unreadable or from another seatwright"),
        (output(record()), "b" * 64, "variables changed"),
        (output(record(), boot="another-boot"), INPUTS, "rebooted"),
        (output(record(), now=1796239300 + 24 * 3600 + 1), INPUTS, "older than 24 h"),
        (output(record(), now=1796239299), INPUTS, "clock moved back"),
        (output(record(), paths=dict(PATHS, **{"/etc/nccl.conf": ADDED})), INPUTS, "/etc/nccl.conf"),
        (output(record(), paths={k: v for k, v in PATHS.items() if "wants" not in k}), INPUTS, "seatwright-gpu-power"),
        (
            output(record(), paths=dict(PATHS, **{"/etc/seatwright/nccl.env": MODE_600})),
            INPUTS,
            "changed on the node since the last converge: /etc/seatwright/nccl.env",
        ),
    ],
    ids=["current", "none", "unreadable", "schema", "inputs", "reboot", "age", "clock", "added", "removed", "mode"],
)  # fmt: skip
def test_the_reason_to_converge_again(stdout, inputs, expected):
    reason = converge_reason(stdout, inputs)
    assert (reason == "") if expected == "" else (expected in reason)


def test_many_changed_paths_are_named_three_and_counted():
    paths = {"/etc/modprobe.d/x%d.conf" % n: ["f", "644", "1", "1.0", ""] for n in range(5)}
    reason = converge_reason(output(record(), paths=dict(PATHS, **paths)), INPUTS)
    assert reason.endswith("x2.conf and 2 more")


def test_a_folder_is_watched_by_its_entries_not_its_own_mtime():
    moved = dict(PATHS, **{"/etc/seatwright": ["d", "755", "", "", ""]})
    lines = output(record(), paths=moved).replace(
        "/etc/seatwright\td\t755\t\t\t", "/etc/seatwright\td\t755\t4096\t9.9\t"
    )
    assert converge_reason(lines, INPUTS) == ""


FACTS = {"seatwright_gpu_summary": {"count": 2}, "seatwright_fabric": {}, "ansible_local": {"seatwright": {}}}


def node(stdout, **variables):
    return dict({"ansible_facts": FACTS, "__nodes_snapshot": {"stdout": stdout}}, **variables)


@pytest.mark.parametrize("stdout", ["", "#boot\nx\n", output(record()).replace("#now\n1796240000", "#now\nsoon")])
def test_output_that_is_not_the_commands_is_refused_with_what_the_node_needs(stdout):
    with pytest.raises(AnsibleFilterError, match="GNU find"):
        converge_decisions(["n1"], {"n1": node(stdout)})


def test_the_play_decides_every_node_from_its_own_variables_and_record():
    hostvars = {"n1": node(output(None)), "n2": node(output(None), gpu_power_limit_w=250)}
    first = converge_decisions(["n1", "n2"], hostvars)
    assert first["n1"]["inputs"] != first["n2"]["inputs"]
    assert all("no converge record" in d["reason"] for d in first.values())
    written = {host: json.loads(converge_record(output(None), d["inputs"])) for host, d in first.items()}
    hostvars = {host: node(output(written[host], now=1796240100), **{k: v for k, v in hostvars[host].items()
                if k == "gpu_power_limit_w"}) for host in hostvars}  # fmt: skip
    assert {h: d["reason"] for h, d in converge_decisions(["n1", "n2"], hostvars).items()} == {"n1": "", "n2": ""}
    # An override on the command line (in hostvars) sends that node through the roles again.
    hostvars["n2"]["gpu_power_limit_w"] = 300
    decided = converge_decisions(["n1", "n2"], hostvars)
    assert decided["n1"]["reason"] == "" and "variables changed" in decided["n2"]["reason"]
    forced = converge_decisions(["n1", "n2"], hostvars, forced=True)
    assert {d["reason"] for d in forced.values()} == {cr.FORCED}


@pytest.mark.parametrize("missing", ["seatwright_gpu_summary", "seatwright_fabric", "ansible_local"])
def test_a_node_without_cached_facts_converges(missing):
    facts = {k: v for k, v in FACTS.items() if k != missing}
    decided = converge_decisions(["n1"], {"n1": dict(node(output(record())), ansible_facts=facts)})
    assert decided["n1"]["reason"] == cr.NO_FACTS


WSL2 = {"seatwright_host_kind": {"kind": "wsl2", "source": "node"}}
LINUX = {"seatwright_host_kind": {"kind": "linux", "source": "node"}}


@pytest.mark.parametrize(
    "kind, missing, expected",
    [
        # rdma_fabric gathers no fabric facts on a WSL2 node: its record holds without them.
        (WSL2, "seatwright_fabric", ""),
        (WSL2, "seatwright_gpu_summary", cr.NO_FACTS),
        (WSL2, "ansible_local", cr.NO_FACTS),
        (LINUX, "seatwright_fabric", cr.NO_FACTS),
        ({}, "seatwright_fabric", cr.NO_FACTS),
        ({"seatwright_host_kind": "wsl2"}, "seatwright_fabric", cr.NO_FACTS),
    ],
    ids=["wsl2-no-fabric", "wsl2-no-gpus", "wsl2-no-local", "linux-no-fabric", "no-kind", "kind-not-a-mapping"],
)
def test_the_facts_a_node_needs_cached_follow_its_kind(kind, missing, expected):
    facts = dict({k: v for k, v in FACTS.items() if k != missing}, **kind)
    inputs = converge_decisions(["n1"], {"n1": node(output(None))})["n1"]["inputs"]
    current = dict(node(output(record(inputs=inputs))), ansible_facts=facts)
    assert converge_decisions(["n1"], {"n1": current})["n1"]["reason"] == expected


def test_the_record_and_the_gpu_facts_cache_are_not_watched():
    cache = {"/var/lib/seatwright/gpu_facts.json": ["f", "644", "2253", "5.0", ""]}
    rec = {"/var/lib/seatwright/converge-record.json": ["f", "644", "4048", "6.0", ""]}
    assert converge_reason(output(record(), paths=dict(PATHS, **cache, **rec)), INPUTS) == ""
    moved = {"/srv/sw/gpu_facts.json": ["f", "644", "1", "5.0", ""]}
    assert converge_reason(output(record(), paths=dict(PATHS, **moved)), INPUTS, state_dir="/srv/sw") == ""


def test_a_new_record_holds_what_the_next_run_compares():
    text = converge_record(output(None), INPUTS)
    assert json.loads(text) == record(written_at=1796240000)
    assert converge_reason(output(json.loads(text), now=1796240500), INPUTS) == ""


def test_steering_variables_are_seatwrights_and_the_roles_not_facts_or_the_switch():
    names = ["seatwright_node_gpu_profile", "gpu_power_limit_w", "nccl_env_conf_path", "ansible_host",
             "seatwright_gpu_summary", "seatwright_full_converge", "__nodes_why", "other_var"]  # fmt: skip
    facts = {"seatwright_gpu_summary": {}}
    assert cr.steering_names(names, ["gpu_power", "nccl_env"], facts) == [
        "gpu_power_limit_w",
        "nccl_env_conf_path",
        "seatwright_node_gpu_profile",
    ]


def test_the_inputs_digest_moves_with_code_and_settings_only():
    base = cr.inputs_digest({"roles/a/tasks/main.yml": "1"}, {"gpu_power_limit_w": 300})
    assert base == cr.inputs_digest({"roles/a/tasks/main.yml": "1"}, {"gpu_power_limit_w": 300})
    assert base != cr.inputs_digest({"roles/a/tasks/main.yml": "2"}, {"gpu_power_limit_w": 300})
    assert base != cr.inputs_digest({"roles/a/tasks/main.yml": "1"}, {"gpu_power_limit_w": 250})


def snapshot(tmp_path):
    command = cr.snapshot_command(config_dir=str(tmp_path / "etc"), state_dir=str(tmp_path / "lib"))
    return subprocess.run(["sh", "-c", command], capture_output=True, text=True, check=True).stdout


def test_the_command_run_for_real_reads_what_changed_and_leaves_out_the_record(tmp_path):
    (tmp_path / "etc" / "router").mkdir(parents=True)
    (tmp_path / "lib" / "deep").mkdir(parents=True)
    (tmp_path / "etc" / "a.env").write_text("A=1\n")
    (tmp_path / "etc" / "router" / "other-roles.yaml").write_text("not watched\n")
    (tmp_path / "lib" / "deep" / "big.bin").write_text("staged weights are not watched\n")
    state = str(tmp_path / "lib")
    first = converge_record(snapshot(tmp_path), INPUTS, state)
    paths = json.loads(first)["paths"]
    assert paths[str(tmp_path / "etc" / "a.env")][:3] == ["f", "644", "4"]
    assert str(tmp_path / "etc" / "router" / "other-roles.yaml") not in paths
    assert str(tmp_path / "lib" / "deep") in paths and str(tmp_path / "lib" / "deep" / "big.bin") not in paths
    (tmp_path / "lib" / "converge-record.json").write_text(first)
    assert converge_reason(snapshot(tmp_path), INPUTS, state) == ""
    (tmp_path / "etc" / "router" / "other-roles.yaml").write_text("changed by another role\n")
    assert converge_reason(snapshot(tmp_path), INPUTS, state) == ""
    os.chmod(tmp_path / "etc" / "a.env", 0o600)
    assert converge_reason(snapshot(tmp_path), INPUTS, state).endswith(str(tmp_path / "etc" / "a.env"))
