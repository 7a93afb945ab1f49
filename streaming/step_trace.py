"""Step times of a streaming query's micro-batches, for a latency breakdown.

Spark's progress events time a micro-batch's ``addBatch`` as one figure: the launch of
its tasks, the source's read, the sink's write and the sink's commit on the driver. When
the environment variable ``SEGLOG_TRACE_FILE`` names a file, the seglog source's read
and sink's write (in the tasks) and the sink's commit (on the driver) each append one
JSON line to it per call::

    {"step": "read", "batch": 12, "partition": 0, "start_ns": ..., "end_ns": ..., "pid": ...}

(wall-clock nanoseconds, ``time.time_ns``: the processes of one machine share the clock).
``benchmarks/bench_e2e_latency.py`` joins them with the progress events per micro-batch.

The variable is read at each call, so Spark's Python workers see it when it was in the
environment the session started from; unset (the default), a step costs one environment
lookup and nothing is written. A line is one ``os.write`` to a file opened with
``O_APPEND``: lines of concurrent processes never interleave on a local file system.
A trace that cannot be written never fails the query: it is logged once per process.
"""

from __future__ import annotations

import json
import logging
import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TypeVar

from seglog.logstore.storage.storage import LOCAL

logger = logging.getLogger(__name__)

__all__ = ["TRACE_ENV", "StepTime", "trace_path", "traced", "traced_iterator", "read_trace"]

TRACE_ENV = "SEGLOG_TRACE_FILE"

T = TypeVar("T")

_warned = False  # a trace file that cannot be written is logged once per process


@dataclass(frozen=True)
class StepTime:
    """One traced call: what ran (``step``), for which micro-batch and task partition."""

    step: str
    batch: int | None
    partition: int | None
    start_ns: int
    end_ns: int
    pid: int

    @property
    def ms(self) -> float:
        return (self.end_ns - self.start_ns) / 1e6


def trace_path() -> str | None:
    """The trace file, or None when tracing is off."""
    return os.environ.get(TRACE_ENV) or None


def _append(path: str, step: StepTime) -> None:
    global _warned
    line = json.dumps(
        {
            "step": step.step,
            "batch": step.batch,
            "partition": step.partition,
            "start_ns": step.start_ns,
            "end_ns": step.end_ns,
            "pid": step.pid,
        }
    )
    try:
        # O_APPEND: the lines of the processes tracing at once never interleave
        with LOCAL.open_file(path, "append") as handle:
            handle.write((line + "\n").encode())
    except OSError as e:
        if not _warned:
            _warned = True
            logger.warning(
                "cannot write the step trace %s=%s (%s): not tracing in this process",
                TRACE_ENV,
                path,
                e,
            )


@contextmanager
def traced(step: str, batch: int | None, partition: int | None = None) -> Iterator[None]:
    """Time the block as ``step`` of micro-batch ``batch`` (when tracing is on); a block
    that raises is not traced (it is no step of a micro-batch that ran)."""
    path = trace_path()
    if path is None:
        yield
        return
    start = time.time_ns()
    yield
    _append(path, StepTime(step, batch, partition, start, time.time_ns(), os.getpid()))


def traced_iterator(
    step: str, batch: int | None, partition: int | None, items: Iterator[T]
) -> Iterator[T]:
    """``items``, timed from this call until they are exhausted (when tracing is on)."""
    path = trace_path()
    if path is None:
        return items
    return _timed(path, step, batch, partition, items, time.time_ns())


def _timed(
    path: str, step: str, batch: int | None, partition: int | None, items: Iterator[T], start: int
) -> Iterator[T]:
    yield from items
    _append(path, StepTime(step, batch, partition, start, time.time_ns(), os.getpid()))


def read_trace(path: str, offset: int = 0) -> list[StepTime]:
    """The steps traced in ``path`` from byte ``offset`` on (whole lines only: a line
    still being appended is left for the next read)."""
    data = LOCAL.read(path)[offset:]
    out = []
    for line in data[: data.rfind(b"\n") + 1].splitlines():
        d = json.loads(line)
        out.append(
            StepTime(
                str(d["step"]),
                d["batch"],
                d["partition"],
                int(d["start_ns"]),
                int(d["end_ns"]),
                int(d["pid"]),
            )
        )
    return out
