"""Issue 24's check of the layering at run time: one append from the Spark sink to the
bytes in a bucket, and one read back, pass through each seglog module once, never
returning to a module the call left (a callback up the stack).

The test drives the functions the Spark sink and source call (``stream_writer``'s task
``write`` and driver ``commit``, ``stream_reader.read_input_partition``) without Spark:
``sink_destination(...).backend().stage`` for each task, ``sink_protocol.commit`` on the
driver, ``source_read.read_range`` for the read; and the driver's side of a fresh
bucket's first micro-batch and of a source trigger (``validate_sink``'s destination
checks; ``latestOffset``'s snapshot, admission and ``partitions``' plan, as
``stream_reader`` calls them). ``sys.setprofile`` sees every Python
call; at each call into a ``seglog`` module the stack's seglog modules, outermost first
with repeats folded, must not show one module twice."""

from __future__ import annotations

import sys
import threading
import uuid
from collections.abc import Callable
from types import FrameType

import pyarrow as pa

from seglog.datasource.schema import arrow_schema
from seglog.logstore.bucket import bucket_read_window
from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.records.record_codec import decode_batches, encode_batches
from seglog.streaming.admission import AdmissionLimits, admit, segment_layout
from seglog.streaming.read_planning import ReadRange, plan_ranges
from seglog.streaming.sink_destination import sink_destination
from seglog.streaming.sink_options import SinkColumns, SinkOptions
from seglog.streaming.sink_protocol import commit
from seglog.streaming.source_offsets import initial_offsets, reconcile_start, snapshot_log_dirs
from seglog.streaming.source_options import SourceOptions
from seglog.streaming.source_read import read_range

# Modules every layer uses as values, so a call into them from anywhere is no return:
# the exceptions (raised and built everywhere) and the record format's value types
# (BatchHeader, TopicPartition, the header reads).
LEAVES = frozenset({"seglog.logstore.errors", "seglog.logstore.records.record_format"})

# What the first run found (issue 24's design findings), each a call back into a module
# the call had left, kept with its reason; a new one fails the test, a fixed one must be
# dropped from here. A fresh bucket's first micro-batch and a source trigger's planning
# (the third test) found none besides these. Gone, each by handing a part or values
# down: the stager's describe_topic and write into the bucket staging area (one
# TopicDescriber handed to both, batches returned as values), the committer's on_change
# into the manager, a log's state source in the manager (bucket_committer's
# PartitionSource, from which a log takes the newest state itself), and the optimistic
# commit's build call-backs (the sink's publish, retention, the routed log's rebuild):
# the caller drives the commit loop (``commit_steps`` yields the state to build on, the
# caller's own ``for`` builds it), so the engine never calls back.
KNOWN_RETURNS: dict[str, str] = {}


def _seglog_path(frame: FrameType | None) -> list[str]:
    """The seglog modules of the stack ending at ``frame``, outermost first, repeats
    folded, leaves dropped."""
    path: list[str] = []
    while frame is not None:
        name = frame.f_globals.get("__name__", "")
        if name.startswith("seglog.") and name not in LEAVES and (not path or path[-1] != name):
            path.append(name)
        frame = frame.f_back
    return path[::-1]


def _return(path: list[str]) -> str | None:
    """The first module the path enters again after leaving it, as ``A > B > ... > A``."""
    seen: dict[str, int] = {}
    for i, name in enumerate(path):
        if name in seen:
            return " > ".join(m.removeprefix("seglog.") for m in path[seen[name] : i + 1])
        seen[name] = i
    return None


def traced(work: Callable[[], object]) -> tuple[object, set[str]]:
    """Run ``work`` under the profiler; return its result and every return seen (in any
    thread it starts)."""
    found: set[str] = set()

    def profile(frame: FrameType, event: str, arg: object) -> None:
        if event == "call" and frame.f_globals.get("__name__", "").startswith("seglog."):
            back = _return(_seglog_path(frame))
            if back is not None:
                found.add(back)

    threading.setprofile(profile)
    sys.setprofile(profile)
    try:
        result = work()
    finally:
        sys.setprofile(None)
        threading.setprofile(None)
    return result, found


def test_the_path_sees_a_return_up_the_stack():
    path = ["seglog.a", "seglog.b", "seglog.c", "seglog.a"]
    assert _return(path) == "a > b > c > a"
    assert _return(["seglog.a", "seglog.b", "seglog.c"]) is None


def test_one_append_and_one_read_back_pass_through_each_module_once():
    uri = f"memory://one-pass-{uuid.uuid4().hex}"
    # maintenanceIntervalMs 0: the commit also runs maintenance (a new sink's first
    # commit otherwise only starts its interval), so its path is walked too.
    opts = SinkOptions.parse(
        {"path": uri, "topic": "t", "numPartitions": "1", "maintenanceIntervalMs": "0"}
    )
    batch = pa.record_batch(
        {
            "key": pa.array([f"k{i}" for i in range(50)], pa.string()),
            "value": pa.array([f"v{i}".encode() for i in range(50)], pa.binary()),
        }
    )
    columns = SinkColumns.resolve(batch.schema, default_topic="t")

    def write_and_commit() -> object:
        staged = sink_destination(opts).backend().stage(columns, [batch], "q-1", 0, 0, 0)
        return commit(sink_destination(opts).backend(), [staged], 0)

    def read_back() -> list[int]:
        r = ReadRange((uri,), "t", 0, 0, 50)
        return [
            o for b in read_range(r, arrow_schema(False)) for o in b.column("offset").to_pylist()
        ]

    _, on_write = traced(write_and_commit)
    offsets, on_read = traced(read_back)
    assert offsets == list(range(50))
    found = on_write | on_read
    assert sorted(found - set(KNOWN_RETURNS)) == [], "calls back into a module the call left"
    assert sorted(set(KNOWN_RETURNS) - found) == [], "a known return is gone: drop it"


