"""``SeglogStreamWriter``: ``df.writeStream.format("seglog")``, exactly once.

A thin adapter over ``seglog.streaming``: options and columns are validated here, on the
driver, when Spark creates the writer (so a bad option or column fails the query before
any task runs); ``write()`` stages rows on executors and ``commit``/``abort`` publish or
discard them on the driver, all through the sink's backend (``sink_destination``: local
log dirs or a bucket, picked once by the path; ``sink_protocol``: the rules).

Which process calls what (PySpark 4.3): the writer is built and pickled to every task by
the write planner; ``commit``/``abort`` run in a Python worker that builds a fresh writer
from the data source for each micro-batch. Nothing travels through ``self`` between
calls: the commit messages carry everything.

The sink's identity is the streaming query id (Spark's ``sql.streaming.queryId`` task
property, stable across restarts from the same checkpoint), and ``write()`` learns the
micro-batch id from the ``streaming.sql.batchId`` task property (the API does not pass
it; ``tests/datasource/test_stream_sink.py`` checks that both are visible in the Python
worker). Both go into every record batch written (producerId, producerEpoch/baseSequence)
so that a replayed micro-batch is recognised in the data itself.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from seglog.logstore.errors import ConfigError
from seglog.streaming.errors import SinkCommitError
from seglog.streaming.kafka_compat import warn_ignored
from seglog.streaming.sink_destination import sink_destination
from seglog.streaming.sink_options import (
    SinkColumns,
    SinkOptions,
    log_dirs_option,
    require_creatable,
)
from seglog.streaming.sink_protocol import SinkBackend, SinkDestination
from seglog.streaming.sink_protocol import abort as sink_abort
from seglog.streaming.sink_protocol import commit as sink_commit
from seglog.streaming.step_trace import traced

from .schema import to_arrow_schema
from .user_errors import shown_in_one_piece

if TYPE_CHECKING:
    import pyarrow as pa

    from seglog.streaming.sink_staging import StagedTask
    from seglog.streaming.sink_view import TopicView

logger = logging.getLogger(__name__)

__all__ = ["SeglogStreamWriter", "SeglogCommitMessage", "validate_sink"]


@dataclass(frozen=True)
class SeglogCommitMessage(WriterCommitMessage):
    """What one task staged (picklable, small: paths and counts, never data)."""

    staged: StagedTask


def validate_sink(options: Mapping[str, Any], schema: StructType
                  ) -> tuple[SinkOptions, SinkColumns]:
    """Parse the options and check the input columns (driver side, before any task)."""
    opts = SinkOptions.parse(options)
    destination = sink_destination(opts)  # the one place the path picks the backend
    destination.check_destination(log_dirs_option(options))
    columns = SinkColumns.resolve(to_arrow_schema(schema), default_topic=opts.topic)
    if opts.topic is not None and (not opts.create_topics or opts.num_partitions_given):
        _check_existing_topic(opts, destination, opts.topic)
    return opts, columns


def _check_existing_topic(opts: SinkOptions, destination: SinkDestination,
                          topic: str) -> None:
    """``createTopics=false`` needs the topic; an explicit ``numPartitions`` must match it
    (``SinkDestination.existing_partitions``: on a bucket, usually without a request)."""
    from seglog.streaming.sink_staging import check_partition_count

    partitions = destination.existing_partitions(topic)
    if partitions is not None:
        check_partition_count(opts, topic, partitions)
    else:
        require_creatable(opts, topic, named_by="topic")


class ShippedOnce:
    """Describes the sink (ignored options and columns) when the writer is first pickled.

    The write planner builds the writer and pickles it to ship it to the tasks; the
    commit workers build their own and never pickle it. So pickling is the driver-side
    moment before any task, without asking who the caller is (see ``data_source``'s
    module docstring). A batch write is planned once per job; a stream, once per
    micro-batch (``SeglogStreamWriter`` narrows it to once per query)."""

    options: SinkOptions
    columns: SinkColumns
    _described: bool = False
    view: TopicView | None = None
    """The driver's view of the destination's topics (``SinkDestination.topic_view``),
    taken when the writer is pickled: the tasks stage with it instead of a look."""

    def __getstate__(self) -> dict[str, Any]:
        if not self._described:
            self._described = True
            if self._first_description():
                describe_sink(self.options, self.columns.ignored)
        self.view = sink_destination(self.options).topic_view(
            all_topics=self.columns.topic is not None)
        return dict(self.__dict__)

    def _first_description(self) -> bool:
        """Whether this planning is the first of its query (a batch job: always)."""
        return True

    def backend(self) -> SinkBackend:
        """The sink's backend (imported where a task stages or the driver commits)."""
        return sink_destination(self.options).backend(self.view)


