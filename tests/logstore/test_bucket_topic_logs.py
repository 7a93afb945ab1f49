"""Per-topic commit logs (bucket_logs): each topic created now has its own commit log
under ``_seglog/topics/<id>/``, the catalog ``_seglog/log/`` names it. Writers of
different topics never race each other and never touch the catalog on their append path;
a delete racing an append is never acknowledged into the dead log; a create racing a
create of the same name leaves one id, the loser's log collected; crashes between the two
commits of a create or a delete read correctly and are finished by the next writer; a
bucket written before per-topic logs opens, reads, appends and gets new topics in their
own logs. Real objects: the session's S3 server (moto) and memory://, real subprocesses
for the crashes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from bucket_helpers import log_values, memory_uri, store_moving_with

from seglog.logstore.bucket import bucket_append
from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.bucket.bucket_state import CATALOG, TOPIC_LOGS_DIR, Commit
from seglog.logstore.errors import (
    CorruptMetadataError,
    PartialCommitError,
    TopicExistsError,
    UnknownTopicOrPartitionError,
)
from seglog.logstore.records.record_codec import encode_batches
from seglog.logstore.storage.object_storage import ObjectStorage
from seglog.logstore.util.clock import MockClock

SRC = str(Path(__file__).resolve().parents[2] / "src")


def batch(text: str, n: int = 3) -> bytearray:
    return encode_batches(pa.array([f"{text}-{j}".encode() for j in range(n)]))


class KeyLog:
    """Forwards to ``inner``; ``keys`` holds (operation, key) of every request."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.keys: list[tuple[str, str]] = []
        self._lock = threading.Lock()

    @property
    def uri(self) -> str:
        return self.inner.uri

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self.inner, name)
        if not callable(attr):
            return attr

        def logged(*args: Any, **kwargs: Any) -> Any:
            with self._lock:
                self.keys.append((name, str(args[0]) if args else ""))
            return attr(*args, **kwargs)

        return logged


def catalog_requests(keys: list[tuple[str, str]]) -> list[tuple[str, str]]:
    return [
        (op, k)
        for op, k in keys
        if k == CATALOG.commit_dir
        or k.startswith(CATALOG.commit_dir + "/")
        or k.startswith(CATALOG.snapshot_dir)
        or k == CATALOG.hint_key
        or k == CATALOG.turn_key
    ]


def test_writers_of_two_topics_never_race_and_never_ask_the_catalog(s3_uri: str):
    with BucketLogManager(s3_uri) as admin:
        admin.create_topic("a", 1)
        admin.create_topic("b", 1)
    stores = {t: KeyLog(ObjectStorage(s3_uri)) for t in "ab"}
    writers = {t: BucketLogManager(stores[t]) for t in "ab"}
    for s in stores.values():
        s.keys.clear()
    attempts: dict[str, list[int]] = {"a": [], "b": []}
    start = threading.Barrier(2)

    def write(topic: str) -> None:
        mgr = writers[topic]
        start.wait()
        for i in range(15):
            mgr.append(topic, 0, batch(f"{topic}{i}"))
            attempts[topic].append(mgr.commits.last_attempts)

    threads = [threading.Thread(target=write, args=(t,)) for t in "ab"]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    # Every append won its first create: no lost race between the two topics.
    assert attempts == {"a": [1] * 15, "b": [1] * 15}
    for t in "ab":
        assert catalog_requests(stores[t].keys) == []
        assert all(k.startswith((f"{t}-0/", f"{TOPIC_LOGS_DIR}/")) for _, k in stores[t].keys)
        writers[t].close()
    with BucketLogManager(s3_uri, read_only=True) as reader:
        assert reader.high_watermarks() == {("a", 0): 45, ("b", 0): 45}


