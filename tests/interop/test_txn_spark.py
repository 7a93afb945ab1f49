"""Spark reads (batch and stream) of transactions written by Kafka's own record code, with
``kafka.isolation.level`` read_uncommitted (default) and read_committed."""

from __future__ import annotations

import pytest
from _kafka_txn import KafkaRecords, all_values, committed_values, write_partition

from seglog.logstore.manager.log_manager import LogManager

pytestmark = pytest.mark.spark

TOPIC = "txn"


@pytest.fixture(scope="module")
def kafka():
    with KafkaRecords() as k:
        yield k


def _batch(spark, log_dir, **options) -> list[str]:
    reader = spark.read.format("seglog").option("path", log_dir).option("subscribe", TOPIC)
    for k, v in options.items():
        reader = reader.option(k, v)
    rows = reader.load().select("offset", "value").collect()
    return [bytes(r.value).decode() for r in sorted(rows, key=lambda r: r.offset)]


def test_batch_reads_with_both_isolation_levels(spark, kafka, tmp_path):
    d = tmp_path / "logs"
    txns = write_partition(kafka, d, TOPIC)
    open_first = next(t for t in txns if t.outcome == "open").offsets[0]
    assert _batch(spark, str(d)) == all_values(txns)
    committed = committed_values(txns, open_first)
    assert _batch(spark, str(d), **{"kafka.isolation.level": "read_committed"}) == committed
    # no .txnindex: the executors compute the aborted transactions from the log
    for p in (d / f"{TOPIC}-0").glob("*.txnindex"):
        p.unlink()
    assert _batch(spark, str(d), **{"kafka.isolation.level": "read_committed"}) == committed
    with pytest.raises(Exception, match="kafka.isolation.level"):
        _batch(spark, str(d), **{"kafka.isolation.level": "read-committed"})


def test_streams_stop_at_the_lso_until_the_transaction_commits(spark, kafka, tmp_path):
    d = tmp_path / "logs"
    txns = write_partition(kafka, d, TOPIC)
    open_txn = next(t for t in txns if t.outcome == "open")
    got: dict[str, list[tuple[int, str]]] = {"read_committed": [], "read_uncommitted": []}

    def sink(level):
        def collect(df, _batch_id):
            got[level] += [(r.offset, bytes(r.value).decode())
                           for r in df.select("offset", "value").collect()]
        return collect

    queries = []
    for level in got:
        q = (spark.readStream.format("seglog").option("path", str(d))
             .option("subscribe", TOPIC).option("startingOffsets", "earliest")
             .option("kafka.isolation.level", level).load()
             .writeStream.foreachBatch(sink(level))
             .option("checkpointLocation", str(tmp_path / f"chk-{level}")).start())
        queries.append(q)
    try:
        for q in queries:
            q.processAllAvailable()
        assert [v for _o, v in sorted(got["read_uncommitted"])] == all_values(txns)
        committed = [v for _o, v in sorted(got["read_committed"])]
        assert committed == committed_values(txns, open_txn.offsets[0])
        assert max(o for o, _v in got["read_committed"]) < open_txn.offsets[0]
        with LogManager([str(d)]) as writer:
            log = writer.get_log(TOPIC, 0)
            log.append(kafka.marker(log.log_end_offset, open_txn.producer_id, 0, commit=True),
                       assign_offsets=False)
            writer.checkpoint_high_watermarks()
        open_txn.outcome = "commit"
        for q in queries:
            q.processAllAvailable()
        # exactly once: the rest of the committed records, nothing read twice
        assert [v for _o, v in sorted(got["read_committed"])] == committed_values(txns, 2**62)
        assert len({o for o, _v in got["read_committed"]}) == len(got["read_committed"])
    finally:
        for q in queries:
            q.stop()