def test_reads_over_windows_segments_and_a_timestamp_pass_through_each_module_once(
    monkeypatch,
):
    """The read side's paths the sink's one-segment read does not take: two segments
    with offset indexes, windows smaller than a segment (read-ahead from an index entry
    and into the next segment), ranges ending inside a segment, ``read`` and
    ``offset_for_timestamp``.
    None calls back into the bucket log or its read window."""
    monkeypatch.setattr(bucket_read_window, "FETCH_BYTES", 3000)
    mgr = BucketLogManager(f"memory://one-pass-{uuid.uuid4().hex}")
    mgr.create_topic("t", 1, {"index.interval.bytes": "100"})
    ts = 1_700_000_000_000
    for start in (0, 400, 800):
        values = pa.array([b"value-%06d" % i for i in range(start, start + 400)])
        times = pa.array([ts + i for i in range(start, start + 400)], pa.int64())
        mgr.append("t", 0, encode_batches(values, timestamps=times, max_batch_bytes=512))
    log = mgr.get_log("t", 0)

    def reads() -> tuple[list[int], list[int], int | None]:
        chunked = [
            o
            for c in log.read_chunks(150, 780, 600)
            for o in decode_batches(bytes(c), start_offset=150, end_offset=780)
            .column("offset")
            .to_pylist()
        ]
        fetched = log.read(390, max_offset=800, max_bytes=1 << 20)
        whole = decode_batches(fetched.records, start_offset=390, end_offset=800)
        return chunked, whole.column("offset").to_pylist(), log.offset_for_timestamp(ts + 555)

    (chunked, whole, at), found = traced(reads)
    assert chunked == list(range(150, 780))
    assert whole == list(range(390, 800))
    assert at == 555
    mgr.close()
    assert sorted(found) == []


def test_a_fresh_buckets_first_micro_batch_and_a_source_trigger_pass_through_each_module_once():
    """The driver's paths the append above does not take: the sink's checks before its
    first micro-batch in a fresh bucket (``validate_sink``'s destination check and
    ``existing_partitions``; the commit then creates the topic), and a source trigger's
    planning (``initialOffset``, ``latestOffset`` with ``maxBytesPerTrigger``, so the
    admission reads segment layouts, then ``partitions``), as ``stream_reader`` calls
    them, through ``streaming/`` only."""
    uri = f"memory://one-pass-{uuid.uuid4().hex}"
    opts = SinkOptions.parse(
        {"path": uri, "topic": "t", "numPartitions": "2", "maintenanceIntervalMs": "0"}
    )
    batch = pa.record_batch(
        {
            "key": pa.array([f"k{i}" for i in range(60)], pa.string()),
            "value": pa.array([f"v{i}".encode() for i in range(60)], pa.binary()),
        }
    )
    columns = SinkColumns.resolve(batch.schema, default_topic="t")

    def first_micro_batch() -> object:
        destination = sink_destination(opts)
        destination.check_destination("path")
        assert destination.existing_partitions("t") is None  # a fresh bucket
        staged = sink_destination(opts).backend().stage(columns, [batch], "q-1", 0, 0, 0)
        return commit(sink_destination(opts).backend(), [staged], 0)

    source = SourceOptions.parse(
        {
            "path": uri,
            "subscribe": "t",
            "startingOffsets": "earliest",
            "maxBytesPerTrigger": "1000000",
        },
        streaming=True,
    )
    limits = AdmissionLimits.from_options(source)

    def trigger() -> list[ReadRange]:
        snap = snapshot_log_dirs(source.log_dirs, options=source)
        start = initial_offsets(source, snap)
        snap = snapshot_log_dirs(
            source.log_dirs, start_offsets_for=lambda tp: tp not in start, options=source
        )
        current = reconcile_start(start, source, snap, {})
        latest = {tp: max(snap.latest(tp), off) for tp, off in current.items()}
        end = admit(
            current,
            latest,
            limits,
            now_ms=0,
            layouts=lambda tp: segment_layout(source.log_dirs, tp, latest[tp], source.storage),
        ).end
        return plan_ranges(current, end, log_dirs=source.log_dirs, topic_ids=snap.topic_ids)

    _, on_write = traced(first_micro_batch)
    ranges, on_plan = traced(trigger)
    assert sum(r.end - r.start for r in ranges) == 60
    found = on_write | on_plan
    assert sorted(found - set(KNOWN_RETURNS)) == [], "calls back into a module the call left"
