"""Consumer lag of seglog sources in Spark: ``SeglogLagListener``.

Spark's Kafka source reports ``avgOffsetsBehindLatest``, ``maxOffsetsBehindLatest`` and
``minOffsetsBehindLatest`` as source metrics of each progress event. PySpark's Python
sources cannot report custom metrics, but the seglog source reports its latest offsets
(``reportLatestOffset``), so each progress event carries, per source, ``endOffset`` (where
the micro-batch ended) and ``latestOffset`` (the high watermarks then). This listener
turns those into the same numbers: per partition, offsets behind latest =
``latest - end``, and their average, maximum and minimum.

>>> from seglog.datasource.progress import SeglogLagListener
>>> listener = SeglogLagListener(lambda lag: print(lag.query_name, lag.metrics()))
>>> spark.streams.addListener(listener)   # doctest: +SKIP

Each lag is also logged (INFO, logger ``seglog.datasource.progress``). The listener runs in
the driver's Python process (the one that called ``addListener``); it reads only the
progress event, never the log dirs.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from pyspark.sql.streaming.listener import (
    QueryIdleEvent,
    QueryProgressEvent,
    QueryStartedEvent,
    QueryTerminatedEvent,
    StreamingQueryListener,
)

logger = logging.getLogger(__name__)

__all__ = ["SeglogLagListener", "SourceLag", "lags_of_progress"]

TopicPartition = tuple[str, int]


@dataclass(frozen=True, slots=True)
class SourceLag:
    """How far one seglog source of a query is behind the end of its partitions."""

    query_id: str
    query_name: str | None
    batch_id: int
    source_index: int
    offsets_behind: Mapping[TopicPartition, int]
    """Per partition: the latest offset minus the offset the micro-batch ended at."""

    @property
    def max_offsets_behind(self) -> int | None:
        return max(self.offsets_behind.values(), default=None)

    @property
    def min_offsets_behind(self) -> int | None:
        return min(self.offsets_behind.values(), default=None)

    @property
    def avg_offsets_behind(self) -> float | None:
        n = len(self.offsets_behind)
        return sum(self.offsets_behind.values()) / n if n else None

    def metrics(self) -> dict[str, str]:
        """The metrics under the names Spark's Kafka source uses (strings, as Spark's)."""
        if not self.offsets_behind:
            return {}
        return {"avgOffsetsBehindLatest": f"{self.avg_offsets_behind:.1f}",
                "maxOffsetsBehindLatest": str(self.max_offsets_behind),
                "minOffsetsBehindLatest": str(self.min_offsets_behind)}


def lags_of_progress(progress: Mapping[str, Any]) -> list[SourceLag]:
    """The lag of every seglog source in one progress event, given as Spark's progress
    JSON (``StreamingQueryProgress.json``, parsed). A source counts as seglog's when it is
    a Python source whose offsets are Kafka-style ``{"topic": {"partition": offset}}``."""
    out = []
    for i, source in enumerate(progress.get("sources") or ()):
        if "Python" not in str(source.get("description", "")):
            continue
        end = _offsets(source.get("endOffset"))
        latest = _offsets(source.get("latestOffset"))
        if end is None or latest is None:
            continue
        behind = {tp: max(latest[tp] - off, 0) for tp, off in sorted(end.items())
                  if tp in latest}
        out.append(SourceLag(str(progress.get("id")), progress.get("name"),
                             int(progress.get("batchId", -1)), i, behind))
    return out


def _offsets(value: Any) -> dict[TopicPartition, int] | None:
    """Kafka-style offsets from a progress field (a dict, or JSON text), else None."""
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            return None
    if not isinstance(value, dict) or not value:
        return None
    out: dict[TopicPartition, int] = {}
    for topic, parts in value.items():
        if topic.startswith("$"):  # the source's own bookkeeping ("$lastTriggerMs")
            continue
        if not isinstance(parts, dict):
            return None
        for p, off in parts.items():
            if not (isinstance(p, str) and p.isdigit()) or not isinstance(off, int):
                return None
            out[(topic, int(p))] = off
    return out


class SeglogLagListener(StreamingQueryListener):
    """Reports each seglog source's offsets behind latest on every progress event.

    ``callback`` (optional) receives one ``SourceLag`` per seglog source per event; an
    exception it raises is logged and the listener goes on (Spark would otherwise drop
    the listener's later events). Every lag is logged at INFO as well.
    """

    def __init__(self, callback: Callable[[SourceLag], None] | None = None) -> None:
        super().__init__()
        self._callback = callback

    def onQueryStarted(self, event: QueryStartedEvent) -> None:  # noqa: N802 (PySpark's names)
        """Nothing to report before the first batch."""

    def onQueryProgress(self, event: QueryProgressEvent) -> None:  # noqa: N802
        self.report(lags_of_progress(json.loads(event.progress.json)))

    def onQueryIdle(self, event: QueryIdleEvent) -> None:  # noqa: N802
        """An idle query made no progress: the last reported lag still holds."""

    def onQueryTerminated(self, event: QueryTerminatedEvent) -> None:  # noqa: N802
        """Nothing to report."""

    def report(self, lags: Iterable[SourceLag]) -> None:
        for lag in lags:
            logger.info("query %s batch %d source %d: offsets behind latest %s",
                        lag.query_name or lag.query_id, lag.batch_id, lag.source_index,
                        lag.metrics() or "n/a")
            if self._callback is None:
                continue
            try:
                self._callback(lag)
            except Exception:
                logger.exception("the SeglogLagListener callback failed for query %s",
                                 lag.query_id)
