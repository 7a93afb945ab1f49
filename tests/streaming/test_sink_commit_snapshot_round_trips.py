"""The bucket sink's driver commit on a version due a snapshot waits for what every other
commit waits for, one round trip (its conditional PUT: the sink's writer made the log's
last commit, so it neither refreshes nor lists its uploads): the snapshot and hint of
that version are written after the commit returned (``bucket_snapshot_writer``), no
longer on the micro-batch's path every 10th batch. Counted through
``tests/s3_proxy.py``: the requests a commit waited for are those answered before it
returned."""

from __future__ import annotations

import json
from collections import Counter

import pyarrow as pa
from s3_proxy import sequential_round_trips

from seglog.logstore.bucket.bucket_state import SNAPSHOT_EVERY, topic_layout
from seglog.logstore.storage.object_storage import ObjectStorage
from seglog.streaming.sink_bucket_commit import bucket_writer, commit
from seglog.streaming.sink_bucket_staging import stage_rows
from seglog.streaming.sink_options import SinkColumns, SinkOptions
from seglog.streaming.sink_staging import StagedTask

TOPIC = "out"
SINK = "snapshot-round-trips"
DELAY_S = 0.05



def _stage(opts: SinkOptions, batch: int) -> StagedTask:
    rows = pa.record_batch({"value": pa.array([f"b{batch}-{i}".encode() for i in range(5)])})
    columns = SinkColumns.resolve(rows.schema, default_topic=TOPIC)
    return stage_rows(opts, columns, [rows], SINK, batch, 0, 0)


def test_a_micro_batch_whose_commit_is_due_a_snapshot_commits_in_one_round_trip(
    bucket_server, proxy
):
    uri = f"s3://{bucket_server.create_bucket()}/logs"
    # No merges: the background merger's commits would share the log and the count.
    opts = SinkOptions.parse({"path": uri, "topic": TOPIC, "mergeMinSegments": "1000000"})
    commit([_stage(opts, 0)], 0, opts)  # creates the topic: its log's version 0
    writer = bucket_writer(opts)
    layout = topic_layout(writer.state.topic_logs[TOPIC])
    due = []
    for batch in range(1, 2 * SNAPSHOT_EVERY + 2):
        staged = _stage(opts, batch)
        writer.commits.flush_snapshots()  # the last one's, not this commit's
        since = proxy.clock()
        result = commit([staged], batch, opts)
        until = proxy.clock()
        assert result.published
        waited = [r for r in proxy.requests(since) if r.replied is not None and r.replied < until]
        version = writer.commits.logs()[writer.state.topic_logs[TOPIC]].state.version
        if version % SNAPSHOT_EVERY == 0:
            due.append(version)
        # Before: on versions 10 and 20, then the snapshot's PUT beside the hint's GET and
        # the hint's PUT: 2 more round trips.
        assert Counter(r.kind for r in waited) == {"CONDITIONAL_PUT": 1}, (version, waited)
        assert sequential_round_trips(waited) == 1, (version, waited)
    assert due == [SNAPSHOT_EVERY, 2 * SNAPSHOT_EVERY]
    writer.commits.flush_snapshots()
    store = ObjectStorage(uri)
    assert json.loads(store.read(layout.hint_key)) == {"version": 2 * SNAPSHOT_EVERY}
