"""Merging a bucket sink's small fragments: by default the driver merges after the commit,
in the background (``mergeMinSegments`` adjacent segments under ``mergeSmallSegmentBytes``,
and every partition when ``maintenanceIntervalMs`` has passed), no task merges; a
long-lived query's segment count stays bounded and its reads byte-identical;
``mergeSmallSegments=true`` still merges in task 0 before the commit. ``commit_merged``
waits for the background merge where a test checks what it did."""

from __future__ import annotations

import math
import time

import pytest
from test_sink_bucket import TOPIC, check_exactly_once, memory_uri, options, stage, values

from seglog.logstore.errors import ConfigError
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.util.clock import MockClock
from seglog.streaming.sink_batch import CommitResult
from seglog.streaming.sink_bucket_commit import commit
from seglog.streaming.sink_bucket_merge import MERGE_MIN_SEGMENTS
from seglog.streaming.sink_bucket_merger import wait_all

TASKS = 3
BATCHES = MERGE_MIN_SEGMENTS + 2
NEVER = str(10**12)  # maintenanceIntervalMs / mergeMinSegments that never come due


def commit_merged(*args, **kwargs) -> CommitResult:
    """``commit``, then wait for the merge it handed to the background merger."""
    result = commit(*args, **kwargs)
    assert wait_all(60), "the background merge did not finish in 60 s"
    return result


def write_batches(**extra: str) -> tuple[str, list[bytes]]:
    """``BATCHES`` micro-batches of ``TASKS`` tasks into 2 partitions: each partition gets
    ``TASKS`` small fragments per batch."""
    uri = memory_uri()
    opts = options(uri, numPartitions="2", **extra)
    expected: list[bytes] = []
    for b in range(BATCHES):
        commit_merged([stage(opts, b, task=t, n=30, tag=f"t{t}") for t in range(TASKS)], b, opts)
        expected += [v for t in range(TASKS) for v in values(b, 30, f"t{t}")]
    return uri, expected


def segment_counts(uri: str, partitions: tuple[int, ...] = (0, 1)) -> list[int]:
    with LogManager(uri, read_only=True) as mgr:
        return [len(mgr.state.partition(TOPIC, p).segments) for p in partitions]


def segment_keys(uri: str) -> list[str]:
    with LogManager(uri, read_only=True) as mgr:
        return [s.key for p in mgr.state.partitions.values() for s in p.segments]


def test_by_default_no_task_merges_before_the_commit():
    uri, _ = write_batches(maintenanceIntervalMs=NEVER, mergeMinSegments=NEVER)
    before = segment_keys(uri)
    assert len(before) > MERGE_MIN_SEGMENTS * 2
    stage(options(uri, numPartitions="2"), BATCHES, task=0, n=30)  # task 0, default options
    assert segment_keys(uri) == before  # it only uploaded its own fragment


def test_merge_small_segments_true_merges_in_task_0_before_the_commit():
    uri, expected = write_batches(
        mergeSmallSegments="true", maintenanceIntervalMs=NEVER, mergeMinSegments=NEVER
    )
    # task 0 merged each time it found 8 side by side; a batch adds TASKS after it
    assert all(n < MERGE_MIN_SEGMENTS + TASKS for n in segment_counts(uri))
    check_exactly_once(uri, expected)


def test_by_default_the_driver_merges_after_the_commit_once_min_segments_lie_side_by_side():
    uri, expected = write_batches(maintenanceIntervalMs=NEVER, mergeMinSegments="12")
    # 3 fragments a batch: merged whenever 12 small segments lie side by side
    assert all(1 < n < 12 for n in segment_counts(uri)), segment_counts(uri)
    check_exactly_once(uri, expected)


def test_mergeMinSegments_never_reached_leaves_fragments_to_seglog_maintain():
    uri, expected = write_batches(maintenanceIntervalMs=NEVER, mergeMinSegments=NEVER)
    # one segment per fragment (a sink's first maintenance merges nothing: no interval
    # has passed since an earlier one)
    assert segment_counts(uri) == [TASKS * BATCHES] * 2
    check_exactly_once(uri, expected)
    with LogManager(uri) as mgr:  # what `seglog maintain` runs
        mgr.run_maintenance()
    assert segment_counts(uri) == [1, 1]
    check_exactly_once(uri, expected)


