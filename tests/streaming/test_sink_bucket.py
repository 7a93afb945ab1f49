"""The exactly-once sink on a bucket without Spark: tasks upload fragments, the driver
commits metadata only (one conditional commit), replays commit nothing, losing attempts
and dead uploads are deleted, concurrent sinks stay exactly once, and a SIGKILL at each
named step of the bucket commit is followed by an exactly-once replay."""

from __future__ import annotations

import collections
import os
import subprocess
import sys
import textwrap
import threading
import uuid

import pyarrow as pa
import pytest

from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.bucket.bucket_staging import SINK_EXPIRY_MS, staging_prefix
from seglog.logstore.bucket.bucket_state import STAGING_DIR
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import decode_batches
from seglog.logstore.storage.object_storage import ObjectStorage
from seglog.logstore.util.clock import MockClock
from seglog.streaming import sink_bucket_commit, sink_bucket_staging
from seglog.streaming.errors import SinkCommitError
from seglog.streaming.partitioner import partitions_for_keys
from seglog.streaming.sink_bucket_commit import (
    BUCKET_CRASH_STEPS,
    abort,
    commit,
    staged_keys,
)
from seglog.streaming.sink_bucket_staging import BucketFragment, stage_rows
from seglog.streaming.sink_commit import CRASH_ENV
from seglog.streaming.sink_options import SinkColumns, SinkOptions
from seglog.streaming.sink_staging import producer_fields

TOPIC = "out"
SINK = "7a0c-query"


def memory_uri() -> str:
    return f"memory://sink-bucket-{uuid.uuid4().hex}"


def rows(batch: int, n: int = 300, tag: str = "") -> pa.RecordBatch:
    keys = [None if i % 4 == 0 else f"user-{i % 13}" for i in range(n)]
    return pa.record_batch({
        "key": pa.array(keys, pa.string()),
        "value": pa.array([f"{tag}b{batch}-row{i}".encode() for i in range(n)], pa.binary()),
    })


def options(uri: str, **extra: str) -> SinkOptions:
    return SinkOptions.parse({"path": uri, "topic": TOPIC, "numPartitions": "3",
                              "compression.type": "lz4", **extra})


def columns(batch: pa.RecordBatch) -> SinkColumns:
    return SinkColumns.resolve(batch.schema, default_topic=TOPIC)


def stage(opts: SinkOptions, batch: int, task: int = 0, attempt: int = 0, n: int = 300,
          sink: str = SINK, tag: str = "", clock: MockClock | None = None):
    rb = rows(batch, n, tag)
    kwargs = {"clock": clock} if clock is not None else {}
    return stage_rows(opts, columns(rb), [rb], sink, batch, task, attempt, **kwargs)


def read_all(uri: str, topic: str = TOPIC) -> list[tuple[int, int, bytes | None, bytes]]:
    """(partition, offset, key, value) of every committed record, through the read path."""
    out = []
    with LogManager(uri, read_only=True) as mgr:
        for p in mgr.partitions(topic):
            log = mgr.get_log(topic, p)
            for chunk in log.read_chunks(log.log_start_offset, log.high_watermark, 1 << 20):
                t = decode_batches(chunk)
                for off, k, v in zip(t.column("offset").to_pylist(), t.column("key").to_pylist(),
                                     t.column("value").to_pylist(), strict=True):
                    out.append((p, off, k, v))
    return out


def check_exactly_once(uri: str, expected: list[bytes]) -> list[tuple]:
    records = read_all(uri)
    assert collections.Counter(r[3] for r in records) == collections.Counter(expected)
    by_part = collections.defaultdict(list)
    for p, off, _, _ in records:
        by_part[p].append(off)
    for offs in by_part.values():  # offsets contiguous from 0 in every partition
        assert offs == list(range(len(offs)))
    return records


def values(batch: int, n: int = 300, tag: str = "") -> list[bytes]:
    return rows(batch, n, tag).column("value").to_pylist()


