"""The processes of the soak (``benchmarks/soak.py``), one role each, every one of them
SIGKILLable at any moment and restartable:

    python benchmarks/soak_roles.py writer|reader|maintain|query ARGS...

- ``writer ID PATH WORK SEED RATE``: appends records whose values are unique ids
  (``w<ID>-<seq>``) to the topic ``in`` with ``append`` and ``append_many``, at most
  ``RATE`` records a second (0: as fast as it can); before each
  call it journals ``try``, after it returns ``ack`` (fsynced: an acknowledged record),
  after it raises ``fail``. A restarted writer goes on after the highest sequence number
  it ever journaled, so an id is never used twice. On a local dir it opens the log dir
  for a few calls at a time (one writer per dir: the others and the sinks wait).
- ``reader ID PATH WORK``: tails every partition of ``in`` through a read-only manager,
  journaling what each read returned (``R <partition> <first offset> <id,id,...>``) and
  any read that did not continue where the previous one ended.
- ``maintain PATH WORK ORPHAN_GRACE_MS``: ``seglog maintain`` one pass at a time, and on
  a bucket a collection with the small orphan grace in between.
- ``query NAME PATH CHK MODE``: a Spark query ``in`` -> ``<NAME>`` (seglog to seglog,
  exactly-once), ``MODE`` ``run`` (a trigger a second until killed) or ``drain``
  (``availableNow``: everything there, in bounded micro-batches, then exit); ``out2``'s
  session takes docs/operations.md's ``LOW_LATENCY_SPARK_CONF``, ``out1``'s Spark's
  defaults, so the kills exercise both. Prints
  ``STARTED``, ``PROGRESS <batch> <rows> <trigger ms> <addBatch ms>`` per micro-batch,
  ``DONE``.

Bucket processes reach the store through the ``AWS_*`` environment they inherit (the
proxy's endpoint); local ones through the path.
"""

from __future__ import annotations

import os
import random
import signal
import sys
import threading
import time
from pathlib import Path
from typing import Any

TOPIC = "in"
PARTITIONS = 4
KEYS = 7


class Journal:
    """An append-only text journal; ``line(..., sync=True)`` returns once it is on disk."""

    def __init__(self, path: Path) -> None:
        self._fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)

    def line(self, text: str, *, sync: bool = False) -> None:
        os.write(self._fd, (text + "\n").encode())
        if sync:
            os.fsync(self._fd)


def _stop_on_sigterm() -> list[bool]:
    stop = [False]

    def handler(*_: object) -> None:
        stop[0] = True

    signal.signal(signal.SIGTERM, handler)
    return stop


def _next_seq(path: Path) -> int:
    """One past the highest sequence number the journal at ``path`` ever named."""
    if not path.exists():
        return 0
    top = -1
    for line in path.read_text(errors="replace").splitlines():
        parts = line.split()
        if len(parts) >= 3 and parts[0] in ("try", "ack", "fail"):
            try:
                top = max(top, int(parts[2]))
            except ValueError:
                continue  # a line cut by a kill: its try line (if any) names it
    return top + 1


