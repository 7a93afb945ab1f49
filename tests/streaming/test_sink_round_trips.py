"""The bucket sink's requests, counted through the delaying proxy (``tests/s3_proxy.py``):
a steady micro-batch's driver commit is one round trip (its conditional PUT; the
background merger's commits, made through the same writer, do not make it lose), a
query's first micro-batch a few more (the writer's open, made in parallel beside the
LIST of its uploads; no maintenance); a task
PUTs its objects side by side and a read GETs many small segments at once. Exactly once
holds whatever the view: another driver's commit of the same batch is found as a
replay, with or without this run's uploads, and a missing upload still fails."""

from __future__ import annotations

import threading
import time
import urllib.parse
from collections import Counter
from collections.abc import Iterator

import pyarrow as pa
import pytest
from s3_proxy import RequestRecord, S3Proxy, sequential_round_trips

from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import decode_batches, encode_batches
from seglog.logstore.util.clock import SYSTEM_CLOCK
from seglog.streaming import log_writers, sink_bucket_merger
from seglog.streaming.errors import SinkCommitError
from seglog.streaming.sink_bucket_commit import bucket_writer, commit
from seglog.streaming.sink_bucket_staging import stage_rows
from seglog.streaming.sink_options import SinkColumns, SinkOptions
from seglog.streaming.sink_staging import StagedTask

TOPIC = "out"
SINK = "round-trips"
# Requests sent side by side must reach the proxy within one delay of each other to
# count as one round trip: at 10 ms a loaded machine's thread scheduling made two
# parallel requests look sequential (10 round trips counted for 9).
DELAY_S = 0.05
ROWS = 60


@pytest.fixture
def uri(bucket_server, proxy) -> str:
    return f"s3://{bucket_server.create_bucket()}/logs"


def options(uri: str, **extra: str) -> SinkOptions:
    return SinkOptions.parse({"path": uri, "topic": TOPIC, "numPartitions": "3", **extra})


def rows(batch: int, task: int, n: int = ROWS) -> pa.RecordBatch:
    return pa.record_batch(
        {
            "key": pa.array([f"user-{i}" for i in range(n)], pa.string()),
            "value": pa.array([f"b{batch}-t{task}-{i}".encode() for i in range(n)], pa.binary()),
        }
    )


def stage(opts: SinkOptions, batch: int, task: int = 0) -> StagedTask:
    data = rows(batch, task)
    columns = SinkColumns.resolve(data.schema, default_topic=TOPIC)
    return stage_rows(opts, columns, [data], SINK, batch, task, 0)


def driver_commit(
    proxy: S3Proxy, opts: SinkOptions, tasks: list[StagedTask], batch: int
) -> tuple[list[RequestRecord], int]:
    """The commit's requests (nothing else talks to the server meanwhile) and how many
    it waited for one after the other."""
    since = proxy.clock()
    result = commit(tasks, batch, opts)
    assert result.published or result.skipped
    made = proxy.requests(since)
    return made, sequential_round_trips(made)


def published_values(uri: str) -> Counter[bytes]:
    """Every published record's value, counted (through the read path)."""
    found: Counter[bytes] = Counter()
    with LogManager(uri, read_only=True) as mgr:
        for p in mgr.partitions(TOPIC):
            log = mgr.get_log(TOPIC, p)
            for chunk in log.read_chunks(log.log_start_offset, log.high_watermark, 1 << 20):
                found.update(decode_batches(chunk).column("value").to_pylist())
    return found


def expected_values(*batches: int, tasks: int = 1) -> Counter[bytes]:
    return Counter(
        v for b in batches for t in range(tasks) for v in rows(b, t).column("value").to_pylist()
    )


def test_a_steady_micro_batch_commits_in_one_round_trip(proxy, uri):
    opts = options(uri)
    commit([stage(opts, 0)], 0, opts)
    for batch in (1, 2, 3):
        tasks = [stage(opts, batch, task) for task in range(2)]
        made, trips = driver_commit(proxy, opts, tasks, batch)
        # Before: the refresh's LIST of the topic's log beside the LIST of the uploads,
        # then the create (2 round trips, 3 requests). Now the writer, which made the
        # log's last commit, creates the next version at once: a stale view only loses.
        assert [r.kind for r in made] == ["CONDITIONAL_PUT"], made
        assert trips == 1
    assert published_values(uri) == expected_values(0) + expected_values(1, 2, 3, tasks=2)


