"""Checkpoint decisions and the disk reader: safetensors headers, index, HF cache, parity manifest."""

import hashlib
import json
import os
import time

import pytest
from ansible_collections.seatwright.fleet.plugins.module_utils.errors import CheckpointError
from ansible_collections.seatwright.fleet.plugins.module_utils.io.weights.checkpoint_scan import (
    read_header,
    scan_checkpoint,
)
from ansible_collections.seatwright.fleet.plugins.module_utils.weights import checkpoint as ck
from checkpoint_cases import (
    OTHER_REVISION,
    REFERENCE,
    REVISION,
    big_shards,
    blob_path,
    copy_reference,
    flip_byte,
    reference_files,
    shard_bytes,
    truncate,
    write_folder,
    write_hf_entry,
)

SHARD1 = "model-00001-of-00002.safetensors"
SHARD2 = "model-00002-of-00002.safetensors"


def header_of(payload):
    length = ck.header_length(payload[:8])
    return ck.parse_safetensors_header(payload[8 : 8 + length], length, len(payload))


@pytest.mark.parametrize(
    "name, tensors, by_dtype",
    [
        (SHARD1, 3, {"F16": 1024, "F32": 64, "U8": 64}),
        (SHARD2, 4, {"I8": 16, "BOOL": 3, "F32": 2048, "I64": 8}),
    ],
)
def test_reference_shards_parse_exactly(name, tensors, by_dtype):
    payload = (REFERENCE / name).read_bytes()
    report = header_of(payload)
    assert report["status"] == "ok", report["problems"]
    assert report["tensors"] == tensors
    assert report["bytes_by_dtype"] == by_dtype
    assert report["expected_size"] == len(payload)


@pytest.mark.parametrize(
    "damage, status, words",
    [
        (lambda b: b[:-1], "truncated", "1 missing"),
        (lambda b: b[:-1000], "truncated", "missing"),
        (lambda b: b + b"\0" * 16, "oversized", "16 trailing"),
        (lambda b: b[:100], "truncated", "does not fit"),
        (lambda b: b[:5], "truncated", "shorter than the 8-byte"),
        (lambda b: b[:8] + b"[" + b[9:], "bad-header", "not JSON"),
        (lambda b: (2).to_bytes(8, "little") + b"[]" + b[10:], "bad-header", "expected an object"),
        (lambda b: (10**12).to_bytes(8, "little") + b[8:], "bad-header", "does not fit"),
    ],
)
def test_damaged_reference_shard_is_named(tmp_path, damage, status, words):
    path = tmp_path / SHARD1
    path.write_bytes(damage((REFERENCE / SHARD1).read_bytes()))
    report = read_header(str(path), path.stat().st_size)
    assert report["status"] == status
    assert words in " ".join(report["problems"])


@pytest.mark.parametrize(
    "dtype, shape, nbytes",
    [
        ("F16", [32, 16], 1024),
        ("BF16", [], 2),
        ("F4", [3, 5], 8),
        ("F6_E2M3", [4], 3),
        ("F8_E4M3", [7, 0], 0),
        ("C64", [2], 16),
        ("NOPE", [1], None),
    ],
)
def test_tensor_nbytes(dtype, shape, nbytes):
    assert ck.tensor_nbytes(dtype, shape) == nbytes


def _header(entries):
    raw = json.dumps(entries).encode()
    return ck.parse_safetensors_header(raw, len(raw), 8 + len(raw) + 64)


@pytest.mark.parametrize(
    "entries, words",
    [
        (
            {
                "a": {"dtype": "U8", "shape": [32], "data_offsets": [0, 32]},
                "b": {"dtype": "U8", "shape": [16], "data_offsets": [48, 64]},
            },
            "belong to no tensor",
        ),
        (
            {
                "a": {"dtype": "U8", "shape": [40], "data_offsets": [0, 40]},
                "b": {"dtype": "U8", "shape": [32], "data_offsets": [32, 64]},
            },
            "overlaps",
        ),
        ({"a": {"dtype": "F32", "shape": [4], "data_offsets": [0, 64]}}, "needs 16 bytes"),
        ({"a": {"dtype": "U8", "shape": [-1], "data_offsets": [0, 64]}}, "non-negative"),
        ({"a": {"dtype": "U8", "shape": [64], "data_offsets": [64, 0]}}, "begin <= end"),
        ({"a": {"dtype": 8, "shape": [64], "data_offsets": [0, 64]}}, "not a string"),
        ({"a": {"dtype": "Q3", "shape": [64], "data_offsets": [0, 64]}}, "unknown dtype Q3"),
        ({"a": [1, 2]}, "expected an object"),
    ],
)
def test_header_problems_are_explained(entries, words):
    report = _header(entries)
    assert report["status"] == "bad-header"
    assert words in " ".join(report["problems"])


