"""The micro-batch commit right after a background merge (``sink_bucket_merger``), counted
through the delaying proxy: the end-to-end latency tail of a bucket query (issue 25).

The merge is the first commit of another writer the sink's writer sees after a lone run
of its own commits, so that commit's refresh reads its own commits back (the fork check
of ``CommitLog._check_own_commits``, up to ``MAX_READ_BACK``). Read one after the other,
that was a round trip per micro-batch since the last merge on the next micro-batch's
critical path: 32 with the default ``mergeMinSegments``, about 0.9 s at 25 ms a request,
once every 32 micro-batches (``benchmarks/README.md``, "The end-to-end tail")."""

from __future__ import annotations

from collections.abc import Iterator

import pyarrow as pa
import pytest
from s3_proxy import S3Proxy, sequential_round_trips

from seglog.streaming.sink_bucket_commit import commit
from seglog.streaming.sink_bucket_merger import wait_all
from seglog.streaming.sink_bucket_staging import stage_rows
from seglog.streaming.sink_options import SinkColumns, SinkOptions
from seglog.streaming.sink_staging import StagedTask

TOPIC = "out"
SINK = "after-merge"
DELAY_S = 0.05  # as test_sink_round_trips: parallel requests stay one round trip
RUN = 12  # micro-batches of one segment each before the merge comes due


@pytest.fixture
def proxy(bucket_server, monkeypatch) -> Iterator[S3Proxy]:
    with S3Proxy(bucket_server.endpoint, delay_s=DELAY_S, log_requests=True) as p:
        for name, value in {**bucket_server.env, "AWS_ENDPOINT_URL": p.endpoint}.items():
            monkeypatch.setenv(name, value)
        yield p


def _stage(opts: SinkOptions, batch: int) -> StagedTask:
    data = pa.record_batch({"value": pa.array([b"b%d" % batch], pa.binary())})
    columns = SinkColumns.resolve(data.schema, default_topic=TOPIC)
    return stage_rows(opts, columns, [data], SINK, batch, 0, 0)


def test_the_commit_after_a_merge_waits_a_few_round_trips(bucket_server, proxy) -> None:
    uri = f"s3://{bucket_server.create_bucket()}/logs"
    opts = SinkOptions.parse(
        {"path": uri, "topic": TOPIC, "mergeMinSegments": str(RUN), "numPartitions": "1"}
    )
    for batch in range(RUN):
        commit([_stage(opts, batch)], batch, opts)
    if not wait_all(60.0):
        pytest.fail("the background merger did not finish within 60 s")
    # The run was merged (an upload of the merger's, then its commit in the topic's
    # log): another writer of the log, as far as the sink's writer can tell.
    if not [r for r in proxy.requests() if r.kind == "PUT" and f"/{TOPIC}-0/" in r.target]:
        pytest.fail(f"no merge after {RUN} micro-batches of mergeMinSegments={RUN}")
    staged = _stage(opts, RUN)
    since = proxy.clock()
    if not commit([staged], RUN, opts).published:
        pytest.fail(f"micro-batch {RUN} was not published")
    made = proxy.requests(since)
    own = [r for r in made if r.kind == "GET" and "/log/" in r.target]
    # Every own commit of the run is read back (the fork check is kept whole) ...
    if len(own) < RUN:
        pytest.fail(f"{len(own)} commits read back, not the run's {RUN}")
    # ... at once: the refresh's and the uploads' LISTs, the read-back, the merge's
    # commit, the create; not a round trip per micro-batch since the last merge.
    assert sequential_round_trips(made) <= 5