def test_another_writers_commit_costs_the_lost_create_then_the_commit_log_look(proxy, uri):
    opts = options(uri)
    commit([stage(opts, 0)], 0, opts)
    with LogManager(uri) as other:  # e.g. a merge, another query, a producer
        # Into the sink's topic: with one commit log per topic, a commit to another
        # topic's log (or the catalog) is not in this writer's way and not read.
        other.append(TOPIC, 0, encode_batches(pa.array([b"producer"], pa.binary())))
        other.create_topic("elsewhere", 1)
    made, trips = driver_commit(proxy, opts, [stage(opts, 1)], 1)
    # The create at the writer's next version loses to the producer's commit, whose
    # bytes one GET reads; the commit log LISTs the topic's log, reads back this
    # writer's own last commit (the log's version 0: the check that the store kept it),
    # then creates again on the new state and wins: 5 round trips (before: 2 LISTs at
    # once, 2 GETs at once, the create: 3). The catalog's commits of "elsewhere" are not
    # asked for.
    kinds = Counter(r.kind for r in made)
    assert kinds["CONDITIONAL_PUT"] == 2 and kinds["LIST"] == 1, made
    assert trips <= 5
    assert published_values(uri) == expected_values(0, 1) + Counter([b"producer"])


def test_two_queries_writing_one_topic_refresh_first_instead_of_losing_every_create(proxy, uri):
    mine, theirs = options(uri), _other_driver(uri, proxy)  # two writers of the bucket

    def staged(opts: SinkOptions, sink: str, batch: int) -> StagedTask:
        data = rows(batch, 0 if sink == SINK else 1)
        columns = SinkColumns.resolve(data.schema, default_topic=TOPIC)
        return stage_rows(opts, columns, [data], sink, batch, 0, 0)

    commit([staged(mine, SINK, 0)], 0, mine)
    trips = []
    for batch in range(1, 5):  # the queries' micro-batches alternate
        commit([staged(theirs, "other", batch)], batch, theirs)
        _, n = driver_commit(proxy, mine, [staged(mine, SINK, batch)], batch)
        trips.append(n)
    # The first commit after the other query's lost its create (5 round trips); from
    # then on the refresh comes first, beside the uploads' LIST (its LIST, the other's
    # commit GET, the read-back of this writer's own last one, the create: 4, as
    # before the steady commit skipped it), not a lost create every time (5).
    assert trips[0] <= 5 and all(n <= 4 for n in trips[1:]), trips
    # The other query stops: the next refresh finds nothing new, and the commit after
    # it is its create again, without a LIST before it (this version also happens to
    # be due a snapshot of the topic's log: its PUTs come after the create).
    driver_commit(proxy, mine, [staged(mine, SINK, 5)], 5)
    made, n = driver_commit(proxy, mine, [staged(mine, SINK, 6)], 6)
    kinds = [r.kind for r in made]
    assert kinds[0] == "CONDITIONAL_PUT" and kinds.count("CONDITIONAL_PUT") == 1, made
    assert "LIST" not in kinds, made
    assert published_values(uri) == expected_values(0, 1, 2, 3, 4, 5, 6) + Counter(
        v for b in range(1, 5) for v in rows(b, 1).column("value").to_pylist()
    )


def test_the_background_merge_does_not_make_the_next_commit_lose_its_create(proxy, uri):
    opts = options(uri, mergeMinSegments="3")
    for batch in range(3):  # a segment per partition each: the third commit asks a merge
        commit([stage(opts, batch)], batch, opts)
    assert sink_bucket_merger.wait_all(60)
    merger = sink_bucket_merger.background_merger(uri, opts.storage, SYSTEM_CLOCK)
    assert merger.merged == 3 * 3
    made, trips = driver_commit(proxy, opts, [stage(opts, 3)], 3)
    # The merges (one commit per partition) were made through the commit's own writer:
    # its state holds them, and the next version is created at once. Before (a manager
    # of the merger's own): the create lost to the merges' commits, then the commit
    # log's LIST and GETs, and the create again (5 round trips).
    assert [r.kind for r in made] == ["CONDITIONAL_PUT"], made
    assert trips == 1
    assert published_values(uri) == expected_values(0, 1, 2, 3)