def _reference_index():
    return json.loads((REFERENCE / "model.safetensors.index.json").read_text())


def _reference_tensors():
    return {name: header_of((REFERENCE / name).read_bytes())["tensor_names"] for name in (SHARD1, SHARD2)}


@pytest.mark.parametrize(
    "edit, errors, warnings",
    [
        (lambda idx, sh: None, [], []),
        (lambda idx, sh: sh.update({SHARD2: None}), ["missing or unreadable"], []),
        (lambda idx, sh: idx["weight_map"].update({"lm_head.weight": SHARD1}), ["does not hold"], ["does not list"]),
        (lambda idx, sh: idx["weight_map"].pop("lm_head.weight"), [], ["does not list, e.g. lm_head.weight"]),
        (lambda idx, sh: sh.update({"consolidated.safetensors": ["x"]}), [], ["not referenced by the index"]),
        (lambda idx, sh: idx.pop("weight_map"), ["no weight_map"], []),
        (lambda idx, sh: idx["weight_map"].update({"x": 3}), ["expected a file name"], []),
    ],
)
def test_index_against_shards(edit, errors, warnings):
    index, shards = _reference_index(), _reference_tensors()
    edit(index, shards)
    result = ck.check_index(index, shards)
    assert len(result["errors"]) == len(errors)
    assert all(any(word in e for e in result["errors"]) for word in errors)
    assert all(any(word in w for w in result["warnings"]) for word in warnings)


@pytest.mark.parametrize("declared, held, warned", [(3227, 3227, False), (3228, 3227, True), (None, 5, False)])
def test_index_total_size(declared, held, warned):
    assert (ck.index_total_warning(declared, held) is not None) == warned


@pytest.mark.parametrize(
    "name, kind", [("a" * 64, "sha256"), ("b" * 40, "git-sha1"), ("A" * 64, None), ("c" * 63, None), (None, None)]
)
def test_blob_hash_kind(name, kind):
    assert ck.blob_hash_kind(name) == kind


@pytest.mark.parametrize(
    "doc, words",
    [
        ({"format": "other"}, "format='other'"),
        ([], "format=None"),
        ({"format": ck.MANIFEST_FORMAT}, "no files"),
        ({"format": ck.MANIFEST_FORMAT, "files": {"a": {"size": "1", "sha256": "0" * 64}}}, "integer size"),
        ({"format": ck.MANIFEST_FORMAT, "files": {"a": {"size": 1, "sha256": "xyz"}}}, "64-hex"),
        ({"format": ck.MANIFEST_FORMAT, "files": {}, "revision": "main"}, "not a 40-hex"),
    ],
)
def test_bad_manifests_are_refused(doc, words):
    with pytest.raises(CheckpointError, match=words.replace("(", r"\(")):
        ck.parse_manifest(doc)


def test_manifest_rewritten_only_when_content_changes():
    files = {"a.safetensors": {"size": 3, "sha256": "0" * 64, "mtime_ns": 1}}
    first = ck.build_manifest("m", REVISION, "folder", files, "2026-11-30T00:00:00Z", "node-a:/m")
    later = ck.build_manifest("m", REVISION, "folder", files, "2026-12-01T00:00:00Z", "node-a:/m")
    touched = ck.build_manifest(
        "m",
        REVISION,
        "folder",
        dict(files, **{"a.safetensors": dict(files["a.safetensors"], mtime_ns=2)}),
        "2026-12-01T00:00:00Z",
        "node-a:/m",
    )
    assert not ck.manifest_differs(first, later)
    assert ck.manifest_differs(first, touched)
    assert ck.manifest_differs(None, first)
    assert ck.parse_manifest(first) is first


