"""A shared bucket: seglog deletes only objects it can prove are its own, and refuses a log
dir nested in another's prefix (or holding one) at open. On the session's real S3 server
(moto, or SeaweedFS with ``SEGLOG_TEST_S3_SERVER=seaweedfs``)."""

from __future__ import annotations

import pyarrow as pa
import pytest

from seglog.logstore.bucket.bucket_collect import collect
from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.bucket.bucket_segment import object_keys
from seglog.logstore.errors import LogDirError
from seglog.logstore.records.record_codec import decode_batches, encode_batches
from seglog.logstore.storage.object_storage import ObjectStorage

NO_DELAY = {"file.delete.delay.ms": 0}
FOREIGN = b"quarter,revenue\nq1,42\n"
SEGMENT_NAME = "00000000000000000000-0123456789abcdef"


def batch(*values: str) -> bytes:
    return encode_batches(pa.array([v.encode() for v in values]))


def values(mgr: BucketLogManager, topic: str) -> list[bytes]:
    log = mgr.get_log(topic, 0)
    out: list[bytes] = []
    for chunk in log.read_chunks(log.log_start_offset, log.high_watermark):
        out += decode_batches(bytes(chunk)).column("value").to_pylist()
    return out


def keys(storage: ObjectStorage) -> set[str]:
    return {e.name for e in storage.list_tree("")}


def fill(uri: str, topic: str = "t") -> set[str]:
    """A log dir with one topic and two appends; returns its object keys (bucket-wide)."""
    with BucketLogManager(uri, default_topic_config=NO_DELAY) as mgr:
        mgr.create_topic(topic, 1, NO_DELAY)
        mgr.append(topic, 0, batch("a", "b"))
        mgr.append(topic, 0, batch("c"))
    return keys(ObjectStorage(uri))


def collect_now(storage: ObjectStorage) -> None:
    """The collector a manager's maintenance runs, with no delay and no orphan grace."""
    collect(storage, delete_delay_ms=lambda _topic: 0, max_delete_delay_ms=0, orphan_grace=0)


def test_a_manager_at_the_bucket_root_is_refused_and_deletes_nothing(s3_uri: str) -> None:
    # The reported scenario: a log dir at s3://b/logs, a foreign CSV, and a second log dir
    # opened at the bucket root whose maintenance deleted both.
    root = s3_uri.rsplit("/", 1)[0]
    bucket = ObjectStorage(root)
    fill(s3_uri)
    bucket.write_atomic("reports/q1.csv", FOREIGN)
    before = keys(bucket)

    with pytest.raises(LogDirError) as refused:
        BucketLogManager(root, orphan_grace_ms=0).run_maintenance()
    assert f"{root} holds another log dir, {s3_uri}" in str(refused.value)

    assert keys(bucket) == before
    assert bucket.read("reports/q1.csv") == FOREIGN
    with BucketLogManager(s3_uri, read_only=True) as mgr:
        assert values(mgr, "t") == [b"a", b"b", b"c"]


def test_collection_at_the_root_never_deletes_another_log_dir_or_foreign_objects(
    s3_uri: str,
) -> None:
    # The collector itself, as the root manager's maintenance would run it: it lists no
    # prefix that no commit of its own names.
    root = s3_uri.rsplit("/", 1)[0]
    bucket = ObjectStorage(root)
    fill(s3_uri)
    bucket.write_atomic("reports/q1.csv", FOREIGN)
    bucket.write_atomic(f"other-0/{SEGMENT_NAME}.log", b"not ours")
    before = keys(bucket)

    collect_now(bucket)

    assert keys(bucket) == before | {"_seglog/clock"}  # the store's clock, read by writing
    bucket.delete("_seglog/clock")  # else the root is a log dir that holds s3_uri
    with BucketLogManager(s3_uri, read_only=True) as mgr:
        assert values(mgr, "t") == [b"a", b"b", b"c"]


