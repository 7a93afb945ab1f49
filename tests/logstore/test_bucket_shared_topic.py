"""Writers of one topic (issue 25, goal 1): a lost append race is cheap (the loser keeps
its upload and commits it with an ``offset_delta``: no re-upload, no delete; the winner's
commit read once), and writers appending to one partition in a loop
all make progress, on a real S3 server behind ``tests/s3_proxy.py`` (its request log
counts the requests; no timing is asserted)."""

from __future__ import annotations

import json
import threading
from collections import Counter
from collections.abc import Iterator

import pyarrow as pa
import pytest
from bucket_helpers import log_values
from s3_proxy import S3Proxy, sequential_round_trips
from s3_server import S3Server

from seglog.logstore.bucket.bucket_commit_log import BLIND_CREATES, TURN_AFTER_CHAINS
from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.errors import UnknownTopicOrPartitionError
from seglog.logstore.records.record_codec import encode_batches
from seglog.logstore.storage.object_storage import ObjectStorage


@pytest.fixture
def proxy(bucket_server: S3Server) -> Iterator[S3Proxy]:
    with S3Proxy(bucket_server.endpoint, delay_s=0.002, log_requests=True) as p:
        yield p


def _storage(server: S3Server, bucket: str, endpoint: str | None = None) -> ObjectStorage:
    options = server.storage_options()
    if endpoint is not None:
        options = {**options, "aws_endpoint": endpoint}
    return ObjectStorage(f"s3://{bucket}/logs", options)


def _batch(tag: str, n: int = 3) -> bytearray:
    return encode_batches(pa.array([f"{tag}-{j}".encode() for j in range(n)]))


def test_a_lost_append_race_costs_one_more_round_trip_the_blind_create(
    bucket_server: S3Server, proxy: S3Proxy
) -> None:
    bucket = bucket_server.create_bucket()
    other = BucketLogManager(_storage(bucket_server, bucket))  # not through the proxy
    other.create_topic("t", 1)
    loser = BucketLogManager(_storage(bucket_server, bucket, proxy.endpoint))
    other.append("t", 0, _batch("other"))  # the loser is one commit behind
    since = proxy.clock()
    info = loser.append("t", 0, _batch("loser"))
    records = proxy.requests(since)
    kinds = Counter(r.kind for r in records)
    # The .log once; the lost create; then the next version created blind (the same
    # entries, placed at the log end by the fold) while the lost version is read (was it
    # ours? the winner's, to fold). No LIST, nothing deleted or uploaded again: three
    # round trips, one more than an append that did not lose.
    assert kinds == {"PUT": 1, "CONDITIONAL_PUT": 2, "GET": 1}, kinds
    assert sequential_round_trips(records) == 3
    log = loser.commits.topic_log("t")
    assert log is not None
    blind = json.loads(loser.storage.read(log.layout.commit_key(2)))
    assert blind["format"] == 3 and blind["partitions"]["t-0"]["at_end"] is True
    assert loser.commits.last_attempts == 2 and info.first_offset == 3
    (_, kept) = loser.state.partition("t", 0).segments
    assert kept.offset_delta == 3 and kept.key.rpartition("/")[2].startswith(f"{0:020d}-")
    assert [v for _, v in log_values(other, "t", 0)] == [
        f"{tag}-{j}".encode() for tag in ("other", "loser") for j in range(3)
    ]