def test_tasks_upload_fragments_and_the_commit_publishes_them_once():
    uri = memory_uri()
    opts = options(uri, maxBatchBytes="2048")
    tasks = [stage(opts, 0, task=t, tag=f"t{t}") for t in range(2)]
    assert all(isinstance(f, BucketFragment) for m in tasks for f in m.fragments)
    assert all(f.key.startswith(f"{staging_prefix(SINK, 0)}/") for m in tasks for f in m.fragments)
    assert read_all_or_none(uri) is None  # nothing visible before the commit

    result = commit(tasks, 0, opts)
    records = check_exactly_once(uri, values(0, tag="t0") + values(0, tag="t1"))
    assert result.records == 600 and len(result.published) == 3
    # key placement is Kafka's murmur2 over the partition count
    keyed = [(p, k) for p, _, k, _ in records if k is not None]
    expected = partitions_for_keys(pa.array([k for _, k in keyed], pa.binary()), 3)
    assert [p for p, _ in keyed] == list(expected)
    # every batch carries the sink's producerId and the micro-batch id
    pid, epoch, seq = producer_fields(SINK, 0)
    with LogManager(uri, read_only=True) as mgr:
        segs = [s for p in mgr.state.partitions.values() for s in p.segments]
        assert all(s.key.startswith(f"{STAGING_DIR}/") for s in segs)
        assert any(s.offset_delta for s in segs)  # the second task's fragments moved
        log = mgr.get_log(TOPIC, 0)
        seg = log.segments[-1]
        data = seg.pread(0, seg.size)
        from seglog.logstore.records.record_format import iter_batch_headers
        heads = list(iter_batch_headers(data))
        assert heads[0].base_offset == seg.base_offset
        assert {(h.producer_id, h.producer_epoch, h.base_sequence) for h in heads} == {
            (pid, epoch, seq)}


def test_micro_batches_of_many_record_batches_are_all_published_on_a_bucket():
    """As on a local dir, a fragment cut into several record batches (above
    maxBatchBytes) carries the micro-batch id in every batch (the bucket's replay
    decides from its commits, but the data must say the same), and every micro-batch
    is published."""
    from seglog.logstore.records.record_format import iter_batch_headers
    from seglog.streaming.sink_staging import batch_id_of

    uri = memory_uri()
    opts = options(uri, maxBatchBytes="300")
    for batch in range(3):
        result = commit([stage(opts, batch)], batch, opts)
        assert result.records == 300, batch
    check_exactly_once(uri, values(0) + values(1) + values(2))
    with LogManager(uri, read_only=True) as mgr:
        heads = [h for p in range(3) for seg in mgr.get_log(TOPIC, p).segments
                 for h in iter_batch_headers(seg.pread(0, seg.size))]
    assert len(heads) > 9
    assert {batch_id_of(h.producer_epoch, h.base_sequence) for h in heads} == {0, 1, 2}


def test_small_fragment_indexes_travel_inline_and_large_ones_are_objects(monkeypatch):
    uri = memory_uri()
    opts = options(uri, maxBatchBytes="1024", **{"topic.index.interval.bytes": "512"})
    task = stage(opts, 0, n=400)
    assert task.fragments and all(
        f.inline_index and f.inline_timeindex and not f.index_bytes and not f.timeindex_bytes
        for f in task.fragments)
    storage = ObjectStorage(uri)
    uploaded = {e.name for e in storage.list_tree(staging_prefix(SINK, 0))}
    assert uploaded and all(n.endswith(".log") for n in uploaded)  # one object a fragment
    commit([task], 0, opts)
    with LogManager(uri, read_only=True) as mgr:
        entries = {s.key: s for p in mgr.state.partitions.values() for s in p.segments}
    for f in task.fragments:
        assert (entries[f.key].inline_index, entries[f.key].inline_timeindex) == (
            f.inline_index, f.inline_timeindex)

    # Over the bound: objects, as before
    bound = min(len(f.inline_index) + len(f.inline_timeindex) for f in task.fragments) + 1
    monkeypatch.setattr(sink_bucket_staging, "FRAGMENT_INLINE_INDEX_BYTES", bound)
    big = stage(opts, 1, n=2000)
    assert any(f.index_bytes for f in big.fragments)
    for f in big.fragments:
        assert not (f.inline_index and f.index_bytes)
        assert len(f.inline_index) + len(f.inline_timeindex) <= bound
    uploaded = {e.name for e in storage.list_tree(staging_prefix(SINK, 1))}
    assert any(n.endswith(".index") for n in uploaded)
    commit([big], 1, opts)
    check_exactly_once(uri, values(0, 400) + values(1, 2000))


def read_all_or_none(uri: str):
    with LogManager(uri, read_only=True) as mgr:
        return None if TOPIC not in mgr.topics() else read_all(uri)


