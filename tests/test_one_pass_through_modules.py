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
    # The optimistic commit: CommitLog.commit calls the caller's build(state) again on
    # every attempt, against the state that won the race.
    "streaming.sink_bucket_commit > logstore.bucket.bucket_commit_log"
    " > streaming.sink_bucket_commit": "write: BucketPublication.publish's build",
    "logstore.bucket.bucket_maintenance > logstore.bucket.bucket_commit_log"
    " > logstore.bucket.bucket_maintenance": "write: retention's build",
    # Written once, the backend plugged in: the stager hands rows to its StagingArea.
    "streaming.sink_bucket_staging > streaming.sink_staging"
    " > streaming.sink_bucket_staging": "write: PartitionStager -> describe_topic",
    # A value type of the protocol (SinkBatch.topics) read by the backend: SinkBatch and
    # its kin could live in a value module beneath both.
    "streaming.sink_protocol > streaming.sink_bucket_commit"
    " > streaming.sink_protocol": "write: SinkBatch.topics",
    # Written once, the backend plugged in: LogReads asks the log for its read end, and
    # SegmentReads.find_batch reads through the window's pread.
    "logstore.bucket.bucket_log > logstore.log.log_read"
    " > logstore.bucket.bucket_log": "read: LogReads -> BucketLog._read_end",
    "logstore.bucket.bucket_read_window > logstore.log.segment_reads"
    " > logstore.bucket.bucket_read_window": "read: find_batch -> SegmentWindow.pread",
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
