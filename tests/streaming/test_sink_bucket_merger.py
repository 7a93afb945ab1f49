"""The bucket sink's background merger (``sink_bucket_merger``): a micro-batch's commit
returns before the merge it asked for; the next micro-batch commits while it runs, and
either may win the topic log's create; the merged bytes are the in-commit merge's;
requests coalesce (one waits per sink), so nothing piles up or merges twice; a stopped
merger drops what waits; a merge the process abandons leaves an orphan the collector
deletes after the grace."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
import time
from dataclasses import replace

import pytest
from test_sink_bucket import TOPIC, check_exactly_once, memory_uri, options, stage, values
from test_sink_bucket_merge_option import NEVER, TASKS, _kafka_bytes, segment_counts

from seglog.logstore.bucket import bucket_merge
from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.bucket.bucket_segment import object_keys
from seglog.logstore.bucket.bucket_state import SegmentEntry
from seglog.logstore.util.clock import SYSTEM_CLOCK, MockClock
from seglog.streaming import sink_bucket_merger
from seglog.streaming.sink_bucket_commit import bucket_writer, commit
from seglog.streaming.sink_bucket_merge import merge_after_commit
from seglog.streaming.sink_bucket_merger import BackgroundMerger, MergeRequest, wait_all
from seglog.streaming.sink_commit import CRASH_ENV
from seglog.streaming.sink_options import DEFAULT_MERGE_SMALL_SEGMENT_BYTES

MIN = 3 * TASKS  # mergeMinSegments: batch 2's commit asks for the merge of batches 0-2


def _opts(uri: str, **extra: str):
    return options(
        uri,
        **{
            "numPartitions": "1",
            "maintenanceIntervalMs": NEVER,
            "mergeMinSegments": str(MIN),
            **extra,
        },
    )


def _batch(opts, b: int, clock: MockClock | None = None) -> list:
    return [stage(opts, b, task=t, n=30, tag=f"t{t}", clock=clock) for t in range(TASKS)]


def _expected(batches: range) -> list[bytes]:
    return [v for b in batches for t in range(TASKS) for v in values(b, 30, f"t{t}")]


def _segments(uri: str) -> list[SegmentEntry]:
    with BucketLogManager(uri, read_only=True) as mgr:
        return list(mgr.state.partition(TOPIC, 0).segments)


class _Gate:
    """Holds the background merge between its upload and its commit until ``open``."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        self.uploaded = threading.Event()
        self.opened = threading.Event()
        self.held_in: list[str] = []
        real_upload = bucket_merge.upload

        def upload_then_wait(storage, built) -> None:
            real_upload(storage, built)
            self.held_in.append(threading.current_thread().name)
            self.uploaded.set()
            # Bounded: on a build whose commit waits for its merge, this would hang.
            self.opened.wait(10)

        monkeypatch.setattr(bucket_merge, "upload", upload_then_wait)

    def open(self) -> None:
        self.opened.set()


