"""Issue 50 item 2 end to end: playbooks/qualify.yml (role qualify) at `ansible-playbook -v`, on the
controller itself, against an endpoint that echoes the seat key in its answers (tests/hostile_server.py
echo-key: whole, unicode-escaped, and where the client's copies are cut). No piece of the key of 8
characters or more reaches the play's output, the evidence or the progress log, and the key's folder
is gone when the play ends.
"""

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from conftest import ROOT

sys.path.insert(0, str(ROOT / "tests"))
import hostile_server  # noqa: E402  pylint: disable=wrong-import-position

KEY = "sk-Zq8Ww2LmR4tY7uPa9XcV1bN3mK5jH6gF"
SEAT = "lab-echo"


def pieces(text, key=KEY, least=8):
    return sorted({key[i:j] for i in range(len(key)) for j in range(i + least, len(key) + 1) if key[i:j] in text})


def test_an_echoing_endpoint_puts_no_piece_of_the_key_into_the_verbose_play(tmp_path):
    recipe = yaml.safe_load((ROOT / "seats" / "lab.yml").read_text())
    recipe["name"] = SEAT
    recipe["qualification"]["gates"] = ["smoke", "json"]
    recipe["qualification"]["expect_fail"] = []
    (tmp_path / "seat.yml").write_text(yaml.safe_dump(recipe))
    evidence = tmp_path / "evidence"
    server = hostile_server.serve("echo-key", deadline_s=300)
    # The key reaches the play in a vars file, as from a vault: never on ansible-playbook's own argv.
    extra = tmp_path / "vars.yml"
    extra.write_text(
        yaml.safe_dump(
            {
                "seat": SEAT,
                "base_url": server.url,
                "model": hostile_server.MODEL,
                "recipe": str(tmp_path / "seat.yml"),
                "evidence_dir": str(evidence),
                "parts": ["gates"],
                "qualify_api_key": KEY,
                "qualify_fail_when_not_qualified": False,
            }
        )
    )
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    try:
        done = subprocess.run(
            [str(Path(sys.executable).parent / "ansible-playbook"), "-v", "-i", "localhost,", "-e", "@%s" % extra]
            + [str(ROOT / "playbooks" / "qualify.yml")],
            capture_output=True,
            text=True,
            env=env,
            cwd=str(ROOT),
            timeout=600,
        )
    finally:
        server.stop()
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-4000:]
    escaped = json.dumps(KEY, ensure_ascii=True)[1:-1]
    unicode_escaped = "".join("\\u%04x" % ord(c) for c in KEY)
    written = "".join(p.read_text(errors="replace") for p in evidence.rglob("*") if p.is_file())
    for name, text in (("the -v output", out), ("the evidence", written)):
        assert KEY not in text and escaped not in text and unicode_escaped not in text, name
        assert pieces(text) == [], "%s holds %s" % (name, pieces(text)[-3:])
    assert (evidence / "qualification.json").exists() and "qualify.progress.log" in os.listdir(evidence)
    assert not (ROOT / ".cache" / "private" / ("qualify-" + SEAT)).exists()
