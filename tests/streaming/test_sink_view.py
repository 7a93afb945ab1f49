"""The bucket sink's write task stages with the driver's view of its topics
(``streaming.sink_view``): its requests are its PUTs, counted through the delaying proxy
(``tests/s3_proxy.py``). A stale view is safe: the commit refuses what the tasks routed or
checked with another partition count or config, a replay with a fresh look publishes,
and a topic deleted and created again with the same settings takes the batch."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
import pytest
from s3_proxy import sequential_round_trips

from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import decode_batches
from seglog.streaming import log_readers, sink_view
from seglog.streaming.errors import SinkCommitError
from seglog.streaming.sink_bucket_commit import commit
from seglog.streaming.sink_bucket_staging import stage_rows
from seglog.streaming.sink_options import SinkColumns, SinkOptions
from seglog.streaming.sink_staging import StagedTask
from seglog.streaming.sink_view import TopicView

TOPIC = "out"
SINK = "view"
DELAY_S = 0.05  # see test_sink_round_trips: parallel requests within one delay count once
ROWS = 40



@pytest.fixture
def uri(bucket_server, proxy) -> str:
    return f"s3://{bucket_server.create_bucket()}/logs"


def options(uri: str, **extra: str) -> SinkOptions:
    return SinkOptions.parse({"path": uri, "topic": TOPIC, **extra})


def rows(batch: int, topics: list[str] | None = None) -> pa.RecordBatch:
    data = {
        "key": pa.array([f"user-{i}" for i in range(ROWS)], pa.string()),
        "value": pa.array([f"b{batch}-{i}".encode() for i in range(ROWS)], pa.binary()),
    }
    if topics is not None:
        data["topic"] = pa.array([topics[i % len(topics)] for i in range(ROWS)], pa.string())
    return pa.record_batch(data)


def stage(
    opts: SinkOptions, batch: int, view: TopicView | None, topics: list[str] | None = None
) -> StagedTask:
    data = rows(batch, topics)
    columns = SinkColumns.resolve(data.schema, default_topic=opts.topic)
    return stage_rows(opts, columns, [data], SINK, batch, 0, 0, view=view)


def planned_view(opts: SinkOptions, *, all_topics: bool = False) -> TopicView | None:
    """What the driver ships with a micro-batch's writer, once its background refresh
    (started by a missing topic or an old view) ended: no request is in flight after."""
    sink_view.driver_view(opts, all_topics=all_topics)
    sink_view.wait_refreshes()
    view = sink_view.driver_view(opts, all_topics=all_topics)
    sink_view.wait_refreshes()
    return view


def values(uri: str, topic: str = TOPIC) -> Counter[bytes]:
    found: Counter[bytes] = Counter()
    with LogManager(uri, read_only=True) as mgr:
        for p in mgr.partitions(topic):
            log = mgr.get_log(topic, p)
            for chunk in log.read_chunks(log.log_start_offset, log.high_watermark, 1 << 20):
                found.update(decode_batches(chunk).column("value").to_pylist())
    return found


def expected(*batches: int) -> Counter[bytes]:
    return Counter(v for b in batches for v in rows(b).column("value").to_pylist())


def test_a_task_with_the_drivers_view_only_puts(proxy, uri):
    with LogManager(uri) as mgr:
        mgr.create_topic(TOPIC, 3)
    opts = options(uri)
    # The planner's first micro-batch: its reader is not open, so nothing is shipped and
    # the task looks itself (the reader opens in the background meanwhile).
    assert sink_view.driver_view(opts, all_topics=False) is None
    commit([stage(opts, 0, None)], 0, opts)
    for batch in (1, 2, 3):
        view = planned_view(opts)
        assert view is not None and view.get(TOPIC) == (3, {})
        since = proxy.clock()
        task = stage(opts, batch, view)
        made = proxy.requests(since)
        # Before: the look at the topic's log (its LIST, a GET per new commit), then the
        # PUTs: 2 round trips. Now the PUTs alone, side by side.
        assert {r.kind for r in made} == {"PUT"}, made
        assert len(made) == 3  # a fragment per partition, its index inline
        assert sequential_round_trips(made) == 1
        commit([task], batch, opts)
    assert values(uri) == expected(0, 1, 2, 3)


def test_a_topic_the_sink_creates_is_looked_up_by_the_task_until_the_view_holds_it(proxy, uri):
    opts = options(uri, numPartitions="2")
    planned_view(opts)  # the reader opens: no topic yet
    view = planned_view(opts)
    assert view is not None and view.get(TOPIC) is None
    first = stage(opts, 0, view)  # the look: the topic is missing, the creation settings
    assert first.topic_partitions == ((TOPIC, 2),)
    commit([first], 0, opts)
    # The view lacked a wanted topic: the planner refreshed in the background, and the
    # next micro-batch's view holds what the first commit created.
    view = planned_view(opts)
    assert view is not None and view.get(TOPIC) == (2, {})
    since = proxy.clock()
    commit([stage(opts, 1, view)], 1, opts)
    assert all(r.kind != "LIST" for r in proxy.requests(since))
    assert values(uri) == expected(0, 1)


def test_rows_naming_their_topics_use_the_view_of_every_topic(proxy, uri):
    with LogManager(uri) as mgr:
        mgr.create_topic("a", 1)
        mgr.create_topic("b", 2, {"cleanup.policy": "compact"})
    opts = SinkOptions.parse({"path": uri})
    planned_view(opts, all_topics=True)
    view = planned_view(opts, all_topics=True)
    assert view is not None
    assert view.get("a") == (1, {}) and view.get("b") == (2, {"cleanup.policy": "compact"})
    since = proxy.clock()
    task = stage(opts, 0, view, topics=["a", "b"])
    assert {r.kind for r in proxy.requests(since)} == {"PUT"}
    assert dict(task.topic_configs) == {"a": (), "b": (("cleanup.policy", "compact"),)}
    # A topic the view lacks (created since the planning): that task looks for it.
    with LogManager(uri) as mgr:
        mgr.create_topic("c", 1)
    since = proxy.clock()
    task = stage(opts, 1, view, topics=["a", "c"])
    assert "LIST" in {r.kind for r in proxy.requests(since)}
    assert dict(task.topic_partitions) == {"a": 1, "c": 1}


def test_partitions_added_after_the_planning_refuse_the_batch_and_a_fresh_look_publishes(
    proxy, uri
):
    with LogManager(uri) as mgr:
        mgr.create_topic(TOPIC, 2)
    opts = options(uri)
    commit([stage(opts, 0, None)], 0, opts)
    view = planned_view(opts)
    with LogManager(uri) as mgr:
        mgr.add_partitions(TOPIC, 4)
    stale = stage(opts, 1, view)  # routed for 2 partitions
    with pytest.raises(
        SinkCommitError,
        match=f"topic '{TOPIC}' .* has 4 partition\\(s\\) but the tasks routed "
        "rows for 2: it changed during the batch; batch 1 is not "
        "published",
    ):
        commit([stale], 1, opts)
    assert values(uri) == expected(0)
    # The restarted query's planning: its view catches up (or, too old, is not shipped).
    view = planned_view(opts)
    assert view is not None and view.get(TOPIC) == (4, {})
    commit([stage(opts, 1, view)], 1, opts)
    assert values(uri) == expected(0, 1)


def test_a_config_changed_after_the_planning_refuses_the_batch(proxy, uri):
    with LogManager(uri) as mgr:
        mgr.create_topic(TOPIC, 1)
    opts = options(uri)
    commit([stage(opts, 0, None)], 0, opts)
    view = planned_view(opts)
    with LogManager(uri) as mgr:
        mgr.alter_topic_config(TOPIC, {"max.message.bytes": "100000"})
    stale = stage(opts, 1, view)
    with pytest.raises(
        SinkCommitError,
        match=f"topic '{TOPIC}' .* changed its config during batch 1 .*max.message.bytes",
    ):
        commit([stale], 1, opts)
    assert values(uri) == expected(0)
    view = planned_view(opts)
    assert view is not None and view.get(TOPIC) == (1, {"max.message.bytes": "100000"})
    commit([stage(opts, 1, view)], 1, opts)
    assert values(uri) == expected(0, 1)


def test_a_topic_deleted_and_created_again_after_the_planning(proxy, uri):
    with LogManager(uri) as mgr:
        mgr.create_topic(TOPIC, 2)
    opts = options(uri)
    commit([stage(opts, 0, None)], 0, opts)
    view = planned_view(opts)
    # Created again with other partitions: the batch routed for 2 is refused.
    with LogManager(uri) as mgr:
        mgr.delete_topic(TOPIC)
        mgr.create_topic(TOPIC, 3)
    with pytest.raises(
        SinkCommitError, match="has 3 partition\\(s\\) but the tasks routed rows for 2"
    ):
        commit([stage(opts, 1, view)], 1, opts)
    # Created again with the same settings: the rows were routed and checked as the new
    # topic wants them, so the batch goes there (as a producer's would), exactly once.
    view = planned_view(opts)
    with LogManager(uri) as mgr:
        mgr.delete_topic(TOPIC)
        mgr.create_topic(TOPIC, 3)
    commit([stage(opts, 1, view)], 1, opts)
    assert values(uri) == expected(1)
    again = commit([stage(opts, 1, view)], 1, opts)  # Spark's replay of it
    assert not again.published and again.skipped
    assert values(uri) == expected(1)


def test_an_old_view_is_not_shipped(proxy, uri, monkeypatch):
    with LogManager(uri) as mgr:
        mgr.create_topic(TOPIC, 1)
    opts = options(uri)
    assert planned_view(opts) is not None
    monkeypatch.setattr(sink_view, "SHIP_MAX_AGE_MS", 0)
    assert sink_view.driver_view(opts, all_topics=False) is None
    sink_view.wait_refreshes()
    with log_readers.reader(opts.log_dirs, opts.storage) as mgr:
        assert TOPIC in mgr.topics()