def test_the_next_micro_batch_commits_while_the_last_ones_merge_runs(monkeypatch):
    """Batch 2's commit returns with its merge still in flight (held after its upload);
    batch 3 commits meanwhile, so the merge loses the create, re-checks its sources and
    commits after it: one merged segment [0, 270), batch 3's fragments after it, every
    record once, the same Kafka bytes as a sink that never merged."""
    clock = MockClock(int(time.time() * 1000))  # the twin's record batches: the same bytes
    uri, twin = memory_uri(), memory_uri()
    opts, twin_opts = _opts(uri), _opts(twin, mergeMinSegments=NEVER)
    for b in range(2):
        commit(_batch(opts, b, clock), b, opts, clock=clock)
        commit(_batch(twin_opts, b, clock), b, twin_opts, clock=clock)
    assert wait_all(60)
    gate = _Gate(monkeypatch)
    commit(_batch(opts, 2, clock), 2, opts, clock=clock)
    assert gate.uploaded.wait(30), "batch 2's commit asked for no merge"
    assert not gate.opened.is_set()  # the commit returned while its merge was held
    assert gate.held_in[0].startswith("seglog-sink-merger")
    assert segment_counts(uri, (0,)) == [3 * TASKS]  # nothing merged yet
    commit(_batch(opts, 3, clock), 3, opts, clock=clock)  # the next micro-batch, during the merge
    assert segment_counts(uri, (0,)) == [4 * TASKS]
    gate.open()
    assert wait_all(60)
    segs = _segments(uri)
    assert (segs[0].base_offset, segs[0].next_offset) == (0, 270)
    assert [(s.base_offset, s.next_offset) for s in segs[1:]] == [
        (270, 300),
        (300, 330),
        (330, 360),
    ]
    check_exactly_once(uri, _expected(range(4)))
    for b in range(2, 4):
        commit(_batch(twin_opts, b, clock), b, twin_opts, clock=clock)
    assert _kafka_bytes(uri) == _kafka_bytes(twin)
    # Spark's replay of batch 3 after the merge: the ledger holds it, nothing is added
    assert not commit(_batch(opts, 3, clock), 3, opts, clock=clock).published
    check_exactly_once(uri, _expected(range(4)))


def test_the_background_merge_writes_the_bytes_the_in_commit_merge_wrote():
    """The same batches (one clock, so the same record batches) into two buckets: one
    merged by the background merger, one by what the commit ran before
    (``merge_after_commit`` on the writer the commit left): the merged segment's entry
    (but its key) and its .log, .index and .timeindex bytes are identical."""
    clock = MockClock(int(time.time() * 1000))
    background, in_commit = memory_uri(), memory_uri()
    bg_opts, ic_opts = _opts(background), _opts(in_commit, mergeMinSegments=NEVER)
    for b in range(3):
        commit(_batch(bg_opts, b, clock), b, bg_opts, clock=clock)
        commit(_batch(ic_opts, b, clock), b, ic_opts, clock=clock)
    assert wait_all(60)
    merged = merge_after_commit(
        bucket_writer(ic_opts, clock),
        [(TOPIC, 0)],
        clock,
        min_segments=MIN,
        small_bytes=DEFAULT_MERGE_SMALL_SEGMENT_BYTES,
        age_pass=False,
    )
    assert merged == 3 * TASKS
    got: list[tuple[SegmentEntry, list[bytes]]] = []
    for uri in (background, in_commit):
        [seg] = _segments(uri)
        with BucketLogManager(uri, read_only=True) as mgr:
            objects = [mgr.storage.read(k) for k in object_keys(seg)]
        got.append((replace(seg, key=""), objects))
    assert got[0] == got[1]
    assert (got[0][0].base_offset, got[0][0].next_offset) == (0, 270)
    assert len(got[0][1][0]) == got[0][0].size > 0


def test_requests_coalesce_while_a_merge_runs_and_nothing_is_merged_twice(monkeypatch):
    """While batch 2's merge is held, batches 3-5 commit and ask again: one request waits
    (the merger runs twice in all, the second for batch 5), each fragment is merged away
    once, and every record is read once."""
    uri = memory_uri()
    opts = _opts(uri)
    for b in range(2):
        commit(_batch(opts, b), b, opts)
    assert wait_all(60)
    runs: list[tuple[int, frozenset[tuple[str, int]]]] = []
    real = sink_bucket_merger.merge_written

    def counted(mgr, options, sink_id, batch_id, written, clock, *, age_pass):
        runs.append((batch_id, frozenset(written)))
        return real(mgr, options, sink_id, batch_id, written, clock, age_pass=age_pass)

    monkeypatch.setattr(sink_bucket_merger, "merge_written", counted)
    gate = _Gate(monkeypatch)
    commit(_batch(opts, 2), 2, opts)
    assert gate.uploaded.wait(30)
    for b in range(3, 6):
        commit(_batch(opts, b), b, opts)
    gate.open()
    assert wait_all(60)
    assert runs == [(2, frozenset({(TOPIC, 0)})), (5, frozenset({(TOPIC, 0)}))]
    merger = sink_bucket_merger.background_merger(uri, opts.storage, SYSTEM_CLOCK)
    # the first merge's segment is small too: the second rewrites it with the 9 after it
    assert merger.merged == MIN + 1 + MIN
    assert [(s.base_offset, s.next_offset) for s in _segments(uri)] == [(0, 540)]
    check_exactly_once(uri, _expected(range(6)))


