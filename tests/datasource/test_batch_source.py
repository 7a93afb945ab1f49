"""``spark.read.format("seglog")``: Kafka's batch semantics, pushdown, foreign log dirs."""

from __future__ import annotations

import datetime as dt
import json
import struct
import subprocess
import sys
import textwrap
from pathlib import Path

import pyarrow as pa
import pytest
from pyspark.sql import functions as F
from pyspark.sql.datasource import EqualTo, GreaterThanOrEqual, In, LessThan

from seglog.datasource.batch_reader import SeglogBatchReader, SeglogFilteringBatchReader
from seglog.datasource.schema import arrow_schema, source_schema
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches

T0 = 1_700_000_000_000
N = 200  # records per partition
UTC = dt.timezone.utc


def _rows(p: int, lo: int, hi: int):
    return [(f"k{p}-{i}".encode(), f"v{p}-{i}".encode() * 3, T0 + i * 1000) for i in range(lo, hi)]


@pytest.fixture(scope="module")
def log_dir(tmp_path_factory) -> str:
    """Topic ``orders``: 3 partitions × 200 records in many small segments; ts = T0 + i s."""
    path = tmp_path_factory.mktemp("batch-logs")
    with LogManager([str(path)]) as mgr:
        mgr.create_topic("orders", 3, config={"segment.bytes": "2048",
                                              "index.interval.bytes": "256"})
        mgr.create_topic("other", 1)
        for p in range(3):
            for lo in range(0, N, 20):
                rows = _rows(p, lo, lo + 20)
                headers = pa.array(
                    [[{"key": "h", "value": b"%d" % i}] if i % 2 else None
                     for i in range(lo, lo + 20)],
                    pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])),
                )
                mgr.append("orders", p, encode_batches(
                    pa.array([r[1] for r in rows], pa.binary()),
                    keys=pa.array([r[0] for r in rows], pa.binary()),
                    timestamps=pa.array([r[2] for r in rows], pa.int64()),
                    headers=headers, max_batch_bytes=512,
                ))
        mgr.append("other", 0, encode_batches(pa.array([b"x"], pa.binary())))
        assert mgr.get_log("orders", 0).num_segments > 3
    return str(path)


def _read(spark, log_dir, **options):
    reader = spark.read.format("seglog").option("path", log_dir).option("subscribe", "orders")
    for k, v in options.items():
        reader = reader.option(k, v)
    return reader.load()


def _key_offsets(df):
    return sorted((r.partition, r.offset) for r in df.select("partition", "offset").collect())


@pytest.mark.spark
def test_reads_every_record_with_kafkas_schema(spark, log_dir):
    df = _read(spark, log_dir)
    assert df.schema == source_schema({})
    rows = (df.withColumn("ms", F.unix_millis("timestamp"))
            .orderBy("partition", "offset").collect())
    got = [(r.key, r.value, r.topic, r.partition, r.offset, r.ms, r.timestampType) for r in rows]
    assert got == [(k, v, "orders", p, i, ts, 0)
                   for p in range(3) for i, (k, v, ts) in enumerate(_rows(p, 0, N))]


@pytest.mark.spark
def test_json_offsets_headers_and_split_options(spark, log_dir):
    df = _read(
        spark, log_dir,
        startingOffsets='{"orders": {"0": 10, "1": -2, "2": 150}}',
        endingOffsets='{"orders": {"0": 20, "1": 5, "2": -1}}',
        includeHeaders="true", maxRecordsPerPartition="4",
    )
    assert _key_offsets(df) == ([(0, i) for i in range(10, 20)] + [(1, i) for i in range(5)]
                                + [(2, i) for i in range(150, N)])
    assert df.rdd.getNumPartitions() == 3 + 2 + 13
    h = {r.offset: r.headers for r in df.where("partition = 1").collect()}
    assert h[0] is None and [(x.key, x.value) for x in h[1]] == [("h", b"1")]
    assert _read(spark, log_dir, minPartitions="12").rdd.getNumPartitions() == 12


@pytest.mark.spark
def test_timestamps_resolve_through_the_time_index(spark, log_dir):
    ends = {"0": T0 + 120_000, "1": T0 + 150_000, "2": 9_999_999_999_999}
    df = _read(spark, log_dir, startingTimestamp=str(T0 + 100_500),
               endingOffsetsByTimestamp=json.dumps({"orders": ends}))
    assert _key_offsets(df) == ([(0, i) for i in range(101, 120)]
                                + [(1, i) for i in range(101, 150)]
                                + [(2, i) for i in range(101, N)])
    late = _read(spark, log_dir, startingTimestamp=str(T0 + 100_500),
                 endingOffsetsByTimestamp=json.dumps({"orders": {**ends, "1": T0}}))
    with pytest.raises(Exception, match="partition 1: the starting offset 101 is after"):
        late.collect()


@pytest.mark.spark
def test_pushdown_prunes_and_results_stay_exact(spark, log_dir):
    df = _read(spark, log_dir, filterPushdown="true")
    since = dt.datetime.fromtimestamp((T0 + 150_000) / 1000, UTC)
    q = df.where((F.col("partition").isin(0, 2)) & (F.col("offset") < 180)
                 & (F.col("timestamp") >= F.lit(since)))
    assert _key_offsets(q) == [(p, i) for p in (0, 2) for i in range(150, 180)]
    future = dt.datetime.fromtimestamp((T0 + 10_000_000) / 1000, UTC)
    assert df.where(F.col("timestamp") > F.lit(future)).count() == 0
    assert df.where("offset = 7 and partition = 1").select("value").first().value == b"v1-7" * 3


