"""``seglog upgrade URI``: a bucket written before per-topic commit logs has its legacy
topics moved into their own logs (``--dry-run`` lists them with sizes and writes nothing;
a second run moves nothing and says so); the older-versions warning comes before a move;
bad input (a local dir, an empty prefix, an unknown topic, an unreachable store) is one
line, status 2, nothing changed; ``seglog check`` names legacy topics until they moved.
Real objects on the session's S3 server (moto)."""

from __future__ import annotations

import pyarrow as pa
from _cli import run

from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.records.record_codec import encode_batches
from seglog.logstore.storage.object_storage import ObjectStorage


def legacy_bucket(uri: str) -> None:
    with BucketLogManager(uri, topic_logs=False) as old:
        old.create_topic("a", 2)
        old.create_topic("b", 1)
        old.append("a", 1, encode_batches(pa.array([b"x", b"y"])))


def listing(uri: str) -> list[str]:
    return sorted(e.name for e in ObjectStorage(uri).list_tree(""))


def test_upgrade_dry_run_then_moves_then_has_nothing_to_do(s3_uri: str, capsys):
    legacy_bucket(s3_uri)
    before = listing(s3_uri)
    dry = run(capsys, "upgrade", s3_uri, "--dry-run")
    assert dry.code == 0, dry.err
    assert "Would move topic a (2 partition(s), 1 segment(s), " in dry.out
    assert "Would move topic b (1 partition(s), 0 segment(s), 0 bytes)" in dry.out
    assert "Dry run: nothing was changed" in dry.out and "unknown commit format 2" in dry.out
    assert listing(s3_uri) == before
    done = run(capsys, "upgrade", s3_uri, "--json")
    assert done.code == 0, done.err
    assert "stop or upgrade every older reader and writer" in done.err
    doc = done.json()
    assert [m["topic"] for m in doc["moved"]] == ["a", "b"] and not doc["dryRun"]
    assert all(m["log"] for m in doc["moved"]) and doc["moved"][0]["sizeBytes"] > 0
    again = run(capsys, "upgrade", s3_uri)
    assert again.code == 0 and again.err == ""
    assert "Nothing to move" in again.out
    assert "In their own commit logs already (untouched): a, b" in again.out
    with BucketLogManager(s3_uri, read_only=True) as mgr:
        assert mgr.high_watermarks() == {("a", 0): 0, ("a", 1): 2, ("b", 0): 0}
        assert set(mgr.commits.catalog.state.topic_logs) == {"a", "b"}


def test_upgrade_of_one_named_topic_leaves_the_others(s3_uri: str, capsys):
    legacy_bucket(s3_uri)
    done = run(capsys, "upgrade", s3_uri, "--topic", "b")
    assert done.code == 0, done.err
    assert "Moved topic b" in done.out and "topic a" not in done.out
    with BucketLogManager(s3_uri, read_only=True) as mgr:
        assert set(mgr.commits.catalog.state.topic_logs) == {"b"}
        assert set(mgr.commits.catalog.state.topics) == {"a"}


def test_upgrade_refuses_bad_input_in_one_line_and_changes_nothing(s3_uri: str, tmp_path, capsys):
    local = run(capsys, "upgrade", str(tmp_path))
    assert local.code == 2 and "bucket log dir" in local.err and len(local.err.splitlines()) == 1
    empty = run(capsys, "upgrade", s3_uri)
    assert empty.code == 2 and f"no bucket log dir at {s3_uri}" in empty.err
    legacy_bucket(s3_uri)
    before = listing(s3_uri)
    unknown = run(capsys, "upgrade", s3_uri, "--topic", "nope")
    assert unknown.code == 2 and "no topic 'nope' to move" in unknown.err
    assert len(unknown.err.splitlines()) == 1
    assert listing(s3_uri) == before
    gone = run(
        capsys,
        "upgrade",
        s3_uri,
        "--storage-option",
        "aws_endpoint=http://127.0.0.1:9",
        "--storage-option",
        "retry_timeout=1s",
    )
    assert gone.code == 2 and len(gone.err.splitlines()) == 1, gone.err
    assert gone.err.startswith("seglog upgrade: ")
    assert listing(s3_uri) == before


def test_check_names_legacy_topics_until_they_moved(s3_uri: str, capsys):
    legacy_bucket(s3_uri)
    with BucketLogManager(s3_uri) as mgr:
        mgr.create_topic("fresh", 1)
    checked = run(capsys, "check", s3_uri)
    assert "topic a: legacy (in the catalog log): `seglog upgrade` moves it" in checked.out
    assert "topic b: legacy" in checked.out and "topic fresh: legacy" not in checked.out
    run(capsys, "upgrade", s3_uri)
    checked = run(capsys, "check", s3_uri)
    assert "legacy" not in checked.out
