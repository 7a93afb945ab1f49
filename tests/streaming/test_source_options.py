"""Source options: Kafka names, case-insensitive, every bad input named."""

from __future__ import annotations

import pytest

from seglog.logstore.errors import ConfigError
from seglog.streaming.source_options import (
    Earliest,
    GlobalTimestamp,
    Latest,
    SourceOptions,
    SpecificOffsets,
    SpecificTimestamps,
    Subscription,
    include_headers,
    parse_duration_ms,
)

BASE = {"path": "/data/logs", "subscribe": "events"}


def parse(streaming=True, **extra):
    return SourceOptions.parse({**BASE, **extra}, streaming=streaming)


def test_defaults_follow_kafka():
    s = parse()
    assert s.log_dirs == ("/data/logs",)
    assert s.subscription == Subscription("subscribe", topics=("events",))
    assert s.starting == Latest() and s.fail_on_data_loss and not s.include_headers
    assert s.max_trigger_delay_ms == 15 * 60 * 1000 and not s.has_limits
    b = parse(streaming=False)
    assert b.starting == Earliest() and b.ending == Latest()


def test_names_are_case_insensitive_as_spark_lowercases_them():
    s = SourceOptions.parse(
        {"PATH": "/a", "subscribepattern": "ev.*", "MAXOFFSETSPERTRIGGER": "10",
         "includeheaders": "TRUE", "FailOnDataLoss": "false"},
        streaming=True,
    )
    assert s.subscription.kind == "subscribePattern" and s.max_offsets_per_trigger == 10
    assert s.include_headers and not s.fail_on_data_loss
    assert include_headers({"INCLUDEHEADERS": "true"}) and not include_headers({})


def test_log_dirs_and_json_offsets():
    s = SourceOptions.parse(
        {"logDirs": "/a, /b", "assign": '{"t": [1, 0], "u": [2]}',
         "startingOffsets": '{"u": {"2": -2}, "t": {"1": 5, "0": -1}}'},
        streaming=True,
    )
    assert s.log_dirs == ("/a", "/b")
    assert s.subscription.partitions == (("t", 0), ("t", 1), ("u", 2))
    assert s.starting == SpecificOffsets(((("t", 0), -1), (("t", 1), 5), (("u", 2), -2)))


def test_timestamps_take_kafkas_precedence():
    s = parse(startingTimestamp="1000", startingOffsets="earliest")
    assert s.starting == GlobalTimestamp(1000)
    s = parse(startingOffsetsByTimestamp='{"events": {"0": 5}}', startingOffsets="earliest")
    assert s.starting == SpecificTimestamps(((("events", 0), 5),))
    b = parse(streaming=False, endingTimestamp="77")
    assert b.ending == GlobalTimestamp(77)
    assert parse(startingOffsetsByTimestampStrategy="LATEST").starting_by_timestamp_strategy == (
        "latest"
    )


def test_durations_use_kafkas_syntax():
    assert parse_duration_ms("15m", "x") == 900_000
    assert parse_duration_ms("10s", "x") == 10_000
    assert parse_duration_ms("250", "x") == 250
    assert parse_duration_ms("1h", "x") == 3_600_000
    assert parse(maxTriggerDelay="2min", minOffsetsPerTrigger="5").max_trigger_delay_ms == 120_000


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"subscribePattern": "e.*"}, "subscribePattern"),
        ({"assign": '{"t": [0]}'}, "assign"),
        ({"startingOffsets": '{"t": {"0": 1}'}, "startingOffsets"),
        ({"startingOffsets": '{"t": [0]}'}, "startingOffsets"),
        ({"startingOffsets": '{"t": {"x": 1}}'}, "startingOffsets"),
        ({"startingOffsets": '{"t": {"0": -3}}'}, "startingOffsets"),
        ({"startingOffsetsByTimestamp": "[]"}, "startingOffsetsByTimestamp"),
        ({"startingTimestamp": "yesterday"}, "startingTimestamp"),
        ({"maxOffsetsPerTrigger": "0"}, "maxOffsetsPerTrigger"),
        ({"maxOffsetsPerTrigger": "ten"}, "maxOffsetsPerTrigger"),
        ({"maxTriggerDelay": "5 parsecs"}, "maxTriggerDelay"),
        ({"maxBytesPerTrigger": "-1"}, "maxBytesPerTrigger"),
        ({"failOnDataLoss": "maybe"}, "failOnDataLoss"),
        ({"minPartitions": "0"}, "minPartitions"),
        ({"startingOffsetsByTimestampStrategy": "nearest"}, "startingOffsetsByTimestampStrategy"),
        ({"minOffsetsPerTrigger": "10", "maxOffsetsPerTrigger": "5"}, "minOffsetsPerTrigger"),
        ({"endingOffsets": "latest"}, "endingOffsets"),
        ({"logDirs": "/b"}, "logDirs"),
    ],
)
def test_bad_streaming_options_name_the_option(extra, named):
    with pytest.raises(ConfigError, match=named):
        parse(**extra)