def test_segments_at_or_above_merge_small_segment_bytes_are_never_merged():
    uri, expected = write_batches(
        maintenanceIntervalMs="0", mergeMinSegments="2", mergeSmallSegmentBytes="64"
    )  # every fragment is larger
    assert segment_counts(uri) == [TASKS * BATCHES] * 2
    check_exactly_once(uri, expected)


def _kafka_bytes(uri: str) -> bytes:
    """The partition's record batches as a reader gets them (offsets patched)."""
    with LogManager(uri, read_only=True) as mgr:
        log = mgr.get_log(TOPIC, 0)
        return b"".join(log.read_chunks(log.log_start_offset, log.high_watermark, 1 << 20))


def test_a_long_lived_query_of_tiny_micro_batches_keeps_a_bounded_segment_count():
    """300 micro-batches of 2 tasks x 5 rows into one partition, committed as the sink
    commits them (maintenance every 20 s, 1 s a micro-batch): after every commit the
    partition holds fewer than ``mergeMinSegments`` + (tasks - 1) + log2(bytes / smallest
    fragment) segments, and reads the same Kafka batches, byte for byte, as a bucket whose
    sink never merged."""
    min_segments, tasks, batches = 8, 2, 300
    clock = MockClock(int(time.time() * 1000))
    merged, unmerged = memory_uri(), memory_uri()
    common = {"numPartitions": "1", "maxBatchBytes": "2048"}
    opts = options(
        merged, mergeMinSegments=str(min_segments), maintenanceIntervalMs="20000", **common
    )
    twin = options(unmerged, mergeMinSegments=NEVER, maintenanceIntervalMs=NEVER, **common)
    expected: list[bytes] = []
    smallest = total = 0
    worst = 0
    for b in range(batches):
        staged = [stage(opts, b, task=t, n=5, tag=f"t{t}", clock=clock) for t in range(tasks)]
        sizes = [f.size for s in staged for f in s.fragments]
        smallest = min([smallest or sizes[0], *sizes])
        total += sum(sizes)
        commit_merged(staged, b, opts, clock=clock)
        commit_merged(
            [stage(twin, b, task=t, n=5, tag=f"t{t}", clock=clock) for t in range(tasks)],
            b,
            twin,
            clock=clock,
        )
        expected += [v for t in range(tasks) for v in values(b, 5, f"t{t}")]
        count = segment_counts(merged, (0,))[0]
        worst = max(worst, count)
        bound = min_segments + tasks - 1 + math.log2(total / smallest)
        assert count < bound, (b, count, bound)
        clock.advance(1000)
    assert segment_counts(unmerged, (0,)) == [tasks * batches]
    print(f"worst segment count {worst} of {tasks * batches} fragments")
    assert worst < min_segments + tasks  # of 600 fragments
    check_exactly_once(merged, expected)
    assert _kafka_bytes(merged) == _kafka_bytes(unmerged)


@pytest.mark.parametrize(
    ("name", "value", "message"),
    [
        ("mergeSmallSegments", "sometimes", "true or false"),
        ("mergeMinSegments", "1", "at least 2"),
        ("mergeMinSegments", "many", "an integer"),
        ("mergeSmallSegmentBytes", "0", "must be positive"),
    ],
)
def test_merge_options_refuse_bad_values_naming_the_option(name: str, value: str, message: str):
    with pytest.raises(ConfigError, match=f"'{name}'.*{message}"):
        options(memory_uri(), **{name: value})


# --------------------------------------------------- the driver's merge racing others
def _merge_racing(monkeypatch, meanwhile) -> str:
    """Sink ``SINK``'s batches 0-2 of 3 fragments each (``mergeMinSegments=9``, so batch
    2's commit merges all 9); between the upload of that merge and its commit,
    ``meanwhile(uri)`` runs once, as another process would (its own manager)."""
    from seglog.logstore.bucket import bucket_merge

    uri = memory_uri()
    opts = options(uri, numPartitions="1", maintenanceIntervalMs=NEVER, mergeMinSegments="9")
    for b in range(2):
        commit_merged([stage(opts, b, task=t, n=30, tag=f"t{t}") for t in range(TASKS)], b, opts)
    real_upload = bucket_merge.upload
    raced: list[int] = []

    def upload_then_race(storage, built) -> None:
        real_upload(storage, built)
        if not raced:
            raced.append(1)
            meanwhile(uri)

    monkeypatch.setattr(bucket_merge, "upload", upload_then_race)
    commit_merged([stage(opts, 2, task=t, n=30, tag=f"t{t}") for t in range(TASKS)], 2, opts)
    assert raced, "batch 2's commit merged nothing: the test proves nothing"
    return uri


