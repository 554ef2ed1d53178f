"""node_files: a role's folders and files made to match in one call (library/node_files.py)."""

import json
import os

import node_files
import pytest
from ansible.module_utils.testing import patch_module_args


def run(capsys, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            node_files.main()
    return json.loads(capsys.readouterr().out)


def args_for(tmp_path, text="A=1\n"):
    return {
        "folders": [{"path": str(tmp_path / "etc")}],
        "files": [
            {"path": str(tmp_path / "etc" / "a.env"), "content": text},
            {"path": str(tmp_path / "lib" / "b.json"), "content": "{}\n", "mode": "0600"},
        ],
    }


def test_check_mode_predicts_and_writes_nothing(capsys, tmp_path):
    result = run(capsys, dict(args_for(tmp_path), _ansible_check_mode=True, _ansible_diff=True))
    assert result["changed"] is True and len(result["changed_paths"]) == 3
    assert [d["after"] for d in result["diff"]] == ["A=1\n", "{}\n"]
    assert not (tmp_path / "etc").exists() and not (tmp_path / "lib").exists()


def test_writes_then_reports_nothing_then_only_what_differs(capsys, tmp_path):
    first = run(capsys, args_for(tmp_path))
    assert first["changed"] is True
    assert (tmp_path / "etc" / "a.env").read_text() == "A=1\n"
    assert os.stat(tmp_path / "lib" / "b.json").st_mode & 0o777 == 0o600
    assert os.stat(tmp_path / "etc").st_mode & 0o777 == 0o755
    assert run(capsys, args_for(tmp_path))["changed"] is False
    os.chmod(tmp_path / "lib" / "b.json", 0o644)
    again = run(capsys, dict(args_for(tmp_path, "A=2\n"), _ansible_diff=True))
    assert again["changed_paths"] == [str(tmp_path / "etc" / "a.env"), str(tmp_path / "lib" / "b.json")]
    assert again["diff"][0]["before"] == "A=1\n" and again["diff"][0]["after"] == "A=2\n"
    assert os.stat(tmp_path / "lib" / "b.json").st_mode & 0o777 == 0o600


@pytest.mark.parametrize(
    "files", [[{"path": "relative.txt", "content": "x"}], [{"path": "/tmp/x"}], [{"content": "x"}]]
)
def test_bad_entries_are_named(capsys, files):
    result = run(capsys, {"files": files})
    assert result["failed"] is True
    assert result["msg"].startswith("files[0]: expected an absolute path and path, content")
