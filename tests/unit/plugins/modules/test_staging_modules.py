"""weight_source and weight_stage through patch_module_args, talking to each other over loopback."""

import json
import socket
import threading

import pytest
import weight_source
import weight_stage
from ansible.module_utils.testing import patch_module_args
from checkpoint_cases import REVISION, big_shards, blob_path, truncate, write_hf_entry

TOKEN = "s" * 32


def free_port():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def run(capsys, module, args):
    with patch_module_args(args):
        with pytest.raises(SystemExit):
            module.main()
    return json.loads(capsys.readouterr().out)


class SourceModule:
    """weight_source running its module main() in a thread, as an async task would on a node."""

    def __init__(self, args):
        self.args, self.exit = args, None
        self.ready = threading.Event()

    def _main(self):
        with patch_module_args(self.args):
            self.ready.set()
            try:
                weight_source.main()
            except SystemExit as exc:
                self.exit = exc.code

    def __enter__(self):
        self.thread = threading.Thread(target=self._main)
        self.thread.start()
        self.ready.wait()
        return self

    def __exit__(self, *exc):
        self.thread.join(30)


@pytest.fixture
def entry(tmp_path):
    return write_hf_entry(tmp_path / "src", big_shards(2, 1))


def source_args(tmp_path, entry, port, **changes):
    return dict(
        dict(
            path=entry,
            revision=REVISION,
            name="m",
            bind_address="127.0.0.1",
            port=port,
            token=TOKEN,
            clients=1,
            idle_timeout_s=20,
            lifetime_s=60,
            state_dir=str(tmp_path / "src-state"),
        ),
        **changes,
    )


def stage_args(tmp_path, port, **changes):
    return dict(
        dict(
            source_url="http://127.0.0.1:%d" % port,
            token=TOKEN,
            dest=str(tmp_path / "dst"),
            name="m",
            revision=REVISION,
            client="node-b",
            state_dir=str(tmp_path / "dst-state"),
            connect_timeout_s=10,
        ),
        **changes,
    )


def test_stage_then_restage_through_the_modules(capsys, tmp_path, entry):
    port = free_port()
    with SourceModule(source_args(tmp_path, entry, port, clients=3)) as source:
        first = run(capsys, weight_stage, stage_args(tmp_path, port, _ansible_diff=True))
        second = run(capsys, weight_stage, stage_args(tmp_path, port, client="second"))
        predicted = run(capsys, weight_stage, stage_args(tmp_path, port, client="third", _ansible_check_mode=True))
    served = json.loads(capsys.readouterr().out)
    assert source.exit == 0
    assert first["changed"] and first["verified"] and first["files_fetched"] == 4
    assert "model-00002-of-00002.safetensors" in first["diff"]["after"] and first["diff"]["before"] == ""
    assert not second["changed"] and second["bytes_transferred"] == 0
    assert not predicted["changed"]
    assert served["stopped"] == "every destination reported done"
    assert served["bytes_by_client"] == {"node-b": first["bytes_total"]}
    assert served["listing"]["files"] == 4 and served["changed"] is False


def test_damaged_source_fails_on_both_ends_with_the_file_named(capsys, tmp_path, entry):
    truncate(blob_path(entry, "model-00001-of-00002.safetensors"), 100)
    port = free_port()
    with SourceModule(source_args(tmp_path, entry, port)) as source:
        staged = run(capsys, weight_stage, stage_args(tmp_path, port))
    served = json.loads(capsys.readouterr().out)
    assert staged["failed"] and "model-00001-of-00002.safetensors" in staged["msg"]
    assert "Nothing was written here" in staged["msg"]
    assert source.exit == 1 and "is damaged, nothing was served" in served["msg"]
    assert not (tmp_path / "dst").exists()


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"revision": "v1.0"}, "not a pinned 40-hex commit id"),
        ({"name": "a/b"}, "may hold only letters"),
        ({"streams": -1}, "streams is -1"),
        ({"bandwidth_limit_mb_per_s": -1}, "bandwidth_limit_mb_per_s is -1"),
        ({"source_url": "ftp://10.0.0.1"}, "is not http://<address>:<port>"),
    ],
)
def test_stage_bad_input(capsys, tmp_path, changes, words):
    result = run(capsys, weight_stage, stage_args(tmp_path, 9, **changes))
    assert result["failed"] and words in result["msg"]
    assert TOKEN not in json.dumps(result)


@pytest.mark.parametrize(
    "changes, words",
    [
        ({"token": "k9x"}, "token is too short"),
        ({"path": "/nonexistent/seatwright"}, "weights_source_path"),
        ({"revision": "main"}, "not a pinned 40-hex"),
        ({"clients": 0}, "clients is 0"),
        ({"bind_address": "192.0.2.1"}, "cannot listen on 192.0.2.1"),
    ],
)
def test_source_bad_input(capsys, tmp_path, entry, changes, words):
    result = run(capsys, weight_source, source_args(tmp_path, entry, free_port(), **changes))
    assert result["failed"] and words in result["msg"]
