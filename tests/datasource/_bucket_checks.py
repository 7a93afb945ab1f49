"""Checks shared by the bucket's Spark tests: the session's Python workers pointed at the
moto server, and what a bucket topic holds, parsed by kafka-python from the bytes the
read path serves (each segment's whole ``.log`` with its offsets patched: what an export
writes)."""

from __future__ import annotations

import collections
from pathlib import Path

from kafka.record import MemoryRecords

from seglog.logstore.manager.log_manager import LogManager


def point_workers_at(spark, env: dict[str, str]) -> None:
    """Give every Python worker Spark starts from now on ``env``: PySpark ships
    ``SparkContext.environment`` with each Python function, and a data source's planner,
    readers and writers are the function registered with it, so it is registered again."""
    from seglog.datasource import SeglogDataSource

    spark.sparkContext.environment.update(env)
    spark.dataSource.register(SeglogDataSource)


def forget_worker_env(spark, names) -> None:
    from seglog.datasource import SeglogDataSource

    for n in names:
        spark.sparkContext.environment.pop(n, None)
    spark.dataSource.register(SeglogDataSource)


def export_segments(uri: str, topic: str, out: Path,
                    storage_options: dict[str, str] | None = None) -> list[Path]:
    """Each committed segment of ``topic`` as ``<out>/<topic>-<p>/<base>.log``."""
    files = []
    with LogManager(uri, read_only=True, storage_options=storage_options) as mgr:
        for p in mgr.partitions(topic):
            d = out / f"{topic}-{p}"
            d.mkdir(parents=True, exist_ok=True)
            for seg in mgr.get_log(topic, p).segments:
                path = d / f"{seg.base_offset:020d}.log"
                path.write_bytes(seg.pread(0, seg.size))
                files.append(path)
    return files


def bucket_records(uri: str, topic: str, tmp: Path,
                   storage_options: dict[str, str] | None = None) -> list[tuple]:
    """(partition, offset, key, value, producer_id) of every record, by kafka-python,
    with every batch's CRC validated."""
    out = []
    for path in export_segments(uri, topic, tmp, storage_options):
        partition = int(path.parent.name.rpartition("-")[2])
        records = MemoryRecords(path.read_bytes())
        while records.has_next():
            batch = records.next_batch()
            assert batch.validate_crc(), f"{path}: bad CRC"
            for r in batch:
                out.append((partition, r.offset, r.key, r.value, batch.producer_id))
    return out


def check_offsets(records: list[tuple]) -> None:
    by_part: dict[int, list[int]] = collections.defaultdict(list)
    for r in records:
        by_part[r[0]].append(r[1])
    for p, offs in by_part.items():
        assert offs == list(range(len(offs))), f"partition {p}: offsets not contiguous"


def run_in_to_out(spark, uri: str, chk: Path):
    """The bucket pipeline of the killed-commit tests: ``in`` -> ``out`` (2 partitions),
    1,000 offsets a trigger, ``availableNow``; the exception it ended with, if any."""
    q = (
        spark.readStream.format("seglog")
        .option("path", uri)
        .option("subscribe", "in")
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", "1000")
        .load()
        .selectExpr("key", "concat('out-', cast(value AS string)) AS value")
        .writeStream.format("seglog")
        .option("path", uri)
        .option("topic", "out")
        .option("numPartitions", "2")
        .option("checkpointLocation", str(chk))
        .trigger(availableNow=True)
        .start()
    )
    try:
        q.awaitTermination(300)
    except Exception as e:  # the run whose commit is killed
        return e
    return q.exception()
