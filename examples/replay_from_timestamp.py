"""Replay a topic from a point in time, the Kafka way (time index lookup per partition).

    python examples/replay_from_timestamp.py                      # self-contained demo
    python examples/replay_from_timestamp.py --log-dir work-data/logs --topic events \\
        --from 2026-01-01T00:30:00Z

The demo writes 12 000 events one second apart (4 partitions) with the seglog sink, then
replays everything from the event time 2 hours 30 minutes in:

1. in batch (``spark.read`` with ``startingTimestamp``): each partition starts at the first
   offset whose timestamp is at or after the instant, found through its ``.timeindex``;
2. as a stream (``Trigger.AvailableNow``) copied exactly once into ``<topic>-replay``:
   the usual way to re-feed a downstream job after fixing a bug.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

os.environ.setdefault("PYSPARK_PYTHON", sys.executable)
os.environ.setdefault("PYSPARK_DRIVER_PYTHON", sys.executable)

T0_MS = 1_767_225_600_000  # 2026-01-01T00:00:00Z
DEMO_EVENTS = 12_000


def spark_session():
    from pyspark.sql import SparkSession

    spark = (SparkSession.builder.master("local[2]").appName("seglog-replay")
             .config("spark.ui.enabled", "false").config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    return spark


def write_demo_events(spark, logs: str, topic: str) -> None:
    (spark.range(0, DEMO_EVENTS, numPartitions=4)
     .selectExpr("concat('sensor-', cast(id % 40 AS string)) AS key",
                 "concat('reading ', cast(id AS string)) AS value",
                 f"timestamp_millis({T0_MS} + id * 1000) AS timestamp")
     .write.format("seglog").option("path", logs).option("topic", topic)
     .option("numPartitions", "4").option("topic.retention.ms", "-1")
     .option("topic.index.interval.bytes", "512").option("topic.segment.bytes", "65536")
     .mode("append").save())


def parse_instant(text: str) -> int:
    """Epoch milliseconds, or an ISO-8601 instant (``Z`` or an offset)."""
    if text.isdigit():
        return int(text)
    instant = dt.datetime.fromisoformat(text.replace("Z", "+00:00"))
    if instant.tzinfo is None:
        instant = instant.replace(tzinfo=dt.timezone.utc)
    return int(instant.timestamp() * 1000)


def replay(spark, logs: str, topic: str, from_ms: int, checkpoint: str) -> tuple[int, int]:
    from pyspark.sql import functions as F

    from seglog.logstore.manager.log_manager import LogManager

    when = dt.datetime.fromtimestamp(from_ms / 1000, dt.timezone.utc).isoformat()
    print(f"replaying {topic!r} from {when} ({from_ms} ms)")
    batch = (spark.read.format("seglog").option("path", logs).option("subscribe", topic)
             .option("startingTimestamp", str(from_ms)).load().cache())
    rows = batch.count()
    for r in (batch.groupBy("partition")
              .agg(F.min("offset").alias("first"), F.count("*").alias("n"),
                   F.min("timestamp").alias("ts"))
              .orderBy("partition").collect()):
        print(f"  partition {r['partition']}: from offset {r['first']:>5} "
              f"({r['n']} records, first at {r['ts']})")
    print(f"batch replay: {rows} records")
    batch.unpersist()
    with LogManager([logs], read_only=True) as mgr:  # same layout: partition for partition
        partitions = len(mgr.partitions(topic))

    target = f"{topic}-replay"
    q = (spark.readStream.format("seglog").option("path", logs).option("subscribe", topic)
         .option("startingTimestamp", str(from_ms)).load()
         .select("key", "value", "timestamp", "partition")
         .writeStream.format("seglog").option("path", logs).option("topic", target)
         .option("numPartitions", str(partitions)).option("checkpointLocation", checkpoint)
         .option("topic.retention.ms", "-1")  # replayed events keep their old timestamps
         .trigger(availableNow=True).start())
    q.awaitTermination()
    copied = (spark.read.format("seglog").option("path", logs).option("subscribe", target)
              .load().count())
    print(f"stream replay: {copied} records copied exactly once into {target!r} "
          f"(partition for partition)")
    return rows, copied


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--log-dir", help="an existing log dir (default: a demo in a temp dir)")
    parser.add_argument("--topic", default="readings")
    parser.add_argument("--from", dest="from_", help="epoch ms or ISO-8601 instant")
    args = parser.parse_args(argv)

    started = time.monotonic()
    scratch = Path(tempfile.mkdtemp(prefix="seglog-replay-"))
    spark = spark_session()
    try:
        if args.log_dir:
            logs = str(Path(args.log_dir).resolve())
            if not args.from_:
                parser.error("--from is required with --log-dir")
            from_ms = parse_instant(args.from_)
        else:
            logs = str(scratch / "logs")
            write_demo_events(spark, logs, args.topic)
            from_ms = parse_instant(args.from_) if args.from_ else T0_MS + 9000 * 1000
            print(f"wrote {DEMO_EVENTS} demo events, one per second from "
                  f"{dt.datetime.fromtimestamp(T0_MS / 1000, dt.timezone.utc).isoformat()}")
        rows, copied = replay(spark, logs, args.topic, from_ms, str(scratch / "chk"))
    finally:
        spark.stop()
        shutil.rmtree(scratch, ignore_errors=True)
    ok = rows == copied and (args.log_dir or rows == DEMO_EVENTS - 9000)
    print(f"done in {time.monotonic() - started:.1f} s" + ("" if ok else " (MISMATCH)"))
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
