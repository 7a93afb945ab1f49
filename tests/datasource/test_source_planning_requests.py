"""A streaming source's trigger on a bucket, counted request by request through the
delaying proxy (``tests/s3_proxy.py``): when nothing changed, Spark's ``latestOffset`` and
``reportLatestOffset`` of a trigger cost one round trip: the LIST of the topic's own
commit log and, beside it, the LIST of the catalog (which names the topics: a pattern
subscription's new topics, a topic deleted and created again), nothing else; a new
commit adds its GET. No Spark session: the reader's methods are called as the driver
calls them, each trigger one after the other."""

from __future__ import annotations

from collections import Counter

import pyarrow as pa
from pyspark.sql.streaming.datasource import ReadAllAvailable
from s3_proxy import sequential_round_trips

from seglog.datasource.schema import source_schema
from seglog.datasource.stream_reader import SeglogStreamReader
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches

DELAY_S = 0.01  # the proxy fixture's delay (tests/conftest.py)


def _trigger(reader: SeglogStreamReader, start: dict) -> dict:
    end = reader.latestOffset(start, ReadAllAvailable())
    reader.reportLatestOffset()
    return end


def test_a_trigger_with_nothing_new_is_one_list(bucket_server, proxy):
    uri = f"s3://{bucket_server.create_bucket()}/logs"
    with LogManager(uri) as mgr:
        mgr.create_topic("t", 2)
        mgr.append("t", 0, encode_batches(pa.array([b"a", b"b"], pa.binary())))
    opts = {"path": uri, "subscribe": "t"}
    reader = SeglogStreamReader(opts, source_schema(opts))
    start = reader.initialOffset()
    end = _trigger(reader, start)  # the first trigger: the batch [start, end)
    assert end["t"] == {"0": 2, "1": 0}
    for _ in range(3):
        since = proxy.clock()
        assert _trigger(reader, end) == end
        made = proxy.requests(since)
        listed = sorted(r.target.split("prefix=")[1].split("&")[0] for r in made)
        assert [r.kind for r in made] == ["LIST", "LIST"], made
        assert listed[0] == "logs%2F_seglog%2Flog%2F", listed  # the catalog
        assert listed[1].startswith("logs%2F_seglog%2Ftopics%2F"), listed  # t's own log
        assert sequential_round_trips(made) == 1
    with LogManager(uri) as mgr:
        mgr.append("t", 1, encode_batches(pa.array([b"c"], pa.binary())))
    since = proxy.clock()
    moved = _trigger(reader, end)
    made = proxy.requests(since)
    assert moved["t"] == {"0": 2, "1": 1}
    # The new commit is read where the LIST found it: one round trip more.
    assert Counter(r.kind for r in made) == {"LIST": 2, "GET": 1}
    assert sequential_round_trips(made) == 2
