"""A bucket range read as planned (``ReadRange.plan``, ``bucket_read_plan``): the task
GETs the segments the driver's state named, without looking at the log; an object gone
since planning (a merge or retention past its grace, a topic deleted and collected) ends
the planned read, and the rest is read as without a plan: the same rows, or the same
error. Spark-free: the driver's calls (``plan_ranges``, ``with_read_plans``) and the
task's (``read_range``) as the source makes them; ``close_all`` between them stands for
the task's other process."""

from __future__ import annotations

import logging
import pickle
import uuid
from dataclasses import replace

import pyarrow as pa
import pytest

from seglog.datasource.schema import arrow_schema
from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.bucket.bucket_read_plan import MAX_PLANNED_SEGMENTS
from seglog.logstore.bucket.bucket_segment import object_keys
from seglog.logstore.errors import DataLossError
from seglog.logstore.records.record_codec import encode_batches
from seglog.streaming.log_readers import close_all, reader
from seglog.streaming.read_planning import ReadRange, plan_ranges, with_read_plans
from seglog.streaming.source_read import read_range

SCHEMA = arrow_schema(False)


@pytest.fixture(autouse=True)
def _no_shared_readers():
    close_all()
    yield
    close_all()


def bucket_with(segments: int, records: int = 10) -> tuple[str, BucketLogManager]:
    uri = f"memory://planned-read-{uuid.uuid4().hex}"
    writer = BucketLogManager(uri)
    writer.create_topic("t", 1)
    for s in range(segments):
        value = pa.array([f"s{s}-{i}".encode() for i in range(records)])
        writer.append("t", 0, encode_batches(value, max_batch_bytes=80))
    return uri, writer


def planned(
    uri: str,
    start: int,
    end: int,
    *,
    fail_on_data_loss: bool = True,
    max_records_per_partition: int | None = None,
) -> list[ReadRange]:
    """The driver: its trigger's look at the bucket, then the ranges with their plans."""
    with reader((uri,)) as mgr:
        mgr.high_watermarks()
        ids = mgr.topic_ids(["t"])
    ranges = plan_ranges(
        {("t", 0): start},
        {("t", 0): end},
        log_dirs=(uri,),
        topic_ids=ids,
        fail_on_data_loss=fail_on_data_loss,
        max_records_per_partition=max_records_per_partition,
    )
    return with_read_plans(ranges)


def rows(r: ReadRange) -> list[tuple[int, bytes]]:
    """The task, in a process of its own (no reader shared with the driver)."""
    close_all()
    return [
        (o, v)
        for b in read_range(r, SCHEMA)
        for o, v in zip(b.column("offset").to_pylist(), b.column("value").to_pylist(), strict=True)
    ]


def test_a_plan_names_the_segments_of_its_range_and_reads_what_a_look_reads():
    uri, _ = bucket_with(5)
    ranges = planned(uri, 13, 47, max_records_per_partition=12)
    assert [(r.start, r.end) for r in ranges] == [(13, 24), (24, 35), (35, 47)]
    assert all(r.plan is not None for r in ranges)
    assert [[s.base_offset for s in r.plan.segments] for r in ranges if r.plan] == [
        [10, 20],
        [20, 30],
        [30, 40],
    ]
    # Small: names and offsets, no record bytes (it travels in the input partition).
    assert all(len(pickle.dumps(r)) < 2000 for r in ranges)
    for r in ranges:
        assert rows(r) == rows(replace(r, plan=None))
        assert [o for o, _ in rows(r)] == list(range(r.start, r.end))


def test_no_plan_where_the_state_does_not_hold_the_whole_range():
    uri, writer = bucket_with(3)
    assert planned(uri, 0, 31)[0].plan is None  # beyond the log end
    writer.delete_records("t", 0, 12)
    assert planned(uri, 5, 30)[0].plan is None  # below the log start
    assert planned(uri, 12, 30)[0].plan is not None
    uri, _ = bucket_with(MAX_PLANNED_SEGMENTS + 1, records=1)
    assert planned(uri, 0, MAX_PLANNED_SEGMENTS + 1)[0].plan is None  # too many segments
    assert planned(uri, 1, MAX_PLANNED_SEGMENTS + 1)[0].plan is not None


