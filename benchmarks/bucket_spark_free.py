"""The Spark-free parts of ``bench_spark_bucket``: the driver's commit time per
micro-batch (by its size, by the bucket's history) and where a write task's time goes
(``--phases``), on the functions a task and the driver call. See that module's
docstring for how to run them."""

from __future__ import annotations

import os
import statistics
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pyarrow as pa
from s3_server import S3Server

VALUE_BYTES = 100
TASKS = 2  # local[2]: a micro-batch's data comes from two write tasks


def load() -> str:
    return "load {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())


# ---------------------------------------------------------------------- driver commit
class CommitHarness:
    """Stages micro-batches as write tasks do and times the driver's commit of each."""

    ROWS = 10_000

    def __init__(self, server: S3Server, uri: str, topic: str) -> None:
        from seglog.streaming.sink_options import SinkColumns, SinkOptions

        self.server = server
        self.uri = uri
        self.opts = SinkOptions.parse({"path": uri, "topic": topic, "numPartitions": "3"})
        self.data = pa.record_batch(
            {
                "key": pa.array([b"user-%d" % (i % 1000) for i in range(self.ROWS)]),
                "value": pa.array([b"v" * VALUE_BYTES] * self.ROWS),
            }
        )
        self.cols = SinkColumns.resolve(self.data.schema, default_topic=topic)
        self.sink_id = f"bench-{topic}"
        self.batch_id = 0

    def stage(self, mb: float) -> list:
        """Two tasks' uploads of about ``mb`` MB in all (~118 B a row once encoded)."""
        from seglog.streaming.sink_bucket_staging import stage_rows

        rows = max(3, round(mb * 1e6 / 118))
        per_task = -(-rows // TASKS)

        def batches() -> Iterator[pa.RecordBatch]:
            left = per_task
            while left > 0:
                n = min(left, self.ROWS)
                yield self.data.slice(0, n)
                left -= n

        return [
            stage_rows(self.opts, self.cols, batches(), self.sink_id, self.batch_id, t, 0)
            for t in range(TASKS)
        ]

    def staged_in_bucket(self) -> tuple[int, int]:
        """(objects, bytes) under this batch's staging prefix, listed by a plain S3
        client: the fragments really are in the bucket before the commit."""
        from seglog.streaming.sink_bucket_staging import staging_prefix

        bucket, _, root = self.uri[len("s3://") :].partition("/")
        prefix = f"{root}/{staging_prefix(self.sink_id, self.batch_id)}/"
        objects = size = 0
        pages = self.server.client().get_paginator("list_objects_v2")
        for page in pages.paginate(Bucket=bucket, Prefix=prefix):
            for o in page.get("Contents", []):
                objects += 1
                size += o["Size"]
        return objects, size

    def commit(self, staged: list) -> float:
        from seglog.streaming.sink_bucket_commit import commit

        t0 = time.perf_counter()
        result = commit(staged, self.batch_id, self.opts)
        secs = time.perf_counter() - t0
        if not result.published:
            raise RuntimeError(f"batch {self.batch_id} published nothing: {result}")
        self.batch_id += 1
        return secs


def commit_by_size(server: S3Server, sizes_mb: list[float], repeats: int) -> None:
    h = CommitHarness(server, f"s3://{server.create_bucket('commit-size')}/logs", "c")
    print(
        f"driver commit per micro-batch by its size ({TASKS} tasks' fragments uploaded "
        f"first, listed in the bucket; only commit() timed):",
        flush=True,
    )
    for mb in sizes_mb:
        times, staged_s = [], []
        for _ in range(repeats if mb < 1000 else max(1, repeats - 1)):
            t = time.perf_counter()
            staged = h.stage(mb)
            staged_s.append(time.perf_counter() - t)
            fragments = sum(len(s.fragments) for s in staged)
            objects, size = h.staged_in_bucket()
            if size < sum(f.size for s in staged for f in s.fragments):
                raise RuntimeError(f"batch {h.batch_id}: the fragments are not all uploaded")
            times.append(h.commit(staged))
        print(
            f"  {size / 1e6:8,.0f} MB, {fragments:3d} fragments ({objects} objects): commit "
            f"median {statistics.median(times) * 1000:6.1f} ms, min {min(times) * 1000:6.1f}"
            f" ms of {len(times)} (uploads before it: {statistics.median(staged_s):.1f} s; "
            f"{load()})",
            flush=True,
        )


def commit_by_history(server: S3Server, histories: list[int], repeats: int) -> None:
    h = CommitHarness(server, f"s3://{server.create_bucket('commit-history')}/logs", "h")
    print(
        "driver commit of a 1 MB micro-batch by the bucket's history (prior commits, "
        "each a micro-batch of 3 fragments):",
        flush=True,
    )
    for history in sorted(histories):
        while h.batch_id < history:
            h.commit(h.stage(0.0001))
        times = [h.commit(h.stage(1)) for _ in range(repeats)]
        print(
            f"  after {history:5d} commits: median {statistics.median(times) * 1000:6.1f} ms,"
            f" min {min(times) * 1000:6.1f} ms of {len(times)} ({load()})",
            flush=True,
        )


# ---------------------------------------------------------------------- phases
class _Timed:
    """Wraps module attributes so each call's wall time adds up under a phase name."""

    def __init__(self) -> None:
        self.secs: dict[str, float] = {}
        self._undo: list[Callable[[], None]] = []

    def wrap(self, module: object, attr: str, phase: str) -> None:
        inner = getattr(module, attr)

        def timed(*a: object, **kw: object) -> object:
            t = time.perf_counter()
            try:
                return inner(*a, **kw)
            finally:
                self.secs[phase] = self.secs.get(phase, 0.0) + time.perf_counter() - t

        setattr(module, attr, timed)
        self._undo.append(lambda: setattr(module, attr, inner))

    def restore(self) -> None:
        for undo in reversed(self._undo):
            undo()
        self._undo.clear()


def phases(server: S3Server, work: Path, rows: int) -> None:
    """Where a write task's and a read task's time goes, Spark-free."""
    from seglog.logstore.storage import object_storage
    from seglog.streaming import sink_bucket_staging, sink_local_staging, sink_stager
    from seglog.streaming.sink_options import SinkColumns, SinkOptions

    data = pa.record_batch(
        {
            "key": pa.array([b"user-%d" % (i % 1000) for i in range(10_000)]),
            "value": pa.array([(b"%012d" % i).ljust(VALUE_BYTES, b"x") for i in range(10_000)]),
        }
    )
    uri = f"s3://{server.create_bucket('phases')}/logs"
    print(f"write task phases, {rows:,} rows ({load()}):")
    for label, path, stage in (
        ("local dir", str(work / "phase-logs"), sink_local_staging.stage_rows),
        ("bucket", uri, sink_bucket_staging.stage_rows),
    ):
        opts = SinkOptions.parse({"path": path, "topic": "p", "numPartitions": "3"})
        cols = SinkColumns.resolve(data.schema, default_topic="p")
        timed = _Timed()
        timed.wrap(sink_bucket_staging, "validate_batches", "validate (CRC, headers)")
        timed.wrap(sink_bucket_staging, "build_fragment", "build .index/.timeindex")
        timed.wrap(object_storage.ObjectStorage, "write_atomic", "upload (PUT)")
        timed.wrap(sink_stager.PartitionStager, "add", "add (route, check, encode)")
        t = time.perf_counter()
        try:
            stage(opts, cols, (data for _ in range(rows // 10_000)), "phases", 0, 0, 0)
        finally:
            timed.restore()
        total = time.perf_counter() - t
        print(f"  {label}: {total:.2f} s, {rows / total:,.0f} rows/s")
        for phase, secs in sorted(timed.secs.items(), key=lambda kv: -kv[1]):
            print(f"    {phase:28s} {secs:6.2f} s ({secs / total:4.0%})")
