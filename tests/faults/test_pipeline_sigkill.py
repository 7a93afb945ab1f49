"""A whole pipeline (seglog → transform → seglog, checkpointed) SIGKILLed at random moments.

The job runs in its own process group (driver, JVM, Python workers, the commit worker);
each kill takes the whole group down at once, wherever it is: planning, tasks staging,
a commit holding the log dir lock, Spark writing its commit log. Each kill is one of two
kinds, both in every run: a random moment after the run's first micro-batch, or a random
moment after the query started (start-up, planning). Then the job is restarted from its
checkpoint and runs to the end; every input record must then be in the output exactly
once, and no staging file may be left behind. (Each run is a new driver JVM, ~15 s: more
kills of the same kinds belong to the soak, ``benchmarks/soak.py``.)
"""

from __future__ import annotations

import collections
import os
import queue
import random
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

import pyarrow as pa
import pytest

from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import decode_batches, encode_batches

pytestmark = [pytest.mark.spark, pytest.mark.slow]

RECORDS = 12_000
# The moment each kill waits for, then a random delay: one kill of each kind.
KILL_AFTER = ("PROGRESS", "STARTED")

_JOB = textwrap.dedent("""
    import sys
    from pyspark.sql import SparkSession
    from pyspark.sql.streaming import StreamingQueryListener
    from seglog.datasource import SeglogDataSource

    path, chk, max_offsets = sys.argv[1], sys.argv[2], sys.argv[3]
    spark = (SparkSession.builder.master("local[2]").config("spark.ui.enabled", "false")
             .config("spark.ui.showConsoleProgress", "false")
             .config("spark.sql.shuffle.partitions", "2").getOrCreate())
    spark.sparkContext.setLogLevel("ERROR")
    spark.dataSource.register(SeglogDataSource)

    class Progress(StreamingQueryListener):
        def onQueryStarted(self, event):
            print("STARTED", flush=True)
        def onQueryProgress(self, event):
            print("PROGRESS", event.progress.batchId, flush=True)
        def onQueryIdle(self, event):
            pass
        def onQueryTerminated(self, event):
            pass

    spark.streams.addListener(Progress())
    q = (spark.readStream.format("seglog").option("path", path).option("subscribe", "in")
         .option("startingOffsets", "earliest").option("maxOffsetsPerTrigger", max_offsets)
         .load()
         .selectExpr("key", "concat('out-', cast(value AS string)) AS value")
         .writeStream.format("seglog").option("path", path).option("topic", "out")
         .option("numPartitions", "2").option("checkpointLocation", chk)
         .trigger(availableNow=True).start())
    q.awaitTermination()
    print("DONE", flush=True)
    spark.stop()
""")


def _write_input(path: Path | str) -> collections.Counter:
    with LogManager([path]) as mgr:
        mgr.create_topic("in", 3)
        for p in range(3):
            for lo in range(p, RECORDS, 3 * 1000):
                ids = range(lo, min(lo + 3 * 1000, RECORDS), 3)
                mgr.append(
                    "in",
                    p,
                    encode_batches(
                        pa.array([f"r{i}".encode() for i in ids]),
                        pa.array([f"k{i % 17}".encode() for i in ids]),
                    ),
                )
        if isinstance(path, Path):  # a bucket's appends are visible once committed
            mgr.checkpoint_high_watermarks()
    return collections.Counter(
        (f"k{i % 17}".encode(), f"out-r{i}".encode()) for i in range(RECORDS)
    )


def _output(path: Path | str) -> collections.Counter:
    out: collections.Counter = collections.Counter()
    with LogManager([path], read_only=True) as mgr:
        hws = mgr.high_watermarks()
        for p in mgr.partitions("out"):
            log = mgr.get_log("out", p)
            for chunk in log.read_chunks(log.log_start_offset, hws[("out", p)]):
                t = decode_batches(chunk)
                out.update(
                    zip(t.column("key").to_pylist(), t.column("value").to_pylist(), strict=True)
                )
    return out


