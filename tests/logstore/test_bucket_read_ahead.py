"""A reader of a bucket log that is being written sees each new commit in ONE round trip
(issue 25, goal 4): once a refresh found another writer's commit, the next one GETs the
following version beside its LIST (``CommitLog.refresh``'s read-ahead), so a source's
trigger, a task's read and a consumer's look no longer wait for the LIST and then the
GET; a reader that found N commits last time GETs the next N. An idle log's refresh stays
one LIST, and a writer's refreshes read nothing ahead. Counted on a real S3 server
behind ``tests/s3_proxy.py`` (no timing asserted)."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

import pyarrow as pa
import pytest
from s3_proxy import RequestRecord, S3Proxy, sequential_round_trips
from s3_server import S3Server

from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.records.record_codec import decode_batches, encode_batches
from seglog.logstore.storage.object_storage import ObjectStorage


@pytest.fixture
def proxy(bucket_server: S3Server) -> Iterator[S3Proxy]:
    with S3Proxy(bucket_server.endpoint, delay_s=0.02, log_requests=True) as p:
        yield p


def _storage(server: S3Server, bucket: str, endpoint: str | None = None) -> ObjectStorage:
    options = server.storage_options()
    if endpoint is not None:
        options = {**options, "aws_endpoint": endpoint}
    return ObjectStorage(f"s3://{bucket}/logs", options)


def _batch(tag: str, n: int = 3) -> bytearray:
    return encode_batches(pa.array([f"{tag}-{j}".encode() for j in range(n)]))


def _look(proxy: S3Proxy, reader: BucketLogManager) -> tuple[int, list[RequestRecord]]:
    """The reader's high watermark of t-0 and the requests that look made."""
    since = proxy.clock()
    hw = reader.high_watermarks()[("t", 0)]
    return hw, proxy.requests(since)


def _gets(records: list[RequestRecord]) -> list[str]:
    return [r.target for r in records if r.kind == "GET"]


def test_a_reader_of_a_log_being_written_sees_each_commit_in_one_round_trip(
    bucket_server: S3Server, proxy: S3Proxy
) -> None:
    bucket = bucket_server.create_bucket()
    writer = BucketLogManager(_storage(bucket_server, bucket))  # not through the proxy
    writer.create_topic("t", 1)
    reader = BucketLogManager(_storage(bucket_server, bucket, proxy.endpoint), read_only=True)
    assert reader.high_watermarks()[("t", 0)] == 0

    writer.append("t", 0, _batch("a"))
    hw, first = _look(proxy, reader)
    # Nothing seen written yet: the LISTs (catalog and topic log, at once), then the
    # new commit's GET.
    assert hw == 3
    assert Counter(r.kind for r in first) == {"LIST": 2, "GET": 1}
    assert sequential_round_trips(first) == 2

    for n in range(2, 5):
        writer.append("t", 0, _batch(f"b{n}"))
        hw, made = _look(proxy, reader)
        assert hw == 3 * n
        # The commit is read beside the LISTs: one round trip, no second GET of it.
        assert Counter(r.kind for r in made) == {"LIST": 2, "GET": 1}, made
        assert sequential_round_trips(made) == 1, made

    # Nothing new: the read-ahead of the next version finds nothing (its GET is the
    # price of one look after the last commit), and the look after reads nothing ahead.
    hw, made = _look(proxy, reader)
    assert hw == 12
    assert sequential_round_trips(made) == 1
    hw, idle = _look(proxy, reader)
    assert hw == 12
    assert Counter(r.kind for r in idle) == {"LIST": 2}, idle

    # Written again after the idle look: LIST then GET, as at first; reading ahead again
    # from there on.
    writer.append("t", 0, _batch("c"))
    hw, made = _look(proxy, reader)
    assert hw == 15
    assert sequential_round_trips(made) == 2
    writer.append("t", 0, _batch("d"))
    hw, made = _look(proxy, reader)
    assert hw == 18
    assert sequential_round_trips(made) == 1
    assert [v.decode() for v in _values(reader)][-3:] == ["d-0", "d-1", "d-2"]


def test_a_reader_reads_ahead_as_many_commits_as_it_found_last_time(
    bucket_server: S3Server, proxy: S3Proxy
) -> None:
    bucket = bucket_server.create_bucket()
    writer = BucketLogManager(_storage(bucket_server, bucket))  # not through the proxy
    writer.create_topic("t", 1)
    reader = BucketLogManager(_storage(bucket_server, bucket, proxy.endpoint), read_only=True)
    assert reader.high_watermarks()[("t", 0)] == 0
    # A producer committing three times between two looks of a consumer (or triggers of
    # a source): the first look finds three after its LIST; from then on the three are
    # read beside the LIST, in one round trip.
    for look in range(4):
        for n in range(3):
            writer.append("t", 0, _batch(f"l{look}-{n}"))
        hw, made = _look(proxy, reader)
        assert hw == 9 * (look + 1)
        assert Counter(r.kind for r in made) == {"LIST": 2, "GET": 3}, made
        assert sequential_round_trips(made) == (2 if look == 0 else 1), made
    # Fewer than guessed: the GETs of versions not there yet are answered "not found"
    # in the same round trip, and the look is still right.
    writer.append("t", 0, _batch("one"))
    hw, made = _look(proxy, reader)
    assert hw == 39
    assert sequential_round_trips(made) == 1
    assert _values(reader)[-1] == b"one-2"


def _values(mgr: BucketLogManager) -> list[bytes]:
    log = mgr.get_log("t", 0)
    out: list[bytes] = []
    for chunk in log.read_chunks(0, log.high_watermark):
        out.extend(decode_batches(chunk).column("value").to_pylist())
    return out


def test_a_writer_reads_nothing_ahead(bucket_server: S3Server, proxy: S3Proxy) -> None:
    bucket = bucket_server.create_bucket()
    writer = BucketLogManager(_storage(bucket_server, bucket, proxy.endpoint))
    writer.create_topic("t", 1)
    since = proxy.clock()
    for n in range(5):
        writer.append("t", 0, _batch(f"w{n}"))
        assert writer.high_watermarks()[("t", 0)] == 3 * (n + 1)
    # Its own commits are in its state already: no refresh found another writer's, so
    # no GET of a commit goes out (a read-ahead would GET versions not yet there).
    commit_gets = [t for t in _gets(proxy.requests(since)) if "_seglog/log/" in t]
    assert commit_gets == []


def test_a_read_of_a_few_small_segments_gets_them_all_at_once(
    bucket_server: S3Server, proxy: S3Proxy
) -> None:
    """A micro-batch of a producer's small appends (one segment each): the task's walk
    GETs the first segment and the next ones side by side, one round trip (before: the
    first, then the others at its end, two)."""
    bucket = bucket_server.create_bucket()
    writer = BucketLogManager(_storage(bucket_server, bucket))
    writer.create_topic("t", 1)
    for n in range(5):
        writer.append("t", 0, _batch(f"s{n}", 2))
    reader = BucketLogManager(_storage(bucket_server, bucket, proxy.endpoint), read_only=True)
    log = reader.get_log("t", 0)
    assert len(log.segments) == 5
    since = proxy.clock()
    values = [
        v for c in log.read_chunks(0, 10) for v in decode_batches(c).column("value").to_pylist()
    ]
    made = [r for r in proxy.requests(since) if r.kind in ("GET", "RANGED_GET")]
    assert values == [f"s{n}-{j}".encode() for n in range(5) for j in range(2)]
    assert len(made) == 5
    assert sequential_round_trips(made) == 1, made