def test_the_commit_reads_and_writes_no_data_byte(monkeypatch):
    uri = memory_uri()
    opts = options(uri)
    tasks = [stage(opts, 0, task=t, n=2000) for t in range(2)]
    calls = collections.Counter()
    real_put, real_create = ObjectStorage.write_atomic, ObjectStorage.create

    def refuse(name):
        def fail(self, *a, **k):
            raise AssertionError(f"the driver's commit called {name}{a[:1]}")
        return fail

    def put(self, path, data):
        calls["put"] += 1
        assert str(path).startswith("_seglog/") and not str(path).startswith(STAGING_DIR)
        return real_put(self, path, data)

    def create(self, path, data):
        calls["create"] += 1
        calls["bytes"] += len(data)
        return real_create(self, path, data)

    for name in ("read_range", "read_ranges", "open_range_reader"):
        monkeypatch.setattr(ObjectStorage, name, refuse(name))
    monkeypatch.setattr(ObjectStorage, "write_atomic", put)
    monkeypatch.setattr(ObjectStorage, "create", create)
    commit(tasks, 0, opts)
    # ONE conditional commit for the micro-batch, plus one for the topic it creates (its
    # own log's first version, then the catalog's commit naming it)
    assert calls["create"] == 2
    assert calls["bytes"] < 4096  # metadata: a few hundred bytes per fragment
    monkeypatch.undo()
    check_exactly_once(uri, values(0, 2000) * 2)


def test_a_replayed_batch_commits_nothing_and_its_new_uploads_are_deleted():
    uri = memory_uri()
    opts = options(uri)
    first = [stage(opts, 0)]
    commit(first, 0, opts)
    version = _version(uri)
    again = [stage(opts, 0, attempt=0)]  # the rerun after a crash: new uploads
    result = commit(again, 0, opts)
    assert result.published == () and result.skipped
    assert _version(uri) == version
    check_exactly_once(uri, values(0))
    with LogManager(uri) as mgr:
        assert not [k for k in staged_keys(mgr, SINK) if any(
            k.startswith(f.key) for f in again[0].fragments)]
        assert mgr.state.sinks[SINK]["batch_id"] == 0
    commit([stage(opts, 1)], 1, opts)
    check_exactly_once(uri, values(0) + values(1))


def test_losing_attempts_are_deleted_and_one_attempt_per_task_is_published():
    uri = memory_uri()
    opts = options(uri)
    a0 = stage(opts, 0, task=0, attempt=0)
    a1 = stage(opts, 0, task=0, attempt=1)  # speculative / retried attempt, same rows
    commit([a1, a0], 0, opts)
    check_exactly_once(uri, values(0))
    with LogManager(uri) as mgr:
        left = staged_keys(mgr, SINK)
    assert left and not [k for k in left if a1.attempt_uid in k]


def test_abort_deletes_uploads_but_never_committed_fragments():
    uri = memory_uri()
    opts = options(uri)
    ok = stage(opts, 0)
    commit([ok], 0, opts)
    failed = stage(opts, 1)
    assert abort([failed, None], 1, opts) > 0
    assert abort([ok], 0, opts) == 0  # committed: referenced, kept
    check_exactly_once(uri, values(0))


def test_the_collector_deletes_dead_uploads_of_settled_batches_after_the_grace_only():
    """Ages by the store's clock (moved here with the test's clock); a batch in flight
    (newer than the ledger, its sink alive) is kept however old its uploads are."""
    sys.path.insert(0, os.path.join(os.path.dirname(__file__), "..", "logstore"))
    from bucket_helpers import StoreClockStorage

    uri = memory_uri()
    opts = options(uri)
    commit([stage(opts, 0, task=0)], 0, opts)
    dead = stage(opts, 0, task=1)  # its executor died: no message reached the commit
    in_flight = stage(opts, 1, task=0)  # batch 1: its other tasks still run
    clock = MockClock(1_700_000_000_000)
    mgr = BucketLogManager(StoreClockStorage(ObjectStorage(uri), clock), clock=clock,
                           orphan_grace_ms=ORPHAN_GRACE)
    before = set(staged_keys(mgr, SINK))
    assert mgr.collect().orphans == 0  # young: kept
    clock.advance(ORPHAN_GRACE + 1)
    dead_keys = {k for f in dead.fragments for k in f.object_keys()}
    assert mgr.collect().orphans == len(dead_keys)
    assert set(staged_keys(mgr, SINK)) == before - dead_keys
    clock.advance(SINK_EXPIRY_MS)  # the sink uploaded nothing for a week: gone
    assert mgr.collect().orphans == sum(len(f.object_keys()) for f in in_flight.fragments)
    check_exactly_once(uri, values(0))


ORPHAN_GRACE = 3_600_000


def test_a_missing_task_message_publishes_nothing():
    uri = memory_uri()
    opts = options(uri)
    with pytest.raises(SinkCommitError, match="task 1 of batch 0 left no commit message"):
        commit([stage(opts, 0), None], 0, opts)
    assert read_all_or_none(uri) is None


def test_concurrent_sinks_into_one_topic_are_both_exactly_once():
    uri = memory_uri()
    opts = options(uri)
    errors = []

    def run(sink: str) -> None:
        try:
            for b in range(6):
                commit([stage(opts, b, sink=sink, tag=sink, n=150)], b, opts)
        except BaseException as e:  # reported below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(s,)) for s in ("qa", "qb")]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors
    expected = [v for s in ("qa", "qb") for b in range(6) for v in values(b, 150, s)]
    check_exactly_once(uri, expected)


