"""The exactly-once sink protocol without Spark: staging, commit, replay after a crash at
every named step (a real SIGKILL in a subprocess), duplicate attempts, abort, sweep."""

from __future__ import annotations

import collections
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pyarrow as pa
import pytest

from seglog.logstore.errors import (
    CorruptRecordError,
    InvalidTopicError,
    LogDirLockedError,
    RecordTooLargeError,
    UnknownTopicOrPartitionError,
)
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import decode_batches
from seglog.streaming.errors import SinkCommitError
from seglog.streaming.partitioner import partitions_for_keys
from seglog.streaming.sink_commit import (
    CRASH_ENV,
    CRASH_STEPS,
    SinkLedger,
    abort,
    commit,
    sweep_staging,
)
from seglog.streaming.sink_local_staging import stage_rows
from seglog.streaming.sink_options import SinkColumns, SinkOptions
from seglog.streaming.sink_staging import producer_fields, staging_root

TOPIC = "out"
SINK = "3f1c6a8e-query"
HEADERS = pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())]))


def rows(batch: int, n: int = 120) -> pa.RecordBatch:
    """Deterministic input of micro-batch ``batch``: keyed and keyless rows, headers."""
    keys = [None if i % 3 == 0 else f"user-{i % 11}" for i in range(n)]
    return pa.record_batch({
        "key": pa.array(keys, pa.string()),
        "value": pa.array([f"b{batch}-row{i}".encode() for i in range(n)], pa.binary()),
        "headers": pa.array([[{"key": "h", "value": str(i).encode()}] for i in range(n)],
                            HEADERS),
    })


def options(log_dir: Path, **extra: str) -> SinkOptions:
    return SinkOptions.parse({"path": str(log_dir), "topic": TOPIC, "numPartitions": "3",
                              "compression.type": "lz4", **extra})


