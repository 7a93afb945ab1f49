"""Every writer of a bucket log dir eventually commits (issue 22.5): against a process
appending in a tight loop, a merge, ``add_partitions``, ``alter_topic_config`` and an
export each get through within 3 attempts (a lost race rebases on the winner's commit;
a writer that keeps losing asks for the turn: ``bucket_turn``), on a real S3 server."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pyarrow as pa
from bucket_helpers import CountingStorage, memory_uri

from seglog.logstore.bucket import bucket_merge, bucket_turn
from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.bucket.bucket_turn import Turns
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import decode_batches, encode_batches
from seglog.logstore.storage.object_storage import ObjectStorage
from seglog.logstore.util.clock import MockClock

APPENDER = r"""
import sys
import pyarrow as pa
from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.records.record_codec import encode_batches

with BucketLogManager(sys.argv[1]) as mgr:
    i = 0
    while True:
        mgr.append("t", 0, encode_batches(pa.array([f"a{i}-{j}".encode() for j in range(5)])))
        i += 1
        print(i, flush=True)
"""


def offsets_and_values(mgr: LogManager, topic: str) -> list[tuple[int, bytes]]:
    log = mgr.get_log(topic, 0)
    out: list[tuple[int, bytes]] = []
    for chunk in log.read_chunks(log.log_start_offset, log.high_watermark):
        t = decode_batches(bytes(chunk))
        out += zip(t.column("offset").to_pylist(), t.column("value").to_pylist(), strict=True)
    return out


def test_each_kind_of_commit_gets_through_a_tight_loop_appender(s3_uri: str, tmp_path: Path):
    mgr = BucketLogManager(s3_uri)
    mgr.create_topic("t", 1, {"segment.bytes": 1 << 20})
    mgr.create_topic("u", 1)
    appender = subprocess.Popen(
        [sys.executable, "-c", APPENDER, s3_uri],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    attempts: dict[str, list[int]] = {"merge": [], "add_partitions": [], "alter_config": []}
    try:
        for _ in range(20):  # the loop is running: it committed a few appends
            assert appender.stdout is not None
            appender.stdout.readline()
        for round_ in range(2):
            before = mgr.state.version
            result = mgr.merge_segments()
            assert result > 0  # the appender's segments were merged
            attempts["merge"].append(mgr.commits.last_attempts)
            mgr.add_partitions("u", 2 + round_)
            attempts["add_partitions"].append(mgr.commits.last_attempts)
            mgr.alter_topic_config("t", {"retention.ms": str(86_400_000 + round_)})
            attempts["alter_config"].append(mgr.commits.last_attempts)
            assert mgr.state.version > before
            target = tmp_path / f"export-{round_}"
            mgr.export(target)  # reads one version while the appends go on
            with LogManager([target], read_only=True) as exported:
                rows = offsets_and_values(exported, "t")
            assert [o for o, _ in rows] == list(range(len(rows))) and rows
        assert appender.poll() is None, appender.stderr.read() if appender.stderr else ""
    finally:
        appender.kill()
        appender.wait()
    assert all(1 <= n <= 3 for ns in attempts.values() for n in ns), attempts
    mgr.refresh()
    assert mgr.state.topics["u"].partitions == 3
    assert mgr.topic_overrides("t")["retention.ms"] == str(86_400_000 + 1)
    with LogManager(s3_uri, read_only=True) as reader:  # the appends all there, in order
        rows = offsets_and_values(reader, "t")
    assert [o for o, _ in rows] == list(range(len(rows)))
    assert len(rows) % 5 == 0 and rows[-1][1] == f"a{len(rows) // 5 - 1}-4".encode()
    mgr.close()


def test_a_request_left_by_a_dead_writer_is_waited_for_once():
    """A writer that asked for the turn and died leaves its marker: a writer committing in
    a loop waits for it once, at most MAX_YIELD_MS, then commits without waiting again; a
    writer committing now and then never even looks."""
    storage = CountingStorage(ObjectStorage(memory_uri()))
    clock = MockClock()
    slept: list[float] = []

    def sleep(seconds: float) -> None:
        slept.append(seconds)
        clock.advance(int(seconds * 1000))

    def commits(turns: Turns, n: int, gap_ms: int) -> None:
        for _ in range(n):
            clock.advance(gap_ms)
            turns.give_way()
            turns.ended()

    Turns(storage, "dead", clock, sleep).request()  # never withdrawn
    other = Turns(storage, "busy", clock, sleep)
    slept.clear()
    storage.reset()
    commits(other, 10, bucket_turn.BUSY_GAP_MS + 1)  # now and then: never looks
    assert other.waits == 0 and not slept and storage.total() == 0
    commits(other, 10, 40)  # in a loop: looks, waits for the request once
    assert other.waits == 1
    assert sum(slept) * 1000 >= bucket_turn.MAX_YIELD_MS - bucket_turn.POLL_MS
    slept.clear()
    commits(other, 20, 40)  # the same marker: not again
    assert other.waits == 1 and not slept
    requester = Turns(storage, "loser", clock, sleep)
    token = requester.request()
    assert token is not None
    commits(other, 10, 40)  # a new request is waited for
    assert other.waits == 2
    requester.withdraw(token)
    assert not storage.exists(bucket_turn.TURN_KEY)


def test_a_merge_that_lost_to_an_append_rebases_without_uploading_again(monkeypatch):
    """Another writer appends between the merge's upload and its commit: the merge's
    create loses, it folds the append (which touched only the tail) and commits the same
    upload on the new state, at its second attempt."""
    uri = memory_uri()
    mgr = BucketLogManager(uri)
    mgr.create_topic("t", 1, {"segment.bytes": 1 << 20})
    for i in range(4):
        mgr.append("t", 0, encode_batches(pa.array([f"m{i}".encode()])))
    other = BucketLogManager(uri)
    uploads: list[int] = []
    real_upload = bucket_merge.upload

    def counting_upload(storage, segments) -> None:
        uploads.append(len(segments))
        real_upload(storage, segments)

    def append_meanwhile(step: str) -> None:
        if step == "merge-after-upload":
            other.append("t", 0, encode_batches(pa.array([b"tail"])))

    monkeypatch.setattr(bucket_merge, "upload", counting_upload)
    monkeypatch.setattr(bucket_merge, "crash_point", append_meanwhile)
    assert mgr.merge_segments() == 4
    assert uploads == [1] and mgr.commits.last_attempts == 2
    with LogManager(uri, read_only=True) as reader:
        assert [v for _, v in offsets_and_values(reader, "t")] == [
            b"m0",
            b"m1",
            b"m2",
            b"m3",
            b"tail",
        ]
        assert len(reader.state.partition("t", 0).segments) == 2  # merged + the tail
