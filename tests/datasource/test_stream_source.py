"""``spark.readStream.format("seglog")`` end to end, against real log dirs and a live writer.

Every query start costs ~13 s here, so each test runs several queries at once or chains
several checks on one query.
"""

from __future__ import annotations

import json
import threading
import time
from collections import Counter
from pathlib import Path

import pyarrow as pa
import pytest

from seglog.logstore.log.partition_metadata import read_topic_id
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import encode_batches

pytestmark = pytest.mark.spark

T0 = 1_700_000_000_000


def append(mgr: LogManager, topic: str, partition: int, n: int, checkpoint: bool = True) -> None:
    """Append ``n`` records (value ``topic-partition-offset``, ts = T0 + offset s)."""
    lo = mgr.get_log(topic, partition).log_end_offset
    mgr.append(topic, partition, encode_batches(
        pa.array([f"{topic}-{partition}-{i}".encode() for i in range(lo, lo + n)], pa.binary()),
        timestamps=pa.array([T0 + i * 1000 for i in range(lo, lo + n)], pa.int64()),
        max_batch_bytes=256,
    ))
    if checkpoint:
        mgr.checkpoint_high_watermarks()


class Collector:
    """A foreachBatch sink keeping (batch id, [(topic, partition, offset, value)])."""

    def __init__(self) -> None:
        self.batches: list[tuple[int, list[tuple[str, int, int, bytes]]]] = []

    def __call__(self, df, batch_id: int) -> None:
        rows = [(r.topic, r.partition, r.offset, bytes(r.value))
                for r in df.select("topic", "partition", "offset", "value").collect()]
        self.batches.append((batch_id, rows))

    @property
    def rows(self) -> list[tuple[str, int, int, bytes]]:
        return [r for _, rows in self.batches for r in rows]

    def offsets(self) -> dict[tuple[str, int], list[int]]:
        out: dict[tuple[str, int], list[int]] = {}
        for t, p, o, _ in self.rows:
            out.setdefault((t, p), []).append(o)
        return {tp: sorted(v) for tp, v in out.items()}


def start(spark, log_dir, collector, checkpoint, trigger=None, **options):
    reader = spark.readStream.format("seglog").option("path", log_dir)
    for k, v in options.items():
        reader = reader.option(k, v)
    writer = (reader.load().writeStream.foreachBatch(collector)
              .option("checkpointLocation", str(checkpoint)))
    if trigger:
        writer = writer.trigger(**trigger)
    return writer.start()


def test_earliest_admission_new_partitions_and_restart(spark, tmp_path):
    log_dir = str(tmp_path / "logs")
    chk = tmp_path / "chk"
    with LogManager([log_dir]) as mgr:
        mgr.create_topic("ev1", 2)
        append(mgr, "ev1", 0, 30)
        append(mgr, "ev1", 1, 10)
        got = Collector()
        q = start(spark, log_dir, got, chk, subscribePattern="ev.*",
                  startingOffsets="earliest", maxOffsetsPerTrigger="8")
        try:
            q.processAllAvailable()
            assert all(len(rows) <= 8 for _, rows in got.batches)
            first = Counter(p for _, p, _, _ in got.batches[0][1])
            assert first == {0: 6, 1: 2}  # split in proportion to lag, as Kafka
            assert got.offsets() == {("ev1", 0): list(range(30)), ("ev1", 1): list(range(10))}
            # New partitions and, with subscribePattern, new topics: from earliest.
            mgr.add_partitions("ev1", 3)
            append(mgr, "ev1", 2, 5)
            mgr.create_topic("ev2", 1)
            append(mgr, "ev2", 0, 4)
            mgr.create_topic("other", 1)
            append(mgr, "other", 0, 4)
            q.processAllAvailable()
            assert got.offsets()[("ev1", 2)] == list(range(5))
            assert got.offsets()[("ev2", 0)] == list(range(4))
            assert ("other", 0) not in got.offsets()
            end = json.loads(q.lastProgress["sources"][0]["endOffset"])
            assert set(end.pop("$topicIds")) == {"ev1", "ev2"}
            assert end == {"ev1": {"0": 30, "1": 10, "2": 5}, "ev2": {"0": 4}}
        finally:
            q.stop()
        # Restart from the checkpoint: no gap, no repeat.
        append(mgr, "ev1", 0, 6)
        append(mgr, "ev2", 0, 3)
        q = start(spark, log_dir, got, chk, subscribePattern="ev.*",
                  startingOffsets="earliest", maxOffsetsPerTrigger="8")
        try:
            q.processAllAvailable()
        finally:
            q.stop()
    rows = got.rows
    assert len(rows) == len(set(rows))
    assert got.offsets() == {("ev1", 0): list(range(36)), ("ev1", 1): list(range(10)),
                             ("ev1", 2): list(range(5)), ("ev2", 0): list(range(7))}
    assert all(v == f"{t}-{p}-{o}".encode() for t, p, o, v in rows)


