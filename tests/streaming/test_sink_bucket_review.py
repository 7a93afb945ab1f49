"""The bucket sink against what a hostile review found (each test failed before its fix):
long batches commit, replays are recognised by the ledger first, ages are the store's,
the commit checks its objects, commits and tasks do not read the history, a topic whose
config changed during the batch is refused, fragments are cut at the segment size, a
best-effort step after the publish never fails it, and a URI's credentials are never
echoed."""

from __future__ import annotations

import logging
import os
import re
import sys
import time

import pyarrow as pa
import pytest
from test_sink_bucket import SINK, TOPIC, check_exactly_once, memory_uri, options, stage, values

from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.errors import InvalidStorageUriError, KafkaStorageError
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.storage.object_storage import ObjectStorage
from seglog.logstore.storage.object_store_config import parse_object_uri, redact_uri
from seglog.logstore.util.clock import MockClock
from seglog.streaming.errors import SinkCommitError
from seglog.streaming.sink_bucket_commit import abort, commit
from seglog.streaming.sink_bucket_merger import wait_all
from seglog.streaming.sink_bucket_staging import open_bucket, stage_rows
from seglog.streaming.sink_options import SinkColumns, SinkOptions


def test_a_failing_sweep_after_the_publish_does_not_fail_the_commit(monkeypatch, caplog):
    uri = memory_uri()
    opts = options(uri, maintenanceIntervalMs="0")  # a new sink's first commit maintains
    tasks = [stage(opts, 0)]
    real_dir, real_tree = ObjectStorage.list_dir, ObjectStorage.list_tree

    def flaky(real):
        def listing(self, path, *args):
            if str(path).startswith("_seglog/staging") and "00000000000000000000" not in path:
                raise KafkaStorageError(f"LIST {self.uri}/{path} failed: 503 SlowDown")
            return real(self, path, *args)
        return listing

    monkeypatch.setattr(ObjectStorage, "list_dir", flaky(real_dir))
    monkeypatch.setattr(ObjectStorage, "list_tree", flaky(real_tree))
    result = commit(tasks, 0, opts)  # raised KafkaStorageError, the batch published
    monkeypatch.undo()
    assert result.records == 300
    assert "503 SlowDown" in caplog.text and "published batch 0" in caplog.text
    assert "maintenance failed" in caplog.text or "sweep" in caplog.text
    check_exactly_once(uri, values(0))
    with LogManager(uri, read_only=True) as mgr:
        assert mgr.state.sinks[SINK]["batch_id"] == 0


@pytest.mark.parametrize("uri", ["s3a://AKIAEXAMPLE:wJalrSECRET@bucket/logs",
                                 "s3://AKIAEXAMPLE@bucket/logs",
                                 "gs://user:wJalrSECRET@bucket"])
def test_credentials_in_a_uri_are_refused_and_never_echoed(uri):
    with pytest.raises(InvalidStorageUriError, match="carries credentials") as e:
        parse_object_uri(uri)
    assert "SECRET" not in str(e.value) and "AKIA" not in str(e.value)
    assert "***@bucket" in str(e.value)
    with pytest.raises(InvalidStorageUriError) as e:
        open_bucket(SinkOptions.parse({"path": uri, "topic": TOPIC}), read_only=True)
    assert "SECRET" not in str(e.value) and "AKIA" not in str(e.value)


def test_redaction_keeps_azure_container_names_and_plain_paths():
    assert redact_uri("abfs://container@account.dfs.core.windows.net/logs") == \
        "abfs://container@account.dfs.core.windows.net/logs"
    assert redact_uri("abfs://u:pw@account/logs") == "abfs://***@account/logs"
    assert redact_uri("/data/logs") == "/data/logs"
    with pytest.raises(Exception) as e:  # a sink option message quoting the log dirs
        SinkOptions.parse({"path": "s3a://K:wJalrSECRET@bucket/logs,/tmp/x", "topic": TOPIC})
    assert "SECRET" not in str(e.value)


MINUTE = 60_000


def test_a_long_batch_commits_and_its_replay_is_recognised_by_the_ledger_first():
    """Review 1: a fragment uploaded 31 min before the commit used to be refused, and so
    was a replay of a batch already committed (the age check ran before the ledger)."""
    uri = memory_uri()
    opts = options(uri)
    clock = MockClock(1_700_000_000_000)
    early = stage(opts, 0, task=0, clock=clock, tag="t0")
    clock.advance(31 * MINUTE)  # the slowest task finishes half an hour later
    late = stage(opts, 0, task=1, clock=clock, tag="t1")
    assert commit([early, late], 0, opts, clock=clock).records == 600
    clock.advance(31 * MINUTE)
    rerun = [stage(opts, 0, task=t, clock=clock, tag=f"t{t}") for t in range(2)]
    clock.advance(31 * MINUTE)
    assert commit(rerun, 0, opts, clock=clock).skipped  # a replay, not an error
    job = [stage(opts, 0, task=0, sink="job-x", clock=clock, tag="job")]
    clock.advance(31 * MINUTE)
    assert commit(job, 0, opts, use_ledger=False, clock=clock).records == 300
    check_exactly_once(uri, values(0, tag="t0") + values(0, tag="t1") + values(0, tag="job"))


