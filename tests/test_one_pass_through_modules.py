"""Issue 24's check of the layering at run time: one append from the Spark sink to the
bytes in a bucket, and one read back, pass through each seglog module once, never
returning to a module the call left (a callback up the stack).

The test drives the functions the Spark sink and source call (``stream_writer``'s task
``write`` and driver ``commit``, ``stream_reader.read_input_partition``) without Spark:
``sink_destination(...).backend().stage`` for each task, ``sink_protocol.commit`` on the
driver, ``source_read.read_range`` for the read. ``sys.setprofile`` sees every Python
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
from seglog.streaming.read_planning import ReadRange
from seglog.streaming.sink_destination import sink_destination
from seglog.streaming.sink_options import SinkColumns, SinkOptions
from seglog.streaming.sink_protocol import commit
from seglog.streaming.source_read import read_range

# Modules every layer uses as values, so a call into them from anywhere is no return:
# the exceptions (raised and built everywhere) and the record format's value types
# (BatchHeader, TopicPartition, the header reads).
LEAVES = frozenset({"seglog.logstore.errors", "seglog.logstore.records.record_format"})

# What the first run found (issue 24's design findings), each a call back into a module
# the call had left, kept with its reason; a new one fails the test, a fixed one must be
# dropped from here.
KNOWN_RETURNS = {
    # The optimistic commit: BucketLogs.commit calls the caller's build(view), and the
    # one log it routes the change to (CommitLog.commit) calls the router's build again
    # on every attempt, against the state that won the race.
    "streaming.sink_bucket_commit > logstore.bucket.bucket_logs"
    " > streaming.sink_bucket_commit": "write: BucketPublication.publish's build",
    "logstore.bucket.bucket_maintenance > logstore.bucket.bucket_logs"
    " > logstore.bucket.bucket_maintenance": "write: retention's build",
    "logstore.bucket.bucket_logs > logstore.bucket.bucket_commit_log"
    " > logstore.bucket.bucket_logs": "write: the routed log's build (topic_build)",
    # Written once, the backend plugged in: the stager hands rows to its StagingArea.
    "streaming.sink_bucket_staging > streaming.sink_stager"
    " > streaming.sink_bucket_staging": "write: PartitionStager -> describe_topic",
    # The manager told of every fold (on_change), and a log's state source, both handed
    # down by the manager so that its logs follow the committed state.
    "logstore.bucket.bucket_manager > logstore.bucket.bucket_committer"
    " > logstore.bucket.bucket_manager": "read: on_change -> _sync_logs",
    "logstore.bucket.bucket_manager > logstore.bucket.bucket_log"
    " > logstore.bucket.bucket_manager": "read: BucketLog._sync -> get_log's source",
}


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