def test_latest_json_timestamp_and_min_offsets_with_delay(spark, tmp_path):
    log_dir = str(tmp_path / "logs")
    with LogManager([log_dir]) as mgr:
        mgr.create_topic("st", 2)
        mgr.create_topic("mn", 1)
        for p in (0, 1):
            append(mgr, "st", p, 20)
        append(mgr, "mn", 0, 3)
        c = {k: Collector() for k in ("latest", "json", "ts", "min")}
        specs = {
            "latest": dict(subscribe="st"),
            "json": dict(subscribe="st", startingOffsets='{"st": {"0": 15, "1": -2}}'),
            "ts": dict(assign='{"st": [0, 1]}', startingTimestamp=str(T0 + 17_500)),
            "min": dict(subscribe="mn", startingOffsets="earliest", minOffsetsPerTrigger="5",
                        maxTriggerDelay="1h"),
        }
        qs = {}
        try:
            # One at a time: on a loaded 2-core box, Python workers starting together can
            # miss Spark's connect-back timeout.
            for name, opts in specs.items():
                qs[name] = start(spark, log_dir, c[name], tmp_path / name, **opts)
                qs[name].processAllAvailable()
            # The first batch of a query is admitted at once (Kafka), then it waits for 5.
            assert c["min"].offsets() == {("mn", 0): [0, 1, 2]}
            for p in (0, 1):
                append(mgr, "st", p, 3)
            append(mgr, "mn", 0, 2)
            for q in qs.values():
                q.processAllAvailable()
            assert c["min"].offsets() == {("mn", 0): [0, 1, 2]}  # 2 < 5: delayed
            append(mgr, "mn", 0, 4)
            qs["min"].processAllAvailable()
            end = json.loads(qs["min"].lastProgress["sources"][0]["endOffset"])
        finally:
            for q in qs.values():
                q.stop()
    assert c["latest"].offsets() == {("st", 0): [20, 21, 22], ("st", 1): [20, 21, 22]}
    assert c["json"].offsets() == {("st", 0): list(range(15, 23)), ("st", 1): list(range(23))}
    assert c["ts"].offsets() == {("st", 0): list(range(18, 23)), ("st", 1): list(range(18, 23))}
    assert [len(rows) for _, rows in c["min"].batches if rows] == [3, 6]
    assert end["mn"] == {"0": 9} and end["$lastTriggerMs"] > T0


def test_available_now_stops_at_its_target_while_a_writer_appends(spark, tmp_path):
    log_dir = str(tmp_path / "logs")
    stop = threading.Event()
    with LogManager([log_dir]) as mgr:
        mgr.create_topic("an", 2)
        for p in (0, 1):
            append(mgr, "an", p, 50)

        def keep_writing() -> None:
            while not stop.wait(0.05):
                for p in (0, 1):
                    append(mgr, "an", p, 5)

        writer = threading.Thread(target=keep_writing, daemon=True)
        writer.start()
        got = Collector()
        try:
            q = start(spark, log_dir, got, tmp_path / "chk", trigger={"availableNow": True},
                      subscribe="an", startingOffsets="earliest", maxOffsetsPerTrigger="20")
            assert q.awaitTermination(240), "AvailableNow query did not stop by itself"
            assert q.exception() is None
        finally:
            stop.set()
            writer.join()
        written = {p: mgr.get_log("an", p).log_end_offset for p in (0, 1)}
    offsets = got.offsets()
    assert all(len(rows) <= 20 for _, rows in got.batches)
    for p in (0, 1):
        read = offsets[("an", p)]
        assert read == list(range(len(read)))  # a contiguous prefix, each offset once
        assert len(read) >= 50
    assert sum(len(offsets[("an", p)]) for p in (0, 1)) < sum(written.values())


