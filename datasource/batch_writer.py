"""``SeglogBatchWriter``: ``df.write.format("seglog").mode("append")``, all or nothing.

Tasks stage rows (through the sink's backend, ``sink_destination``) under a
job id drawn when Spark creates the writer on the driver (the same pickled writer
reaches every task and the commit); ``commit``
publishes every partition and then moves the high watermark in one checkpoint write per
log dir, so readers see the whole job or nothing; ``abort`` removes the staging. A log
is append-only: ``mode("overwrite")`` is refused, as Spark's Kafka sink does.
"""

from __future__ import annotations

import logging
import uuid
from collections.abc import Iterator, Mapping
from typing import TYPE_CHECKING, Any

from pyspark.sql.datasource import DataSourceArrowWriter, WriterCommitMessage
from pyspark.sql.types import StructType

from seglog.logstore.errors import ConfigError
from seglog.streaming.errors import SinkCommitError
from seglog.streaming.sink_protocol import abort as sink_abort
from seglog.streaming.sink_protocol import commit as sink_commit

from .stream_writer import (
    SeglogCommitMessage,
    ShippedOnce,
    unwrap,
    validate_sink,
)
from .user_errors import shown_in_one_piece

if TYPE_CHECKING:
    import pyarrow as pa

logger = logging.getLogger(__name__)

__all__ = ["SeglogBatchWriter"]

_BATCH_ID = 0  # a batch job is one "micro-batch" of its own sink id


class SeglogBatchWriter(ShippedOnce, DataSourceArrowWriter):
    """All-or-nothing batch writer."""

    def __init__(self, options: Mapping[str, Any], schema: StructType,
                 overwrite: bool = False) -> None:
        if overwrite:
            raise ConfigError("save mode 'overwrite' is not supported by the seglog sink: a "
                              "log is append-only; use mode('append')")
        self.options, self.columns = validate_sink(options, schema)
        self.job_id = f"job-{uuid.uuid4().hex}"

    @shown_in_one_piece
    def write(self, iterator: Iterator[pa.RecordBatch]) -> SeglogCommitMessage:
        from pyspark import TaskContext

        ctx = TaskContext.get()
        if ctx is None:
            raise SinkCommitError("the seglog sink's write() must run in a Spark task")
        staged = self.backend().stage(self.columns, iterator, self.job_id, _BATCH_ID,
                                      ctx.partitionId(), ctx.attemptNumber())
        return SeglogCommitMessage(staged)

    @shown_in_one_piece
    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        sink_commit(self.backend(), unwrap(messages), _BATCH_ID,
                    use_ledger=False)

    @shown_in_one_piece
    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        # The job id too: a task that failed before its message still staged files.
        sink_abort(self.backend(), unwrap(messages), _BATCH_ID,
                   sink_ids=[self.job_id])