def test_the_first_micro_batch_opens_the_writer_in_parallel_and_maintains_later(proxy, uri):
    with LogManager(uri) as mgr:
        mgr.create_topic(TOPIC, 3)  # an existing log dir: its snapshot hint is there
    opts = options(uri)
    tasks = [stage(opts, 0)]
    made, trips = driver_commit(proxy, opts, tasks, 0)
    # Before: 17 one after the other (nesting LISTs, hint, snapshot, commits LIST, a
    # refresh, the uploads' LIST, the create, then a maintenance pass). Now: the nesting
    # LISTs beside the hint GET, the snapshot GET beside the commits LIST, the uploads'
    # LIST, the create; maintenance waits for maintenanceIntervalMs from here.
    # Per-topic commit logs: the topic's own log is opened too (its hint GET, then its
    # snapshot GET beside its commits LIST), after the catalog's, which names its log:
    # two round trips more, of which the uploads' LIST, made beside the open, hides one
    # (4 before per-topic logs, 6 with them and the LIST after the open).
    assert trips == 5, made
    # The topic log's open: one LIST and two GETs more than the catalog alone.
    assert Counter(r.kind for r in made) == {"LIST": 5, "GET": 4, "CONDITIONAL_PUT": 1}
    assert published_values(uri) == expected_values(0)


def test_a_first_micro_batch_that_creates_its_topic_does_not_open_the_log_it_wrote(proxy, uri):
    opts = options(uri)
    made, trips = driver_commit(proxy, opts, [stage(opts, 0)], 0)
    # The create: version 0 of the topic's log (and its snapshot), then the catalog's
    # commit naming it. The writer holds that log from its version 0: nothing of it is
    # read after the catalog's commit (before: its hint GET, then its snapshot GET and
    # LIST, two round trips more: 11).
    (named,) = [r for r in made if r.kind == "CONDITIONAL_PUT" and "/_seglog/log/" in r.target]
    # (The snapshot and hint of its version 0 are written after the commit, off its path:
    # objects of that log, but no read to open it.)
    after = [
        r
        for r in made
        if r.arrived >= named.replied
        and "/_seglog/topics/" in r.target
        and "/snapshots/" not in r.target
        and not r.target.endswith("/last-snapshot")
    ]
    assert after == []
    assert trips <= 9, made
    assert published_values(uri) == expected_values(0)


def test_maintenance_interval_zero_still_maintains_from_the_first_micro_batch(proxy, uri):
    opts = options(uri, maintenanceIntervalMs="0")
    made, _ = driver_commit(proxy, opts, [stage(opts, 0)], 0)
    staging_lists = [
        r
        for r in made
        if r.kind == "LIST"
        and urllib.parse.unquote(r.target).endswith("prefix=logs/_seglog/staging/")
    ]
    assert staging_lists, "no collection ran: maintenanceIntervalMs=0 means every commit"


def _other_driver(uri: str, proxy: S3Proxy) -> SinkOptions:
    """The same sink's options as another driver process sees them: another writer of the
    bucket (the process's writers are keyed by their storage options), whose commits
    this process's writer has not LISTed."""
    return options(uri, **{"storage.aws_endpoint": proxy.endpoint})


def test_a_replay_another_driver_published_commits_nothing_again(proxy, uri):
    opts = options(uri)
    commit([stage(opts, 0)], 0, opts)
    other = _other_driver(uri, proxy)
    commit([stage(other, 1)], 1, other)  # batch 1, published by "another driver"
    # This writer's view does not know it: its refresh, beside the uploads' LIST, does.
    result = commit([stage(opts, 1)], 1, opts)
    assert not result.published and result.skipped
    assert published_values(uri) == expected_values(0, 1)


def test_a_replay_whose_uploads_are_gone_is_still_a_replay(proxy, uri):
    opts = options(uri)
    commit([stage(opts, 0)], 0, opts)
    other = _other_driver(uri, proxy)
    commit([stage(other, 1)], 1, other)
    mine = stage(opts, 1)
    with LogManager(uri) as mgr:
        for f in mine.fragments:
            mgr.storage.delete(f.path + ".log")
    # The check of the uploads fails; the refreshed view's ledger holds the batch: a
    # replay is never refused.
    result = commit([mine], 1, opts)
    assert not result.published and result.skipped
    assert published_values(uri) == expected_values(0, 1)


