"""The ``seglog`` commands on a bucket URI (a moto S3 server): topics, produce/consume,
maintain, export, check and dump-log take a URI wherever they take a log dir."""

from __future__ import annotations

from pathlib import Path

import pyarrow as pa
from _cli import run, run_process

from seglog.logstore.bucket.bucket_manager import BucketLogManager
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches
from seglog.logstore.storage.object_storage import ObjectStorage


def test_topic_commands_produce_and_consume_on_a_bucket(s3_uri: str, capsys):
    uri = s3_uri
    assert run(capsys, "create", "t", "--path", uri, "--partitions", "2").code == 0
    r = run_process("produce", "t", "--path", uri, "--partition", "1", "--key-separator", ":",
                    stdin=b"a:1\nb:2\nc:3\n")
    assert r.code == 0 and "partition 1 offsets 0..2" in r.out, r
    assert run(capsys, "topics", "--path", uri).out == "t\n"
    (described,) = run(capsys, "describe", "t", "--path", uri, "--json").json()["topics"]
    assert [(p["partition"], p["endOffset"], p["logDir"]) for p in described["partitions"]] \
        == [(0, 0, uri), (1, 3, uri)]
    assert described["topicId"] == LogManager(uri, read_only=True).topic_ids(["t"])["t"]
    assert described["topicId"] is not None
    got = run(capsys, "consume", "t", "--path", uri, "--from-beginning", "--format", "json")
    assert [(x["key"], x["value"]) for x in got.json_lines()] == \
        [("a", "1"), ("b", "2"), ("c", "3")]
    r = run(capsys, "alter-config", "t", "--path", uri, "--add-config", "retention.ms=5000")
    assert r.code == 0
    assert LogManager(uri, read_only=True).topic_overrides("t") == {"retention.ms": "5000"}
    assert run(capsys, "delete", "t", "--path", uri).code == 0
    assert run(capsys, "topics", "--path", uri).out == ""


def _small_segments(uri: str) -> BucketLogManager:
    mgr = BucketLogManager(uri)
    mgr.create_topic("t", 1, {"retention.ms": -1})
    for i in range(5):
        mgr.append("t", 0, encode_batches(pa.array([f"v{i}".encode()])))
    return mgr


def test_maintain_export_and_check_on_a_bucket(s3_uri: str, capsys, tmp_path: Path):
    uri = s3_uri
    mgr = _small_segments(uri)
    r = run(capsys, "maintain", uri)
    assert r.code == 0 and "segment-merge: 5 small segment(s) merged" in r.out, r
    mgr.refresh()
    assert len(mgr.state.partition("t", 0).segments) == 1
    r = run(capsys, "check", uri)
    assert r.code == 0, r
    assert "not referenced by the current state" in r.out  # the merged sources: notes
    assert f"{uri}/t-0: 1 segment(s), 5 batch(es), log end offset 5: OK" in r.out

    target = tmp_path / "exported"
    r = run(capsys, "export", uri, str(target))
    assert r.code == 0 and "1 segment(s)" in r.out, r
    assert run(capsys, "check", str(target)).code == 0
    assert (target / "t-0" / f"{0:020d}.log").is_file()


def test_check_names_an_object_that_is_not_what_its_commit_says(s3_uri: str, capsys):
    uri = s3_uri
    mgr = _small_segments(uri)
    victim = mgr.state.partition("t", 0).segments[2]
    data = bytearray(mgr.storage.read(victim.key + ".log"))
    data[-1] ^= 0x55
    ObjectStorage(uri).write_atomic(victim.key + ".log", bytes(data))
    r = run(capsys, "check", uri, "--json")
    assert r.code == 1
    assert f"{uri}/{victim.key}.log" in r.out and "CRC" in r.out


def test_dump_log_of_a_bucket_object(s3_uri: str, capsys):
    uri = s3_uri
    mgr = _small_segments(uri)
    seg = mgr.state.partition("t", 0).segments[3]
    r = run(capsys, "dump-log", f"{uri}/{seg.key}.log", "--print-data-log")
    assert r.code == 0, r
    assert "Log starting offset: 3" in r.out and "payload: v3" in r.out
    r = run(capsys, "dump-log", f"{uri}/t-0/nothing.log")
    assert r.code == 1


def test_check_refuses_a_partition_prefix(s3_uri: str, capsys):
    _small_segments(s3_uri).close()
    r = run(capsys, "check", f"{s3_uri}/t-0")
    assert r.code == 1, r
    assert (f"{s3_uri}/t-0: {s3_uri}/t-0 is the prefix of partition t-0 of the log dir "
            f"{s3_uri}, not a log dir: name the log dir ({s3_uri})") in r.out
    r = run(capsys, "topics", "--path", f"{s3_uri}/t-0")
    assert r.code == 2 and "is the prefix of partition t-0 of the log dir" in r.err, r


def test_an_empty_or_mistyped_bucket_log_dir_is_an_error(s3_uri: str, capsys,
                                                         tmp_path: Path):
    _small_segments(s3_uri).close()
    mistyped = f"{s3_uri}-typo"
    r = run(capsys, "check", mistyped)
    assert r.code == 1, r
    assert f"{mistyped}: no log dir here: nothing under {mistyped}/_seglog/log/" in r.out
    assert run(capsys, "check", mistyped, "--json").json()["dirs"][0]["problems"] == [
        {"file": mistyped, "message": f"no log dir here: nothing under {mistyped}/_seglog/"
                                      "log/ (a mistyped bucket or prefix?)"}]
    message = (f"log dir {mistyped} does not exist: nothing under {mistyped}/_seglog/log/ "
               "(a mistyped bucket or prefix? seglog create makes a log dir)")
    for argv in (("topics", "--path", mistyped), ("describe", "t", "--path", mistyped),
                 ("consume", "t", "--path", mistyped, "--from-beginning"),
                 ("maintain", mistyped), ("export", mistyped, str(tmp_path / "out"))):
        r = run(capsys, *argv)
        assert r.code == 2 and message in r.err, (argv, r)
    assert not ObjectStorage(mistyped).list_tree("")  # nothing written by any of them
    # create makes one, and the commands then see it (an empty log dir is not missing).
    assert run(capsys, "create", "t", "--path", mistyped).code == 0
    assert run(capsys, "topics", "--path", mistyped).out == "t\n"
    assert run(capsys, "check", mistyped).code == 0