@pytest.mark.parametrize(
    ("option", "value", "because"),
    [
        ("endingOffsets", "latest", "a stream has no end"),
        ("endingTimestamp", "77", "a stream has no end"),
        ("endingOffsetsByTimestamp", '{"events": {"0": 77}}', "a stream has no end"),
        ("filterPushdown", "true", "PySpark pushes filters only into batch reads"),
    ],
)
def test_a_batch_only_option_in_a_stream_is_refused_for_its_own_reason(option, value, because):
    with pytest.raises(ConfigError) as info:
        parse(**{option: value})
    assert str(info.value).startswith(
        f"option {option!r} is not applicable to streaming queries: {because}")
    if option == "filterPushdown":
        assert "no end" not in str(info.value)


def test_every_batch_only_option_says_why():
    from seglog.streaming.source_options import SOURCE_OPTIONS

    assert [o.name for o in SOURCE_OPTIONS if o.mode == "batch" and not o.only_because] == []


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        ({"startingOffsets": "latest"}, "startingOffsets"),
        ({"startingOffsets": '{"events": {"0": -1}}'}, "startingOffsets"),
        ({"endingOffsets": "earliest"}, "endingOffsets"),
        ({"endingOffsets": '{"events": {"0": -2}}'}, "endingOffsets"),
    ],
)
def test_bad_batch_options_name_the_option(extra, named):
    with pytest.raises(ConfigError, match=named):
        parse(streaming=False, **extra)


def test_missing_path_and_subscription_are_named():
    with pytest.raises(ConfigError, match="path"):
        SourceOptions.parse({"subscribe": "t"}, streaming=True)
    with pytest.raises(ConfigError, match="subscribe"):
        SourceOptions.parse({"path": "/x"}, streaming=True)


def test_subscription_selects_existing_partitions():
    avail = {"ev1": [0, 1], "ev2": [0], "other": [0]}
    assert Subscription("subscribe", topics=("ev2", "nope")).select(avail) == [("ev2", 0)]
    assert Subscription("subscribePattern", pattern="ev.").select(avail) == [
        ("ev1", 0), ("ev1", 1), ("ev2", 0)
    ]
    assert Subscription("assign", partitions=(("x", 3),)).select(avail) == [("x", 3)]


def test_options_pickle():
    import pickle

    s = parse(startingOffsetsByTimestamp='{"events": {"0": 5}}')
    assert pickle.loads(pickle.dumps(s)) == s


def test_broker_only_kafka_options_are_accepted_and_listed_for_one_warning():
    kafka = {"kafka.bootstrap.servers": "b:9092", "kafka.group.id": "g",
             "groupIdPrefix": "p", "kafka.security.protocol": "SSL",
             "fetchOffset.numRetries": "3", "fetchoffset.retryintervalms": "10",
             "kafkaConsumer.pollTimeoutMs": "512"}
    s = parse(**kafka)
    documented = ("kafka.bootstrap.servers", "kafka.group.id", "groupIdPrefix",
                  "kafka.security.protocol", "fetchOffset.numRetries",
                  "fetchOffset.retryIntervalMs", "kafkaConsumer.pollTimeoutMs")
    assert s.ignored == documented
    assert s == parse(**kafka) and parse().ignored == ()
    # Spark lowercases option names before seglog sees them: the warning spells them as
    # Kafka's connector documents them all the same
    lowered = parse(**{k.lower(): v for k, v in kafka.items()})
    assert lowered.ignored == documented


