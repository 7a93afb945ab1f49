"""The streaming sink in Spark, replaying its last micro-batch after the sink ledger was
damaged: the micro-batch was published (Spark did not record it), published in one log
dir of two, or not published. Every input row must be in the output exactly once.

Spark replays a micro-batch whose offsets it logged but whose commit it did not record:
removing ``<checkpoint>/commits/<id>`` (and its ``.crc``) puts the query in the state a
crash between the sink's commit and Spark's commit log leaves; lowering a log dir's
high-watermark checkpoint back to where the micro-batch starts there puts that dir in the
state a crash before the sink's checkpoint leaves (its rows are then an unpublished tail)."""

from __future__ import annotations

import collections
from pathlib import Path

import pytest

from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import decode_batches
from seglog.logstore.records.record_format import iter_batch_headers
from seglog.logstore.storage.checkpoint_file import OFFSETS, CheckpointFile
from seglog.streaming.sink_commit import SinkLedger
from seglog.streaming.sink_staging import batch_id_of, producer_id_of

pytestmark = pytest.mark.spark

ROWS = 3000


def _output(dirs: list[Path]) -> collections.Counter:
    out: collections.Counter = collections.Counter()
    with LogManager(dirs, read_only=True) as mgr:
        hws = mgr.high_watermarks()
        for p in mgr.partitions("out"):
            log = mgr.get_log("out", p)
            for chunk in log.read_chunks(log.log_start_offset, hws[("out", p)]):
                t = decode_batches(chunk)
                out.update(zip(t.column("key").to_pylist(), t.column("value").to_pylist(),
                               strict=True))
    return out


def _unpublish(log_dir: Path, sink_id: str, batch_id: int) -> int:
    """Lower ``log_dir``'s high watermarks to where ``batch_id`` of the sink starts in each
    partition (as if the commit had died before its checkpoint). Returns how many
    partitions that touched."""
    pid = producer_id_of(sink_id)
    f = CheckpointFile(log_dir / "replication-offset-checkpoint", OFFSETS)
    hws = dict(f.read())
    touched = 0
    for part_dir in sorted(log_dir.glob("out-*")):
        tp = ("out", int(part_dir.name.rsplit("-", 1)[1]))
        for seg in sorted(part_dir.glob("*.log")):
            starts = [h.base_offset for h in iter_batch_headers(seg.read_bytes())
                      if h.producer_id == pid
                      and batch_id_of(h.producer_epoch, h.base_sequence) == batch_id]
            if starts:
                hws[tp] = min(hws[tp], starts[0])
                touched += 1
                break
    f.write(hws.items())
    return touched


def _forget_commit(chk: Path, batch_id: int) -> None:
    """Spark's commit log loses ``batch_id`` (and its checksum file): it is replayed."""
    (chk / "commits" / str(batch_id)).unlink()
    (chk / "commits" / f".{batch_id}.crc").unlink(missing_ok=True)


def test_replay_after_ledger_damage_is_exactly_once(spark, tmp_path: Path) -> None:
    src, a, b, chk = (tmp_path / n for n in ("src", "a", "b", "chk"))
    (spark.range(0, ROWS, numPartitions=2)
     .selectExpr("cast(id % 17 as string) AS key", "concat('e', id) AS value")
     .write.format("seglog").option("path", str(src)).option("topic", "in")
     .option("numPartitions", "3").mode("append").save())
    expected = collections.Counter((str(i % 17).encode(), f"E{i}".encode())
                                   for i in range(ROWS))

    def run():
        q = (spark.readStream.format("seglog").option("path", str(src))
             .option("subscribe", "in").option("startingOffsets", "earliest")
             .option("maxOffsetsPerTrigger", "1000").load()
             .selectExpr("key", "upper(cast(value AS string)) AS value")
             .writeStream.format("seglog").option("logDirs", f"{a},{b}").option("topic", "out")
             .option("numPartitions", "4").option("checkpointLocation", str(chk))
             .trigger(availableNow=True).start())
        q.awaitTermination(240)
        assert q.exception() is None
        return q

    q = run()
    assert _output([a, b]) == expected
    last = max(int(p.name) for p in (chk / "commits").iterdir() if p.name.isdigit())
    ledgers = [SinkLedger(d, q.id).path for d in (a, b)]
    assert all(p.exists() for p in ledgers)

    # 1. published everywhere, Spark did not record it, the ledgers are garbled
    _forget_commit(chk, last)
    for p in ledgers:
        p.write_bytes(p.read_bytes().replace(b"[", b"{", 2))
    run()
    assert _output([a, b]) == expected

    # 2. published in dir a only (b's checkpoint never written), ledgers truncated
    _forget_commit(chk, last)
    assert _unpublish(b, q.id, last) > 0
    for p in ledgers:
        p.write_bytes(p.read_bytes()[:40])
    assert _output([a, b]) != expected
    run()
    assert _output([a, b]) == expected

    # 3. published nowhere, ledgers deleted
    _forget_commit(chk, last)
    assert _unpublish(a, q.id, last) + _unpublish(b, q.id, last) > 0
    for p in ledgers:
        p.unlink()
    run()
    assert _output([a, b]) == expected
    assert all(SinkLedger(d, q.id).read().valid for d in (a, b))  # rebuilt