def writer(wid: str, path: str, work: str, seed: str, rate: str) -> None:
    import pyarrow as pa

    from seglog.logstore.errors import LogDirLockedError, SeglogError
    from seglog.logstore.manager.log_manager import LogManager
    from seglog.logstore.records.record_codec import encode_batches

    journal_path = Path(work) / f"writer-{wid}.journal"
    seq = _next_seq(journal_path)
    journal = Journal(journal_path)
    rng = random.Random(int(seed) * 1000 + seq)
    stop = _stop_on_sigterm()
    bucket = "://" in path
    per_second = float(rate)

    def records(lo: int, n: int) -> bytearray:
        ids = [f"w{wid}-{s}".encode() for s in range(lo, lo + n)]
        return encode_batches(
            pa.array(ids, pa.binary()), pa.array([b"k%d" % (s % KEYS) for s in range(lo, lo + n)])
        )

    mgr = None
    owed = 0.0  # seconds of pause the rate asks for, not yet taken
    while not stop[0]:
        if mgr is None:
            try:
                mgr = LogManager([path])
            except LogDirLockedError:
                time.sleep(rng.uniform(0.01, 0.1))
                continue
        calls = 0
        while not stop[0] and (bucket or calls < 3):
            calls += 1
            parts = rng.sample(range(PARTITIONS), rng.choice((1, 1, 2, 3)))
            n = rng.randint(1, 10)
            lo = seq
            spans = [(p, lo + i * n, n) for i, p in enumerate(parts)]
            seq += n * len(parts)
            desc = " ".join(f"{p}:{s}:{n}" for p, s, n in spans)
            journal.line(f"try {lo} {seq - 1} {desc}")
            try:
                if len(spans) == 1:
                    mgr.append(TOPIC, spans[0][0], records(spans[0][1], n))
                else:
                    mgr.append_many({(TOPIC, p): records(s, n) for p, s, n in spans})
            except (SeglogError, OSError) as e:
                journal.line(
                    f"fail {lo} {seq - 1} {type(e).__name__}: "
                    f"{str(e).splitlines()[0][:300] if str(e) else ''}",
                    sync=True,
                )
                if not bucket:
                    break  # reopen: the writer may have been fenced or hit damage
                time.sleep(0.2)
                continue
            journal.line(f"ack {lo} {seq - 1}", sync=True)
            # The rate's pause: on a local dir after the dir's lock is let go, or the
            # writer would hold it while idle, and sinks and maintain wait.
            owed += n * len(parts) / per_second if per_second > 0 else 0.0
            time.sleep(max(rng.uniform(0.0, 0.05), owed if bucket else 0.0))
            if bucket:
                owed = 0.0
        if not bucket:
            mgr.close()
            mgr = None
            time.sleep(max(rng.uniform(0.0, 0.2), owed))
            owed = 0.0
    if mgr is not None:
        mgr.close()


def reader(rid: str, path: str, work: str) -> None:
    from seglog.logstore.errors import SeglogError
    from seglog.logstore.manager.log_manager import LogManager
    from seglog.logstore.records.record_codec import decode_batches

    journal = Journal(Path(work) / f"reader-{rid}.journal")
    journal.line("start")
    stop = _stop_on_sigterm()
    next_offset = dict.fromkeys(range(PARTITIONS), 0)
    while not stop[0]:
        try:
            with LogManager([path], read_only=True) as mgr:
                hws = mgr.high_watermarks()
                for p in range(PARTITIONS):
                    hw = hws.get((TOPIC, p), 0)
                    at = next_offset[p]
                    if hw <= at:
                        continue
                    log = mgr.get_log(TOPIC, p)
                    for chunk in log.read_chunks(at, hw):
                        rows = decode_batches(chunk, start_offset=at, end_offset=hw)
                        offsets = rows.column("offset").to_pylist()
                        if not offsets:
                            continue
                        if (
                            offsets != list(range(offsets[0], offsets[0] + len(offsets)))
                            or offsets[0] != at
                        ):
                            journal.line(f"gap {p} expected {at} got {offsets[:3]}...")
                        values = [v.decode() for v in rows.column("value").to_pylist()]
                        journal.line(f"R {p} {offsets[0]} {','.join(values)}")
                        at = offsets[-1] + 1
                    next_offset[p] = at
        except (SeglogError, OSError) as e:
            journal.line(f"error {type(e).__name__}: {str(e).splitlines()[0][:300]}")
        time.sleep(0.2)


def maintain(path: str, work: str, orphan_grace_ms: str) -> None:
    import contextlib
    import io

    from seglog.cli import main as seglog_main

    journal = Journal(Path(work) / "maintain.journal")
    stop = _stop_on_sigterm()
    passes = 0
    while not stop[0]:
        out = io.StringIO()
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            try:
                code = seglog_main(["maintain", path, "--lock-timeout", "60000", "--json"])
            except SystemExit as e:
                code = e.code if isinstance(e.code, int) else 2
        journal.line(f"pass {passes} exit {code} {out.getvalue().strip()[:500]!r}")
        if "://" in path and passes % 2 == 1:
            _collect(path, int(orphan_grace_ms), journal)
        print("PASS", passes, flush=True)
        passes += 1
        time.sleep(1.0)


