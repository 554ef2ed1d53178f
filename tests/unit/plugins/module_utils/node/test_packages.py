"""Which packages are missing, from dpkg-query output (plugins/module_utils/node/packages.py)."""

import json

import deb_packages_missing
import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.seatwright.fleet.plugins.module_utils.node.packages import installed_packages, missing_packages

# Real shape of `dpkg-query -W -f='${Package}\t${db:Status-Status}\n' ...` on bookworm.
DPKG = "gnupg\tinstalled\nperftest\tconfig-files\nrdma-core\tinstalled\nlibc6:amd64\tinstalled\n"


def test_installed_packages_keeps_only_installed():
    assert installed_packages(DPKG) == {"gnupg", "rdma-core", "libc6"}


@pytest.mark.parametrize(
    "wanted,expected",
    [
        (["gnupg", "rdma-core"], []),
        (["perftest", "iperf3", "gnupg"], ["perftest", "iperf3"]),
        (["nvidia-driver=580.*", "gnupg"], ["nvidia-driver=580.*"]),
        (["libc6:amd64", "iperf3", "iperf3"], ["iperf3"]),
        ([], []),
    ],
)
def test_missing_packages(wanted, expected):
    assert missing_packages(wanted, DPKG) == expected


def test_module_reports_missing_from_dpkg(capsys, monkeypatch):
    calls = []

    def fake_run(self, args, **kwargs):
        calls.append(args)
        return 1, "gnupg\tinstalled\n", "dpkg-query: no packages found matching iperf3\n"

    monkeypatch.setattr(deb_packages_missing.AnsibleModule, "run_command", fake_run)
    monkeypatch.setattr(
        deb_packages_missing.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: "/usr/bin/" + name
    )
    with patch_module_args({"names": ["gnupg", "iperf3=3.*"]}):
        with pytest.raises(SystemExit):
            deb_packages_missing.main()
    result = json.loads(capsys.readouterr().out)
    assert result["missing"] == ["iperf3=3.*"] and result["changed"] is False
    assert calls[0][-2:] == ["gnupg", "iperf3"]


def test_module_fails_clearly_when_dpkg_breaks(capsys, monkeypatch):
    monkeypatch.setattr(
        deb_packages_missing.AnsibleModule,
        "run_command",
        lambda self, args, **kw: (2, "", "dpkg-query: error: database locked"),
    )
    monkeypatch.setattr(
        deb_packages_missing.AnsibleModule, "get_bin_path", lambda self, name, *a, **k: "/usr/bin/" + name
    )
    with patch_module_args({"names": ["gnupg"]}):
        with pytest.raises(SystemExit):
            deb_packages_missing.main()
    result = json.loads(capsys.readouterr().out)
    assert result["failed"] is True and "database locked" in result["msg"]
