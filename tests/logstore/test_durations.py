"""One duration syntax (Spark's ``timeStringAsMs``) for source, sink and storage options:
the same text means the same time wherever it is given."""

from __future__ import annotations

from datetime import timedelta

import pytest

from seglog.logstore.errors import ConfigError
from seglog.logstore.storage.durations import parse_duration_ms
from seglog.logstore.storage.object_store_config import parse_object_uri, split_options
from seglog.streaming.source_options import SourceOptions


@pytest.mark.parametrize(
    ("text", "ms"),
    [
        ("250", 250),
        ("250ms", 250),
        ("1500us", 1),
        ("10s", 10_000),
        ("2m", 120_000),
        ("2min", 120_000),
        ("1h", 3_600_000),
        ("1d", 86_400_000),
        (" 30S ", 30_000),
        ("0", 0),
    ],
)
def test_spark_time_strings(text: str, ms: int):
    assert parse_duration_ms(text, "x") == ms


@pytest.mark.parametrize("text", ["", "1.5s", "10 sec", "soon", "5w", "-1", "-5s", "s"])
def test_bad_durations_name_the_option(text: str):
    with pytest.raises(ConfigError, match="option 'retry_timeout'"):
        parse_duration_ms(text, "retry_timeout")


@pytest.mark.parametrize("text", ["45", "45s", "2h", "1d"])
def test_source_and_storage_options_read_a_duration_alike(text: str):
    source = SourceOptions.parse(
        {"path": "/d", "subscribe": "t", "maxTriggerDelay": text, "minOffsetsPerTrigger": "10"},
        streaming=True,
    )
    settings = split_options(
        parse_object_uri("s3://bucket/logs"), {"retry_timeout": text, "connect_timeout": text}
    )
    assert settings.retry_config["retry_timeout"] == timedelta(
        milliseconds=source.max_trigger_delay_ms
    )
    assert settings.client_options["connect_timeout"] == f"{source.max_trigger_delay_ms}ms"