@pytest.mark.parametrize(
    "layout, requested, snapshot, manifest_rev, words",
    [
        ("hf-cache", REVISION, True, None, None),
        ("hf-cache", REVISION, False, None, "no snapshot"),
        ("hf-cache", REVISION, True, OTHER_REVISION, "manifest is for revision"),
        ("hf-cache", "main", True, None, "not a pinned"),
        ("folder", REVISION, True, REVISION, None),
        ("folder", REVISION, True, None, None),
        ("folder", REVISION, True, OTHER_REVISION, "holds revision " + OTHER_REVISION),
        ("folder", None, True, None, None),
    ],
)
def test_revision_problems(layout, requested, snapshot, manifest_rev, words):
    problems = ck.revision_problems(layout, requested, snapshot, manifest_rev)
    assert (words is None and problems == []) or (words and words in problems[0])


def test_reference_folder_is_complete_but_has_no_parity(tmp_path):
    report, _ = scan_checkpoint(copy_reference(tmp_path / "m"))
    assert report["layout"] == "folder"
    assert report["complete"] and not report["verified"]
    assert report["safetensors"]["tensor_bytes"] == 3227 == report["index"]["total_size"]
    assert report["safetensors"]["tensors"] == 7
    assert report["parity"] == "none"
    assert sorted(report["unverified"]) == sorted(os.listdir(REFERENCE))
    pinned, _ = scan_checkpoint(str(tmp_path / "m"), REVISION)
    assert pinned["complete"] and not pinned["verified"] and not pinned["revision_confirmed"]


@pytest.mark.parametrize("mode, verified, parity", [("quick", False, "none"), ("full", True, "hashed")])
def test_hf_entry_blob_names_are_the_expected_hashes(tmp_path, mode, verified, parity):
    entry = write_hf_entry(tmp_path, reference_files())
    report, files = scan_checkpoint(entry, REVISION, mode)
    assert report["layout"] == "hf-cache" and report["complete"]
    assert report["verified"] is verified and report["parity"] == parity
    assert report["refs"] == {"main": REVISION}
    assert files[SHARD1]["expect"]["sha256"] == os.path.basename(files[SHARD1]["abs"])
    assert files["model.safetensors.index.json"]["expect"]["git_sha1"]
    by_path = {entry["path"]: entry for entry in report["files"]}
    assert by_path[SHARD1]["expected_sha256"] == os.path.basename(files[SHARD1]["abs"])
    assert by_path[SHARD1]["hash_source"] == "blob name"


@pytest.mark.parametrize(
    "damage, mode, key, name, words",
    [
        (lambda e: os.unlink(blob_path(e, SHARD2)), "quick", "missing", SHARD2, "missing blob"),
        (lambda e: truncate(blob_path(e, SHARD1), 10), "quick", "truncated", SHARD1, "10 missing"),
        (lambda e: flip_byte(blob_path(e, SHARD1)), "full", "mismatched", SHARD1, "expected"),
        (
            lambda e: flip_byte(blob_path(e, "model.safetensors.index.json"), 3),
            "full",
            "mismatched",
            "model.safetensors.index.json",
            "git_sha1",
        ),
    ],
)
def test_hf_entry_damage_is_named(tmp_path, damage, mode, key, name, words):
    entry = write_hf_entry(tmp_path, reference_files())
    damage(entry)
    report, _ = scan_checkpoint(entry, REVISION, mode)
    assert report[key] == [name]
    assert not report["complete"]
    message = ck.failure_message(entry, report, True)
    assert name in message and words in message


def test_flipped_byte_is_invisible_to_quick_mode_but_not_to_full(tmp_path):
    entry = write_hf_entry(tmp_path, reference_files())
    flip_byte(blob_path(entry, SHARD2))
    assert scan_checkpoint(entry, REVISION, "quick")[0]["complete"]
    assert not scan_checkpoint(entry, REVISION, "full")[0]["complete"]


def test_wrong_revision_is_an_error(tmp_path):
    entry = write_hf_entry(tmp_path, reference_files())
    report, _ = scan_checkpoint(entry, OTHER_REVISION)
    assert not report["complete"]
    assert "no snapshot" in report["errors"][0]