def test_a_merge_after_the_commit_that_loses_to_another_sinks_commit_keeps_both(monkeypatch):
    other = "0b1d-other-query"

    def other_sink_commits(uri: str) -> None:
        # another clock: the process's shared writer is replaced, as another process's
        opts = options(uri, numPartitions="1")
        commit(
            [stage(opts, 0, sink=other, n=40, tag="o")],
            0,
            opts,
            clock=MockClock(int(time.time() * 1000)),
        )

    uri = _merge_racing(monkeypatch, other_sink_commits)
    expected = [v for b in range(3) for t in range(TASKS) for v in values(b, 30, f"t{t}")]
    check_exactly_once(uri, expected + values(0, 40, "o"))
    with LogManager(uri, read_only=True) as mgr:
        segs = mgr.state.partition(TOPIC, 0).segments
        # the 9 fragments merged into one; the other sink's segment after them, intact
        assert len(segs) == 2 and (segs[0].base_offset, segs[0].next_offset) == (0, 270)
        assert segs[1].next_offset - segs[1].base_offset == 40


def test_a_merge_after_the_commit_whose_source_retention_removed_is_abandoned(monkeypatch):
    def retention_meanwhile(uri: str) -> None:
        with LogManager(uri) as mgr:  # `seglog delete-records` + `seglog maintain`
            mgr.delete_records(TOPIC, 0, 30)  # the first fragment, wholly
            mgr.delete_old_segments()

    uri = _merge_racing(monkeypatch, retention_meanwhile)
    expected = [v for b in range(3) for t in range(TASKS) for v in values(b, 30, f"t{t}")]
    with LogManager(uri, read_only=True) as mgr:
        segs = mgr.state.partition(TOPIC, 0).segments
        assert len(segs) == 8 and segs[0].base_offset == 30  # nothing merged
        log = mgr.get_log(TOPIC, 0)
        assert log.log_start_offset == 30 and log.high_watermark == 270
        staged = {e.name.rsplit(".", 1)[0] for e in mgr.storage.list_dir(f"{TOPIC}-0")}
    assert staged <= {s.key.rsplit("/", 1)[1] for s in segs}  # the merge's upload: deleted
    from test_sink_bucket import read_all

    assert [r[3] for r in read_all(uri)] == expected[30:]


@pytest.mark.parametrize("step", ["merge-after-upload", "merge-after-commit"])
def test_sigkill_in_the_merge_after_the_commit_leaves_the_batch_published(step, s3_uri):
    """A real SIGKILL of the committing process in its merge, after the batch's commit:
    the batch is published, Spark's replay of it commits nothing, and the next batches
    (whose commits merge again) stay exactly once."""
    import os
    import subprocess
    import sys
    import textwrap

    from seglog.streaming.sink_commit import CRASH_ENV

    opts = options(s3_uri, numPartitions="1", maintenanceIntervalMs="0")
    commit([stage(opts, 0, n=30)], 0, opts)
    script = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.dirname(__file__)!r})
        from test_sink_bucket import options, stage
        from seglog.streaming.sink_bucket_commit import commit
        from seglog.streaming.sink_bucket_merger import wait_all
        opts = options({s3_uri!r}, numPartitions="1", maintenanceIntervalMs="0")
        commit([stage(opts, 1, task=t, n=30, tag=f"t{{t}}") for t in range(2)], 1, opts)
        print("COMMITTED")
        wait_all(60)  # the merge runs in the background: the kill comes from there
    """)
    env = dict(os.environ, **{CRASH_ENV: step})
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == -9, proc.stderr[-2000:]
    expected = values(0, 30) + values(1, 30, "t0") + values(1, 30, "t1")
    check_exactly_once(s3_uri, expected)
    replay = commit([stage(opts, 1, task=t, n=30, tag=f"t{t}") for t in range(2)], 1, opts)
    assert not replay.published
    commit_merged([stage(opts, 2, n=30)], 2, opts)
    check_exactly_once(s3_uri, expected + values(2, 30))
    # batch 2's commit merged again (a merged segment larger than all that follows it
    # waits for more: plan_deferred_merges)
    assert segment_counts(s3_uri, (0,))[0] <= 2
