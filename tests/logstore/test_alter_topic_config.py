"""``LogManager.alter_topic_config``: persisted overrides, every partition, lowest last."""

from __future__ import annotations

import pytest

from seglog.logstore.config.topics import altered_overrides, read_topic_config
from seglog.logstore.errors import ConfigError, ReadOnlyError, UnknownTopicOrPartitionError
from seglog.logstore.manager import log_manager_topics
from seglog.logstore.manager.log_manager import LogManager


def test_set_and_delete_overrides_reach_every_partition_and_the_next_writer(tmp_path):
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("t", 3, {"retention.ms": 1000, "segment.bytes": 4096})
        new = mgr.alter_topic_config("t", {"cleanup.policy": "compact,delete"},
                                     ["retention.ms"])
        assert new == {"cleanup.policy": "compact,delete", "segment.bytes": "4096"}
        assert mgr.topic_overrides("t") == new
        for p in range(3):
            assert read_topic_config(tmp_path / f"t-{p}") == new
    with LogManager([tmp_path], read_only=True) as reader:
        cfg = reader.topic_config("t")
        assert cfg.cleanup_policy == frozenset({"compact", "delete"})
        assert cfg.retention_ms == 7 * 24 * 3600 * 1000 and cfg.segment_bytes == 4096
        with pytest.raises(ReadOnlyError):
            reader.alter_topic_config("t", {"retention.ms": 1})


def test_bad_keys_values_and_topics_are_refused_before_anything_is_written(tmp_path):
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("t", 2, {"retention.ms": 1000})
        with pytest.raises(ConfigError, match="'retention.mss'"):
            mgr.alter_topic_config("t", {"retention.mss": 5})
        with pytest.raises(ConfigError, match="'segment.bytes'"):
            mgr.alter_topic_config("t", {"segment.bytes": "3"})
        with pytest.raises(ConfigError, match="'bogus'"):
            mgr.alter_topic_config("t", delete=["bogus"])
        with pytest.raises(ConfigError, match="both set and deleted"):
            mgr.alter_topic_config("t", {"retention.ms": 5}, ["retention.ms"])
        with pytest.raises(UnknownTopicOrPartitionError, match="'u'"):
            mgr.alter_topic_config("u", {"retention.ms": 5})
        for p in range(2):
            assert read_topic_config(tmp_path / f"t-{p}") == {"retention.ms": "1000"}
    # deleting a known key that is not overridden changes nothing
    assert altered_overrides({"retention.ms": "1"}, None, ["flush.ms"]) == {"retention.ms": "1"}


def test_a_crash_part_way_leaves_the_old_config_in_force(tmp_path, monkeypatch):
    """The lowest partition is written last: a failure before it leaves the topic's
    config (the lowest partition's) unchanged, and check reports the disagreement."""
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("t", 3, {"retention.ms": 1000})
    written = []
    real = log_manager_topics.write_topic_config

    def failing(partition_dir, topic, overrides):
        if partition_dir.name == "t-0":
            raise OSError("disk full")
        written.append(partition_dir.name)
        real(partition_dir, topic, overrides)

    monkeypatch.setattr(log_manager_topics, "write_topic_config", failing)
    with LogManager([tmp_path]) as mgr, pytest.raises(OSError):
        mgr.alter_topic_config("t", {"retention.ms": 5})
    monkeypatch.undo()
    assert written == ["t-2", "t-1"]
    with LogManager([tmp_path]) as mgr:
        assert mgr.topic_overrides("t") == {"retention.ms": "1000"}
        problems = mgr.check()
        assert {p.path.name for p in problems} == {"t-1", "t-2"}, problems
        mgr.alter_topic_config("t", {"retention.ms": 5})  # running it again completes it
        assert mgr.check() == []
