"""The latency floor of ``bench_e2e_latency.py``: a no-op Python source and sink.

The source's offsets are lines of a local file the producer appends to (one line per
record, its time in ns); the sink's driver-side ``commit`` takes each record's latency.
Spark's own cost of planning, launching and committing a micro-batch, with no storage.

A module of its own, importing only PySpark's data source API and seglog's step tracer:
Spark's Python workers import the module of the classes they unpickle, and a floor
whose workers imported the benchmark (seglog's codec, numba, the S3 test servers) would
carry their weight (memory, and the garbage collections that traverse it) into every
micro-batch, which a no-op source and sink do not have.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pyspark.sql.datasource import (
    DataSource,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    InputPartition,
    WriterCommitMessage,
)
from pyspark.sql.streaming.datasource import ReadLimit

from seglog.streaming.step_trace import traced, traced_iterator

__all__ = ["NoopLatencySource"]


class _LinesReader(DataSourceStreamReader):
    """Offsets are byte positions of whole lines of ``path`` (one produced time each)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def initialOffset(self) -> dict[str, int]:  # noqa: N802 (PySpark's name)
        return {"pos": 0}

    def latestOffset(self, start: dict[Any, Any], limit: ReadLimit) -> dict[Any, Any]:  # noqa: N802
        # Everything produced so far: a latency floor reads all that is there.
        data = Path(self.path).read_bytes()
        return {"pos": data.rfind(b"\n") + 1}

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        return [InputPartition((start["pos"], end["pos"]))]

    def read(self, partition: InputPartition) -> Iterator[tuple[int]]:
        batch, part = _task_batch()
        return traced_iterator("read", batch, part, self._rows(partition))

    def _rows(self, partition: InputPartition) -> Iterator[tuple[int]]:
        lo, hi = partition.value
        with open(self.path, "rb") as f:
            f.seek(lo)
            for line in f.read(hi - lo).split():
                yield (int(line),)


def _task_batch() -> tuple[int | None, int | None]:
    """(micro-batch id, task partition) of the running Spark task, as seglog's traces."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return None, None
    batch = ctx.getLocalProperty("streaming.sql.batchId")
    return (None if batch is None else int(batch)), ctx.partitionId()


@dataclass
class _Times(WriterCommitMessage):
    produced_ns: list[int] = field(default_factory=list)


class _LatencyWriter(DataSourceStreamWriter):
    """Writes nothing; its driver-side commit takes each record's latency."""

    def __init__(self, out: str) -> None:
        self.out = out

    def write(self, iterator: Iterator[Any]) -> _Times:
        batch, part = _task_batch()
        with traced("write", batch, part):
            return _Times([row[0] for row in iterator])

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        with traced("commit", batchId):
            now = time.time_ns()
            times = [m for m in messages if isinstance(m, _Times)]
            lines = [f"{t} {now - t}\n" for m in times for t in m.produced_ns]
            with open(self.out, "a") as f:
                f.writelines(lines)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:  # noqa: N803
        pass  # nothing was written


class NoopLatencySource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "noop_latency_bench"

    def schema(self) -> str:
        return "produced_ns long"

    def streamReader(self, schema: Any) -> _LinesReader:  # noqa: N802
        return _LinesReader(self.options["path"])

    def streamWriter(self, schema: Any, overwrite: bool) -> _LatencyWriter:  # noqa: N802
        return _LatencyWriter(self.options["latencies"])
