"""The evidence redactor: one case per kind of identifier, on real output shapes."""

import json
import subprocess
import sys

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.evidence.redact import Redactor, redact
from conftest import FIXTURES

REAL_UUID = "GPU-3f9a1c22-7b1e-4c55-9a0e-1d2f3a4b5c6d"


@pytest.mark.parametrize(
    "raw, secret, expected",
    [
        # GPU UUIDs (nvidia-smi -L, -q, CSV), MIG UUIDs, bare UUIDs
        (
            "GPU 0: NVIDIA H200 (UUID: %s)" % REAL_UUID,
            REAL_UUID,
            "GPU 0: NVIDIA H200 (UUID: GPU-00000000-0000-4000-8000-000000000000)",
        ),
        ("MIG-GPU-3f9a1c22-7b1e-4c55-9a0e-1d2f3a4b5c6d/1/0", "3f9a1c22", None),
        ("boot_id 9b2c6e1a-0d44-4f7b-8c1e-aa11bb22cc33", "9b2c6e1a", None),
        # serials: nvidia-smi -q, lspci -vv, key=value
        (
            "    Serial Number                                      : 1654823012345",
            "1654823012345",
            "    Serial Number                                      : 0000000000001",
        ),
        ("\t\tCapabilities: [140 v1] Device Serial Number 48-b0-2d-ff-ff-9a-03-00", "48-b0-2d", None),
        ("board serial=PN12X4567AB", "PN12X4567AB", None),
        # IPv4: private, CGNAT, public; CIDR kept
        ("inet 10.20.30.41/24 brd 10.20.30.255 scope global ens1f0", "10.20.30", None),
        ("peer 172.16.5.9 via 100.64.0.7", "172.16.5.9", None),
        ("inet 192.168.1.7/16", "192.168.1.7", "inet 192.0.2.1/16"),
        # IPv6: global, link-local with zone, IPv4-mapped, in a URL
        ("inet6 fd12:3456:789a:1::5/64 scope global", "fd12:3456", "inet6 2001:db8::1/64 scope global"),
        ("inet6 fe80::ec0d:9aff:fe1a:2b3c%ibp65s0/64 scope link", "ec0d:9aff", None),
        ("from ::ffff:10.1.2.3 port 443", "10.1.2.3", None),
        ("http://[2a01:4f8:c0c:1234::1]:8000/v1", "2a01:4f8", "http://[2001:db8::1]:8000/v1"),
        # MACs with colons and dashes
        ("link/ether 5c:25:73:0a:1b:2c brd ff:ff:ff:ff:ff:ff", "5c:25:73", None),
        ("Physical Address. . . : 5C-25-73-0A-1B-2C", "5C-25-73", "Physical Address. . . : 02-00-00-00-00-01"),
        # InfiniBand GUIDs (ibstat, ibv_devinfo, sysfs)
        ("\tNode GUID: 0xec0d9a03001a2b3c", "ec0d9a03001a2b3c", "\tNode GUID: 0x0000000000000001"),
        ("\tnode_guid:\t\t\tec0d:9a03:001a:2b3c", "ec0d:9a03", "\tnode_guid:\t\t\t0000:0000:0000:0001"),
        ("0000:0000:0000:0000:ec0d:9a03:001a:2b3c\n", "ec0d:9a03", None),
        # 20-byte IPoIB link address: kept whole (the MAC pattern used to mangle its middle)
        (
            "link/infiniband 80:00:00:48:fe:80:00:00:00:00:00:00:ec:0d:9a:03:00:1a:2b:3c brd "
            "00:ff:ff:ff:ff:12:40:1b:ff:ff:00:00:00:00:00:00:ff:ff:ff:ff",
            "ec:0d:9a:03",
            "link/infiniband 80:00:00:48:fe:80:00:00:00:00:00:00:00:00:00:00:00:00:00:01 brd "
            "00:ff:ff:ff:ff:12:40:1b:ff:ff:00:00:00:00:00:00:ff:ff:ff:ff",
        ),
        # perftest GID (RoCE v2 carries the IPv4 address)
        (
            " GID: 00:00:00:00:00:00:00:00:00:00:255:255:10:00:07:116",
            "10:00:07",
            " GID: 00:00:00:00:00:00:00:00:00:00:255:255:192:00:02:01",
        ),
        ("GID: fe:80:00:00:00:00:00:00:ec:0d:9a:03:00:1a:2b:3c", "ec:0d:9a:03", None),
        # secrets
        ("curl -H 'Authorization: Bearer sk-live-abcdef123456'", "sk-live-abcdef", None),
        ("HF_TOKEN=hf_AbCdEfGhIjKlMnOpQrStUv vllm serve", "hf_AbCd", None),
        ("remote = https://user:ghp_s3cr3t@github.com/org/model.git", "ghp_s3cr3t", None),
    ],
)
def test_each_identifier_is_replaced(raw, secret, expected):
    out = redact(raw)
    assert secret not in out
    if expected is not None:
        assert out == expected


@pytest.mark.parametrize(
    "keep",
    [
        "driver_version 580.159.04, cuda 13.0, nccl 2.27.3",
        "pci.bus_id 00000000:00:06.0",
        "listening on 127.0.0.1:8000 and [::1]:8000 and 0.0.0.0, netmask 255.255.255.0",
        "12:34:56 started; std::vector<int>",
        "max_tokens: 256, tokens_per_second=1234.5, tokenizer_config.json: ok",
        "safe_serialization=True",
        "GPU-00000000-0000-4000-8000-000000000001 and 192.0.2.7 and 2001:db8::3",
    ],
)
def test_ordinary_values_and_placeholders_pass_through(keep):
    assert redact(keep) == keep


