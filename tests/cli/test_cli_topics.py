"""``seglog topics / describe / create / delete / alter-config`` on real log dirs."""

from __future__ import annotations

import os
from pathlib import Path

from _cli import Result, one_line_error, run, run_process

from seglog.logstore.log.partition_metadata import (
    new_topic_id,
    partition_metadata_path,
    read_topic_id,
    write_partition_metadata,
)
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.storage.file_names import CLEAN_SHUTDOWN_FILE


def test_create_describe_alter_delete_round_trip(tmp_path, capsys):
    d = tmp_path / "logs"
    r = run(capsys, "create", "events", "--path", d, "--partitions", "3",
            "--config", "retention.ms=86400000", "--config", "cleanup.policy=compact,delete")
    assert r.code == 0 and "Created topic events with 3 partition(s)" in r.out
    assert (d / CLEAN_SHUTDOWN_FILE).exists()  # the writer closed cleanly
    assert run(capsys, "create", "other", "--path", d).code == 0

    r = run(capsys, "topics", "--path", d)
    assert r.code == 0 and r.out.splitlines() == ["events", "other"]
    assert run(capsys, "topics", "--path", d, "--json").json() == {
        "topics": [{"topic": "events", "partitions": 3}, {"topic": "other", "partitions": 1}]}

    doc = run(capsys, "describe", "events", "--path", d, "--json").json()["topics"][0]
    assert doc["topicId"] == read_topic_id(d / "events-2") and len(doc["topicId"]) == 22
    assert [p["partition"] for p in doc["partitions"]] == [0, 1, 2]
    assert doc["partitions"][0] == {"partition": 0, "logDir": str(d.resolve()),
                                    "startOffset": 0, "endOffset": 0, "sizeBytes": 0,
                                    "segments": 1}
    assert doc["configs"]["retention.ms"] == {"value": "86400000", "override": True}
    assert doc["configs"]["cleanup.policy"] == {"value": "compact,delete", "override": True}
    assert doc["configs"]["segment.bytes"] == {"value": str(1 << 30), "override": False}

    r = run(capsys, "alter-config", "events", "--path", d,
            "--add-config", "segment.bytes=1048576,cleanup.policy=[compact]",
            "--delete-config", "retention.ms")
    assert r.code == 0, r
    # persisted for the next writer (and reader) of the dir, in every partition
    with LogManager([d]) as mgr:
        cfg = mgr.topic_config("events")
        assert (cfg.segment_bytes, cfg.cleanup_policy) == (1048576, frozenset({"compact"}))
        assert cfg.retention_ms == 7 * 24 * 3600 * 1000
        assert mgr.check() == []  # every partition's config file agrees
    partition_metadata_path(d / "other-0").unlink()  # as a dir from before topic ids
    assert run(capsys, "describe", "other", "--path", d, "--json").json()["topics"][0][
        "topicId"] is None
    assert "Topic: other\tTopicId: none\t" in run(capsys, "describe", "other", "--path", d).out
    text = run(capsys, "describe", "events", "--path", d).out
    assert f"Topic: events\tTopicId: {doc['topicId']}\tPartitionCount: 3" in text
    assert "Configs: segment.bytes=1048576,cleanup.policy=compact" in text
    assert "  * segment.bytes=1048576" in text and "    retention.ms=604800000" in text

    r = run(capsys, "delete", "events", "--path", d, "--json")
    assert r.json() == {"topic": "events", "deleted": True, "partitions": 3}
    assert run(capsys, "topics", "--path", d).out.splitlines() == ["other"]
    doomed = sorted(n for n in os.listdir(d) if n.startswith("events"))
    assert len(doomed) == 3 and all(n.endswith("-delete") for n in doomed)
    # the next writer removes the -delete dirs as it opens the dir, and says so
    r = run(capsys, "maintain", d)
    assert r.code == 0
    assert [line for line in r.out.splitlines() if line.startswith("delete-logs")] == [
        f"delete-logs: removed {d / n} (a deleted topic's partition)" for n in doomed]
    assert sorted(n for n in os.listdir(d) if n.startswith("events")) == []
    assert run(capsys, "maintain", d, "--json").json()["removedDirectories"] == []
    r = run(capsys, "delete", "other", "--path", d)
    assert "removed by the next writer that opens the log dir" in r.out
    assert "file.delete.delay.ms" not in r.out
    doc = run(capsys, "maintain", d, "--json").json()
    assert [Path(x).name.split(".")[0] for x in doc["removedDirectories"]] == ["other-0"]