def test_retention_under_a_running_query(spark, tmp_path):
    log_dir = str(tmp_path / "logs")
    cfg = {"segment.bytes": "1024"}
    with LogManager([log_dir]) as mgr:
        for t in ("strict", "lenient"):
            mgr.create_topic(t, 1, config=cfg)
            append(mgr, t, 0, 30)
        c = {t: Collector() for t in ("strict", "lenient")}
        qs = {}
        try:
            for t in ("strict", "lenient"):
                qs[t] = start(spark, log_dir, c[t], tmp_path / t, subscribe=t,
                              startingOffsets="earliest",
                              failOnDataLoss=str(t == "strict").lower())
                qs[t].processAllAvailable()
            lso = {}
            for t in ("strict", "lenient"):
                append(mgr, t, 0, 30, checkpoint=False)  # invisible until the checkpoint
                log = mgr.get_log(t, 0)
                log.maybe_increment_log_start_offset(45)
                log.delete_old_segments()
                lso[t] = log.log_start_offset
                assert lso[t] >= 45
                append(mgr, t, 0, 10, checkpoint=False)
            mgr.checkpoint_log_start_offsets()
            mgr.checkpoint_high_watermarks()
            qs["lenient"].processAllAvailable()
            lost = rf"'strict' partition 0: offsets \[30, {lso['strict']}\)"
            with pytest.raises(Exception, match=lost):
                qs["strict"].processAllAvailable()
        finally:
            for q in qs.values():
                q.stop()
    assert c["lenient"].offsets() == {
        ("lenient", 0): list(range(30)) + list(range(lso["lenient"], 70))}
    assert c["strict"].offsets() == {("strict", 0): list(range(30))}


@pytest.mark.parametrize("with_min", [False, True])
def test_reader_methods_without_a_jvm(tmp_path, with_min):
    """The reader's protocol, called directly as the engine's runner would."""
    from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadMaxRows, ReadMinRows

    from seglog.datasource.schema import source_schema
    from seglog.datasource.stream_reader import SeglogStreamReader

    log_dir = str(tmp_path / "logs")
    with LogManager([log_dir]) as mgr:
        mgr.create_topic("r", 2)
        append(mgr, "r", 0, 40)
        append(mgr, "r", 1, 10)
        opts = {"path": log_dir, "subscribe": "r", "startingOffsets": "earliest",
                "maxOffsetsPerTrigger": "20"}
        if with_min:
            opts.update(minOffsetsPerTrigger="5", maxTriggerDelay="1h")
        reader = SeglogStreamReader(opts, source_schema(opts))
        start = reader.initialOffset()
        # Kafka's offsets, and the topic's id the next trigger compares (topic ids)
        tid = read_topic_id(Path(log_dir) / "r-0")
        assert start == {"r": {"0": 0, "1": 0}, "$topicIds": {"r": tid}}
        assert reader.getDefaultReadLimit() == ReadMaxRows(20)
        assert reader.reportLatestOffset() == {"r": {"0": 40, "1": 10}}
        before_ms = time.time_ns() // 1_000_000
        latest = reader.latestOffset(start, ReadAllAvailable())
        after_ms = time.time_ns() // 1_000_000
        assert {k: v for k, v in latest.items() if k != "$lastTriggerMs"} == {
            "r": {"0": 40, "1": 10}, "$topicIds": {"r": tid}}
        if with_min:  # the trigger time is stamped when the offsets move
            assert before_ms <= latest["$lastTriggerMs"] <= after_ms
        else:
            assert "$lastTriggerMs" not in latest
        end = reader.latestOffset(start, ReadMaxRows(20))
        assert {k: v for k, v in end.items() if k != "$lastTriggerMs"} == {
            "r": {"0": 16, "1": 4}, "$topicIds": {"r": tid}}
        assert ("$lastTriggerMs" in end) == with_min
        ranges = [p.value for p in reader.partitions(start, end)]
        assert [(r.partition, r.start, r.end) for r in ranges] == [(0, 0, 16), (1, 0, 4)]
        assert {r.topic_id for r in ranges} == {tid}
        assert sum(b.num_rows for r in ranges for b in reader.read(type("P", (), {
            "value": r})())) == 20
        # AvailableNow: the target is fixed now; later appends are not admitted.
        reader.prepareForTriggerAvailableNow()
        append(mgr, "r", 0, 100)
        end2 = reader.latestOffset(end, ReadMaxRows(20))
        assert end2["r"] == {"0": 32, "1": 8}
        end3 = reader.latestOffset(end2, ReadAllAvailable())
        assert end3["r"] == {"0": 40, "1": 10}
        assert reader.latestOffset(end3, ReadMaxRows(20)) == end3  # done: start returned
        if with_min:
            assert SeglogStreamReader(
                {k: v for k, v in opts.items() if k != "maxOffsetsPerTrigger"},
                source_schema(opts)).getDefaultReadLimit() == ReadMinRows(5)