@pytest.mark.parametrize("inline", [True, False])
def test_reads_through_fragments_seek_by_offset_and_timestamp(monkeypatch, inline):
    if not inline:
        monkeypatch.setattr(sink_bucket_staging, "FRAGMENT_INLINE_INDEX_BYTES", 0)
    uri = memory_uri()
    opts = options(uri, maxBatchBytes="1024", **{"topic.index.interval.bytes": "512"})
    for b in range(3):
        commit([stage(opts, b, task=t, n=400, tag=f"t{t}") for t in range(2)], b, opts)
    records = read_all(uri)
    with LogManager(uri, read_only=True) as mgr:
        log = mgr.get_log(TOPIC, 1)
        seg = next(s for s in log.segments if s.base_offset > 0)
        assert bool(seg.entry.inline_index) == inline and bool(seg.entry.index_bytes) != inline
        assert seg.offset_index.entries > 0  # the fragment's own index is used
        mine = [r for r in records if r[0] == 1]
        middle = mine[len(mine) // 2][1]
        got = decode_batches(log.read(middle, max_bytes=1).records)  # one batch
        offs = got.column("offset").to_pylist()
        assert offs[0] <= middle and middle in offs
        assert log.offset_for_timestamp(0) == 0


@pytest.mark.parametrize("server", ["s3", "seaweedfs"])
@pytest.mark.parametrize("step", [*BUCKET_CRASH_STEPS, "after-upload", "after-commit",
                                  "task-after-upload"])
def test_sigkill_at_each_step_then_replay_is_exactly_once(step, server, request):
    """A real SIGKILL of the committing (or uploading) process at each named step, over
    a real S3 server (moto, SeaweedFS); the replay (same sink, same batch, new uploads)
    publishes once."""
    s3_uri = request.getfixturevalue("s3_uri" if server == "s3" else "seaweed_uri")
    opts = options(s3_uri)
    commit([stage(opts, 0)], 0, opts)  # a history to append to
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_sink_bucket import options, stage
        from seglog.streaming.sink_bucket_commit import commit
        opts = options({s3_uri!r})
        tasks = [stage(opts, 1, task=t, tag=f"t{{t}}") for t in range(2)]
        commit(tasks, 1, opts)
        print("COMMITTED")
    """)
    env = dict(os.environ, **{CRASH_ENV: step})
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == -9, proc.stderr[-2000:]
    committed_before = step in ("after-commit", "bucket-after-commit", "bucket-after-cleanup")
    expected0 = values(0)
    expected1 = values(1, tag="t0") + values(1, tag="t1")
    check_exactly_once(s3_uri, expected0 + (expected1 if committed_before else []))
    # the replay: Spark reruns every task of batch 1, then commits
    tasks = [stage(opts, 1, task=t, tag=f"t{t}") for t in range(2)]
    result = commit(tasks, 1, opts)
    assert bool(result.published) != committed_before
    check_exactly_once(s3_uri, expected0 + expected1)
    commit([stage(opts, 2)], 2, opts)
    check_exactly_once(s3_uri, expected0 + expected1 + values(2))


def _version(uri: str) -> int:
    with LogManager(uri, read_only=True) as mgr:
        return mgr.state.version


def test_sink_options_take_one_bucket_uri_alone():
    with pytest.raises(Exception, match="a bucket URI is the only log dir"):
        SinkOptions.parse({"path": "s3://b/logs,/tmp/x", "topic": TOPIC})
    assert SinkOptions.parse({"path": "s3://b/logs"}).bucket_uri == "s3://b/logs"
    assert SinkOptions.parse({"path": "/tmp/x"}).bucket_uri is None
    assert sink_bucket_commit.OPERATION == "sink_append"


def test_a_commit_whose_collection_races_another_collector_still_succeeds(monkeypatch, caplog):
    # Found by the soak: a concurrent collector deleted a commit this one had listed, the
    # read raised FileNotFoundError (no SeglogError) and failed a published micro-batch.
    uri = memory_uri()
    opts = options(uri, maintenanceIntervalMs="0")
    collections_run = []

    def gone(self: object) -> None:
        collections_run.append(1)
        raise FileNotFoundError(f"{uri}/_seglog/log/00000000000000000261.json")

    monkeypatch.setattr(type(BucketLogManager(uri).maintenance), "collect", gone)
    commit([stage(opts, 0)], 0, opts)
    assert collections_run, "the commit ran no maintenance: the test proves nothing"
    check_exactly_once(uri, values(0))
    assert "maintenance failed" in caplog.text