def test_a_missing_upload_still_fails_the_first_commit_of_a_writer_clearly(proxy, uri):
    """The writer's open LISTs the batch's uploads beside it (free): a gap is refused.
    A steady commit trusts its tasks' acknowledged PUTs (nothing deletes an unsettled
    batch's uploads) and makes no LIST."""
    opts = options(uri)
    commit([stage(opts, 0)], 0, opts)
    mine = stage(opts, 1)
    gone = mine.fragments[0].path + ".log"
    with LogManager(uri) as mgr:
        mgr.storage.delete(gone)
    log_writers.close_all()  # the next commit opens the writer: a new driver process
    with pytest.raises(
        SinkCommitError, match=f"{gone}.* is missing: batch 1 of sink {SINK} is not published"
    ):
        commit([mine], 1, opts)
    assert published_values(uri) == expected_values(0)


def test_a_task_uploads_its_fragments_side_by_side(proxy, uri):
    opts = options(uri)
    commit([stage(opts, 0)], 0, opts)  # the worker's reader is open
    # The driver's snapshots of the topic's version 0, written after its commit returned
    # (in another process under Spark): not the task's requests.
    bucket_writer(opts).commits.flush_snapshots()
    since = proxy.clock()
    task = stage(opts, 1)
    made = proxy.requests(since)
    puts = [r for r in made if r.kind == "PUT"]
    assert len(puts) == len({f.partition for f in task.fragments}) == 3
    # Before: one PUT after the other. Now: the refresh, then the three PUTs at once.
    # The reader was opened before batch 0 created the topic: with per-topic commit logs
    # its refresh reads the catalog's commit naming the topic's log (LIST, GET), then
    # opens that log (its hint GET, then its snapshot GET beside its commits LIST): two
    # round trips more than before per-topic logs, once per topic and process.
    assert sequential_round_trips(puts) == 1
    assert sequential_round_trips(made) == 5
    commit([task], 1, opts)
    # A task of a topic the reader knows: the refresh of that topic's log only (its LIST,
    # the GET of the new commit; before, the catalog's LIST beside it), then the PUTs.
    since = proxy.clock()
    later = stage(opts, 2)
    made = proxy.requests(since)
    assert sequential_round_trips([r for r in made if r.kind == "PUT"]) == 1
    assert sequential_round_trips(made) == 3
    assert Counter(r.kind for r in made) == {"LIST": 1, "GET": 1, "PUT": 3}, made
    commit([later], 2, opts)
    assert published_values(uri) == expected_values(0, 1, 2)


def test_a_task_makes_its_last_put_itself(proxy, uri):
    """A steady task of one partition PUTs its fragment on its own thread: no upload
    thread started, no hand-off to one and back on the micro-batch's path (before: a
    pool per task, its thread started for the one PUT). A task of several partitions
    PUTs the others beside it, on the upload threads; a failing last PUT still leaves
    nothing behind."""
    from seglog.logstore.errors import KafkaStorageError
    from seglog.logstore.storage.object_storage import ObjectStorage

    real = ObjectStorage.write_atomic
    put_on: list[str] = []
    me = threading.current_thread().name

    def recorded(self: ObjectStorage, path: str, data: bytes) -> None:
        if "_seglog/staging/" in str(path):  # the tasks' (not the writer's snapshots)
            put_on.append(threading.current_thread().name)
        if "/00000000000000000003/" in str(path) and put_on[-1] == me:
            raise KafkaStorageError(f"PUT {path} failed: 503 SlowDown")
        real(self, path, data)

    single = SinkOptions.parse({"path": uri, "topic": "one", "numPartitions": "1"})
    data = rows(0, 0)
    columns = SinkColumns.resolve(data.schema, default_topic="one")
    commit([stage_rows(single, columns, [data], SINK, 0, 0, 0)], 0, single)
    opts = options(uri)
    commit([stage(opts, 1)], 1, opts)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ObjectStorage, "write_atomic", recorded)
        task = stage_rows(single, columns, [rows(2, 0)], SINK, 2, 0, 0)
        assert put_on == [me]
        put_on.clear()
        with pytest.raises(KafkaStorageError, match="503 SlowDown"):
            stage(opts, 3)
    assert len(put_on) == 3 and put_on.count(me) == 1, put_on
    commit([task], 2, single)
    with LogManager(uri, read_only=True) as mgr:
        left = list(mgr.storage.list_tree("_seglog/staging"))
        assert mgr.high_watermarks()[("one", 0)] == 2 * ROWS
    assert [e.name for e in left if "/00000000000000000003/" in f"/{e.name}"] == []


