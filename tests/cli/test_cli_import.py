"""``seglog import DIR URI``: a local seglog or Kafka broker log dir copied into a bucket
(a moto S3 server); the bucket passes ``seglog check`` and reads what the dir held."""

from __future__ import annotations

import sys
from pathlib import Path

import pyarrow as pa
import pytest
from _cli import one_line_error, run

from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches
from seglog.logstore.records.record_format import verify_all

sys.path.insert(0, str(Path(__file__).parents[1] / "interop"))
from kafka_dirs import kraft_39_dir, zk_27_dir, zk_legacy_dir  # noqa: E402  (tests/interop)

T0 = 1_700_000_000_000


def _local_dir(d: Path) -> None:
    """Two topics: one with small segments whose log start moved up (delete-records, then
    retention), one compacted with offsets removed, config overrides on both."""
    with LogManager([d]) as mgr:
        mgr.create_topic("ev", 2, {"segment.bytes": "400", "retention.ms": "-1"})
        for i in range(40):
            mgr.append(
                "ev",
                i % 2,
                encode_batches(
                    pa.array([b"v%d" % i]),
                    keys=pa.array([b"k%d" % (i % 5)]),
                    timestamps=pa.array([T0 + i], pa.int64()),
                    compression="gzip",
                ),
            )
        mgr.create_topic(
            "kv",
            1,
            {
                "cleanup.policy": "compact",
                "segment.bytes": "300",
                "min.cleanable.dirty.ratio": "0.01",
            },
        )
        for i in range(30):
            mgr.append(
                "kv",
                0,
                encode_batches(
                    pa.array([b"x%d" % i]), keys=pa.array([b"k%d" % (i % 3 + 3 * (i >= 15))])
                ),
            )
        mgr.checkpoint_high_watermarks()
        mgr.get_log("ev", 0).maybe_increment_log_start_offset(7)
        mgr.delete_old_segments()
        mgr.clean()
        mgr.checkpoint_high_watermarks()


def _records(capsys, path: str, topic: str) -> list[dict]:
    r = run(capsys, "consume", topic, "--from-beginning", "--format", "json", "--path", path)
    assert r.code == 0, r
    return r.json_lines()


def _batches(log) -> list[bytes]:
    """The raw bytes of every batch a reader sees, in order."""
    out = []
    for chunk in log.read_chunks(log.log_start_offset, log.high_watermark, 1 << 20):
        out += [bytes(chunk[c.header.position : c.header.end_position]) for c in verify_all(chunk)]
    return out


def test_a_seglog_dir_imports_byte_for_byte(tmp_path, s3_uri, capsys):
    d = tmp_path / "logs"
    _local_dir(d)
    r = run(capsys, "import", d, s3_uri, "--json")
    assert r.code == 0, r
    doc = r.json()
    assert (doc["topics"], doc["partitions"]) == (2, 3) and doc["segments"] > 3
    check = run(capsys, "check", s3_uri, "--json")
    assert check.code == 0 and check.json()["ok"], check.out
    with (
        LogManager([d], read_only=True) as local,
        BucketLogManager(s3_uri, read_only=True) as bucket,
    ):
        assert bucket.topics() == local.topics()
        assert bucket.log_start_offsets() == {
            (t, p): local.get_log(t, p).log_start_offset
            for t in local.topics()
            for p in local.partitions(t)
        }
        assert bucket.high_watermarks() == local.high_watermarks()
        for t in ("ev", "kv"):
            assert bucket.topic_overrides(t) == local.topic_overrides(t)
            assert bucket.topic_ids([t]) == local.topic_ids([t])
            for p in local.partitions(t):
                assert _batches(bucket.get_log(t, p)) == _batches(local.get_log(t, p))
    assert bucket.get_log("ev", 0).log_start_offset == 7
    for t in ("ev", "kv"):
        assert _records(capsys, s3_uri, t) == _records(capsys, str(d), t)
    # what makes the copy hard is there: a moved log start, offsets compaction removed
    assert [x["offset"] for x in _records(capsys, s3_uri, "ev") if x["partition"] == 0][0] == 7
    kv = [x["offset"] for x in _records(capsys, s3_uri, "kv")]
    assert kv != list(range(kv[0], kv[0] + len(kv)))
    # a second import into the same bucket is refused before anything is written
    one_line_error(run(capsys, "import", d, s3_uri), "ev, kv", "already exist")


def test_a_kafka_broker_dir_imports_its_topics(tmp_path, s3_uri, capsys):
    broker = zk_27_dir(tmp_path / "broker")
    r = run(capsys, "import", broker.path, s3_uri, "--topic", "events")
    assert r.code == 0, r
    assert run(capsys, "check", s3_uri).code == 0
    assert _records(capsys, s3_uri, "events") == _records(capsys, str(broker.path), "events")
    # a topic holding transactions is refused, naming it; nothing of it is left
    one_line_error(
        run(capsys, "import", broker.path, s3_uri, "--topic", "txn"), "txn-0", "transaction"
    )
    assert run(capsys, "topics", "--path", s3_uri).out.splitlines() == ["events"]


@pytest.mark.parametrize("build", [zk_legacy_dir, kraft_39_dir])
def test_old_and_kraft_broker_dirs_import_whole(tmp_path, s3_uri, capsys, build):
    """Magic 0/1 messages (a compressed wrapper knows only its last offset), KRaft's
    __cluster_metadata (no topic) and several partitions: check passes, reads agree."""
    broker = build(tmp_path / "broker")
    r = run(capsys, "import", broker.path, s3_uri)
    assert r.code == 0, r
    check = run(capsys, "check", s3_uri)
    assert check.code == 0, check.out
    topics = run(capsys, "topics", "--path", s3_uri).out.split()
    assert topics == [t for t in broker.topics if not t.startswith("__")]
    for t in topics:
        assert _records(capsys, s3_uri, t) == _records(capsys, str(broker.path), t)


def test_import_refusals(tmp_path, s3_uri, capsys):
    one_line_error(run(capsys, "import", tmp_path / "missing", s3_uri), "missing")
    one_line_error(run(capsys, "import", tmp_path, tmp_path), "bucket")
    one_line_error(run(capsys, "import", s3_uri, tmp_path), "local log dir")
