"""The node roles on a node that declares itself WSL2, run on this machine (which is not one): the node
kind is read through node_kind with the lab's labelled WSL2 test input (lab/node_kind/wsl2.yml), the
GPUs through the lab's nvidia-smi emulator on PATH, and every path the roles write lies under a
temporary folder. The driver role says the node is served by the Windows driver and installs nothing,
gpu_power says each setting it would change is not settable on this node kind, rdma_fabric says why it
skips, nccl_env writes the WSL2 contract; a second run changes nothing, and --check changes nothing."""

import json
import os
import subprocess
import sys

import yaml
from conftest import ROOT

PLAY = """
- name: The node roles on a WSL2-declared node
  hosts: gpu_nodes
  gather_facts: true
  gather_subset: [min]
  tasks:
    - name: Read the node's kind from the lab's labelled test input
      seatwright.fleet.node_kind:
        host: "{{ inventory_hostname }}"
        declared: wsl2
        test_input: "{{ node_base_kind_test_input }}"
        fleet_name: lab
        lab_marker: "%(marker)s"
    - name: Driver
      ansible.builtin.include_role: {name: seatwright.fleet.nvidia_driver}
    - name: Power
      ansible.builtin.include_role: {name: seatwright.fleet.gpu_power}
    - name: Fabric
      ansible.builtin.include_role: {name: seatwright.fleet.rdma_fabric}
    - name: NCCL
      ansible.builtin.include_role: {name: seatwright.fleet.nccl_env}
      vars: {nccl_env_conf_path: "%(config)s/nccl.conf"}
"""


def converge(tmp_path, check=False):
    bin_dir = tmp_path / "bin"
    if not bin_dir.exists():
        bin_dir.mkdir()
        (bin_dir / "nvidia-smi").symlink_to(ROOT / "lab" / "nvidia_smi_emu.py")
        (tmp_path / "profile.json").write_text(
            (ROOT / "lab" / "gpu_profiles" / "rtx-pro-6000-maxq-x2.json").read_text()
        )
        (tmp_path / "marker").write_text("{}")
        host = {
            "ansible_connection": "local",
            "ansible_python_interpreter": sys.executable,
            "seatwright_node_fabric_iface": "eth0",
            "seatwright_node_fabric_ip": "100.64.0.10",
            "seatwright_node_rdma_devices": [],
            "gpu_power_limit_w": 250,
            "seatwright_state_dir": str(tmp_path / "state"),
            "seatwright_config_dir": str(tmp_path / "config"),
        }
        host.update(yaml.safe_load((ROOT / "lab" / "node_kind" / "wsl2.yml").read_text()))
        inventory = {"all": {"children": {"gpu_nodes": {"hosts": {"wsl-node": host}}}}}
        (tmp_path / "hosts.yml").write_text(json.dumps(inventory))
        (tmp_path / "play.yml").write_text(PLAY % {"marker": tmp_path / "marker", "config": tmp_path / "config"})
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_CACHE_PLUGIN="memory",
        PATH="%s:%s" % (bin_dir, os.environ["PATH"]),
        SEATWRIGHT_EMU_PROFILE=str(tmp_path / "profile.json"),
        SEATWRIGHT_EMU_STATE=str(tmp_path / "emu-state.json"),
    )
    command = [os.path.join(os.path.dirname(sys.executable), "ansible-playbook"), "-i", str(tmp_path / "hosts.yml")]
    proc = subprocess.run(
        command + [str(tmp_path / "play.yml")] + (["--check"] if check else []),
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-4000:] + proc.stderr[-2000:]
    return proc.stdout


def recap_changed(output):
    line = next(line for line in output.splitlines() if line.startswith("wsl-node ") and "changed=" in line)
    return int(line.split("changed=")[1].split()[0])


def test_a_wsl2_node_converges_saying_what_it_skips_and_a_rerun_changes_nothing(tmp_path):
    first = " ".join(converge(tmp_path).split())
    assert "served by the Windows driver" in first and "Windows driver 580.159.04 answers for 2 GPUs" in first
    assert "not settable on this node kind (wsl2)" in first and "GPU 0 power limit 300.0 W -> 250.0 W" in first
    assert "no boot unit installed (wsl2)" in first
    assert "skipped (wsl2): a WSL2 node is a single-node seat host" in first
    assert not (tmp_path / "emu-state.json").exists(), "a WSL2 node's GPU settings were set"
    conf = (tmp_path / "config" / "nccl.conf").read_text()
    assert "NCCL_P2P_DISABLE=1" in conf and "NCCL_CUMEM_ENABLE=0" in conf and "NCCL_IB_DISABLE=1" in conf
    assert recap_changed(converge(tmp_path)) == 0
    assert recap_changed(converge(tmp_path, check=True)) == 0