def test_opening_inside_another_log_dir_is_refused(s3_uri: str) -> None:
    root = s3_uri.rsplit("/", 1)[0]
    fill(root, "r")  # a log dir at the bucket root
    for inner in (s3_uri, f"{s3_uri}/deeper/still"):
        with pytest.raises(LogDirError, match=f"{inner} is inside the log dir {root} "):
            BucketLogManager(inner)
        with pytest.raises(LogDirError, match="inside the log dir"):
            BucketLogManager(inner, read_only=True)
    assert not ObjectStorage(s3_uri).list_tree("")  # nothing was created in there


def test_a_partition_prefix_is_not_a_log_dir(s3_uri: str) -> None:
    fill(s3_uri)
    with pytest.raises(LogDirError) as refused:
        BucketLogManager(f"{s3_uri}/t-0", read_only=True)
    assert str(refused.value) == (
        f"{s3_uri}/t-0 is the prefix of partition t-0 of the log "
        f"dir {s3_uri}, not a log dir: name the log dir ({s3_uri})"
    )


def test_side_by_side_log_dirs_open(s3_uri: str) -> None:
    # Sibling prefixes (one a prefix of the other's name) are not nested.
    fill(s3_uri)
    fill(f"{s3_uri}-2")
    with BucketLogManager(s3_uri) as mgr:
        assert values(mgr, "t") == [b"a", b"b", b"c"]


def test_foreign_objects_in_a_log_dir_are_left_alone(s3_uri: str) -> None:
    storage = ObjectStorage(s3_uri)
    foreign = {
        "t-0/notes.txt": b"operator's notes",  # not a Kafka segment name
        f"t-0/archive/{SEGMENT_NAME}.log": b"deeper than a partition prefix",
        f"t-0/{SEGMENT_NAME}.log.bak": b"a backup",
        f"u-0/{SEGMENT_NAME}.log": b"a partition prefix no commit names",
        "reports/q1.csv": FOREIGN,
    }
    fill(s3_uri)
    for key, data in foreign.items():
        storage.write_atomic(key, data)
    orphan = f"t-0/{SEGMENT_NAME}.log"  # a dead writer's upload: seglog's own name
    storage.write_atomic(orphan, b"uncommitted")

    with BucketLogManager(s3_uri, orphan_grace_ms=0, default_topic_config=NO_DELAY) as mgr:
        runs = mgr.run_maintenance()
        assert all(r.ok for r in runs), [r.error for r in runs]
        referenced = {k for s in mgr.state.partition("t", 0).segments for k in object_keys(s)}
        assert values(mgr, "t") == [b"a", b"b", b"c"]

    left = keys(storage)
    assert orphan not in left
    assert referenced <= left
    for key, data in foreign.items():
        assert storage.read(key) == data, key
    findings, _ = BucketLogManager(s3_uri, read_only=True).check_objects()
    assert not [f for f in findings if "notes.txt" in f.where or "u-0" in f.where]


def test_a_deleted_topics_objects_are_collected_and_the_topic_can_be_recreated(s3_uri: str) -> None:
    storage = ObjectStorage(s3_uri)
    fill(s3_uri, "d")
    orphan = f"d-0/{SEGMENT_NAME}.log"
    storage.write_atomic(orphan, b"uncommitted")
    with BucketLogManager(s3_uri, orphan_grace_ms=0, default_topic_config=NO_DELAY) as mgr:
        old = {k for s in mgr.state.partition("d", 0).segments for k in object_keys(s)}
        mgr.delete_topic("d")
        stats = mgr.collect()
        assert stats.removed_objects == len(old) and stats.orphans == 1
        assert not storage.list_tree("d-0")

        mgr.create_topic("d", 1, NO_DELAY)
        mgr.append("d", 0, batch("new"))
        mgr.collect()
        assert values(mgr, "d") == [b"new"]
    with BucketLogManager(s3_uri, read_only=True) as reader:
        assert values(reader, "d") == [b"new"]
    assert keys(storage).isdisjoint(old)
