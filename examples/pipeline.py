"""seglog's main example: an exactly-once Spark pipeline on an embedded log dir.

    python3 run.py example            # or: python examples/pipeline.py [--work-dir DIR]

1. generates shop events (views, carts, purchases) and writes them to the topic
   ``events`` with the seglog sink (``df.write.format("seglog")``), keyed by user, so each
   user's events share a partition exactly as Kafka's partitioner would place them;
2. runs a streaming transform ``events`` → ``purchases`` (parse, filter, enrich) with a
   checkpoint and ``Trigger.AvailableNow``: several micro-batches, each published exactly
   once (``df.writeStream.format("seglog")``);
3. reads ``purchases`` back in batch and prints a short summary, checking that every
   purchase arrived exactly once.

Everything lives in one directory (``./work-data`` by default, cleaned first), in
Kafka's own on-disk format: no broker, no daemon.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import time
from pathlib import Path

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

EVENTS = 40_000
USERS = 500


def spark_session():
    from pyspark.sql import SparkSession

    from seglog.datasource import LOW_LATENCY_SPARK_CONF

    # The checkpoints are on the local disk: docs/operations.md's settings for a cheaper
    # micro-batch apply ("Low end-to-end latency").
    spark = (SparkSession.builder.master("local[2]").appName("seglog-example")
             .config("spark.ui.enabled", "false")
             .config("spark.sql.shuffle.partitions", "2")
             .config("spark.sql.streaming.stopTimeout", "30s")
             .config("spark.python.worker.reuse", "true")
             .config("spark.ui.showConsoleProgress", "false")
             .config(map=dict(LOW_LATENCY_SPARK_CONF))
             .getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def generate_events(spark, logs: str, options: dict[str, str] | None = None) -> int:
    """Write EVENTS shop events to the topic ``events`` (4 partitions, lz4). ``options``:
    more sink options (the bucket example's ``storage.*``)."""
    events = spark.range(0, EVENTS, numPartitions=4).selectExpr(
        f"concat('user-', cast(pmod(id * 7919, {USERS}) AS string)) AS user",
        "CASE WHEN id % 10 = 0 THEN 'purchase' WHEN id % 3 = 0 THEN 'cart' "
        "ELSE 'view' END AS kind",
        "concat('sku-', cast(pmod(id * 31, 97) AS string)) AS sku",
        "cast(pmod(id * 13, 20000) + 99 AS int) AS cents",
        "timestamp_millis(1767225600000 + id * 250) AS ts",
        "id")
    (events.selectExpr("user AS key", "to_json(named_struct('id', id, 'kind', kind, "
                       "'sku', sku, 'cents', cents)) AS value", "ts AS timestamp",
                       "array(named_struct('key', 'source', 'value', "
                       "cast('example-generator' AS binary))) AS headers")
     .write.format("seglog").option("path", logs).option("topic", "events")
     .option("numPartitions", "4").option("compression.type", "lz4")
     .option("topic.retention.ms", "-1").options(**(options or {})).mode("append").save())
    return events.filter("kind = 'purchase'").count()


def run_transform(spark, logs: str, checkpoint: str, options: dict[str, str] | None = None):
    """events → purchases, exactly once, as micro-batches of at most 15 000 records."""
    from pyspark.sql import functions as F

    schema = "id long, kind string, sku string, cents int"
    events = (spark.readStream.format("seglog").option("path", logs)
              .option("subscribe", "events").option("startingOffsets", "earliest")
              .option("maxOffsetsPerTrigger", "15000").options(**(options or {})).load())
    purchases = (events
                 .select(F.col("key"), F.col("timestamp"),
                         F.from_json(F.col("value").cast("string"), schema).alias("e"))
                 .where("e.kind = 'purchase'")
                 .select("key", "timestamp", F.to_json(F.struct(
                     F.col("e.id").alias("id"), F.col("e.sku").alias("sku"),
                     (F.col("e.cents") / 100).alias("euros"),
                     F.when(F.col("e.cents") >= 10000, "large").otherwise("small")
                     .alias("size"))).alias("value")))
    query = (purchases.writeStream.format("seglog").option("path", logs)
             .option("topic", "purchases").option("numPartitions", "2")
             # events of January 2026 keep their time: keep them past the 7-day default
             .option("topic.retention.ms", "-1")
             .option("checkpointLocation", checkpoint).options(**(options or {}))
             .trigger(availableNow=True).start())
    query.awaitTermination()
    return query


def summarize(spark, logs: str, expected: int, options: dict[str, str] | None = None) -> bool:
    from pyspark.sql import functions as F

    out = (spark.read.format("seglog").option("path", logs).option("subscribe", "purchases")
           .options(**(options or {})).load()
           .select("partition", "offset", F.col("key").cast("string").alias("user"),
                   F.from_json(F.col("value").cast("string"),
                               "id long, sku string, euros double, size string").alias("p"))
           .cache())
    total = out.count()
    distinct_ids = out.select("p.id").distinct().count()
    print(f"purchases topic: {total} records ({distinct_ids} distinct purchase ids, "
          f"{expected} purchases generated)")
    for row in out.groupBy("partition").count().orderBy("partition").collect():
        print(f"  partition {row['partition']}: {row['count']} records")
    print("top buyers:")
    top = (out.groupBy("user").agg(F.count("*").alias("n"), F.sum("p.euros").alias("euros"))
           .orderBy(F.desc("euros"), "user").limit(3).collect())
    for row in top:
        print(f"  {row['user']:<10} {row['n']:>3} purchases  {row['euros']:>9.2f} EUR")
    ok = total == distinct_ids == expected
    print("exactly once: " + ("yes, every purchase appears once" if ok else "NO"))
    out.unpersist()
    return ok


def clean_work_dir(argv: list[str] | None, *, description: str, default: str,
                   holds: str) -> Path:
    """The ``--work-dir`` given in ``argv`` (``default`` otherwise), resolved and emptied:
    each run of an example starts from nothing."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--work-dir", default=default, help=f"where {holds} (cleaned first)")
    work = Path(parser.parse_args(argv).work_dir).resolve()
    shutil.rmtree(work, ignore_errors=True)
    return work


def main(argv: list[str] | None = None) -> int:
    work = clean_work_dir(argv, description=__doc__.splitlines()[0], default="work-data",
                          holds="the log dir and checkpoint go")
    logs, checkpoint = str(work / "logs"), str(work / "checkpoints" / "purchases")

    started = time.monotonic()
    spark = spark_session()
    try:
        t = time.monotonic()
        expected = generate_events(spark, logs)
        print(f"generated {EVENTS} events into topic 'events' in {time.monotonic() - t:.1f} s")
        t = time.monotonic()
        query = run_transform(spark, logs, checkpoint)
        batches = (query.lastProgress or {}).get("batchId", -1) + 1
        print(f"streamed events -> purchases in {batches} micro-batches "
              f"({time.monotonic() - t:.1f} s, checkpoint {checkpoint})")
        ok = summarize(spark, logs, expected)
    finally:
        spark.stop()
    print(f"log dir: {logs}  (Kafka's format: try kafka-dump-log on it)")
    print(f"done in {time.monotonic() - started:.1f} s")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