def test_spark_passes_paths_for_load_of_several_dirs():
    # spark.read.format("seglog").load("/a", "/b") hands over a JSON array as 'paths'
    s = SourceOptions.parse({"paths": '["/a","/b"]', "subscribe": "t"}, streaming=False)
    assert s.log_dirs == ("/a", "/b")
    with pytest.raises(ConfigError, match="options 'path' and 'paths' conflict"):
        SourceOptions.parse({"path": "/a", "paths": '["/b"]', "subscribe": "t"},
                            streaming=False)
    with pytest.raises(ConfigError, match="option 'paths' must be a JSON array"):
        SourceOptions.parse({"paths": '"/a"', "subscribe": "t"}, streaming=False)


@pytest.mark.parametrize(("option", "hint"), [
    ("kafka.auto.offset.reset", "'startingOffsets'"),
    ("kafka.key.deserializer", "binary"),
    ("KAFKA.VALUE.DESERIALIZER", "binary"),
    ("kafka.enable.auto.commit", "checkpoint"),
    ("kafka.interceptor.classes", "interceptors"),
])
def test_kafka_options_that_would_change_what_is_read_are_refused(option, hint):
    for streaming in (True, False, None):
        # named as Kafka documents it, whatever case it came in
        with pytest.raises(ConfigError,
                           match=f"option '{option.lower()}' .*not supported.*{hint}"):
            parse(streaming=streaming, **{option: "x"})


def test_trigger_limits_in_a_batch_read_are_ignored_as_kafka_does():
    b = parse(streaming=False, maxOffsetsPerTrigger="5", maxTriggerDelay="1m")
    assert b.ignored == ("maxOffsetsPerTrigger", "maxTriggerDelay")
    assert b.max_offsets_per_trigger is None and not b.has_limits


def test_unknown_kind_of_query_checks_what_does_not_depend_on_it():
    o = parse(streaming=None, endingOffsets="latest", maxOffsetsPerTrigger="5")
    assert o.max_offsets_per_trigger == 5
    with pytest.raises(ConfigError, match="'startingOffsets'"):
        parse(streaming=None, startingOffsets="{oops")
    with pytest.raises(ConfigError, match="'endingOffsets'"):
        parse(streaming=None, endingOffsets="{oops")
    with pytest.raises(ConfigError, match="'maxOffsetsPerTrigger'"):
        parse(streaming=None, maxOffsetsPerTrigger="0")


def test_isolation_level_option():
    base = {"path": "/d", "subscribe": "t"}
    assert SourceOptions.parse(base, streaming=True).isolation_level == "read_uncommitted"
    for streaming in (True, False):
        o = SourceOptions.parse({**base, "kafka.isolation.level": "READ_COMMITTED"},
                                streaming=streaming)
        assert o.isolation_level == "read_committed"
    with pytest.raises(ConfigError, match="'kafka.isolation.level'.*read_uncommitted or"):
        SourceOptions.parse({**base, "kafka.isolation.level": "committed"}, streaming=True)


def test_subscribe_pattern_leaves_out_kafkas_internal_topics():
    avail = {"__consumer_offsets": [0, 1], "__transaction_state": [0], "__mine": [0],
             "orders": [0]}
    assert Subscription("subscribePattern", pattern=".*").select(avail) == [
        ("__mine", 0), ("orders", 0)]
    assert Subscription("subscribePattern", pattern="__.*").select(avail) == [("__mine", 0)]
    # Named explicitly, they are read as any topic.
    assert Subscription("subscribe", topics=("__consumer_offsets",)).select(avail) == [
        ("__consumer_offsets", 0), ("__consumer_offsets", 1)]
