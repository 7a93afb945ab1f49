"""Review of the planned read (``ReadRange.plan``): over every kind of segment a bucket
partition holds, a planned range reads exactly the rows a look reads (same offsets, same
bytes, in order, once), whatever the range's edges and the task's chunk size. The kinds:
small appends (inline indexes), segments over ``WHOLE_OBJECT_BYTES`` (inline index and
index objects: a merge's output), sink-style fragments committed with an
``offset_delta`` (stored base offsets patched on read), and a compacted partition (gaps,
a cleaner offset). ``test_source_read_planned`` covers the races; this one the bytes."""

from __future__ import annotations

import random
import time
import uuid
from dataclasses import replace

import pyarrow as pa
import pytest

from seglog.datasource.schema import arrow_schema
from seglog.logstore.bucket.bucket_commit_log import Change
from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.bucket.bucket_read_plan import WHOLE_OBJECT_BYTES
from seglog.logstore.bucket.bucket_segment import build_segments
from seglog.logstore.bucket.bucket_state import PartitionChange, SegmentEntry, segment_key
from seglog.logstore.records.record_codec import encode_batches
from seglog.logstore.records.record_format import iter_batch_headers
from seglog.streaming.log_readers import close_all, reader
from seglog.streaming.read_planning import ReadRange, plan_ranges, with_read_plans

SCHEMA = arrow_schema(True)


@pytest.fixture(autouse=True)
def _no_shared_readers():
    close_all()
    yield
    close_all()


def planned(uri: str, topic: str, start: int, end: int) -> ReadRange:
    with reader((uri,)) as mgr:
        mgr.high_watermarks()
        ids = mgr.topic_ids([topic])
    (r,) = with_read_plans(
        plan_ranges({(topic, 0): start}, {(topic, 0): end}, log_dirs=(uri,), topic_ids=ids,
                    include_headers=True)
    )
    return r


def rows(r: ReadRange, chunk_bytes: int) -> list[tuple]:
    from seglog.streaming.source_read import read_range

    close_all()  # the task's own process: nothing shared with the driver
    out: list[tuple] = []
    for b in read_range(r, SCHEMA, chunk_bytes=chunk_bytes):
        out += list(zip(*(b.column(c).to_pylist() for c in
                          ("offset", "key", "value", "timestamp", "headers")), strict=True))
    return out


def commit_fragment(mgr: BucketLogManager, topic: str, real_base: int, n: int, tag: int) -> None:
    """A sink-style fragment: batches stored from offset 0, committed at ``real_base``
    with ``offset_delta`` (as ``sink_bucket_commit`` commits a task's upload)."""
    buf = encode_batches(pa.array([f"f{tag}-{j}".encode() for j in range(n)]),
                         max_batch_bytes=60)
    headers = list(iter_batch_headers(buf))
    (seg,) = build_segments(buf, headers, topic=topic, partition=0, segment_bytes=1 << 20,
                            index_interval_bytes=40)
    key = segment_key(topic, 0, real_base, seg.entry.key[-16:])
    entry = SegmentEntry(key, real_base, real_base + n, seg.entry.size, seg.entry.max_timestamp,
                         offset_delta=real_base, inline_index=seg.entry.inline_index,
                         inline_timeindex=seg.entry.inline_timeindex)
    mgr.storage.write_atomic(key + ".log", seg.log)
    mgr.commits.commit("append", lambda state: Change(
        partitions={f"{topic}-0": PartitionChange(add=(entry,))}))


def test_a_planned_range_reads_the_rows_a_look_reads_over_every_kind_of_segment():
    rnd = random.Random(49)
    uri = f"memory://planned-equivalence-{uuid.uuid4().hex}"
    w = BucketLogManager(uri)
    w.create_topic("t", 1, {"retention.ms": "-1"})
    n = 0
    for i in range(24):
        kind = i % 4
        if kind == 0:  # large: over WHOLE_OBJECT_BYTES, several batches
            w.append("t", 0, encode_batches(pa.array([bytes([65 + i % 26]) * 200_000] * 7),
                                            max_batch_bytes=300_000))
            n += 7
        elif kind == 1:
            commit_fragment(w, "t", n, 9, i)
            n += 9
        else:
            w.append("t", 0, encode_batches(
                pa.array([f"s{i}-{j}".encode() for j in range(11)]), max_batch_bytes=60))
            n += 11
        if i == 11:
            assert w.merge_segments() > 0  # a merged segment: its index an object
    segs = w.state.partition("t", 0).segments
    assert any(s.index_bytes and s.size > WHOLE_OBJECT_BYTES for s in segs)
    assert any(s.inline_index and s.size > WHOLE_OBJECT_BYTES for s in segs)
    assert any(s.offset_delta for s in segs)
    edges = sorted({0, n} | {s.base_offset for s in segs} | {s.next_offset for s in segs})
    cases = [(a, b) for a, b in zip(edges, edges[1:], strict=False)]
    cases += [(e - 1, e + 1) for e in edges[1:-1]]
    cases += [tuple(sorted(rnd.sample(range(n + 1), 2))) for _ in range(12)]
    for start, end in cases:
        r = planned(uri, "t", start, end)
        assert r.plan is not None, (start, end)
        for chunk_bytes in (100, 8 << 20):
            got = rows(r, chunk_bytes)
            assert got == rows(replace(r, plan=None), chunk_bytes), (start, end, chunk_bytes)
            assert [row[0] for row in got] == list(range(start, end))


