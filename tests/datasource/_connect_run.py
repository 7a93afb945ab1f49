"""Run by ``test_connect.py`` in a process of its own (a Spark Connect session and the
suite's classic SparkSession do not share a process): batch and streaming reads and
writes of seglog through Spark's local Connect server. Prints one JSON line of results,
or ``CONNECT-UNAVAILABLE: <why>`` when the server cannot start."""

from __future__ import annotations

import json
import sys


def main(work: str) -> None:
    from pyspark.sql import SparkSession

    try:
        spark = (
            SparkSession.builder.remote("local[2]")
            .config("spark.ui.enabled", "false")
            .config("spark.sql.shuffle.partitions", "2")
            .getOrCreate()
        )
    except Exception as e:  # reported to the test, which skips naming it
        print(f"CONNECT-UNAVAILABLE: {type(e).__name__}: {str(e).splitlines()[0]}")
        return
    try:
        logs = f"{work}/logs"
        result: dict[str, object] = {"connect": type(spark).__module__}
        (
            spark.range(0, 30, numPartitions=2)
            .selectExpr("cast(id AS string) AS key", "cast(id AS string) AS value")
            .write.format("seglog")
            .option("topic", "in")
            .option("numPartitions", "2")
            .mode("append")
            .save(logs)
        )
        rows = spark.read.format("seglog").option("subscribe", "in").load(logs).collect()
        result["batch_read"] = sorted(int(r.value) for r in rows)
        q = (
            spark.readStream.format("seglog")
            .option("subscribe", "in")
            .option("startingOffsets", "earliest")
            .option("maxOffsetsPerTrigger", "10")
            .load(logs)
            .select("key", "value")
            .writeStream.format("seglog")
            .queryName("connect_copy")
            .option("topic", "out")
            .option("checkpointLocation", f"{work}/chk")
            .trigger(availableNow=True)
            .start(logs)
        )
        q.awaitTermination(300)
        result["stream_batches"] = len(q.recentProgress)
        result["stream_name"] = q.name
        out = spark.read.format("seglog").option("subscribe", "out").load(logs).collect()
        result["stream_written"] = sorted(int(r.value) for r in out)
        try:
            # Connect analyses lazily: the schema() check runs at the first action
            spark.read.format("seglog").option("subscribe", "in").load(f"{work}/nope").collect()
            result["error_first_line"] = None
        except Exception as e:
            result["error_first_line"] = str(e).splitlines()[0]
        print(json.dumps(result))
    finally:
        spark.stop()


if __name__ == "__main__":
    main(sys.argv[1])