def test_a_collector_with_a_skewed_clock_keeps_a_batch_in_flight():
    """Review 2: an executor 40 min ahead, a collector 61 min ahead of the store: the
    collector judged ages by its own clock and deleted an upload the commit then
    referenced. Ages are the store's now, and a batch in flight is kept anyway."""
    uri = memory_uri()
    opts = options(uri)
    wall = int(time.time() * 1000)
    staged = stage(opts, 0, clock=MockClock(wall + 40 * MINUTE))
    with BucketLogManager(uri, clock=MockClock(wall + 61 * MINUTE)) as other:
        stats = other.collect()
    assert stats.orphans == 0
    commit([staged], 0, opts, clock=MockClock(wall + 61 * MINUTE))
    check_exactly_once(uri, values(0))


def test_a_commit_refuses_a_fragment_missing_from_the_bucket():
    """Review 2: the commit lists <sink>/<batch>/ once and checks every object it
    references; a gap is refused, never published."""
    uri = memory_uri()
    opts = options(uri)
    staged = [stage(opts, 0, task=t) for t in range(2)]
    gone = staged[1].fragments[0]
    ObjectStorage(uri).delete(gone.key + ".log")
    with pytest.raises(SinkCommitError, match=f"{gone.key}.log .* is missing: batch 0"):
        commit(staged, 0, opts)
    with LogManager(uri, read_only=True) as mgr:
        assert TOPIC not in mgr.topics()


class _Reads:
    """Counts GET bytes of ObjectStorage.read (whole objects: snapshots, commits)."""

    def __init__(self, monkeypatch) -> None:
        self.bytes = 0
        real = ObjectStorage.read

        def read(storage, path):
            data = real(storage, path)
            self.bytes += len(data)
            return data

        monkeypatch.setattr(ObjectStorage, "read", read)


def test_commits_and_write_tasks_do_not_read_the_history(monkeypatch):
    """Review 3: every commit and every write task opened a fresh manager, which reads
    the newest snapshot: bytes read grew with the history (25 KB at batch 10, 458 KB at
    batch 200). One manager per process, refreshed: a commit reads what changed."""
    uri = memory_uri()
    # no merge: a long history
    opts = options(uri, maintenanceIntervalMs="86400000", mergeMinSegments=str(10**6))
    reads = _Reads(monkeypatch)
    per_commit, per_task = [], []
    for b in range(60):
        tasks = [stage(opts, b, task=t, n=20) for t in range(3)]
        reads.bytes = 0
        commit(tasks, b, opts)
        per_commit.append(reads.bytes)
        reads.bytes = 0
        stage(opts, b + 1, task=1, n=20)
        per_task.append(reads.bytes)
    with LogManager(uri, read_only=True) as mgr:
        history = len(mgr.state.encode())
    assert history > 40_000
    assert max(per_commit[30:]) < 8_000 and max(per_task[30:]) < 8_000
    assert max(per_commit[30:]) <= max(per_commit[5:15]) + 2_000  # flat, not growing


def test_a_topic_created_with_another_config_during_the_batch_is_refused():
    """Review 5: tasks checked rows against the sink's topic settings; a racing creator
    made the topic compacted with max.message.bytes=1000; the commit compared only the
    partition count and published null keys and oversized batches."""
    uri = memory_uri()
    opts = options(uri, numPartitions="1")
    rb = pa.record_batch({"key": pa.array([None] * 50, pa.string()),
                          "value": pa.array([b"v" * 100] * 50, pa.binary())})
    staged = stage_rows(opts, SinkColumns.resolve(rb.schema, default_topic=TOPIC), [rb],
                        SINK, 0, 0, 0)
    with LogManager(uri) as mgr:
        mgr.create_topic(TOPIC, 1, {"cleanup.policy": "compact", "max.message.bytes": "1000"})
    with pytest.raises(SinkCommitError, match=r"'out' .* changed its config during batch 0 "
                       r"\(cleanup.policy: '\(default\)' then 'compact'; max.message.bytes"):
        commit([staged], 0, opts)
    with LogManager(uri, read_only=True) as mgr:
        assert mgr.high_watermarks() == {(TOPIC, 0): 0}