_DESCRIBED_QUERIES: set[str] = set()
"""The streaming queries this process has described (their ``query_key``)."""


def query_key(options: Mapping[str, Any]) -> str:
    """One streaming query's sink, as the write planner can tell it: by its options.

    PySpark 4.3 plans every micro-batch anew in a (reused) Python worker, and hands the
    planner no query id (it is a task property only); the options are what it has, and
    those Spark adds name the query when given (``queryName``, ``checkpointLocation``).
    A digest, so ``storage.*`` secrets are not kept."""
    text = "\0".join(f"{str(k).lower()}={v}" for k, v in sorted(
        (str(k).lower(), str(v)) for k, v in options.items()))
    return hashlib.sha256(text.encode()).hexdigest()


def describe_sink(options: SinkOptions, columns_ignored: tuple[str, ...]) -> None:
    what = "sink" if options.query_name is None else f"sink of query {options.query_name!r}"
    warn_ignored(options.ignored, what)
    if columns_ignored:
        logger.info("the seglog %s ignores the input column(s) %s, as Kafka's sink does",
                    what, ", ".join(repr(c) for c in columns_ignored))


def unwrap(messages: Iterable[WriterCommitMessage | None]) -> list[StagedTask | None]:
    out: list[StagedTask | None] = []
    for m in messages:
        if m is None:
            out.append(None)
        elif isinstance(m, SeglogCommitMessage):
            out.append(m.staged)
        else:
            raise SinkCommitError(f"unexpected commit message {type(m).__name__}")
    return out


class SeglogStreamWriter(ShippedOnce, DataSourceStreamArrowWriter):
    """Exactly-once streaming writer (append, update and complete modes all append)."""

    def __init__(self, options: Mapping[str, Any], schema: StructType,
                 overwrite: bool = False) -> None:
        self.options, self.columns = validate_sink(options, schema)
        self._query_key = query_key(options)

    def _first_description(self) -> bool:
        # Once per query while the planner's worker lives (PySpark reuses it for every
        # micro-batch): the warning would otherwise repeat with each one.
        if self._query_key in _DESCRIBED_QUERIES:
            return False
        _DESCRIBED_QUERIES.add(self._query_key)
        return True

    @shown_in_one_piece
    def write(self, iterator: Iterator[pa.RecordBatch]) -> SeglogCommitMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is None:
            raise SinkCommitError("the seglog sink's write() must run in a Spark task")
        raw_batch = ctx.getLocalProperty("streaming.sql.batchId")
        if raw_batch is None:
            raise SinkCommitError(
                "the Spark task property 'streaming.sql.batchId' is not visible in this "
                "Python worker; the exactly-once sink needs it")
        sink_id = ctx.getLocalProperty("sql.streaming.queryId") or self._fallback_sink_id()
        with traced("write", int(raw_batch), ctx.partitionId()):
            staged = self.backend().stage(self.columns, iterator, sink_id, int(raw_batch),
                                          ctx.partitionId(), ctx.attemptNumber())
        return SeglogCommitMessage(staged)

    def _fallback_sink_id(self) -> str:
        if self.options.checkpoint_location is None:
            raise ConfigError("the seglog sink needs a streaming query id or the option "
                              "'checkpointLocation' to identify itself across restarts")
        digest = hashlib.sha256(self.options.checkpoint_location.encode()).hexdigest()
        return f"chk-{digest[:32]}"

    @shown_in_one_piece
    def commit(self, messages: list[WriterCommitMessage | None],
               batchId: int) -> None:  # noqa: N803 (PySpark's name)
        with traced("commit", batchId):
            sink_commit(self.backend(), unwrap(messages), batchId)

    @shown_in_one_piece
    def abort(self, messages: list[WriterCommitMessage | None],
              batchId: int) -> None:  # noqa: N803
        sink_abort(self.backend(), unwrap(messages), batchId)