def test_errors_are_one_line_naming_what_is_wrong(tmp_path, capsys):
    d = tmp_path / "logs"
    assert run(capsys, "create", "t", "--path", d).code == 0
    one_line_error(run(capsys, "create", "t2", "--path", d, "--config", "retention.mss=1"),
                   "retention.mss")
    # what the value must be, not Python's "invalid literal for int()"
    r = run(capsys, "create", "t2", "--path", d, "--config", "retention.ms=soon")
    one_line_error(r, "retention.ms", "soon", "an integer (milliseconds)",
                   "-1 (unlimited) or at least 0")
    assert "invalid literal" not in r.err
    r = run(capsys, "create", "t2", "--path", d, "--config", "min.cleanable.dirty.ratio=x")
    one_line_error(r, "min.cleanable.dirty.ratio", "a number", "between 0.0 and 1.0")
    assert "could not convert" not in r.err
    one_line_error(run(capsys, "create", "t2", "--path", d, "--config", "segment.bytes=1e6"),
                   "segment.bytes", "an integer (bytes)", "between 14 and 2147483647")
    one_line_error(run(capsys, "create", "t2", "--path", d, "--config", "retention.ms"),
                   "--config")
    one_line_error(run(capsys, "create", "bad/name", "--path", d), "bad/name")
    one_line_error(run(capsys, "create", "t", "--path", d), "'t'", "already exists")
    assert run(capsys, "create", "t", "--path", d, "--if-not-exists").code == 0
    one_line_error(run(capsys, "describe", "nope", "--path", d), "nope")
    one_line_error(run(capsys, "delete", "nope", "--path", d), "nope")
    assert run(capsys, "delete", "nope", "--path", d, "--if-exists").code == 0
    one_line_error(run(capsys, "alter-config", "t", "--path", d, "--add-config",
                       "max.message.bytes=-5"), "max.message.bytes")
    one_line_error(run(capsys, "alter-config", "t", "--path", d, "--delete-config",
                       "nonsense.key"), "nonsense.key")
    one_line_error(run(capsys, "topics", "--path", tmp_path / "missing"), "missing", "--path")
    one_line_error(run(capsys, "maintain", "--path", tmp_path / "missing"), "missing")
    assert not (tmp_path / "missing").exists()  # a mistyped dir is not created
    # refusals leave the dir cleanly closed (no recovery on the next open)
    assert (d / CLEAN_SHUTDOWN_FILE).exists()


def test_log_dirs_from_the_environment_and_comma_lists(tmp_path, capsys, monkeypatch):
    a, b = tmp_path / "a", tmp_path / "b"
    monkeypatch.setenv("SEGLOG_PATH", f"{a},{b}")
    assert run(capsys, "create", "t", "--partitions", "4").code == 0
    assert {n for n in os.listdir(a) if n.startswith("t-")} | \
        {n for n in os.listdir(b) if n.startswith("t-")} == {"t-0", "t-1", "t-2", "t-3"}
    monkeypatch.delenv("SEGLOG_PATH")
    assert run(capsys, "topics", "--path", f"{a},{b}").out == "t\n"
    assert run(capsys, "topics", "--path", a, "--path", b).out == "t\n"
    one_line_error(run(capsys, "topics"), "--path", "SEGLOG_PATH")
    one_line_error(run(capsys, "topics", "--path", f"{a},{a}"), "twice")


def test_a_writer_waits_for_the_lock_then_names_the_holder(tmp_path, capsys):
    d = tmp_path / "logs"
    with LogManager([d]) as holder:
        holder.create_topic("t")
        r = run_process("create", "u", "--path", d, "--lock-timeout", "300")
        waiting, failure = r.err.splitlines()  # "waiting up to 300 ms", then the error
        assert "waiting up to 300 ms" in waiting
        one_line_error(Result(r.code, r.out, failure),
                       str(d), f"pid={os.getpid()}", "--lock-timeout")
        # readers take no lock
        assert run_process("topics", "--path", d).out == "t\n"
    assert run_process("create", "u", "--path", d, "--lock-timeout", "300").code == 0


def test_describe_shows_a_topic_id_problem_and_describes_the_other_topics(tmp_path, capsys):
    d = tmp_path / "logs"
    assert run(capsys, "create", "bad", "--path", d, "--partitions", "2").code == 0
    assert run(capsys, "create", "good", "--path", d).code == 0
    write_partition_metadata(d / "bad-1", new_topic_id())  # another topic's id moved in
    r = run(capsys, "describe", "--path", d, "--json")
    assert r.code == 0, r
    docs = {t["topic"]: t for t in r.json()["topics"]}
    assert docs["bad"]["topicId"] is None and "different topic ids" in docs["bad"][
        "topicIdProblem"]
    assert docs["good"]["topicId"] and docs["good"]["topicIdProblem"] is None
    text = run(capsys, "describe", "--path", d).out
    assert "Topic: bad\tTopicId: unreadable (see seglog check)\t" in text
    assert "Topic: good\tTopicId: " in text