def test_a_delete_racing_an_append_is_never_acknowledged_into_the_dead_log(monkeypatch):
    """The delete's tombstone lands while the append uploads: the append's create loses
    to it, and the rebuild finds the topic gone."""
    uri = memory_uri()
    writer, other = BucketLogManager(uri), BucketLogManager(uri)
    writer.create_topic("t", 1)
    writer.append("t", 0, batch("before"))
    upload = bucket_append.upload_parts

    def delete_meanwhile(storage: Any, parts: Any) -> None:
        upload(storage, parts)
        if not deleted:
            deleted.append(1)
            other.delete_topic("t")

    deleted: list[int] = []
    monkeypatch.setattr(bucket_append, "upload_parts", delete_meanwhile)
    with pytest.raises(UnknownTopicOrPartitionError, match="'t'|t-0"):
        writer.append("t", 0, batch("racing"))
    reader = BucketLogManager(uri, read_only=True)
    assert reader.topics() == []
    assert "t" not in reader.commits.catalog.state.topic_logs  # both steps done
    writer.create_topic("t", 1)  # a new topic of that name: a new, empty log
    assert writer.high_watermarks() == {("t", 0): 0}


def test_a_create_racing_a_create_of_the_same_name_leaves_one_id(monkeypatch):
    """Writer A has written its topic log's first version when B creates the same name:
    A's catalog commit loses, A gets TopicExistsError, B's id is the topic's, and A's
    unnamed log is collected after the orphan grace."""
    clock = MockClock(int(time.time() * 1000))
    storage = store_moving_with(clock)
    a, b = BucketLogManager(storage, clock=clock), BucketLogManager(storage, clock=clock)
    first = a.commits._first_version

    def and_b_creates(*args: Any, **kwargs: Any) -> str:
        log_id = first(*args, **kwargs)
        b.create_topic("t", 2)
        return log_id

    monkeypatch.setattr(a.commits, "_first_version", and_b_creates)
    with pytest.raises(TopicExistsError, match="'t'"):
        a.create_topic("t", 1)
    reader = BucketLogManager(storage, clock=clock)
    assert reader.partitions("t") == [0, 1]  # B's
    winner = reader.commits.catalog.state.topic_logs["t"]
    logs = {e.name for e in storage.list_dir(TOPIC_LOGS_DIR) if e.is_dir}
    assert len(logs) == 2 and winner in logs
    (loser,) = logs - {winner}
    foreign = f"{TOPIC_LOGS_DIR}/{loser}/notes.txt"  # not a name a commit log writes
    storage.write_atomic(foreign, b"someone else's")
    assert reader.collect().topic_logs == 0  # younger than the orphan grace
    clock.advance(3_600_000)
    assert reader.collect().topic_logs == 1
    assert storage.read(foreign) == b"someone else's"
    storage.delete(foreign)
    assert {e.name for e in storage.list_dir(TOPIC_LOGS_DIR) if e.is_dir} == {winner}
    reader.append("t", 1, batch("x"))
    assert BucketLogManager(storage, clock=clock).high_watermarks() == {("t", 0): 0, ("t", 1): 3}


def _crash(s3_uri: str, step: str, script: str) -> None:
    env = {**os.environ, "SEGLOG_CRASH_AT": step, "PYTHONPATH": SRC}
    code = (
        "from seglog.logstore.bucket.bucket_manager import BucketLogManager\n"
        f"mgr = BucketLogManager({s3_uri!r})\n" + script
    )
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, timeout=120)
    assert done.returncode == -9, done.stderr.decode()[-2000:]  # killed at the step


def test_a_create_killed_between_its_topic_log_and_the_catalog_is_invisible(s3_uri: str):
    _crash(s3_uri, "create-after-topic-log", "mgr.create_topic('t', 1)")
    storage = ObjectStorage(s3_uri)
    assert len([e for e in storage.list_dir(TOPIC_LOGS_DIR) if e.is_dir]) == 1
    with BucketLogManager(s3_uri) as mgr:
        assert mgr.topics() == []  # its log is named by nothing: no topic
        mgr.create_topic("t", 1)  # the next writer creates it anew
        mgr.append("t", 0, batch("x"))
        assert [v for _, v in log_values(mgr, "t")] == [b"x-0", b"x-1", b"x-2"]