def test_local_log_dirs_get_no_plan(tmp_path):
    from seglog.logstore.manager.log_manager import LogManager

    with LogManager([str(tmp_path)]) as mgr:
        mgr.create_topic("t", 1)
        mgr.append("t", 0, encode_batches(pa.array([b"a", b"b"])))
    ranges = with_read_plans(plan_ranges({}, {("t", 0): 2}, log_dirs=(str(tmp_path),)))
    assert ranges[0].plan is None
    assert [o for o, _ in rows(ranges[0])] == [0, 1]


def delete_objects(writer: BucketLogManager, r: ReadRange) -> None:
    """What the collector does past the grace of the commit that removed them."""
    assert r.plan is not None
    for s in r.plan.segments:
        writer.storage.delete(s.key + ".log")


def test_segments_merged_and_collected_under_the_task_read_the_same_rows(caplog):
    uri, writer = bucket_with(4)
    (r,) = planned(uri, 5, 40)
    expected = rows(replace(r, plan=None))
    assert writer.merge_segments() > 0
    delete_objects(writer, r)
    with caplog.at_level(logging.INFO, logger="seglog.streaming.source_read"):
        assert rows(r) == expected
    assert any("as planned stopped" in m and "looking at the log" in m for m in caplog.messages)


def test_a_segment_merged_while_the_task_reads_the_others_is_read_once():
    """The planned read got the first segment's rows; the rest come from the look."""
    uri, writer = bucket_with(4)
    (r,) = planned(uri, 5, 40)
    expected = rows(replace(r, plan=None))
    assert r.plan is not None
    second = r.plan.segments[1]
    assert writer.merge_segments() > 0
    writer.storage.delete(second.key + ".log")
    assert rows(r) == expected


@pytest.mark.parametrize("fail", [True, False])
def test_offsets_removed_and_collected_under_the_task_end_as_without_a_plan(fail, caplog):
    uri, writer = bucket_with(3)
    (r,) = planned(uri, 0, 30, fail_on_data_loss=fail)
    writer.delete_records("t", 0, 20)
    writer.delete_old_segments()
    for s in r.plan.segments[:2] if r.plan else ():
        writer.storage.delete(s.key + ".log")
    message = r"offsets \[0, 20\) were removed \(the log start offset is now 20\)"
    if fail:
        with pytest.raises(DataLossError, match=message) as planned_error:
            rows(r)
        with pytest.raises(DataLossError) as looked_error:
            rows(replace(r, plan=None))
        assert str(planned_error.value) == str(looked_error.value)
    else:
        with caplog.at_level(logging.WARNING):
            assert [o for o, _ in rows(r)] == list(range(20, 30))
        assert any("offsets [0, 20) were removed" in m for m in caplog.messages)


def test_a_topic_recreated_after_planning_is_never_read_as_the_planned_one():
    """Its objects still there: the plan reads the records it was planned for (the old
    topic's offsets, as committed). Collected: the look finds the new topic id, data
    loss, as without a plan. Never the new topic's records under the old plan."""
    uri, writer = bucket_with(2)
    (r,) = planned(uri, 0, 20)
    before = rows(replace(r, plan=None))
    old = writer.state.partitions["t-0"].segments
    writer.delete_topic("t")
    writer.create_topic("t", 1)
    writer.append("t", 0, encode_batches(pa.array([f"new{i}".encode() for i in range(25)])))
    assert rows(r) == before
    for s in old:
        for key in object_keys(s):
            writer.storage.delete(key)
    with pytest.raises(DataLossError, match="deleted and re-created"):
        rows(r)


def test_a_batch_reads_partitions_carry_plans_too():
    """``spark.read``'s planning (``SeglogBatchReader.partitions``) opens the shared
    reader for its offsets, so its ranges are planned as a stream's are."""
    from seglog.datasource.batch_reader import SeglogBatchReader
    from seglog.datasource.schema import source_schema

    uri, _ = bucket_with(3)
    opts = {"path": uri, "subscribe": "t", "minPartitions": "2"}
    parts = SeglogBatchReader(opts, source_schema(opts)).partitions()
    assert [(p.value.start, p.value.end) for p in parts] == [(0, 15), (15, 30)]
    assert all(p.value.plan is not None for p in parts)
    assert [o for p in parts for o, _ in rows(p.value)] == list(range(30))