def test_a_topic_altered_during_the_batch_is_refused_and_the_rerun_checks_again():
    uri = memory_uri()
    opts = options(uri)
    commit([stage(opts, 0)], 0, opts)
    staged = [stage(opts, 1)]
    with LogManager(uri) as mgr:
        mgr.alter_topic_config(TOPIC, {"max.message.bytes": "2000"})
    with pytest.raises(SinkCommitError, match="max.message.bytes: '\\(default\\)' then '2000'"):
        commit(staged, 1, opts)
    assert commit([stage(opts, 1)], 1, opts).records == 300  # checked against the new one
    check_exactly_once(uri, values(0) + values(1))


def test_one_large_arrow_batch_is_cut_into_fragments_at_the_segment_size():
    """Review 6: one Arrow batch became one 5.1 MB fragment with segment.bytes 1 MiB."""
    uri = memory_uri()
    opts = options(uri, numPartitions="1", **{"topic.segment.bytes": str(1 << 20),
                                               "compression.type": "none"})
    n = 5000
    rb = pa.record_batch({"key": pa.array([f"k{i}" for i in range(n)], pa.string()),
                          "value": pa.array([b"x" * 1000 + str(i).encode() for i in range(n)],
                                            pa.binary())})
    staged = stage_rows(opts, SinkColumns.resolve(rb.schema, default_topic=TOPIC), [rb],
                        SINK, 0, 0, 0)
    sizes = [f.size for f in staged.fragments]
    assert len(sizes) >= 5 and max(sizes) <= 1 << 20
    commit([staged], 0, opts)
    check_exactly_once(uri, rb.column("value").to_pylist())


def test_an_empty_batch_commits_nothing_and_logs_no_replay(caplog):
    uri = memory_uri()
    opts = options(uri)
    commit([stage(opts, 0)], 0, opts)
    empty = stage(opts, 1, n=0)
    caplog.set_level(logging.INFO)
    result = commit([empty], 1, opts)
    assert result.published == () and "replay" not in caplog.text
    with LogManager(uri, read_only=True) as mgr:
        assert mgr.state.sinks[SINK]["batch_id"] == 0


COMMIT_KEY = re.compile(r"^_seglog/(log/|topics/[^/]+/log/(?!0{20}\.json))")
"""A commit that makes a batch visible: the catalog's (naming a topic the batch creates)
or a topic log's after its first version (which nothing names before the catalog does)."""


def commit_create_lands_but_fails(monkeypatch, before_read_back=lambda: None) -> None:
    """The first commit create lands in the store but its request fails, and so does
    reading that commit back (``before_read_back`` runs first): the commit log cannot tell
    whether it landed."""
    real_create, real_read = ObjectStorage.create, ObjectStorage.read
    failing: list[str] = []
    armed = [True]

    def create(self, path, data):
        made = real_create(self, path, data)
        if COMMIT_KEY.match(str(path)) and armed:
            armed.clear()
            failing.append(path)
            raise KafkaStorageError(f"PUT {path}: connection reset")
        return made

    def read(self, path):
        if failing and str(path) == failing[0]:
            failing.clear()
            before_read_back()
            raise KafkaStorageError(f"GET {path}: timed out")
        return real_read(self, path)

    monkeypatch.setattr(ObjectStorage, "create", create)
    monkeypatch.setattr(ObjectStorage, "read", read)


def test_a_commit_that_landed_though_its_request_failed_is_published(monkeypatch, caplog):
    """The create of the commit fails on the wire after it landed, and reading it back
    fails too: the outcome is unknown to the commit log. The sink refreshes and finds
    its fragments published: commit() succeeds (a batch job must not fail and be rerun
    into duplicates), and an abort after all says the data is visible."""
    uri = memory_uri()
    opts = options(uri)
    tasks = [stage(opts, 0)]
    commit_create_lands_but_fails(monkeypatch)
    assert commit(tasks, 0, opts, use_ledger=False).records == 300
    monkeypatch.undo()
    check_exactly_once(uri, values(0))
    abort(tasks, 0, opts)
    assert "its data IS visible" in caplog.text
    check_exactly_once(uri, values(0))


