"""The evidence redactor: one case per kind of identifier, on real output shapes."""

import base64
import json
import subprocess
import sys
import threading
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.evidence.redact import Redactor, redact
from conftest import FIXTURES
from test_qualify_client import load_cli, write_recipe

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


# ---- issue 23 item 5: the run's secrets in any shape, and the patterns the redactor missed ------------

SEAT_KEY = "sk-seat-7Hq2Zp9Lw4Xv"


def _gone(out, *secrets):
    text = out if isinstance(out, str) else json.dumps(out)
    for secret in secrets:
        assert secret not in text, "%r survived in %s" % (secret, text)
    return text


@pytest.mark.parametrize(
    "raw, secret",
    [
        (["--api-key", "plainvalue-0123456789"], "plainvalue-0123456789"),
        (("vllm", "serve", "m", "--hf-token", "plainvalue-0123456789"), "plainvalue-0123456789"),
        (["sglang", "--api-key=plainvalue-0123456789"], "plainvalue-0123456789"),
        ('argv ["--api-key", "plainvalue-0123456789", "--port", "8000"]', "plainvalue-0123456789"),
        ("python -m sglang.launch_server --api-key 'plainvalue-0123456789'", "plainvalue-0123456789"),
        ([["Authorization", "Token plainvalue-0123456789"]], "plainvalue-0123456789"),
    ],
)
def test_api_key_flag_value_in_argv_list_is_removed(raw, secret):
    _gone(redact(raw), secret)


def test_api_key_flag_keeps_the_flags_around_it():
    assert redact(["--api-key", "plainvalue-0123456789", "--max-tokens", "256", "--tokenizer", "t"]) == [
        "--api-key",
        "<redacted>",
        "--max-tokens",
        "256",
        "--tokenizer",
        "t",
    ]


@pytest.mark.parametrize(
    "raw",
    [
        {"api_key": ["plainvalue-0123456789"]},
        {"router": {"credentials": {"user": "svc", "pass": "plainvalue-0123456789"}}},
        {"HF_TOKEN": ("plainvalue-0123456789",)},
    ],
)
def test_list_or_object_under_a_secret_key_is_removed(raw):
    _gone(redact(raw), "plainvalue-0123456789")


@pytest.mark.parametrize(
    "raw",
    [
        "Authorization: Token plainvalue-0123456789",
        "authorization: ApiKey plainvalue-0123456789",
        "Proxy-Authorization: Digest plainvalue-0123456789",
        '{"headers": "Authorization: plainvalue-0123456789"}',
    ],
)
def test_authorization_header_of_any_scheme_is_removed(raw):
    out = _gone(redact(raw), "plainvalue-0123456789")
    assert redact(out) == out  # a second pass changes nothing