def test_serial_column_of_a_csv_query_is_redacted():
    csv = (
        "index, name, serial, uuid, memory.total [MiB]\n"
        "0, NVIDIA H200, 1654823012345, %s, 143771 MiB\n"
        "1, NVIDIA H200, 1654823012346, GPU-11111111-2222-4333-8444-555555555555, 143771 MiB\n" % REAL_UUID
    )
    out = redact(csv)
    assert "1654823012345" not in out and "1654823012346" not in out
    assert out.splitlines()[1] == (
        "0, NVIDIA H200, 0000000000001, GPU-00000000-0000-4000-8000-000000000000, 143771 MiB"
    )
    assert "143771 MiB" in out.splitlines()[2]


def test_configured_hostnames_and_their_short_form_are_replaced():
    text = "gpu07.dc1.example.net: ok; ssh gpu07 failed; gpu070 untouched"
    out = redact(text, hostnames=["gpu07.dc1.example.net"])
    # One host, one placeholder: the short form is the same machine.
    assert out == "host-1: ok; ssh host-1 failed; gpu070 untouched"


def test_json_like_values_keys_and_numbering_across_files():
    redactor = Redactor(hostnames=["node-a"])
    bringup = {
        "hostname": "gpu07",
        "gpus": [{"uuid": REAL_UUID, "serial": 1654823012345}],
        "env": {"HF_TOKEN": "hf_AbCdEfGhIjKlMnOpQrStUv", "VLLM_PORT": "8000"},
        "argv": ("vllm", "serve", "--host", "10.0.0.5"),
        "log": "node-a: NCCL INFO NET/IB : Using [0]mlx5_0:1/IB ; OOB ibp65s0:10.0.0.5<0>",
        "safe_serialization": True,
        "max_tokens": 256,
    }
    out = redactor.redact(bringup)
    text = json.dumps(out)
    for secret in ("gpu07", "3f9a1c22", "1654823012345", "hf_AbCd", "10.0.0.5", "node-a"):
        assert secret not in text
    assert out["env"]["VLLM_PORT"] == "8000" and out["max_tokens"] == 256
    assert isinstance(out["argv"], tuple)
    assert out["argv"][3] == "192.0.2.1" and "192.0.2.1<0>" in out["log"]
    # the same GPU in a second file keeps its placeholder
    assert redactor.redact("uuid %s" % REAL_UUID) == "uuid GPU-00000000-0000-4000-8000-000000000000"


@pytest.mark.parametrize(
    "fixture",
    [
        "h200x2/nvidia-smi-q.txt",
        "h200x2/nvidia-smi-query.csv",
        "ib_write_bw/roce-100g-bidirectional.txt",
        "nccl/h200x2-torch-sweep.txt",
    ],
)
def test_recorded_fixtures_are_already_redacted(fixture):
    raw = (FIXTURES / fixture).read_text()
    assert redact(raw) == raw


def test_deeply_nested_input_is_cut_not_a_traceback():
    value = "x"
    for _ in range(5000):
        value = [value]
    out = redact(value)
    assert isinstance(out, list)


def test_device_script_uses_the_module(tmp_path):
    raw, out = tmp_path / "raw", tmp_path / "out"
    raw.mkdir()
    (raw / "smi.txt").write_text("Serial Number : 1654823012345\n%s on gpu07\n" % REAL_UUID)
    script = FIXTURES.parent.parent / "bench" / "device" / "gpu_redact.py"
    subprocess.run([sys.executable, str(script), str(raw), str(out), "gpu07"], check=True, capture_output=True)
    assert (out / "smi.txt").read_text() == (
        "Serial Number : 0000000000001\nGPU-00000000-0000-4000-8000-000000000000 on host-1\n"
    )


@pytest.mark.parametrize(
    "raw",
    [
        # AIPerf / benchmark metrics: names that end in "token" but count or time tokens.
        '{"time_to_first_token":{"avg":41.2,"p50":40.1}}',
        "time_to_first_token: 123.5 ms",
        "inter_token_latency=4.5",
        "output_token_throughput: 812.3",
        '"token": 17',
    ],
)
def test_token_metrics_are_not_taken_for_secrets(raw):
    assert redact(raw) == raw


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("password=123456", "password=<redacted>"),
        ("x --password 1234", "x --password <redacted>"),
        ('"access_token": "eyJhbGciOi"', '"access_token": "<redacted>"'),
        ("VLLM_API_KEY=k-9f8e7d", "VLLM_API_KEY=<redacted>"),
    ],
)
def test_secrets_are_still_replaced_next_to_the_metric_exemption(raw, expected):
    assert redact(raw) == expected


def test_json_numbers_under_token_names_stay_and_under_passwords_go():
    out = redact(
        {
            "time_to_first_token": {"p50": 3.0},
            "inter_token_latency": 4.5,
            "max_token": 5,
            "pin_password": 1234,
            "api_token": "abc",
        }
    )
    assert out == {
        "time_to_first_token": {"p50": 3.0},
        "inter_token_latency": 4.5,
        "max_token": 5,
        "pin_password": "<redacted>",
        "api_token": "<redacted>",
    }