def test_cache_entry_needs_a_revision(tmp_path):
    entry = write_hf_entry(tmp_path, reference_files())
    with pytest.raises(CheckpointError, match="pinned 40-hex revision"):
        scan_checkpoint(entry)


@pytest.mark.parametrize("content, words", [(b"{not json", "unreadable"), (b"[]", "no weight_map")])
def test_bad_index_makes_it_incomplete(tmp_path, content, words):
    files = dict(reference_files(), **{"model.safetensors.index.json": content})
    report, _ = scan_checkpoint(write_folder(tmp_path / "m", files))
    assert not report["complete"]
    assert words in report["errors"][0]


def test_index_naming_an_absent_shard_counts_it_missing(tmp_path):
    files = reference_files()
    del files[SHARD2]
    report, _ = scan_checkpoint(write_folder(tmp_path / "m", files))
    assert report["missing"] == [SHARD2]
    assert "missing or unreadable" in report["errors"][0]


def _manifested_folder(tmp_path, files):
    root = write_folder(tmp_path / "m", files)
    entries = {}
    for name in files:
        info = os.stat(os.path.join(root, name))
        digest = hashlib.sha256(files[name]).hexdigest()
        entries[name] = {"size": info.st_size, "sha256": digest, "mtime_ns": info.st_mtime_ns}
    manifest = ck.build_manifest("m", REVISION, "folder", entries, "2026-11-30T00:00:00Z", "node-a:/m")
    with open(os.path.join(root, ck.MANIFEST_NAME), "w") as handle:
        json.dump(manifest, handle)
    return root


def test_manifest_vouches_for_a_folder_in_quick_mode(tmp_path):
    root = _manifested_folder(tmp_path, reference_files())
    report, _ = scan_checkpoint(root, REVISION)
    assert report["verified"] and report["parity"] == "manifest"
    assert report["manifest"]["revision"] == REVISION and report["revision_confirmed"]


@pytest.mark.parametrize(
    "change, key, words",
    [
        (lambda r: open(os.path.join(r, "notes.txt"), "w").write("x"), "extra", "not in the parity manifest"),
        (lambda r: os.unlink(os.path.join(r, "config.json")), "missing", "config.json"),
        (lambda r: open(os.path.join(r, "config.json"), "ab").write(b" "), "truncated", "config.json"),
        (lambda r: os.utime(os.path.join(r, SHARD1), (time.time(), time.time() + 5)), "unverified", SHARD1),
    ],
)
def test_folder_drift_from_its_manifest(tmp_path, change, key, words):
    root = _manifested_folder(tmp_path, dict(reference_files(), **{"config.json": b"{}\n"}))
    change(root)
    report, _ = scan_checkpoint(root, REVISION)
    assert report[key], report
    assert not report["verified"]
    assert words in ck.failure_message(root, report, True)


def test_folder_revision_comes_from_its_manifest(tmp_path):
    root = _manifested_folder(tmp_path, reference_files())
    report, _ = scan_checkpoint(root, OTHER_REVISION)
    assert not report["complete"]
    assert "holds revision " + REVISION in report["errors"][0]


def test_staging_leftovers_are_not_checkpoint_files(tmp_path):
    files = dict(reference_files(), **{".config.json.0123456789ab.partial": b"x", ".cache/huggingface/x": b"y"})
    report, _ = scan_checkpoint(write_folder(tmp_path / "m", files))
    assert sorted(entry["path"] for entry in report["files"]) == sorted(reference_files())


def test_tensor_totals_over_generated_shards(tmp_path):
    report, _ = scan_checkpoint(write_folder(tmp_path / "m", big_shards(3, 1)))
    assert report["complete"]
    assert report["safetensors"]["bytes_by_dtype"] == {"U8": 3 * 1024 * 1024, "F32": 3 * 256}
    assert report["safetensors"]["tensor_bytes"] == report["index"]["total_size"]


def test_shard_builder_matches_reference_layout():
    payload = shard_bytes([("a", "F32", [4]), ("b", "U8", [3])])
    assert header_of(payload)["status"] == "ok"
