"""Compaction of bucket partitions (bucket_compact, through BucketLogManager.clean) over
memory://: the local cleaner's output byte for byte, tombstones through their delete
horizon, the dirty ratio and compaction lag, the cleaner offset in the state, conflicts."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from bucket_helpers import log_records, memory_uri

from seglog.logstore.bucket import bucket_compact
from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches
from seglog.logstore.util.clock import MockClock

TS = 1_700_000_000_000
COMPACT = {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01,
           "segment.bytes": 400, "delete.retention.ms": 1000}


def keyed(round_: int, keys: list[str], tombstones: tuple[str, ...] = ()) -> bytearray:
    return encode_batches(
        pa.array([None if k in tombstones else f"{k}@{round_}".encode() for k in keys],
                 pa.binary()),
        keys=pa.array([k.encode() for k in keys]),
        timestamps=pa.array([TS + round_] * len(keys), pa.int64()))


ROUNDS = [(["a", "b", "c"], ()), (["a", "d"], ()), (["b", "c"], ("c",)), (["a", "e"], ()),
          (["d", "b"], ("d",)), (["a"], ())]


def test_bucket_compaction_writes_what_the_local_cleaner_writes(tmp_path: Path):
    clock = MockClock(TS + 10)
    with LogManager([tmp_path], clock=clock) as local:
        local.create_topic("c", 1, COMPACT)
        for i, (keys, tombs) in enumerate(ROUNDS):
            local.append("c", 0, keyed(i, keys, tombs))
        local.get_log("c", 0).roll()  # every appended segment inactive, as in a bucket
        local_stats = local.clean()
        local_records = log_records(local.get_log("c", 0))
        local_files = {p.name: p.read_bytes() for p in (tmp_path / "c-0").glob("*.log")
                       if p.stat().st_size}
    bucket = BucketLogManager(memory_uri(), clock=clock)
    bucket.create_topic("c", 1, COMPACT)
    for i, (keys, tombs) in enumerate(ROUNDS):
        bucket.append("c", 0, keyed(i, keys, tombs))
    stats = bucket.clean()
    assert stats is not None and local_stats is not None
    assert (stats.end_offset, stats.records_retained, stats.groups) == \
        (local_stats.end_offset, local_stats.records_retained, local_stats.groups)
    assert log_records(bucket.get_log("c", 0)) == local_records
    ps = bucket.state.partition("c", 0)
    assert ps.cleaner_offset == stats.end_offset == 12
    bucket_files = {f"{s.base_offset:020d}.log": bucket.storage.read(s.key + ".log")
                    for s in ps.segments}
    assert bucket_files == local_files
    # Latest value per key; the tombstones stay until their delete horizon has passed.
    assert [(k, v) for _o, k, v in local_records] == \
        [(b"c", None), (b"e", b"e@3"), (b"d", None), (b"b", b"b@4"), (b"a", b"a@5")]
    assert bucket.clean() is None  # nothing dirty any more


def test_tombstones_go_after_delete_retention_ms():
    clock = MockClock(TS + 10)
    mgr = BucketLogManager(memory_uri(), clock=clock)
    mgr.create_topic("c", 1, COMPACT)
    for i, (keys, tombs) in enumerate(ROUNDS):
        mgr.append("c", 0, keyed(i, keys, tombs))
    mgr.clean()  # stamps the delete horizon: now + delete.retention.ms
    mgr.append("c", 0, keyed(9, ["f"]))  # some dirt, so a pass runs
    clock.advance(1001)
    assert mgr.clean() is not None
    assert [(k, v) for _o, k, v in log_records(mgr.get_log("c", 0))] == \
        [(b"e", b"e@3"), (b"b", b"b@4"), (b"a", b"a@5"), (b"f", b"f@9")]
    found, _ = mgr.check_objects()  # the compacted log still reaches its high watermark
    assert [f for f in found if f.problem] == []



def test_the_dirty_ratio_and_the_compaction_lag_hold_a_pass_back():
    clock = MockClock(TS + 10)
    mgr = BucketLogManager(memory_uri(), clock=clock)
    mgr.create_topic("c", 1, {**COMPACT, "min.cleanable.dirty.ratio": 0.9})
    mgr.append("c", 0, keyed(0, ["a", "b"]))
    mgr.append("c", 0, keyed(1, ["a", "b"]))
    assert mgr.clean() is not None  # never cleaned: everything is dirty (ratio 1)
    mgr.append("c", 0, keyed(2, ["a"]))
    assert mgr.clean() is None  # dirty 1 segment of 2: below 0.9
    mgr.alter_topic_config("c", {"min.cleanable.dirty.ratio": 0.01,
                                 "min.compaction.lag.ms": 60_000})
    assert mgr.clean() is None  # the dirty segment is younger than the lag
    clock.advance(60_000)
    assert mgr.clean() is not None
    assert [(k, v) for _o, k, v in log_records(mgr.get_log("c", 0))] == \
        [(b"b", b"b@1"), (b"a", b"a@2")]


def test_a_compaction_whose_source_left_the_log_is_abandoned(monkeypatch):
    uri = memory_uri()
    clock = MockClock(TS + 10)
    mgr, other = BucketLogManager(uri, clock=clock), BucketLogManager(uri, clock=clock)
    mgr.create_topic("c", 1, COMPACT)
    for i, (keys, tombs) in enumerate(ROUNDS):
        mgr.append("c", 0, keyed(i, keys, tombs))
    before = mgr.state.partition("c", 0)
    real_upload = bucket_compact.upload

    def upload_then_race(storage, built):
        real_upload(storage, built)
        other.refresh()
        other.merge_segments()  # another maintainer rewrote the same segments first

    monkeypatch.setattr(bucket_compact, "upload", upload_then_race)
    assert mgr.clean() is None
    mgr.refresh()
    after = mgr.state.partition("c", 0)
    assert after.cleaner_offset is None and after.segments != before.segments
    referenced = {s.key for s in after.segments} | {s.key for s in before.segments}
    assert {f"c-0/{e.name.rsplit('.', 1)[0]}" for e in mgr.storage.list_dir("c-0")} \
        <= referenced  # the abandoned pass's uploads were deleted


def test_compaction_reads_sink_fragments_with_an_offset_delta():
    from test_bucket_merge_retention import _commit_fragment, batch

    mgr = BucketLogManager(memory_uri(), clock=MockClock(TS + 10))
    mgr.create_topic("t", 1, COMPACT)
    mgr.append("t", 0, batch(0))  # keys k0..k3
    _commit_fragment(mgr, 0, 4, 1)  # the same keys, stored at 0.., committed at 4..
    assert mgr.clean() is not None
    assert log_records(mgr.get_log("t", 0)) == \
        [(4 + j, f"k{j}".encode(), f"v1-{j}".encode()) for j in range(4)]
    (seg,) = mgr.state.partition("t", 0).segments
    assert seg.offset_delta == 0 and (seg.base_offset, seg.next_offset) == (0, 8)
