"""``seglog export`` that fails (an object its commits name is gone or damaged) leaves
nothing that looks usable (no target, or the empty target as it was, no temporary dir
beside it) and names its reason: the partition, the object and its offsets. One that
succeeds leaves only the target."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
import pytest
from _cli import one_line_error, run

from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.errors import CorruptRecordError, MissingSegmentError
from seglog.logstore.records.record_codec import encode_batches
from seglog.logstore.storage.object_storage import ObjectStorage


def _bucket(uri: str) -> BucketLogManager:
    mgr = BucketLogManager(uri)
    mgr.create_topic("t", 2, {"retention.ms": -1})
    for i in range(4):
        for p in range(2):
            mgr.append(
                "t", p, encode_batches(pa.array([f"v{p}-{i}-{j}".encode() for j in range(3)]))
            )
    return mgr


def _leftovers(parent: Path) -> list[str]:
    return sorted(p.name for p in parent.iterdir())


@pytest.mark.parametrize("target_exists", [False, True])
def test_a_missing_segment_object_fails_the_export_leaving_nothing(
    s3_uri, capsys, tmp_path, target_exists
):
    mgr = _bucket(s3_uri)
    victim = mgr.state.partition("t", 1).segments[2]
    ObjectStorage(s3_uri).delete(victim.key + ".log")
    parent = tmp_path / "out"
    parent.mkdir()
    target = parent / "exported"
    if target_exists:
        target.mkdir()
    r = run(capsys, "export", s3_uri, target)
    one_line_error(
        r,
        "t-1",
        f"{s3_uri}/{victim.key}.log",
        "missing",
        f"[{victim.base_offset}, {victim.next_offset})",
    )
    # nothing that looks like a log dir: the empty target as it was, or none at all
    assert _leftovers(parent) == (["exported"] if target_exists else [])
    if target_exists:
        assert list(target.iterdir()) == []


def test_the_library_raises_data_loss_naming_the_offsets(s3_uri, tmp_path):
    mgr = _bucket(s3_uri)
    victim = mgr.state.partition("t", 0).segments[1]
    ObjectStorage(s3_uri).delete(victim.key + ".log")
    with pytest.raises(MissingSegmentError) as e:
        mgr.export(tmp_path / "exported")
    assert (e.value.start, e.value.end) == (victim.base_offset, victim.next_offset)
    assert _leftovers(tmp_path) == []


def test_a_damaged_object_fails_the_export_naming_it(s3_uri, tmp_path):
    mgr = _bucket(s3_uri)
    victim = mgr.state.partition("t", 1).segments[0]
    data = bytearray(mgr.storage.read(victim.key + ".log"))
    data[-1] ^= 0x55
    ObjectStorage(s3_uri).write_atomic(victim.key + ".log", bytes(data))
    with pytest.raises(CorruptRecordError, match="t-1") as e:
        mgr.export(tmp_path / "exported")
    assert f"{victim.key}.log" in str(e.value) and "CRC" in str(e.value)
    assert _leftovers(tmp_path) == []


def test_a_successful_export_leaves_only_the_target(s3_uri, capsys, tmp_path):
    _bucket(s3_uri)
    target = tmp_path / "exported"
    r = run(capsys, "export", s3_uri, target)
    assert r.code == 0, r
    assert _leftovers(tmp_path) == ["exported"]
    assert run(capsys, "check", target).code == 0