def test_each_lost_race_costs_one_round_trip_a_blind_create_beside_a_get(
    bucket_server: S3Server, proxy: S3Proxy, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = bucket_server.create_bucket()
    other = BucketLogManager(_storage(bucket_server, bucket))
    other.create_topic("t", 1)
    loser = BucketLogManager(_storage(bucket_server, bucket, proxy.endpoint))
    real_create = loser.storage.create
    losses = 0

    def create(key: str, data: bytes) -> bool:
        nonlocal losses
        if losses < 2:  # another writer commits just before each of the first two creates
            losses += 1
            other.append("t", 0, _batch(f"other{losses}"))
        return real_create(key, data)

    monkeypatch.setattr(loser.storage, "create", create)
    since = proxy.clock()
    loser.append("t", 0, _batch("loser"))
    records = proxy.requests(since)
    kinds = Counter(r.kind for r in records)
    # Each lost create is followed at once by a blind create of the next version, the
    # lost one read alongside it (one GET each): no LIST, no turn asked for (a PUT of
    # the marker and a 350 ms wait), nothing uploaded again.
    assert loser.commits.last_attempts == 3
    assert kinds == {"PUT": 1, "CONDITIONAL_PUT": 3, "GET": 2}, kinds
    assert loser.high_watermarks()[("t", 0)] == 9


def test_writers_of_one_partition_all_make_progress(
    bucket_server: S3Server, proxy: S3Proxy
) -> None:
    bucket = bucket_server.create_bucket()
    BucketLogManager(_storage(bucket_server, bucket)).create_topic("t", 1)
    writers = [BucketLogManager(_storage(bucket_server, bucket, proxy.endpoint)) for _ in range(3)]
    appends = 8
    attempts: dict[int, list[int]] = {i: [] for i in range(len(writers))}
    errors: list[BaseException] = []
    start = threading.Barrier(len(writers))

    def run(i: int, mgr: BucketLogManager) -> None:
        try:
            start.wait()
            for n in range(appends):
                mgr.append("t", 0, _batch(f"w{i}.{n}", 2))
                attempts[i].append(mgr.commits.last_attempts)
        except BaseException as e:  # noqa: BLE001 - reported by the assertion below
            errors.append(e)

    threads = [threading.Thread(target=run, args=(i, m)) for i, m in enumerate(writers)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    # Every writer committed all its appends, in a few creates each on average (a lost
    # race is retried at once, blind, as the next version, one round trip each; after
    # TURN_AFTER_CHAINS lost chains a loser asks for the turn and the others give way),
    # none near what makes an append fail.
    assert all(len(a) == appends for a in attempts.values()), attempts
    assert all(sum(a) <= 4 * appends for a in attempts.values()), attempts
    chain = BLIND_CREATES + 1
    assert max(n for a in attempts.values() for n in a) <= (TURN_AFTER_CHAINS + 1) * chain, (
        attempts
    )
    values = [v.decode() for _, v in log_values(writers[0], "t", 0)]
    assert len(values) == len(writers) * appends * 2
    for i in range(len(writers)):  # each writer's appends in its order, each whole
        mine = [v for v in values if v.startswith(f"w{i}.")]
        assert mine == [f"w{i}.{n}-{j}" for n in range(appends) for j in range(2)]


def test_a_create_retried_by_the_client_after_it_landed_appends_once(
    bucket_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = bucket_server.create_bucket()
    writer = BucketLogManager(_storage(bucket_server, bucket))
    writer.create_topic("t", 1)
    writer.append("t", 0, _batch("first"))
    real_create = writer.storage.create
    retried = 0

    def create(key: str, data: bytes) -> bool:
        nonlocal retried
        if "/log/" in key and not retried:
            # The commit lands, its answer is lost, the client's retry is told "exists":
            # the writer cannot tell that from a lost race, and creates the next version
            # blind while it reads this one.
            retried += 1
            assert real_create(key, data)
            return False
        return real_create(key, data)

    monkeypatch.setattr(writer.storage, "create", create)
    info = writer.append("t", 0, _batch("once"))
    assert retried == 1 and info.first_offset == 3 and info.last_offset == 5
    log = writer.commits.topic_log("t")
    assert log is not None and log.state.version == 3  # version 3: the duplicate
    reader = BucketLogManager(_storage(bucket_server, bucket))
    assert [v for _, v in log_values(reader, "t", 0)] == [
        f"{tag}-{j}".encode() for tag in ("first", "once") for j in range(3)
    ]
    assert reader.high_watermarks()[("t", 0)] == 6


def test_a_blind_append_after_the_topics_tombstone_folds_as_nothing(
    bucket_server: S3Server, monkeypatch: pytest.MonkeyPatch
) -> None:
    bucket = bucket_server.create_bucket()
    other = BucketLogManager(_storage(bucket_server, bucket))
    other.create_topic("t", 1)
    loser = BucketLogManager(_storage(bucket_server, bucket))
    log = loser.commits.topic_log("t")
    assert log is not None
    real_create = loser.storage.create
    creates = 0

    def create(key: str, data: bytes) -> bool:
        nonlocal creates
        if "/log/" in key:
            creates += 1
            if creates == 1:  # the loser's first create loses to an append ...
                other.append("t", 0, _batch("other"))
            elif creates == 2:  # ... and its blind retry to the topic's tombstone
                other.delete_topic("t")
        return real_create(key, data)

    monkeypatch.setattr(loser.storage, "create", create)
    with pytest.raises(UnknownTopicOrPartitionError, match="partition t-0 .* was deleted"):
        loser.append("t", 0, _batch("loser"))
    # The loser's third create landed after the tombstone: a commit of nothing, which
    # every reader folds (no "follows the tombstone" damage).
    assert creates == 3 and log.state.version == 3 and not log.state.topics
    fresh = log.sibling(log.layout)
    assert fresh.state.version == 3 and not fresh.state.partitions
    assert "t" not in BucketLogManager(_storage(bucket_server, bucket)).topics()


def test_a_lost_append_race_in_the_catalog_log_is_never_created_blind(
    bucket_server: S3Server,
) -> None:
    """A catalog kept for older seglog versions (``topic_logs=False``) holds its topics'
    appends itself; a lost race there rebuilds as before, so no commit of format 3 (which
    those versions refuse) ever lands in it."""
    bucket = bucket_server.create_bucket()
    other = BucketLogManager(_storage(bucket_server, bucket), topic_logs=False)
    other.create_topic("t", 1)
    loser = BucketLogManager(_storage(bucket_server, bucket), topic_logs=False)
    other.append("t", 0, _batch("other"))  # the loser is one commit behind
    info = loser.append("t", 0, _batch("loser"))
    assert loser.commits.last_attempts == 2 and info.first_offset == 3
    assert loser.commits.topic_log("t") is None
    catalog = loser.commits.catalog
    formats = [
        json.loads(loser.storage.read(catalog.layout.commit_key(v)))["format"]
        for v in range(catalog.state.version + 1)
    ]
    assert 3 not in formats and len(formats) == 3, formats
    assert [v for _, v in log_values(other, "t", 0)] == [
        f"{tag}-{j}".encode() for tag in ("other", "loser") for j in range(3)
    ]
