"""``df.write.format("seglog")``: Kafka-readable files, Kafka's key placement, consistent
indexes, all-or-nothing publishing, and clear errors for bad input."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest
from _sink_checks import (
    check_indexes,
    kafka_partition,
    kafka_python_records,
    multiset,
    staging_files,
)

from seglog.logstore.manager.log_manager import LogManager
from seglog.streaming.sink_staging import producer_id_of

pytestmark = pytest.mark.spark


def _input(spark, n: int = 3000):
    return spark.range(0, n, numPartitions=3).selectExpr(
        "CASE WHEN id % 10 = 0 THEN NULL ELSE cast(concat('user-', id % 50) as binary) END "
        "AS key",
        "concat('event-', id) AS value",
        "CASE WHEN id % 4 = 0 THEN array(named_struct('key', 'src', 'value', "
        "cast(concat('s', id % 3) as binary))) ELSE array() END AS headers")


def test_batch_write_is_kafka_readable_with_kafka_placement(spark, tmp_path: Path) -> None:
    df = _input(spark)
    (df.write.format("seglog").option("path", str(tmp_path)).option("topic", "events")
     .option("numPartitions", "4").option("compression.type", "zstd")
     .option("topic.segment.bytes", "1024").mode("append").save())

    records = kafka_python_records(tmp_path, "events")
    rows = df.collect()
    assert multiset(records, (2, 3)) == collections.Counter(
        (r.key, r.value.encode()) for r in rows)
    headers = {r[3]: r[4] for r in records}
    assert headers[b"event-8"] == (("src", b"s2"),) and headers[b"event-9"] == ()
    # keyed rows sit exactly where Kafka's default partitioner puts them
    keyed = [(p, k) for p, _, k, _, _, _ in records if k is not None]
    assert keyed and all(p == kafka_partition(k, 4) for p, k in keyed)
    # keyless rows are spread over several partitions
    assert len({p for p, _, k, _, _, _ in records if k is None}) > 1
    # one job, one producer id; offsets contiguous; indexes consistent; segments rolled
    assert len({r[5] for r in records}) == 1
    assert check_indexes(tmp_path, "events") > 4
    assert len(list((tmp_path / "events-0").glob("*.log"))) > 1
    assert staging_files(tmp_path) == []
    # and seglog's own reader agrees
    back = spark.read.format("seglog").option("path", str(tmp_path)) \
        .option("subscribe", "events").load()
    assert back.count() == len(rows)


def test_bad_input_fails_clearly_and_publishes_nothing(spark, tmp_path: Path) -> None:
    path = str(tmp_path)
    good = spark.createDataFrame([("k", "v")], "key string, value string")
    good.write.format("seglog").option("path", path).option("topic", "t") \
        .option("numPartitions", "2").mode("append").save()
    before = multiset(kafka_python_records(tmp_path, "t"))

    def write(df, mode: str = "append", **opts: str) -> None:
        w = df.write.format("seglog").option("path", path).mode(mode)
        for k, v in {"topic": "t", **opts}.items():
            if v is not None:  # None: no such option
                w = w.option(k, v)
        w.save()

    cases = [
        (spark.createDataFrame([("k",)], "key string"), {}, "required column 'value'"),
        (spark.createDataFrame([(1,)], "value int"), {}, "column 'value' has type int32"),
        (good, {"topic": "bad topic"}, "illegal"),
        (spark.createDataFrame([("v", "no/pe")], "value string, topic string"),
         {"topic": None}, "illegal"),
        (spark.createDataFrame([("v", 7)], "value string, partition int"), {},
         "partition 7 of topic 't'"),
        (good, {"topic": "missing", "createTopics": "false"}, "'createTopics' is false"),
        (good, {"compression.type": "brotli"}, "'compression.type'"),
        (good, {"subscribe": "t"}, "unknown option 'subscribe'"),
    ]
    for df, opts, message in cases:
        with pytest.raises(Exception, match=message):
            write(df, **opts)
    with pytest.raises(Exception, match="overwrite"):
        write(good, mode="overwrite")
    # a log dir held by another writer: the commit waits lockTimeoutMs, then names it
    with LogManager([tmp_path]), pytest.raises(Exception, match="locked by another writer"):
        write(good, lockTimeoutMs="200")

    assert multiset(kafka_python_records(tmp_path, "t")) == before
    with LogManager([tmp_path], read_only=True) as mgr:
        assert mgr.topics() == ["t"]
    assert staging_files(tmp_path) == []


def test_batch_write_producer_id_is_per_job(spark, tmp_path: Path) -> None:
    df = spark.createDataFrame([(str(i),) for i in range(10)], "value string")
    for _ in range(2):
        df.write.format("seglog").option("path", str(tmp_path)).option("topic", "j") \
            .mode("append").save()
    records = kafka_python_records(tmp_path, "j")
    assert len(records) == 20
    pids = {r[5] for r in records}
    assert len(pids) == 2 and all(0 <= p < 2**63 for p in pids)
    assert producer_id_of("job-x") not in pids


def test_a_job_killed_in_its_commit_does_not_block_the_next_job(spark, tmp_path: Path
                                                                ) -> None:
    """The commit of a batch job is SIGKILLed after appending (Spark then runs its abort,
    which removes the staging): the next job to the topic removes the dead job's tail,
    proven by its commit intent, and publishes; the dead job's rows are never seen."""
    from seglog.datasource import SeglogDataSource

    def write(values: range) -> None:
        spark.createDataFrame([(f"v{i}",) for i in values], "value string") \
            .write.format("seglog").option("path", str(tmp_path)).option("topic", "k") \
            .option("numPartitions", "2").mode("append").save()

    write(range(0, 10))
    env = spark.sparkContext.environment  # travels with the registered data source
    env["SEGLOG_CRASH_AT"] = "after-append"
    try:
        spark.dataSource.register(SeglogDataSource)
        with pytest.raises(Exception, match="(?i)python worker|crash|EOF|exit"):
            write(range(10, 20))
    finally:
        del env["SEGLOG_CRASH_AT"]
        spark.dataSource.register(SeglogDataSource)
    with LogManager([tmp_path]) as mgr:  # the dead job's rows lie above the high watermark
        assert any(mgr.get_log("k", p).log_end_offset > mgr.get_log("k", p).high_watermark
                   for p in (0, 1))
    assert staging_files(tmp_path) == []  # Spark's abort ran
    write(range(20, 30))
    values = sorted(r[3] for r in kafka_python_records(tmp_path, "k"))
    assert values == sorted(f"v{i}".encode() for i in (*range(0, 10), *range(20, 30)))
    assert list((tmp_path / ".seglog-sink" / "intent").glob("*.json")) == []
