"""Batch reads under both settings of ``spark.sql.python.filterPushdown.enabled``.

Spark's default is off, and the shared test session turns it on, so each test sets it
for itself and restores the session's value. The reader offers ``pushFilters`` only with
the option ``filterPushdown=true`` (an explicit choice, not a guess about PySpark's
planner): every combination must return the same rows, and with pushdown the plan must
skip what the filters exclude (here: a damaged first segment the timestamp filter seeks
past, and a partition the partition filter drops).
"""

from __future__ import annotations

import datetime as dt
from contextlib import contextmanager

import pyarrow as pa
import pytest
from pyspark.sql import functions as F

from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches
from seglog.logstore.storage.file_names import LOG_SUFFIX

pytestmark = pytest.mark.spark

CONF = "spark.sql.python.filterPushdown.enabled"
T0 = 1_700_000_000_000
N = 120


@contextmanager
def pushdown_conf(spark, enabled: bool):
    before = spark.conf.get(CONF, None)
    spark.conf.set(CONF, str(enabled).lower())
    try:
        yield
    finally:
        if before is None:
            spark.conf.unset(CONF)
        else:
            spark.conf.set(CONF, before)


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory) -> str:
    """``ev``: 2 partitions × 120 records in small segments, ts = T0 + i s; the first
    segment of partition 0 has a flipped payload byte (any read of it fails)."""
    path = tmp_path_factory.mktemp("pushdown-logs")
    with LogManager([str(path)]) as mgr:
        mgr.create_topic("ev", 2, config={"segment.bytes": "512",
                                          "index.interval.bytes": "128"})
        for p in range(2):
            for lo in range(0, N, 10):
                mgr.append("ev", p, encode_batches(
                    pa.array([b"v%d-%d" % (p, i) for i in range(lo, lo + 10)], pa.binary()),
                    timestamps=pa.array([T0 + i * 1000 for i in range(lo, lo + 10)],
                                        pa.int64())))
        assert mgr.get_log("ev", 0).num_segments > 3
    first = path / "ev-0" / f"{0:020d}{LOG_SUFFIX}"
    data = bytearray(first.read_bytes())
    data[70] ^= 0xFF  # inside the first batch's records: its CRC no longer matches
    first.write_bytes(bytes(data))
    return str(path)


def query(spark, log_dir, pushdown: bool):
    since = dt.datetime.fromtimestamp((T0 + 90_000) / 1000, dt.timezone.utc)
    return (spark.read.format("seglog").option("path", log_dir).option("subscribe", "ev")
            .option("filterPushdown", str(pushdown).lower()).load()
            .where((F.col("partition") == 0) & (F.col("timestamp") >= F.lit(since))
                   & (F.col("offset") < 110)))


def rows(df):
    return sorted((r.partition, r.offset, r.value) for r in
                  df.select("partition", "offset", "value").collect())


EXPECTED = [(0, i, b"v0-%d" % i) for i in range(90, 110)]


def test_pushdown_skips_what_the_filters_exclude_with_the_same_rows(spark, log_dir):
    with pushdown_conf(spark, True):
        df = query(spark, log_dir, pushdown=True)
        assert rows(df) == EXPECTED  # the damaged first segment was never read
        assert df.rdd.getNumPartitions() == 1  # partition 1 is not planned at all
        # The same conf without the option: the plain reader reads everything it
        # selects, so it meets the damaged segment.
        with pytest.raises(Exception, match="(?i)corrupt"):
            rows(query(spark, log_dir, pushdown=False))


def test_spark_default_conf_reads_without_pushdown_and_names_the_conf(spark, log_dir):
    with pushdown_conf(spark, False):
        undamaged = (spark.read.format("seglog").option("path", log_dir)
                     .option("subscribe", "ev").option("startingOffsets",
                                                       '{"ev": {"0": 100, "1": 0}}').load()
                     .where(F.col("offset") >= 100))
        assert rows(undamaged) == ([(0, i, b"v0-%d" % i) for i in range(100, N)]
                                   + [(1, i, b"v1-%d" % i) for i in range(100, N)])
        with pytest.raises(Exception, match=CONF.replace(".", r"\.")):
            rows(query(spark, log_dir, pushdown=True))