@pytest.mark.parametrize(
    "raw, secret",
    [
        ("aws access key AKIAIOSFODNN7EXAMPLE in use", "AKIAIOSFODNN7EXAMPLE"),
        ("ASIAY34FZKBOKMUTVV7A", "ASIAY34FZKBOKMUTVV7A"),
        ("aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI"),
        ("AWS_SECRET_ACCESS_KEY=wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "wJalrXUtnFEMI"),
        ('{"secret_key": "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"}', "wJalrXUtnFEMI"),
    ],
)
def test_aws_access_key_and_secret_key_are_removed(raw, secret):
    _gone(redact(raw), secret)


JWT_TEXT = (
    "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIiwibmFtZSI6IkpvaG4gRG9lIn0"
    ".SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
)


@pytest.mark.parametrize("raw", ["session %s ok" % JWT_TEXT, {"id": JWT_TEXT}, "x-auth=%s" % JWT_TEXT])
def test_jwt_is_removed(raw):
    _gone(redact(raw), "SflKxwRJ", "eyJzdWIi")


PEM = (
    "-----BEGIN OPENSSH PRIVATE KEY-----\n"
    "b3BlbnNzaC1rZXktdjEAAAAABG5vbmUAAAAEbm9uZQAAAAAAAAABAAAAMwAAAAtzc2gtZW\n"
    "QyNTUxOQAAACDx3ZlDWiKpZ8yJbXV2c3JpcHRfc2VjcmV0X2JvZHlfaGVyZQ==\n"
    "-----END OPENSSH PRIVATE KEY-----\n"
)


@pytest.mark.parametrize(
    "raw",
    [
        PEM,
        "key: " + PEM.replace("OPENSSH ", "RSA "),
        json.dumps({"log": "loaded " + PEM}),
        "cut short: " + PEM[:120],
    ],
)
def test_pem_private_key_block_is_removed(raw):
    out = _gone(redact(raw), "b3BlbnNzaC1rZXkt", "QyNTUxOQAAACDx3Zl")
    assert "PRIVATE KEY-----" in out  # the kind of block stays readable


@pytest.mark.parametrize(
    "raw, secret",
    [
        ("https://user:p@ss:w%40rd@hub.example.com/org/model", "p@ss"),
        ("redis://:s3cr3t-pass@cache:6379/0", "s3cr3t-pass"),
        ("https://ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8@github.com/org/x.git", "ghp_A1b2"),
        ("GET /v1/models?token=tok-0123456789&limit=5", "tok-0123456789"),
        ("https://h/x?a=1&api_key=abc-0123456789#frag", "abc-0123456789"),
        ("https://h/x?user=me&password=hunter2-long", "hunter2-long"),
        ("https://s3/b/o?X-Amz-Signature=deadbeefcafe0123&X-Amz-Credential=AKIAX%2F2026", "deadbeefcafe0123"),
        ('{"url": "https:\\/\\/me:pw-0123456789@host\\/v1"}', "pw-0123456789"),
    ],
)
def test_url_password_in_every_shape_is_removed(raw, secret):
    out = _gone(redact(raw), secret)
    assert redact(out) == out


def test_url_query_keeps_the_parameters_that_are_not_secret():
    assert redact("https://h/x?token=tok-0123456789&limit=5") == "https://h/x?token=<redacted>&limit=5"
    assert redact("ssh://git@github.com/org/x") == "ssh://git@github.com/org/x"


@pytest.mark.parametrize(
    "raw, expected",
    [
        ("Cisco  0011.22aa.bb55  DYNAMIC  Gi1/0/1", "Cisco  0200.0000.0001  DYNAMIC  Gi1/0/1"),
        ("mac 5c25.730a.1b2c and again 5C25.730A.1B2C", "mac 0200.0000.0001 and again 0200.0000.0001"),
    ],
)
def test_dotted_mac_is_removed(raw, expected):
    assert redact(raw) == expected


@pytest.mark.parametrize(
    "raw, secret",
    [
        ("link/ether 5c25730a1b2c brd ffffffffffff", "5c25730a1b2c"),
        ("eth0      Link encap:Ethernet  HWaddr 5C25730A1B2C", "5C25730A1B2C"),
        ("mac_address=5c25730a1b2c", "5c25730a1b2c"),
        ({"ifname": "ens1f0", "mac": "5c25730a1b2c"}, "5c25730a1b2c"),
        ({"hwaddr": "5C25730A1B2C"}, "5C25730A1B2C"),
    ],
)
def test_bare_mac_where_it_is_named_one_is_removed(raw, secret):
    _gone(redact(raw), secret)


def test_one_mac_keeps_one_number_in_every_spelling():
    out = redact("5c:25:73:0a:1b:2c 5c25.730a.1b2c link/ether 5c25730a1b2c")
    assert out == "02:00:00:00:00:01 0200.0000.0001 link/ether 020000000001"


@pytest.mark.parametrize(
    "keep",
    [
        "image sha256:6f1c2a9e8b7d4c3f2e1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e pulled",
        '{"image_id": "6f1c2a9e8b7d", "digest": "sha256:'
        + '6f1c2a9e8b7d4c3f2e1a0b9c8d7e6f5a4b3c2d1e0f9a8b7c6d5e4f3a2b1c0d9e"}',
        "model revision 3c1d5f2a9b8e7d6c5b4a3f2e1d0c9b8a7f6e5d4c",
        "docker run 6f1c2a9e8b7d, layer 001122334455 cached",
        "tokens 1654823012345 of 20261130150000, throughput 1234.5, seed 20261130",
        "eyJhbGciOiJIUzI1NiJ9 alone is a header, not a token",
        "v2024.1130.0001 build",
    ],
)
def test_digests_image_ids_revisions_and_numbers_are_kept(keep):
    assert redact(keep) == keep
    if keep.startswith("{"):
        assert redact(json.loads(keep)) == json.loads(keep)


def test_hostname_from_inventory_is_replaced_by_one_placeholder_across_files(tmp_path):
    from ansible_collections.seatwright.fleet.plugins.module_utils.io.evidence.writer import write_evidence

    inventory = ["gpu07.dc1.example.net", "gpu08.dc1.example.net"]
    write_evidence(dir=str(tmp_path), files={"a.txt": "gpu08 up; gpu07 up"}, hostnames=inventory)
    write_evidence(dir=str(tmp_path), files={"b.txt": "gpu07.dc1.example.net joined"}, hostnames=inventory)
    a, b = (tmp_path / "a.txt").read_text(), (tmp_path / "b.txt").read_text()
    assert a == "host-2 up; host-1 up" and b == "host-1 joined"


@pytest.mark.parametrize(
    "raw",
    [
        "resolved gpu07.dc1.internal to a rank",
        "ip-10-0-0-5.ec2.internal: ok",
        "vllm-0.default.svc.cluster.local:8000",
        "node gpu07.lab.home.arpa",
    ],
)
def test_hostname_under_a_private_zone_is_replaced(raw):
    out = redact(raw)
    assert "host-1" in out and ".internal" not in out and ".local" not in out and "arpa" not in out


# The run's own secrets, through the new API: every shape, the short-secret rule, keys as well as values.


def _b64(text):
    return base64.b64encode(text.encode()).decode()


QUOTED_KEY = SEAT_KEY[:5] + '"' + SEAT_KEY[5:]
SPACED_KEY = SEAT_KEY + "/+ x"


@pytest.mark.parametrize(
    "shape, secret",
    [
        ("you said %s" % SEAT_KEY, SEAT_KEY),
        ("prefix%ssuffix" % SEAT_KEY, SEAT_KEY),
        ("key=%s" % SEAT_KEY.replace("-", "%2D"), SEAT_KEY),
        ("key=%s" % SEAT_KEY.replace("-", "%252d"), SEAT_KEY),
        ("q=%s" % urllib.parse.quote(SPACED_KEY, safe=""), SPACED_KEY),
        ("form q=%s" % urllib.parse.quote_plus(SPACED_KEY), SPACED_KEY),
        ("basic header " + _b64("user:" + SEAT_KEY), SEAT_KEY),
        ("b64 " + _b64(SEAT_KEY), SEAT_KEY),
        ("b64 " + _b64("ab:" + SEAT_KEY + ":tail"), SEAT_KEY),
        ("urlsafe " + base64.urlsafe_b64encode(("u:" + SEAT_KEY).encode()).decode(), SEAT_KEY),
        (json.dumps({"inner": json.dumps({"echo": QUOTED_KEY})}), QUOTED_KEY),
        ("\\u%04x%s" % (ord(SEAT_KEY[0]), SEAT_KEY[1:]), SEAT_KEY),
    ],
)
def test_bare_seat_key_echoed_in_answer_is_removed(shape, secret):
    out = Redactor(secrets=[secret]).text(shape)
    assert "7Hq2Zp9Lw4Xv" not in out and "<redacted>" in out
    assert _b64(SEAT_KEY)[4:14] not in out


def test_seat_key_in_dict_keys_values_and_lists_is_removed():
    doc = {SEAT_KEY: {"echo": [SEAT_KEY, "x %s y" % SEAT_KEY]}, "n": 3}
    out = Redactor(secrets=[SEAT_KEY]).redact(doc)
    assert SEAT_KEY not in json.dumps(out) and out["n"] == 3


def test_short_secret_is_removed_only_as_a_whole_value():
    out = Redactor(secrets=["pass"]).redact({"key": "pass", "args": ["pass"], "verdict": "bypass", "s": "a pass b"})
    assert out == {"key": "<redacted>", "args": ["<redacted>"], "verdict": "bypass", "s": "a pass b"}


def test_secrets_from_env_takes_secret_names_and_named_variables():
    from ansible_collections.seatwright.fleet.plugins.module_utils.evidence.redact import secrets_from_env

    env = {"HF_TOKEN": "hf_abcdefghijklmnopqrst", "HF_HUB_DISABLE_TOKEN": "1", "SEAT_KEY": "k1", "PATH": "/bin"}
    assert secrets_from_env(env, ("SEAT_KEY",)) == {"hf_abcdefghijklmnopqrst", "k1"}


class EchoingEngine(BaseHTTPRequestHandler):
    """A hostile seat that echoes the caller's key back in every answer, in several shapes."""

    def log_message(self, *args):
        pass

    def _send(self, payload):
        data = json.dumps(payload).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _echo(self):
        key = (self.headers.get("Authorization") or "").split(" ", 1)[-1]
        return {
            "seen": key,
            "seen_quoted": urllib.parse.quote(key, safe=""),
            "seen_basic": _b64("me:" + key),
            "argv": ["--api-key", key],
            key: "as a key",
        }

    def do_GET(self):
        self._send({"object": "list", "data": [{"id": "smol", "max_model_len": 2048}], "echo": self._echo()})

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length") or 0))
        key = self._echo()["seen"]
        self._send(
            {
                "id": "chatcmpl-1",
                "object": "chat.completion",
                "model": "smol",
                "choices": [
                    {
                        "index": 0,
                        "message": {"role": "assistant", "content": "Your key is %s. Paris." % key},
                        "finish_reason": "stop",
                    }
                ],
                "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
                "echo": self._echo(),
            }
        )


def test_qualify_evidence_holds_the_echoed_seat_key_zero_times(tmp_path, monkeypatch):
    server = ThreadingHTTPServer(("127.0.0.1", 0), EchoingEngine)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        cli = load_cli()
        key = "sk-seat-7Hq2Zp9Lw4Xv"  # a plain key: no name or shape gives it away
        monkeypatch.setenv("SEAT_KEY_FOR_TEST", key)
        recipe = write_recipe(tmp_path, ["smoke"])
        evidence = tmp_path / "evidence"
        cli.main(
            [
                "--base-url",
                "http://127.0.0.1:%d/v1" % server.server_address[1],
                "--model",
                "smol",
                "--recipe",
                str(recipe),
                "--evidence-dir",
                str(evidence),
                "--api-key-env",
                "SEAT_KEY_FOR_TEST",
                "--parts",
                "gates",
            ]
        )
    finally:
        server.shutdown()
        server.server_close()
    text = "".join(path.read_text() for path in sorted(evidence.rglob("*")) if path.is_file())
    assert "qualification.json" in {path.name for path in evidence.iterdir()}
    assert "Your key is" in text  # the echo was recorded, so the count below means something
    for shape in (key, urllib.parse.quote(key, safe=""), _b64("me:" + key)[4:20], "7Hq2Zp9Lw4Xv"):
        assert text.count(shape) == 0, "%r found %d times in the qualification evidence" % (shape, text.count(shape))


# ---------------------------------------------------------------- issue 50: cuts, and leftovers

CUT_KEY = "sk-cut-Zq8Ww2LmR4tY7uPa9XcV1bN3mK5jH6gF"


@pytest.mark.parametrize(
    "cut",
    [
        ("error: bad key " + CUT_KEY)[:42],  # text[:200]: the key's head ends the value
        "%r" % ("bad key " + CUT_KEY)[:30],  # a cut inside a repr: a quote follows the head
        "head " + CUT_KEY[:20] + "[... 9 characters left out ...]" + CUT_KEY[29:],  # shorten()'s cut
        CUT_KEY[12:] + " and the rest",  # a copy that starts inside the key: its tail begins the value
        "gate smoke: fail - HTTP 200 but the body is not JSON: 'xxxx bad key " + CUT_KEY[:27] + "...",
    ],
)
def test_a_copy_cut_before_redaction_leaves_no_head_or_tail_of_the_key(cut):
    clean = Redactor(secrets=[CUT_KEY]).redact({"text": cut})["text"]
    pieces = [CUT_KEY[i:j] for i in range(len(CUT_KEY)) for j in range(i + 8, len(CUT_KEY) + 1)]
    assert [p for p in pieces if p in clean] == [], clean


def test_a_piece_of_the_key_shape_that_is_not_at_a_cut_is_kept():
    # Another key of the same family shares the first 7 characters: it is not this key's head.
    assert Redactor(secrets=[CUT_KEY]).text("sk-cut-another-key") == "sk-cut-another-key"


GHP = "ghp_" + "A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"


@pytest.mark.parametrize(
    "value, gone",
    [
        ("cloned with " + GHP + " from the mirror", GHP),
        ("https://x:" + "github_pat_11ABCDEFG0123456789_abcdefghijklmnopqrstuvwxyz" + "@github.com", "github_pat_11"),
        ([["api_key", "K-nobody-told-us-9876"], ["model", "m"]], "K-nobody-told-us-9876"),
        ({"env": [["HF_TOKEN", "plain-token-value-1234"]]}, "plain-token-value-1234"),
        ("node-a at 010.001.002.003 answered", "010.001.002.003"),
        ("node-b at 172.030.099.012", "172.030.099.012"),
    ],
    ids=["ghp token", "fine-grained pat", "api_key pair", "HF_TOKEN pair", "leading zeros", "leading zeros 2"],
)
def test_what_the_redactor_left_without_the_key_passed_in_is_gone(value, gone):
    # Issue 50 item 6: without the key given, these survived.
    assert gone not in json.dumps(redact(value))


def test_a_leading_zero_address_is_the_same_host_as_its_plain_spelling():
    redactor = Redactor()
    assert redactor.text("010.001.002.003") == redactor.text("10.1.2.3")


def test_a_pair_that_is_no_secret_is_kept():
    assert redact([["token_count", 5], ["model", "m"]]) == [["token_count", 5], ["model", "m"]]
