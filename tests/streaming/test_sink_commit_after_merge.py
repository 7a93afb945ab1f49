"""The micro-batch commit right after another writer's commit to its topic, counted
through the delaying proxy: once the end-to-end latency tail of a bucket query (issue 25).

Another writer's commit, after a lone run of the sink's own, makes the sink writer's next
refresh read its own commits back (the fork check of ``CommitLog._check_own_commits``, up
to ``MAX_READ_BACK``). Read one after the other, that was a round trip per micro-batch
since on the next micro-batch's critical path: 32 after each background merge with the
default ``mergeMinSegments``, about 0.9 s at 25 ms a request (``benchmarks/README.md``,
"The end-to-end tail"). The merger now commits through the sink's own writer, so a merge
costs the next commit nothing; a producer or another query still does."""

from __future__ import annotations

import pyarrow as pa
import pytest
from s3_proxy import S3Proxy, sequential_round_trips

from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches
from seglog.streaming.sink_bucket_commit import commit
from seglog.streaming.sink_bucket_merger import wait_all
from seglog.streaming.sink_bucket_staging import stage_rows
from seglog.streaming.sink_options import SinkColumns, SinkOptions
from seglog.streaming.sink_staging import StagedTask

TOPIC = "out"
SINK = "after-merge"
DELAY_S = 0.05  # as test_sink_round_trips: parallel requests stay one round trip
RUN = 12  # micro-batches of one segment each before the merge comes due



def _stage(opts: SinkOptions, batch: int) -> StagedTask:
    data = pa.record_batch({"value": pa.array([b"b%d" % batch], pa.binary())})
    columns = SinkColumns.resolve(data.schema, default_topic=TOPIC)
    return stage_rows(opts, columns, [data], SINK, batch, 0, 0)


def _trace(made: list) -> list[str]:
    start = min(r.arrived for r in made)
    return [
        f"{(r.arrived - start) * 1000:.0f}ms {r.kind} {r.status} {r.target.split('?')[0][-60:]}"
        for r in sorted(made, key=lambda r: r.arrived)
    ]


def _run(uri: str, proxy: S3Proxy) -> SinkOptions:
    opts = SinkOptions.parse(
        {"path": uri, "topic": TOPIC, "mergeMinSegments": str(RUN), "numPartitions": "1"}
    )
    for batch in range(RUN):
        commit([_stage(opts, batch)], batch, opts)
    if not wait_all(60.0):
        pytest.fail("the background merger did not finish within 60 s")
    if not [r for r in proxy.requests() if r.kind == "PUT" and f"/{TOPIC}-0/" in r.target]:
        pytest.fail(f"no merge after {RUN} micro-batches of mergeMinSegments={RUN}")
    return opts


def test_the_commit_after_a_background_merge_is_its_create_alone(bucket_server, proxy) -> None:
    opts = _run(f"s3://{bucket_server.create_bucket()}/logs", proxy)
    staged = _stage(opts, RUN)
    since = proxy.clock()
    if not commit([staged], RUN, opts).published:
        pytest.fail(f"micro-batch {RUN} was not published")
    made = proxy.requests(since)
    assert [r.kind for r in made] == ["CONDITIONAL_PUT"], _trace(made)


def test_the_commit_after_another_writers_reads_its_own_commits_back_at_once(
    bucket_server, proxy
) -> None:
    uri = f"s3://{bucket_server.create_bucket()}/logs"
    opts = _run(uri, proxy)
    with LogManager(uri) as producer:
        producer.append_many({(TOPIC, 0): encode_batches(pa.array([b"another writer"]))})
    staged = _stage(opts, RUN)
    since = proxy.clock()
    if not commit([staged], RUN, opts).published:
        pytest.fail(f"micro-batch {RUN} was not published")
    made = proxy.requests(since)
    own = [r for r in made if r.kind == "GET" and "/log/" in r.target]
    # Every own commit of the run is read back (the fork check is kept whole) ...
    if len(own) < RUN:
        pytest.fail(f"{len(own)} commits read back, not the run's {RUN}")
    # ... at once: the lost create, the log's LIST, the read-back beside the other
    # writer's commit, the create again; not a round trip per micro-batch of the run.
    assert sequential_round_trips(made) <= 6, _trace(made)