def test_a_long_stream_merges_its_fragments_and_collects_them_exactly_once():
    """Maintenance for a running query: after each commit (maintenance due every time)
    the driver merges runs of small committed segments, and its maintenance collects the
    fragments merged away after file.delete.delay.ms."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "logstore"))
    from bucket_helpers import StoreClockStorage

    from seglog.logstore.bucket.bucket_state import STAGING_DIR
    from seglog.streaming.sink_bucket_merge import MERGE_MIN_SEGMENTS

    uri = memory_uri()
    opts = options(uri, numPartitions="2", maintenanceIntervalMs="0")
    expected = []
    batches = 4 * MERGE_MIN_SEGMENTS
    for b in range(batches):
        tasks = [stage(opts, b, task=t, n=30, tag=f"t{t}") for t in range(3)]
        commit(tasks, b, opts)
        expected += [v for t in range(3) for v in values(b, 30, f"t{t}")]
    assert wait_all(60)  # the last commits' merges, in the background
    with LogManager(uri, read_only=True) as mgr:
        segments = {tp: len(mgr.state.partition(*tp).segments) for tp in
                    ((TOPIC, 0), (TOPIC, 1))}
    # 3 fragments per partition per batch without merging; merged: a few each
    assert all(n < 2 * MERGE_MIN_SEGMENTS for n in segments.values()), segments
    check_exactly_once(uri, expected)
    clock = MockClock(int(time.time() * 1000))
    with BucketLogManager(StoreClockStorage(ObjectStorage(uri), clock), clock=clock) as mgr:
        clock.advance(61_000)  # file.delete.delay.ms (60 s) after the merges
        assert mgr.collect().removed_objects > 0
        staged = mgr.storage.list_tree(STAGING_DIR)
        referenced = {s.key for p in mgr.state.partitions.values() for s in p.segments}
        assert {f"{STAGING_DIR}/{e.name}".rsplit(".", 1)[0] for e in staged} <= referenced
    check_exactly_once(uri, expected)


def test_source_planning_lists_once_per_trigger_and_reads_list_only_when_behind(monkeypatch):
    """Review (source): the driver made ~4 LISTs per trigger, and every read task one;
    now one per trigger (none for reportLatestOffset), and a reused worker's reads list
    only when what it knows ends before the range."""
    from seglog.datasource.schema import arrow_schema
    from seglog.streaming.read_planning import ReadRange
    from seglog.streaming.source_offsets import snapshot_log_dirs
    from seglog.streaming.source_options import SourceOptions
    from seglog.streaming.source_read import read_range

    uri = memory_uri()
    opts = options(uri, numPartitions="8")
    commit([stage(opts, 0, task=t, n=200) for t in range(2)], 0, opts)
    assert wait_all(60)  # the sink's background merger LISTs too: not the source's
    src = SourceOptions.parse({"path": uri, "subscribe": TOPIC}, streaming=True)
    lists = []
    real = ObjectStorage.list_after
    monkeypatch.setattr(ObjectStorage, "list_after",
                        lambda self, *a: lists.append(a) or real(self, *a))

    def snapshot(**kw):
        lists.clear()
        snap = snapshot_log_dirs(src.log_dirs, start_offsets_for=lambda tp: True,
                                 options=src, **kw)
        return snap, len(lists)

    snap, first = snapshot()
    assert first <= 2
    # latestOffset: one LIST per commit log (the catalog's and the topic's), made at once
    assert snapshot()[1] == 2
    assert snapshot(refresh=False)[1] == 0  # reportLatestOffset: none
    schema = arrow_schema(False)
    ends = {tp: snap.latest(tp) for tp in snap.subscribed(src)}
    lists.clear()
    for (t, p), end in sorted(ends.items()):  # this trigger's ranges: known, no LIST
        list(read_range(ReadRange(src.log_dirs, t, p, 0, end), schema))
    assert lists == []
    commit([stage(opts, 1, task=0, n=200)], 1, opts)
    assert wait_all(60)
    with LogManager(uri, read_only=True) as other:  # the driver, another process
        new_ends = other.high_watermarks()
    lists.clear()
    for (t, p), end in sorted(ends.items()):  # the next trigger: the first range behind
        list(read_range(ReadRange(src.log_dirs, t, p, end, new_ends[(t, p)]), schema))
    assert len(lists) == 1  # the topic's log: refreshes the worker's state for the others


def test_a_landed_commit_whose_fragments_were_merged_before_the_settle_is_published(
        monkeypatch, caplog):
    """The create of batch 1's commit lands but fails on the wire, and before the sink
    settles it another process merges batch 0's and batch 1's segments: the fragments are
    no longer referenced, yet the ledger (carried by the very commit) says batch 1 landed,
    so commit() succeeds instead of calling a published batch invisible."""
    uri = memory_uri()
    opts = options(uri)
    commit([stage(opts, 0)], 0, opts)
    tasks = [stage(opts, 1)]
    merged: list[int] = []

    def merge_elsewhere() -> None:  # before the sink looks again
        with BucketLogManager(uri) as other:
            merged.append(other.merge_segments())

    commit_create_lands_but_fails(monkeypatch, before_read_back=merge_elsewhere)
    caplog.set_level(logging.WARNING)
    assert commit(tasks, 1, opts).records == 300
    monkeypatch.undo()
    assert merged and merged[0] > 0
    assert "landed" in caplog.text
    check_exactly_once(uri, values(0) + values(1))
    with LogManager(uri, read_only=True) as mgr:
        assert mgr.state.sinks[SINK]["batch_id"] == 1
        staged = {s.key for p in mgr.state.partitions.values() for s in p.segments}
    assert not any(k.startswith("_seglog/staging") for k in staged)  # merged away indeed