def test_pushdown_rejects_an_impossible_timestamp_range_without_reading(log_dir):
    """The pushdown-capable reader plans nothing when no data can match."""
    opts = {"path": log_dir, "subscribe": "orders"}
    schema = source_schema(opts)
    r = SeglogFilteringBatchReader(opts, schema)
    assert type(SeglogBatchReader.for_options(opts, schema)) is SeglogBatchReader
    assert type(SeglogBatchReader.for_options({**opts, "filterPushdown": "true"}, schema)) is (
        SeglogFilteringBatchReader)
    later = dt.datetime.fromtimestamp((T0 + 10_000_000) / 1000, UTC)
    kept = list(r.pushFilters([GreaterThanOrEqual(("timestamp",), later)]))
    assert len(kept) == 1  # Spark keeps filtering rows; the plan is empty
    assert r.partitions() == []
    r2 = SeglogFilteringBatchReader(opts, schema)
    f_part, f_off = In(("partition",), (1,)), LessThan(("offset",), 30)
    f_ts = GreaterThanOrEqual(("timestamp",), dt.datetime.fromtimestamp((T0 + 25_000) / 1000, UTC))
    assert list(r2.pushFilters([f_part, f_off, f_ts, EqualTo(("key",), b"x")])) == [
        f_ts, EqualTo(("key",), b"x")]
    [part] = r2.partitions()
    assert (part.value.partition, part.value.start, part.value.end) == (1, 25, 30)
    batches = list(r2.read(part))
    assert sum(b.num_rows for b in batches) == 5
    assert all(b.schema.equals(arrow_schema(False)) for b in batches)


@pytest.mark.spark
def test_bad_options_fail_naming_the_option(spark, log_dir):
    with pytest.raises(Exception, match="kafka.auto.offset.reset"):
        _read(spark, log_dir, **{"kafka.auto.offset.reset": "earliest"}).collect()
    with pytest.raises(Exception, match="endingOffsets"):
        _read(spark, log_dir, endingOffsets="{oops").collect()


def _write_checkpoint(path: Path, name: str, entries: dict[tuple[str, int], int]) -> None:
    lines = ["0", str(len(entries))] + [f"{t} {p} {o}" for (t, p), o in entries.items()]
    (path / name).write_text("\n".join(lines) + "\n")


@pytest.mark.spark
def test_a_log_dir_written_by_kafka_python_reads_identically(spark, tmp_path):
    """Batches built by kafka-python, laid into a ``.log`` file by hand (no seglog writer)."""
    from kafka.record.default_records import DefaultRecordBatchBuilder

    part = tmp_path / "foreign-0"
    part.mkdir()
    expected, log, offset = [], bytearray(), 0
    for b in range(5):
        builder = DefaultRecordBatchBuilder(
            magic=2, compression_type=b % 2 * 1, is_transactional=False, producer_id=-1,
            producer_epoch=-1, base_sequence=-1, batch_size=1 << 20)
        for i in range(7):
            key = None if i == 3 else b"key-%d" % i
            value = b"value-%d-%d" % (b, i)
            ts = T0 + offset * 10
            headers = [("trace", b"t%d" % offset)] if i % 2 else []
            builder.append(i, timestamp=ts, key=key, value=value, headers=headers)
            expected.append((key, value, offset, ts, [("trace", b"t%d" % offset)] if i % 2
                             else None))
            offset += 1
        batch = bytearray(builder.build())
        struct.pack_into(">q", batch, 0, offset - 7)  # the broker's job: the base offset
        log += batch
    (part / f"{0:020d}.log").write_bytes(bytes(log))
    # No index files at all: a reader treats them as empty and scans from the start.
    for name in ("replication-offset-checkpoint", "recovery-point-offset-checkpoint"):
        _write_checkpoint(tmp_path, name, {("foreign", 0): offset})
    _write_checkpoint(tmp_path, "log-start-offset-checkpoint", {("foreign", 0): 0})
    (tmp_path / ".kafka_cleanshutdown").write_text("")

    df = (spark.read.format("seglog").option("path", str(tmp_path))
          .option("subscribe", "foreign").option("includeHeaders", "true").load())
    rows = df.orderBy("offset").collect()
    got = [(r.key, r.value, r.offset, None,
            [(h.key, h.value) for h in r.headers] if r.headers else None) for r in rows]
    assert got == [(k, v, o, None, h) for k, v, o, _, h in expected]
    ms = df.orderBy("offset").select(F.unix_millis("timestamp").alias("ms")).collect()
    assert [r.ms for r in ms] == [e[3] for e in expected]


def test_auto_registration_lookup_finds_seglog(tmp_path):
    """PySpark's lookup (``lookup_data_sources``) registers top-level ``pyspark_*`` modules
    found by ``pkgutil.iter_modules()``; run it outside the checkout, so only the install
    (not the current directory) can provide ``pyspark_seglog``."""
    code = textwrap.dedent("""
        from importlib import import_module
        from pkgutil import iter_modules
        from pyspark.sql.datasource import DataSource
        found = {}
        for info in iter_modules():
            if info.name.startswith("pyspark_"):
                mod = import_module(info.name)
                if hasattr(mod, "DefaultSource") and issubclass(mod.DefaultSource, DataSource):
                    found[mod.DefaultSource.name()] = mod.DefaultSource
        print(found["seglog"].__module__, found["seglog"].__qualname__)
    """)
    out = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, capture_output=True,
                         text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["seglog.datasource.data_source", "SeglogDataSource"]