def test_a_planned_range_of_a_compacted_partition_reads_the_rows_a_look_reads():
    rnd = random.Random(7)
    uri = f"memory://planned-compacted-{uuid.uuid4().hex}"
    w = BucketLogManager(uri)
    w.create_topic("c", 1, {"cleanup.policy": "compact", "min.cleanable.dirty.ratio": 0.01,
                            "segment.bytes": 400, "delete.retention.ms": 1000,
                            "retention.ms": "-1"})
    now = int(time.time() * 1000)
    for i in range(30):
        keys = [f"k{rnd.randrange(6)}" for _ in range(rnd.randrange(1, 5))]
        w.append("c", 0, encode_batches(
            pa.array([f"{k}@{i}".encode() for k in keys]),
            keys=pa.array([k.encode() for k in keys]),
            timestamps=pa.array([now] * len(keys), pa.int64())))
        if i % 10 == 9:
            w.merge_segments()
            assert w.clean() is not None
    ps = w.state.partition("c", 0)
    assert ps.cleaner_offset is not None
    hw = ps.high_watermark
    planned_count = 0
    for _ in range(40):
        start, end = sorted(rnd.sample(range(hw + 1), 2))
        r = planned(uri, "c", start, end)
        if r.plan is None:  # a gap's edge: the task looks, as before
            continue
        planned_count += 1
        assert r.plan.gaps_allowed
        for chunk_bytes in (100, 8 << 20):
            assert rows(r, chunk_bytes) == rows(replace(r, plan=None), chunk_bytes)
    assert planned_count > 20


def test_a_get_that_fails_once_ends_the_planned_read_as_a_lookless_read_survives_it(
        monkeypatch):
    """A ``.log`` GET that fails (after the client's own retries: a 503, a reset) once.
    A task without a plan reads on: its log looks again and tries once more
    (``BucketLog._ATTEMPTS``). A planned task has no second attempt of its own
    (``PlannedLog``): the failure must end the planned read and the rest be read as
    without a plan, not fail the task (in local mode, the query)."""
    from seglog.logstore.errors import KafkaStorageError
    from seglog.logstore.storage.object_storage import ObjectStorage

    uri = f"memory://planned-transient-{uuid.uuid4().hex}"
    w = BucketLogManager(uri)
    w.create_topic("t", 1)
    for s in range(4):
        w.append("t", 0, encode_batches(pa.array([f"s{s}-{i}".encode() for i in range(10)])))
    r = planned(uri, "t", 5, 40)
    assert r.plan is not None
    expected = rows(replace(r, plan=None), 8 << 20)
    assert [row[0] for row in expected] == list(range(5, 40))

    real = ObjectStorage.read_range_view

    def failing_once(key_prefix: str):
        failed: list[str] = []

        def read_range_view(self, path, position, length):
            if str(path).startswith(key_prefix) and not failed:
                failed.append(str(path))
                raise KafkaStorageError(f"GET {self.uri}/{path} failed: 503 Slow Down")
            return real(self, path, position, length)
        return read_range_view, failed

    for victim in r.plan.segments[:2]:  # the first segment's GET, then a later one's
        for plan in (None, r.plan):
            get, failed = failing_once(victim.key)
            monkeypatch.setattr(ObjectStorage, "read_range_view", get)
            assert rows(replace(r, plan=plan), 8 << 20) == expected, (victim.key, plan)
            assert failed  # the failure happened
            monkeypatch.setattr(ObjectStorage, "read_range_view", real)


def test_offsets_removed_after_planning_are_read_as_planned_while_their_objects_remain():
    """What docs/object-storage.md says of the plan's age: ``delete_records`` committed
    between planning and the task, the objects not yet collected. The planned task reads
    the removed offsets; a task that looked when it started reports them as data loss.
    (Once the objects are collected, the two end alike: test_source_read_planned.)"""
    from seglog.logstore.errors import DataLossError

    uri = f"memory://planned-age-{uuid.uuid4().hex}"
    w = BucketLogManager(uri)
    w.create_topic("t", 1)
    for s in range(3):
        w.append("t", 0, encode_batches(pa.array([f"s{s}-{i}".encode() for i in range(10)])))
    r = planned(uri, "t", 0, 30)
    w.delete_records("t", 0, 20)
    w.delete_old_segments()
    assert [row[0] for row in rows(r, 8 << 20)] == list(range(30))
    with pytest.raises(DataLossError, match=r"offsets \[0, 20\) were removed"):
        rows(replace(r, plan=None), 8 << 20)