def test_a_delete_killed_between_its_tombstone_and_the_catalog_reads_deleted(s3_uri: str):
    with BucketLogManager(s3_uri) as mgr:
        mgr.create_topic("t", 1)
        mgr.append("t", 0, batch("x"))
    _crash(s3_uri, "delete-after-tombstone", "mgr.delete_topic('t')")
    with BucketLogManager(s3_uri) as mgr:
        assert "t" in mgr.commits.catalog.state.topic_logs  # the catalog step is missing
        assert mgr.topics() == []  # yet a log ending with a tombstone is a deleted topic
        with pytest.raises(UnknownTopicOrPartitionError):
            mgr.append("t", 0, batch("y"))
        with pytest.raises(UnknownTopicOrPartitionError):
            mgr.delete_topic("t")  # finishes the catalog step
        assert "t" not in mgr.commits.catalog.state.topic_logs
        mgr.create_topic("t", 1)
        assert mgr.high_watermarks() == {("t", 0): 0}


def test_append_many_over_topics_commits_each_and_names_the_committed_on_failure(monkeypatch):
    uri = memory_uri()
    mgr = BucketLogManager(uri)
    mgr.create_topic("a", 1)
    mgr.create_topic("b", 1)
    infos = mgr.append_many({("a", 0): batch("a"), ("b", 0): batch("b")})
    assert infos[("a", 0)].last_offset == 2 == infos[("b", 0)].last_offset
    other = BucketLogManager(uri)
    commit = bucket_append._commit

    def b_deleted_after_a(committer: Any, parts: Any) -> None:
        if parts[0].topic == "b":
            other.delete_topic("b")
        commit(committer, parts)

    monkeypatch.setattr(bucket_append, "_commit", b_deleted_after_a)
    with pytest.raises(PartialCommitError, match=r"\['a'\] committed.*\['b'\] failed") as e:
        mgr.append_many({("a", 0): batch("a2"), ("b", 0): batch("b2")})
    assert e.value.committed == ("a",)
    assert BucketLogManager(uri, read_only=True).high_watermarks() == {("a", 0): 6}


def test_a_bucket_written_before_topic_logs_opens_reads_appends_and_grows(s3_uri: str):
    """``topic_logs=False`` writes the catalog-only layout seglog wrote before (format-1
    commits only): a current manager reads and appends to those topics in the catalog,
    and creates new topics in their own logs, marking the catalog format 2."""
    with BucketLogManager(s3_uri, topic_logs=False) as old:
        old.create_topic("legacy", 2)
        old.append("legacy", 1, batch("old"))
    storage = ObjectStorage(s3_uri)
    assert [e.name for e in storage.list_dir(TOPIC_LOGS_DIR)] == []
    formats = {
        json.loads(storage.read(f"{CATALOG.commit_dir}/{e.name}"))["format"]
        for e in storage.list_dir(CATALOG.commit_dir)
    }
    assert formats == {1}
    with BucketLogManager(s3_uri) as mgr:
        assert [v for _, v in log_values(mgr, "legacy", 1)] == [b"old-0", b"old-1", b"old-2"]
        mgr.append("legacy", 1, batch("new"))
        mgr.create_topic("fresh", 1)
        mgr.append("fresh", 0, batch("f"))
        assert mgr.commits.topic_log("legacy") is None  # still in the catalog
        assert mgr.commits.topic_log("fresh") is not None
        version = mgr.commits.catalog.state.version
    newest = storage.read(CATALOG.commit_key(version))
    assert json.loads(newest)["format"] == 2  # seglog before topic logs refuses it
    assert Commit.decode(newest, "here", version).topic_logs
    with BucketLogManager(s3_uri, read_only=True) as reader:
        assert reader.high_watermarks() == {("legacy", 0): 0, ("legacy", 1): 6, ("fresh", 0): 3}


def test_a_commit_after_a_tombstone_is_refused_by_readers():
    """A writer never commits after its topic log's tombstone; a log that holds one anyway
    (a writer of another version, a hand edit) is damage, named, never read as the topic
    coming back."""
    uri = memory_uri()
    mgr = BucketLogManager(uri)
    mgr.create_topic("t", 1)
    layout = mgr.commits.topic_log("t").layout
    mgr.delete_topic("t")
    storage = ObjectStorage(uri)
    tombstone = json.loads(storage.read(layout.commit_key(1)))
    assert tombstone["topics"] == {"t": None}
    again = {**json.loads(storage.read(layout.commit_key(0))), "version": 2}
    storage.write_atomic(layout.commit_key(2), json.dumps(again).encode())
    with pytest.raises(CorruptMetadataError, match="follows the tombstone"):
        BucketLogManager(uri, read_only=True).commits.catalog.sibling(layout)
