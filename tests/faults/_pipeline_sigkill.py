"""The pipeline of ``test_pipeline_sigkill.py`` killed and restarted: its job, its input and
output, and the run itself, which the test starts with the session (an ``early_run`` of
``tests/early_runs.py``) as ``python _pipeline_sigkill.py WORK LOGS``: three driver
JVMs one after the other, each kill one of ``KILL_AFTER``'s kinds, then a run to the
end; exit status 0 once every input record is in the output exactly once, else the
assertion's message on stderr."""

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

from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import decode_batches, encode_batches

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


def write_input(path: Path | str) -> collections.Counter:
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
    return expected_output()


def expected_output() -> collections.Counter:
    """What the job's output holds once it ran to the end: each input record once."""
    return collections.Counter(
        (f"k{i % 17}".encode(), f"out-r{i}".encode()) for i in range(RECORDS)
    )


def output(path: Path | str) -> collections.Counter:
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


def kill_and_restart(tmp_path: Path, logs: Path | str) -> collections.Counter:
    chk = tmp_path / "chk"
    expected = write_input(logs)
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
    got = output(logs)
    missing, extra = expected - got, got - expected
    assert not missing and not extra, (
        f"seed {seed}: {sum(missing.values())} missing, {sum(extra.values())} duplicated, "
        f"e.g. {list(missing)[:3]} / {list(extra)[:3]}"
    )
    return expected


if __name__ == "__main__":
    work, logs = Path(sys.argv[1]), sys.argv[2]
    kill_and_restart(work, logs if logs.startswith("s3://") else Path(logs))