def _collect(path: str, orphan_grace_ms: int, journal: Journal) -> None:
    from seglog.logstore.bucket.bucket_manager import BucketLogManager
    from seglog.logstore.errors import SeglogError

    try:
        with BucketLogManager(path, orphan_grace_ms=orphan_grace_ms) as mgr:
            stats = mgr.collect()
        journal.line(
            f"collect removed={stats.removed_objects} orphans={stats.orphans} "
            f"errors={len(stats.errors)}"
        )
    except (SeglogError, OSError) as e:
        journal.line(f"collect error {type(e).__name__}: {str(e).splitlines()[0][:300]}")


def query(name: str, path: str, chk: str, mode: str) -> None:
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQueryListener

    from seglog.datasource import LOW_LATENCY_SPARK_CONF, SeglogDataSource

    spark = (
        SparkSession.builder.master("local[1]")
        .appName(f"soak-{name}")
        .config("spark.ui.enabled", "false")
        .config("spark.ui.showConsoleProgress", "false")
        .config("spark.driver.memory", "768m")
        .config("spark.sql.shuffle.partitions", "1")
        .config("spark.python.worker.reuse", "true")
        .config(map=dict(LOW_LATENCY_SPARK_CONF) if name == "out2" else {})
        .getOrCreate()
    )
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(SeglogDataSource)

    printed: set[int] = set()
    printing = threading.Lock()  # the listener's thread and, at the end, the main one

    def show(progress: Any) -> None:
        with printing:
            if progress.batchId in printed:
                return
            printed.add(progress.batchId)
            _show(progress)

    def _show(progress: Any) -> None:
        # Where a micro-batch's time went (ms): all of it, then the sink's write.
        durations = progress.durationMs
        print(
            "PROGRESS",
            progress.batchId,
            progress.numInputRows,
            durations.get("triggerExecution", -1),
            durations.get("addBatch", -1),
            flush=True,
        )

    class Progress(StreamingQueryListener):
        def onQueryStarted(self, event: Any) -> None:
            print("STARTED", flush=True)

        def onQueryProgress(self, event: Any) -> None:
            show(event.progress)

        def onQueryIdle(self, event: Any) -> None:
            return

        def onQueryTerminated(self, event: Any) -> None:
            return

    spark.streams.addListener(Progress())
    # Micro-batches a kill finds in flight, each large enough that its fixed cost (tens
    # of seconds on a loaded machine: Python workers, the sink's commit) does not leave
    # the queries forever behind the writers; draining, bounded too, so progress shows
    # and a failed attempt keeps what it committed.
    per_trigger = "10000" if mode == "run" else "20000"
    writer = (
        spark.readStream.format("seglog")
        .option("path", path)
        .option("subscribe", TOPIC)
        .option("startingOffsets", "earliest")
        .option("maxOffsetsPerTrigger", per_trigger)
        .load()
        .selectExpr("key", "value")
        .writeStream.format("seglog")
        .option("path", path)
        .option("topic", name)
        .option("numPartitions", "2")
        .option("topic.retention.ms", "-1")
        .option("checkpointLocation", chk)
    )
    if mode == "drain":
        q = writer.trigger(availableNow=True).start()
    else:
        q = writer.trigger(processingTime="1 second").start()
    q.awaitTermination()
    # The listener runs on its own thread: the last micro-batches may not be shown yet.
    for progress in q.recentProgress:
        show(progress)
    print("DONE", flush=True)
    spark.stop()


ROLES = {"writer": writer, "reader": reader, "maintain": maintain, "query": query}

if __name__ == "__main__":
    ROLES[sys.argv[1]](*sys.argv[2:])