def stage_batch(opts: SinkOptions, batch: int, *, tasks: int = 2, attempt: int = 0,
                sink: str = SINK):
    """Stage micro-batch ``batch`` split over ``tasks`` tasks, as Spark would."""
    data = rows(batch)
    cols = SinkColumns.resolve(data.schema, default_topic=opts.topic)
    step = -(-data.num_rows // tasks)
    return [stage_rows(opts, cols, [data.slice(t * step, step)], sink, batch, t, attempt)
            for t in range(tasks)]


def visible(log_dir: Path, topic: str = TOPIC) -> collections.Counter:
    """Every (partition, key, value) a reader in another process can see."""
    out: collections.Counter = collections.Counter()
    with LogManager([log_dir], read_only=True) as mgr:
        if topic not in mgr.topics():
            return out
        hws = mgr.high_watermarks()
        for p in mgr.partitions(topic):
            log = mgr.get_log(topic, p)
            for chunk in log.read_chunks(log.log_start_offset, hws[(topic, p)]):
                t = decode_batches(chunk)
                out.update((p, k, v) for k, v in zip(t.column("key").to_pylist(),
                                                     t.column("value").to_pylist(),
                                                     strict=True))
    return out


def expected(*batches: int) -> collections.Counter:
    out: collections.Counter = collections.Counter()
    for b in batches:
        data = rows(b)
        keys = data.column("key").cast(pa.binary())
        values = data.column("value")
        from seglog.streaming.partitioner import assign_partitions

        parts = assign_partitions(keys, values, 3)
        out.update(zip(parts.tolist(), keys.to_pylist(), values.to_pylist(), strict=True))
    return out


def staging_files(log_dir: Path) -> list[Path]:
    return sorted(p for p in (log_dir / ".seglog-sink" / "staging").rglob("*") if p.is_file())


# ---------------------------------------------------------------------------- basics
def test_commit_publishes_every_row_once_with_kafka_key_placement(tmp_path: Path) -> None:
    opts = options(tmp_path)
    result = commit(stage_batch(opts, 0), 0, opts)
    assert result.records == 120 and not result.skipped
    seen = visible(tmp_path)
    assert seen == expected(0)
    # keyed rows sit where Kafka's partitioner puts them
    for (p, k, _), _n in seen.items():
        if k is not None:
            assert p == int(partitions_for_keys(pa.array([k]), 3)[0])
    assert staging_files(tmp_path) == []
    # the data says which sink and batch wrote it
    pid, epoch, seq = producer_fields(SINK, 0)
    with LogManager([tmp_path], read_only=True) as mgr:
        log = mgr.get_log(TOPIC, 0)
        from seglog.logstore.records.record_format import iter_batch_headers

        headers = list(iter_batch_headers(log.read(0, max_bytes=1 << 20).records))
    assert headers and all((h.producer_id, h.producer_epoch, h.base_sequence) ==
                           (pid, epoch, seq) and h.compression == 3 for h in headers)


@pytest.mark.parametrize("codec", ["none", "lz4"])
def test_micro_batches_of_many_record_batches_are_all_published(tmp_path: Path,
                                                               codec: str) -> None:
    """A partition's rows of one micro-batch cut into several record batches (above
    maxBatchBytes) all carry the micro-batch's id: the next micro-batch's commit reads
    the ledger's last batch as this one, never as a later batch (which made every later
    micro-batch skip the partition as already written)."""
    opts = options(tmp_path, maxBatchBytes="300", **{"compression.type": codec})
    for batch in range(3):
        result = commit(stage_batch(opts, batch), batch, opts)
        assert result.records == 120 and not result.skipped, batch
    assert visible(tmp_path) == expected(0, 1, 2)
    from seglog.logstore.records.record_format import iter_batch_headers
    from seglog.streaming.sink_staging import batch_id_of

    with LogManager([tmp_path], read_only=True) as mgr:
        headers = [h for p in range(3) for h in iter_batch_headers(
            mgr.get_log(TOPIC, p).read(0, max_bytes=1 << 20).records)]
    assert len(headers) > 9  # several record batches per partition and micro-batch
    assert {batch_id_of(h.producer_epoch, h.base_sequence) for h in headers} == {0, 1, 2}


@pytest.mark.parametrize("chunk", [97, 1 << 20])
def test_staging_files_are_appended_whole_whatever_the_read_size(tmp_path: Path, monkeypatch,
                                                                  chunk: int) -> None:
    """Reads smaller than a batch (every batch straddles reads, the buffer grows) and
    larger than the file publish the same records, batch for batch."""
    from seglog.streaming import sink_local_writer

    monkeypatch.setattr(sink_local_writer, "_APPEND_CHUNK", chunk)
    opts = options(tmp_path, maxBatchBytes="600")
    staged = stage_batch(opts, 0)
    sizes = [f.size for t in staged for f in t.fragments]
    assert (max(sizes) > chunk) == (chunk < 1000)
    result = commit(staged, 0, opts)
    assert result.records == 120
    assert visible(tmp_path) == expected(0)


def test_replaying_a_committed_batch_publishes_nothing(tmp_path: Path) -> None:
    opts = options(tmp_path)
    commit(stage_batch(opts, 0), 0, opts)
    again = commit(stage_batch(opts, 0, tasks=3, attempt=1), 0, opts)
    assert again.published == () and len(again.skipped) == 3
    commit(stage_batch(opts, 1), 1, opts)
    assert visible(tmp_path) == expected(0, 1)
    assert staging_files(tmp_path) == []


def test_speculative_and_retried_attempts_publish_once(tmp_path: Path) -> None:
    opts = options(tmp_path)
    first = stage_batch(opts, 0, attempt=0)
    second = stage_batch(opts, 0, attempt=1)  # the same tasks, run again
    # Spark passes one message per task; a duplicate of task 1 must still count once,
    # whichever order the messages come in.
    result = commit([second[1], first[0], first[1]], 0, opts)
    assert result.records == 120
    assert visible(tmp_path) == expected(0)
    # the losing attempt's files went too, and the unlisted ones (second[0]) are swept
    assert staging_files(tmp_path) == []


def test_orphaned_staging_is_swept(tmp_path: Path) -> None:
    opts = options(tmp_path)
    stage_batch(opts, 0)  # a run that died after staging batch 0
    commit(stage_batch(opts, 0, attempt=1), 0, opts)
    assert staging_files(tmp_path) == []
    # another sink's staging: old is swept, recent is left alone
    other_old = stage_batch(opts, 7, sink="dead-job")
    other_new = stage_batch(opts, 8, sink="live-job")
    old_dir = staging_root(tmp_path, "dead-job") / "7"
    past = time.time() - 3 * 24 * 3600
    os.utime(old_dir, (past, past))
    commit(stage_batch(opts, 1), 1, opts)
    left = staging_files(tmp_path)
    assert all(not Path(f.path).exists() for m in other_old for f in m.fragments)
    assert left == sorted(Path(f.path) for m in other_new for f in m.fragments)
    assert sweep_staging([str(tmp_path)], "live-job", 8) == len(left)
    assert staging_files(tmp_path) == []


def test_abort_removes_the_batch_staging(tmp_path: Path) -> None:
    opts = options(tmp_path)
    staged = stage_batch(opts, 0)
    assert staging_files(tmp_path)
    assert abort([staged[0], None], 0, opts) == len(staging_files_from(staged))
    assert staging_files(tmp_path) == []
    assert visible(tmp_path) == collections.Counter()


def staging_files_from(staged) -> list[str]:
    return [f.path for m in staged for f in m.fragments]


def test_missing_message_or_foreign_batch_is_refused(tmp_path: Path) -> None:
    opts = options(tmp_path)
    staged = stage_batch(opts, 0)
    with pytest.raises(SinkCommitError, match="task 1 of batch 0 left no commit message"):
        commit([staged[0], None], 0, opts)
    with pytest.raises(SinkCommitError, match="for batch 0, not 1"):
        commit(staged, 1, opts)
    assert visible(tmp_path) == collections.Counter()


def test_failed_publish_rolls_back_and_nothing_is_visible(tmp_path: Path) -> None:
    opts = options(tmp_path)
    commit(stage_batch(opts, 0), 0, opts)
    staged = stage_batch(opts, 1)
    # corrupt the last fragment to be appended: the others are already in the log then
    victim = max((f for m in staged for f in m.fragments), key=lambda f: (f.partition,))
    with open(victim.path, "r+b") as f:
        f.truncate(victim.size - 5)
    with pytest.raises(CorruptRecordError, match="truncated or corrupt"):
        commit(staged, 1, opts)
    assert visible(tmp_path) == expected(0)
    # and the batch, replayed, goes through exactly once
    commit(stage_batch(opts, 1, attempt=1), 1, opts)
    assert visible(tmp_path) == expected(0, 1)


def test_locked_log_dir_names_the_option(tmp_path: Path) -> None:
    opts = options(tmp_path, lockTimeoutMs="100")
    staged = stage_batch(opts, 0)
    with LogManager([tmp_path]), pytest.raises(LogDirLockedError, match="lockTimeoutMs"):
        commit(staged, 0, opts)
    commit(staged, 0, opts)
    assert visible(tmp_path) == expected(0)


def test_partition_count_changed_under_the_batch(tmp_path: Path) -> None:
    opts = options(tmp_path)
    staged = stage_batch(opts, 0)  # routed for 3 partitions (topic not there yet)
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic(TOPIC, 5)
    with pytest.raises(SinkCommitError, match="has 5 partition"):
        commit(staged, 0, opts)
    assert visible(tmp_path) == collections.Counter()


def test_bad_rows_fail_the_task_and_leave_no_staging(tmp_path: Path) -> None:
    opts = options(tmp_path)
    data = pa.record_batch({"value": pa.array([b"a", b"b"]),
                            "partition": pa.array([0, 3], pa.int32())})
    cols = SinkColumns.resolve(data.schema, default_topic=TOPIC)
    with pytest.raises(UnknownTopicOrPartitionError, match="partition 3 of topic 'out'"):
        stage_rows(opts, cols, [data], SINK, 0, 0, 0)
    no_create = options(tmp_path, createTopics="false")
    with pytest.raises(UnknownTopicOrPartitionError, match="'createTopics' is false"):
        stage_rows(no_create, SinkColumns.resolve(data.schema, default_topic=TOPIC),
                   [data.select(["value"])], SINK, 0, 0, 0)
    named = pa.record_batch({"value": pa.array([b"a"]), "topic": pa.array(["bad/name"])})
    with pytest.raises(InvalidTopicError, match="illegal"):
        stage_rows(opts, SinkColumns.resolve(named.schema, default_topic=None), [named],
                   SINK, 0, 0, 0)
    small = options(tmp_path, **{"topic.max.message.bytes": "1000"})
    big = pa.record_batch({"value": pa.array([os.urandom(5000)])})
    with pytest.raises(RecordTooLargeError, match="max.message.bytes"):
        stage_rows(small, SinkColumns.resolve(big.schema, default_topic=TOPIC), [big],
                   SINK, 0, 0, 0)
    assert staging_files(tmp_path) == []
    assert visible(tmp_path) == collections.Counter()


def test_topic_column_explicit_partitions_and_timestamps(tmp_path: Path) -> None:
    opts = SinkOptions.parse({"path": str(tmp_path), "numPartitions": "3"})  # no 'topic':
    ts_ms = int(time.time() * 1000) // 1000 * 1000 + 123  # it would override the column
    data = pa.record_batch({
        "topic": pa.array(["a", "b", TOPIC, "a"]),
        "value": pa.array(["1", "2", "3", "4"]),
        "partition": pa.array([2, None, 1, 0], pa.int32()),
        "timestamp": pa.array([ts_ms * 1000] * 4, pa.timestamp("us", tz="UTC")),
    })
    cols = SinkColumns.resolve(data.schema, default_topic=None)
    commit([stage_rows(opts, cols, [data], SINK, 0, 0, 0)], 0, opts)
    with LogManager([tmp_path], read_only=True) as mgr:
        assert mgr.topics() == ["a", "b", TOPIC]
        got = {}
        for t in mgr.topics():
            for p in mgr.partitions(t):
                log = mgr.get_log(t, p)
                for chunk in log.read_chunks(0, log.high_watermark):
                    tab = decode_batches(chunk)
                    for v, ts in zip(tab.column("value").to_pylist(),
                                     tab.column("timestamp").to_pylist(), strict=True):
                        got[v] = (t, p, ts)
    assert got[b"1"] == ("a", 2, ts_ms)
    assert got[b"3"] == (TOPIC, 1, ts_ms)
    assert got[b"4"] == ("a", 0, ts_ms)
    assert got[b"2"][0] == "b"


def test_ledger_and_maintenance_state_are_written(tmp_path: Path) -> None:
    opts = options(tmp_path, maintenanceIntervalMs="0")
    commit(stage_batch(opts, 0), 0, opts)
    ledger = SinkLedger(tmp_path, SINK).read()
    assert {tp: e.batch_id for tp, e in ledger.entries.items()} == {
        (TOPIC, 0): 0, (TOPIC, 1): 0, (TOPIC, 2): 0}
    assert (tmp_path / ".seglog-sink" / "maintenance.json").exists()
    # The ledger is a hint: a damaged one does not stop the next batch.
    ledger.path.write_bytes(b"{not json")
    again = commit(stage_batch(opts, 1), 1, opts)
    assert again.records == 120


# ---------------------------------------------------------------------------- crashes
_CRASH_SCRIPT = textwrap.dedent("""
    import sys
    sys.path.insert(0, {tests!r})
    from test_sink_commit import commit, options, stage_batch
    from pathlib import Path
    opts = options(Path({log_dir!r}))
    commit(stage_batch(opts, 1), 1, opts)
    print("survived")
""")


@pytest.mark.parametrize("step", CRASH_STEPS)
def test_crash_at_each_step_then_replay_is_exactly_once(tmp_path: Path, step: str) -> None:
    opts = options(tmp_path)
    commit(stage_batch(opts, 0), 0, opts)
    script = _CRASH_SCRIPT.format(tests=str(Path(__file__).parent), log_dir=str(tmp_path))
    env = dict(os.environ, **{CRASH_ENV: f"{step}@1"})
    proc = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                          text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr[-2000:]
    assert "survived" not in proc.stdout
    seen = visible(tmp_path)
    committed = CRASH_STEPS.index(step) >= CRASH_STEPS.index("after-checkpoint")
    # Readers see all of batch 1 or none of it, never a part.
    assert seen == (expected(0, 1) if committed else expected(0))
    # Spark replays the batch (new attempts, another task split): exactly once.
    result = commit(stage_batch(opts, 1, tasks=3, attempt=1), 1, opts)
    assert (result.records == 0) == committed
    assert visible(tmp_path) == expected(0, 1)
    commit(stage_batch(opts, 2), 2, opts)
    assert visible(tmp_path) == expected(0, 1, 2)
    assert staging_files(tmp_path) == []


def test_due_maintenance_runs_after_a_commit_and_applies_retention(tmp_path: Path) -> None:
    old = pa.record_batch({"value": pa.array([b"old"] * 3),
                           "timestamp": pa.array([1_000_000] * 3, pa.int64())})
    cols = SinkColumns.resolve(old.schema, default_topic=TOPIC)
    opts = options(tmp_path, maintenanceIntervalMs="3600000", allowExpiredTimestamps="true",
                   **{"topic.retention.ms": "60000"})
    state = tmp_path / ".seglog-sink" / "maintenance.json"
    state.parent.mkdir(parents=True)
    state.write_text(json.dumps({"last_run_ms": int(time.time() * 1000)}))  # ran just now
    commit([stage_rows(opts, cols, [old], SINK, 0, 0, 0)], 0, opts)
    assert sum(visible(tmp_path).values()) == 3  # not due: retention did not run
    due = options(tmp_path, maintenanceIntervalMs="0")
    fresh = pa.record_batch({"value": pa.array([b"new"]),
                             "timestamp": pa.array([int(time.time() * 1000)], pa.int64())})
    commit([stage_rows(due, cols, [fresh], SINK, 1, 0, 0)], 1, due)
    # the old records' segment was rolled and deleted by time retention; the new stays
    assert {v for (_, _, v) in visible(tmp_path)} == {b"new"}


def test_several_log_dirs_publish_and_replay_per_dir(tmp_path: Path) -> None:
    a, b = tmp_path / "a", tmp_path / "b"
    opts = SinkOptions.parse({"logDirs": f"{a},{b}", "topic": TOPIC, "numPartitions": "4"})
    first = commit(stage_batch(opts, 0), 0, opts)
    dirs = {p.name for d in (a, b) for p in d.iterdir() if p.name.startswith(f"{TOPIC}-")}
    # each dir's ledger names only that dir's partitions
    in_a = {(TOPIC, int(p.name.rsplit("-", 1)[1])) for p in a.glob(f"{TOPIC}-*")}
    assert len(dirs) == 4 and 0 < len(in_a) < 4
    assert set(SinkLedger(a, SINK).read().entries) == in_a
    assert set(SinkLedger(b, SINK).read().entries) == {(TOPIC, p) for p in range(4)} - in_a
    replay = commit(stage_batch(opts, 0, attempt=1), 0, opts)
    assert replay.published == () and len(replay.skipped) == len(first.published)
    total = sum(1 for d in (a, b) for _ in _records_in(d))
    assert total == 120
    assert staging_files(a) == [] and staging_files(b) == []


def _records_in(log_dir: Path):
    with LogManager([log_dir.parent / "a", log_dir.parent / "b"], read_only=True) as mgr:
        hws = mgr.high_watermarks()
        for p in mgr.partitions(TOPIC):
            log = mgr.get_log(TOPIC, p)
            if log.dir.parent != log_dir:
                continue
            for chunk in log.read_chunks(log.log_start_offset, hws[(TOPIC, p)]):
                yield from decode_batches(chunk).column("value").to_pylist()
