from __future__ import annotations

import pytest

from seglog.logstore.config.config import LONG_MAX, LogConfig, ManagerConfig
from seglog.logstore.errors import ConfigError, SeglogError


def test_defaults_are_kafkas():
    c = LogConfig.from_properties()
    assert c.segment_bytes == 1 << 30
    assert c.segment_index_bytes == 10 * 1024 * 1024
    assert c.index_interval_bytes == 4096
    assert c.retention_ms == 604_800_000
    assert c.retention_bytes == -1
    assert c.flush_messages == LONG_MAX
    assert c.file_delete_delay_ms == 60_000
    assert c.cleanup_policy == frozenset({"delete"})
    assert c.max_message_bytes == 1_048_588
    assert c.message_timestamp_type == "CreateTime"


def test_overrides_parse_and_round_trip():
    c = LogConfig.from_properties(
        {"segment.bytes": "1048576", "cleanup.policy": "compact, delete",
         "message.timestamp.type": "logappendtime", "min.cleanable.dirty.ratio": "0.25"})
    assert c.segment_bytes == 1048576 and c.compact and c.delete
    assert c.message_timestamp_type == "LogAppendTime"
    assert LogConfig.from_properties(c.overrides()) == c


@pytest.mark.parametrize(
    "key,value,fragment",
    [
        ("segment.bytes", "abc", "segment.bytes"),
        ("segment.bytes", "10", "between 14 and"),
        ("retention.ms", "-2", "retention.ms"),
        ("cleanup.policy", "forever", "cleanup.policy"),
        ("message.timestamp.type", "Now", "message.timestamp.type"),
        ("min.cleanable.dirty.ratio", "1.5", "between"),
        ("segmentbytes", "1", "unknown config 'segmentbytes'"),
    ],
)
def test_bad_values_name_the_key(key, value, fragment):
    with pytest.raises(ConfigError, match=fragment) as info:
        LogConfig.from_properties({key: value})
    assert isinstance(info.value, SeglogError)


def test_base_config_is_overridden_not_replaced():
    base = LogConfig.from_properties({"segment.bytes": "2048"})
    c = LogConfig.from_properties({"retention.ms": "-1"}, base=base)
    assert (c.segment_bytes, c.retention_ms) == (2048, -1)


def test_manager_config():
    m = ManagerConfig.from_properties({"log.retention.check.interval.ms": "100"})
    assert m.log_retention_check_interval_ms == 100
    with pytest.raises(ConfigError, match="segment.bytes"):
        ManagerConfig.from_properties({"segment.bytes": "1"})


def test_a_manager_takes_a_config_or_a_mapping_of_keys():
    given = LogConfig.from_properties({"segment.bytes": "2048"})
    assert LogConfig.of(given) is given
    assert LogConfig.of({"segment.bytes": "2048"}) == given
    assert LogConfig.of(None) == LogConfig.from_properties()
    assert ManagerConfig.of({"log.retention.check.interval.ms": 100}) \
        .log_retention_check_interval_ms == 100
    with pytest.raises(ConfigError, match="'retention.bytes'"):
        ManagerConfig.of({"retention.bytes": 1})  # a topic key is no manager key
    with pytest.raises(ConfigError, match="expected a LogConfig .* got a ManagerConfig"):
        LogConfig.of(ManagerConfig.of(None))