def test_a_stopped_merger_drops_what_waits_and_its_idle_thread_ends(monkeypatch):
    uri = memory_uri()
    opts = _opts(uri)
    for b in range(2):
        commit(_batch(opts, b), b, opts)
    assert wait_all(60)
    gate = _Gate(monkeypatch)
    commit(_batch(opts, 2), 2, opts)
    assert gate.uploaded.wait(30)
    commit(_batch(opts, 3), 3, opts)  # its request waits behind batch 2's merge
    stopper = threading.Thread(target=sink_bucket_merger.stop_all, kwargs={"wait": False})
    stopper.start()  # drops batch 3's request, then waits for the running merge
    gate.open()
    stopper.join(60)
    assert not stopper.is_alive()
    assert [(s.base_offset, s.next_offset) for s in _segments(uri)][:2] == [(0, 270), (270, 300)]
    assert not [t for t in threading.enumerate() if t.name.endswith(uri)]
    # a merger left idle ends its thread by itself; the next request starts another
    merger = BackgroundMerger(uri, opts.storage, SYSTEM_CLOCK, idle_exit_s=0.05)
    merger.submit(MergeRequest("s", 3, opts, {(TOPIC, 0)}))
    assert merger.wait_idle(60)
    deadline = time.monotonic() + 30
    while [t for t in threading.enumerate() if t.name.endswith(uri)]:
        assert time.monotonic() < deadline, "the idle merger's thread did not end"
        time.sleep(0.05)
    check_exactly_once(uri, _expected(range(4)))


def test_a_merge_abandoned_by_a_killed_driver_leaves_an_orphan_the_collector_deletes(s3_uri):
    """A real SIGKILL of the driver's process while its background merge's upload is not
    committed yet: the batch is published, the replay commits nothing, and the merged
    object no commit references is deleted by the collector once past the orphan grace
    (0 here: the store's clock cannot be moved), never before by the sink's own pass."""
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
        wait_all(60)
    """)
    env = dict(os.environ, **{CRASH_ENV: "merge-after-upload"})
    proc = subprocess.run(
        [sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == -9, proc.stderr[-2000:]
    expected = values(0, 30) + values(1, 30, "t0") + values(1, 30, "t1")
    check_exactly_once(s3_uri, expected)
    assert not commit(
        [stage(opts, 1, task=t, n=30, tag=f"t{t}") for t in range(2)], 1, opts
    ).published

    def unreferenced() -> set[str]:
        with BucketLogManager(s3_uri, read_only=True) as mgr:
            held = {s.key.rsplit("/", 1)[1] for s in mgr.state.partition(TOPIC, 0).segments}
            names = {e.name.rsplit(".", 1)[0] for e in mgr.storage.list_dir(f"{TOPIC}-0")}
        return names - held

    orphans = unreferenced()
    assert len(orphans) == 1  # the merged segment uploaded, never committed
    with BucketLogManager(s3_uri) as mgr:  # the default grace: too young to collect
        mgr.collect()
    assert unreferenced() == orphans
    with BucketLogManager(s3_uri, orphan_grace_ms=0) as mgr:
        stats = mgr.collect()
    assert stats.orphans >= 1
    assert not unreferenced() & orphans
    check_exactly_once(s3_uri, expected)