def test_a_task_looks_at_its_topic_while_its_first_rows_are_on_their_way(proxy, uri):
    """Spark hands a write task its rows once the input's first batch is read: the look
    at the topic's log (its LIST, the GET of the commit since) runs meanwhile, so once
    the rows are there the task waits for one round trip, its PUTs side by side."""
    opts = options(uri)
    commit([stage(opts, 0)], 0, opts)  # the worker's reader is open
    commit([stage(opts, 1)], 1, opts)  # and knows the topic's log
    before = proxy.counts
    handed_over: list[float] = []

    def slow_input() -> Iterator[pa.RecordBatch]:
        # The input's first batch is being read: wait (up to 10 s) for the look to be
        # made, which the task no longer waits for the rows to start.
        for _ in range(1000):
            made = proxy.counts - before
            if made["LIST"] and made["GET"]:
                break
            time.sleep(0.01)
        handed_over.append(proxy.clock())
        yield rows(2, 0)

    since = proxy.clock()
    data = rows(2, 0)
    task = stage_rows(
        opts, SinkColumns.resolve(data.schema, default_topic=TOPIC), slow_input(), SINK, 2, 0, 0
    )
    made = proxy.requests(since)
    assert Counter(r.kind for r in made) == {"LIST": 1, "GET": 1, "PUT": 3}, made
    looked = [r for r in made if r.kind in ("LIST", "GET")]
    assert all(r.arrived < handed_over[0] for r in looked), (looked, handed_over)
    assert sequential_round_trips(r for r in made if r.arrived >= handed_over[0]) == 1
    commit([task], 2, opts)
    assert published_values(uri) == expected_values(0, 1, 2)


def test_a_task_whose_upload_fails_leaves_nothing(proxy, uri):
    from seglog.logstore.errors import KafkaStorageError
    from seglog.logstore.storage.object_storage import ObjectStorage

    opts = options(uri)
    commit([stage(opts, 0)], 0, opts)
    real = ObjectStorage.write_atomic

    def failing(self: ObjectStorage, path: str, data: bytes) -> None:
        if "/out-1." in str(path):
            raise KafkaStorageError(f"PUT {path} failed: 503 SlowDown")
        real(self, path, data)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(ObjectStorage, "write_atomic", failing)
        with pytest.raises(KafkaStorageError, match="503 SlowDown"):
            stage(opts, 1)
    with LogManager(uri, read_only=True) as mgr:
        left = list(mgr.storage.list_tree("_seglog/staging"))
    assert [e.name for e in left if "/00000000000000000001/" in f"/{e.name}"] == []


def test_a_read_of_many_small_segments_gets_them_side_by_side(proxy, uri):
    """A producer's appends of a record or two each are one small segment each; a task
    reading a micro-batch of them GETs them side by side (``bucket_read_window``)."""
    with LogManager(uri) as mgr:
        mgr.create_topic("in", 1)
        for i in range(12):
            mgr.append("in", 0, encode_batches(pa.array([b"r%d" % i], pa.binary())))
    with LogManager(uri, read_only=True) as mgr:
        log = mgr.get_log("in", 0)
        assert len(log.segments) == 12
        since = proxy.clock()
        chunks = list(log.read_chunks(0, 12))
        made = proxy.requests(since)
    assert [v for c in chunks for v in decode_batches(c).column("value").to_pylist()] == [
        b"r%d" % i for i in range(12)
    ]
    gets = [r for r in made if r.kind in ("GET", "RANGED_GET")]
    assert len(gets) == 12
    # Before: one GET after the other (12 round trips). Now: the first, then the next
    # eight at once; each later one starts as the walk opens a segment of those eight
    # (so at most one after another: 5 at worst, 3 when the walk decodes quickly).
    assert sequential_round_trips(gets) <= 5