class _Job:
    """The job in its own session (process group), its stdout lines in a queue."""

    def __init__(self, script: Path, args: list[str], log: Path) -> None:
        env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
        self.stderr = open(log, "ab")  # noqa: SIM115 (closed in wait())
        self.proc = subprocess.Popen(
            [sys.executable, str(script), *args],
            env=env,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            text=True,
            start_new_session=True,
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        for line in self.proc.stdout:
            self.lines.put(line.strip())
        self.lines.put(None)

    def wait_for(self, prefix: str, timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                line = self.lines.get(timeout=max(0.1, deadline - time.monotonic()))
            except queue.Empty:
                break
            if line is None:
                return False
            if line.startswith(prefix):
                return True
        return False

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.wait(60)

    def wait(self, timeout: float) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self.stderr.close()


def test_pipelines_on_a_local_dir_and_a_bucket_survive_random_sigkills_exactly_once(
    tmp_path: Path, s3_uri: str
) -> None:
    """The pipeline on a local dir and the same on a bucket (moto S3; the job inherits
    the ``AWS_*`` environment), at once: each is three driver JVMs one after the other,
    mostly waiting, so together they take little more than one.

    Local: no staging file is left behind. Bucket: the killed runs leave only uploads no
    commit references, which the collector deletes once their batches are settled (here
    with no orphan grace) without touching the output."""
    local, bucket = tmp_path / "local", tmp_path / "bucket"
    local.mkdir()
    bucket.mkdir()
    failures: list[BaseException] = []

    def on_the_local_dir() -> None:
        try:
            logs = local / "logs"
            _kill_and_restart(local, logs)
            staging = logs / ".seglog-sink" / "staging"
            assert [p for p in staging.rglob("*") if p.is_file()] == []
        except BaseException as e:  # re-raised in the test's thread below
            failures.append(e)

    thread = threading.Thread(target=on_the_local_dir, name="local-pipeline")
    thread.start()
    try:
        _check_bucket_pipeline(bucket, s3_uri)
    finally:
        thread.join()
    if failures:
        raise failures[0]


def _check_bucket_pipeline(tmp_path: Path, s3_uri: str) -> None:
    from seglog.logstore.bucket.bucket_manager import BucketLogManager
    from seglog.logstore.bucket.bucket_state import STAGING_DIR

    expected = _kill_and_restart(tmp_path, s3_uri)
    with BucketLogManager(s3_uri, orphan_grace_ms=0) as mgr:
        stats = mgr.collect()
        referenced = {seg.key for p in mgr.state.partitions.values() for seg in p.segments}
        left = {f"{STAGING_DIR}/{e.name}" for e in mgr.storage.list_tree(STAGING_DIR)}
    unreferenced = left - {
        k + suffix for k in referenced for suffix in (".log", ".index", ".timeindex")
    }
    # What is left and unreferenced was committed, then merged away by the query's
    # tasks: it waits for file.delete.delay.ms (readers may still hold it), no orphan.
    assert stats.orphans_waiting == 0 and len(unreferenced) <= stats.waiting
    assert _output(s3_uri) == expected


def _kill_and_restart(tmp_path: Path, logs: Path | str) -> collections.Counter:
    chk = tmp_path / "chk"
    expected = _write_input(logs)
    script = tmp_path / "job.py"
    script.write_text(_JOB)
    seed = int(os.environ.get("SEGLOG_TEST_SEED", time.time_ns() % 10_000))
    rng = random.Random(seed)
    stderr_log = tmp_path / "job.stderr"
    for kill, moment in enumerate(KILL_AFTER):
        job = _Job(script, [str(logs), str(chk), "400"], stderr_log)
        ready = job.wait_for(moment, timeout=300)
        assert ready, f"seed {seed}: job {kill} never got going; see {stderr_log}"
        time.sleep(rng.uniform(0.0, 2.5))
        # the kill of this kind happened: it finds the job still running
        ended = job.proc.poll()
        assert ended is None, (
            f"seed {seed}: job {kill} ended (exit {ended}) before its kill; see {stderr_log}"
        )
        job.kill()
    final = _Job(script, [str(logs), str(chk), "100000"], stderr_log)
    assert final.wait_for("DONE", timeout=400), f"seed {seed}: see {stderr_log}"
    assert final.wait(120) == 0
    got = _output(logs)
    missing, extra = expected - got, got - expected
    assert not missing and not extra, (
        f"seed {seed}: {sum(missing.values())} missing, {sum(extra.values())} duplicated, "
        f"e.g. {list(missing)[:3]} / {list(extra)[:3]}"
    )
    return expected
