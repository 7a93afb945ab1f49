"""``trace_e2e_floor.py``'s no-op source and sink: the floor's, marking when each
process reaches a step (a module of its own: Spark's Python workers import it)."""

from __future__ import annotations

import json
import os
import time
from typing import Any

from noop_latency_source import NoopLatencySource, _LatencyWriter, _LinesReader
from pyspark.sql.datasource import InputPartition
from pyspark.sql.streaming.datasource import ReadLimit

__all__ = ["MARKS_ENV", "MarkedNoopSource"]

MARKS_ENV = "SEGLOG_FLOOR_MARKS"


def mark(what: str) -> None:
    """One line ``{"what", "ns", "pid"}`` appended to the file ``MARKS_ENV`` names."""
    path = os.environ.get(MARKS_ENV)
    if path:
        line = json.dumps({"what": what, "ns": time.time_ns(), "pid": os.getpid()})
        with open(path, "a") as f:
            f.write(line + "\n")


class _MarkedWriter(_LatencyWriter):
    def __getstate__(self) -> dict[str, Any]:
        mark("writer pickled")
        return dict(self.__dict__)

    def __setstate__(self, state: dict[str, Any]) -> None:
        mark("writer unpickled")
        self.__dict__.update(state)


class _MarkedReader(_LinesReader):
    def __setstate__(self, state: dict[str, Any]) -> None:
        mark("reader unpickled")
        self.__dict__.update(state)

    def latestOffset(self, start: dict[Any, Any], limit: ReadLimit) -> dict[Any, Any]:  # noqa: N802
        mark("latestOffset")
        return super().latestOffset(start, limit)

    def partitions(self, start: dict[str, int], end: dict[str, int]) -> list[InputPartition]:
        mark("partitions")
        return super().partitions(start, end)


class MarkedNoopSource(NoopLatencySource):
    @classmethod
    def name(cls) -> str:
        return "noop_latency_marked"

    def streamReader(self, schema: Any) -> _MarkedReader:  # noqa: N802
        return _MarkedReader(self.options["path"])

    def streamWriter(self, schema: Any, overwrite: bool) -> _MarkedWriter:  # noqa: N802
        mark("streamWriter")
        return _MarkedWriter(self.options["latencies"])
