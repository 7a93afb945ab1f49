from __future__ import annotations

import logging

import pytest

from seglog.logstore.config.config import LogConfig
from seglog.logstore.config.topics import (
    find_collision,
    has_collision_chars,
    load_topic_config,
    parse_overrides,
    read_topic_config,
    validate_topic_name,
    warn_on_collision,
    write_topic_config,
)
from seglog.logstore.errors import ConfigError, InvalidTopicError
from seglog.logstore.storage.file_names import TOPIC_CONFIG_FILE


@pytest.mark.parametrize("name", ["a", "orders", "my-topic.v2_eu", "A" * 249, "..a", "-"])
def test_legal_names(name):
    validate_topic_name(name)


@pytest.mark.parametrize(
    "name,fragment",
    [
        ("", "empty"),
        (".", "'.' or '..'"),
        ("..", "'.' or '..'"),
        ("a" * 250, "250 characters"),
        ("with space", "' '"),
        ("slash/es", "'/'"),
        ("ümlaut", "'ü'"),
        ("tab\t", "'\\t'"),
    ],
)
def test_illegal_names(name, fragment):
    with pytest.raises(InvalidTopicError) as e:
        validate_topic_name(name)
    assert fragment in str(e.value)


def test_collisions(caplog):
    assert has_collision_chars("a.b") and has_collision_chars("a_b")
    assert not has_collision_chars("a-b")
    assert find_collision("a.b", ["x", "a_b"]) == "a_b"
    assert find_collision("a.b", ["a.b", "a-b"]) is None
    with caplog.at_level(logging.WARNING, logger="seglog.logstore.config.topics"):
        warn_on_collision("a_b", ["a.b"])
    assert "collides with existing topic 'a.b'" in caplog.text


def test_overrides_are_validated_and_normalized():
    assert parse_overrides({"retention.ms": 1000, "cleanup.policy": "delete, compact",
                            "preallocate": True}) == {
        "cleanup.policy": "compact,delete", "preallocate": "true", "retention.ms": "1000"}
    assert parse_overrides(None) == {}
    with pytest.raises(ConfigError, match="segment.bytes"):
        parse_overrides({"segment.bytes": "tiny"})
    with pytest.raises(ConfigError, match="retention.mz"):
        parse_overrides({"retention.mz": "1"})


def test_an_override_equal_to_the_kafka_default_is_kept():
    # A process with another default topic config must still see the explicit value.
    assert parse_overrides({"retention.ms": 604_800_000}) == {"retention.ms": "604800000"}


def test_persisted_overrides_round_trip(tmp_path):
    overrides = parse_overrides({"segment.bytes": 1 << 20, "cleanup.policy": "compact"})
    write_topic_config(tmp_path, "t", overrides)
    assert read_topic_config(tmp_path) == overrides
    text = (tmp_path / TOPIC_CONFIG_FILE).read_text()
    assert "segment.bytes=1048576" in text and text.startswith("# ")
    default = LogConfig.from_properties({"retention.ms": "5000"})
    config = load_topic_config(tmp_path, default)
    assert config.segment_bytes == 1 << 20 and config.compact and config.retention_ms == 5000
    assert not (tmp_path / (TOPIC_CONFIG_FILE + ".tmp")).exists()


def test_missing_file_means_defaults(tmp_path):
    assert read_topic_config(tmp_path) is None
    assert load_topic_config(tmp_path, LogConfig.from_properties()) == LogConfig.from_properties()


@pytest.mark.parametrize(
    "content,fragment",
    [
        (b"segment.bytes\n", "line 1: expected key=value"),
        (b"# c\nsegment.bytes=12x\n", "segment.bytes"),
        (b"nope=1\n", "'nope'"),
        (b"segment.bytes=\xff\n", "not UTF-8"),
    ],
)
def test_malformed_file_names_the_file(tmp_path, content, fragment):
    (tmp_path / TOPIC_CONFIG_FILE).write_bytes(content)
    with pytest.raises(ConfigError) as e:
        read_topic_config(tmp_path)
    assert str(tmp_path / TOPIC_CONFIG_FILE) in str(e.value) and fragment in str(e.value)
