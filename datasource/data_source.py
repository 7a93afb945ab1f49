"""``SeglogDataSource``: the data source named ``seglog``, a thin shell.

It only creates readers and writers; options are parsed and validated when they are
created (on the driver), so a bad option fails the query before any task runs. Source
options are checked already when Spark asks for the schema, at ``load()``, as Spark's
Kafka connector checks them.

Installing seglog registers ``format("seglog")`` (PySpark imports the ``pyspark_seglog``
module), so no ``register`` call is needed:

>>> spark.readStream.format("seglog").option("path", "/data/logs") \\
...     .option("subscribe", "events").load()     # doctest: +SKIP

Errors in one piece. PySpark runs these methods in Python workers and hands a failure to
the user as ``[PYTHON_DATA_SOURCE_ERROR] Failed to ...: <the worker's traceback>``, which
puts seglog's message at the bottom of a long trace. A ``SeglogError`` raised here is
about the user's input (options, columns), so its traceback helps nobody: inside a PySpark
worker, seglog sets ``SPARK_HIDE_TRACEBACK`` (the variable behind Spark's
``spark.sql.execution.pyspark.udf.hideTraceback.enabled``) just before the error leaves,
and the user reads ``Failed to ...: seglog.logstore.errors.ConfigError: <message>``.
The worker exits after reporting the error, so the setting goes with it.

PySpark 4.3's streaming source runner masks an error raised by ``streamReader()`` with an
``UnboundLocalError`` of its own (its ``finally`` stops a reader that was never made), so a
stream-only refusal (e.g. ``endingOffsets`` in a stream) is raised from the reader's first
call instead, by ``_RefusedStreamReader``.

Kafka connector options that only configure a broker are named in one warning per query,
on the driver: when Spark asks for the schema (reads) or first creates the writer (writes),
not again in the other processes that rebuild readers and writers.
"""

from __future__ import annotations

import logging
import os
import sys
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.types import StructType

from seglog.logstore.errors import SeglogError
from seglog.streaming.kafka_compat import ignored_message

logger = logging.getLogger(__name__)

__all__ = ["SeglogDataSource"]

# PySpark worker modules that rebuild readers/writers already checked (and warned about)
# in another process: planning, pushdown, the streaming runners, each micro-batch commit.
_REBUILDING_WORKERS = frozenset({
    "plan_data_source_read", "data_source_pushdown_filters",
    "python_streaming_source_runner", "python_streaming_sink_runner",
    "commit_data_source_write",
})
_WORKER_DIRS = ("/pyspark/sql/worker/", "/pyspark/sql/streaming/")
_HIDE_TRACEBACK = "SPARK_HIDE_TRACEBACK"


class SeglogDataSource(DataSource):
    """The ``seglog`` format: stream and batch reads and writes of seglog log dirs."""

    @classmethod
    def name(cls) -> str:
        return "seglog"

    def schema(self) -> StructType:
        from seglog.streaming.source_options import SourceOptions

        from .schema import source_schema

        with _user_errors():
            parsed = SourceOptions.parse(self.options, streaming=None)
        _warn_ignored(parsed.ignored, "source")
        return source_schema(self.options)

    def reader(self, schema: StructType):
        from .batch_reader import SeglogBatchReader

        with _user_errors():
            reader = SeglogBatchReader(self.options, schema)
        _warn_ignored(reader._options.ignored, "source")
        return reader

    def streamReader(self, schema: StructType):
        from .stream_reader import SeglogStreamReader

        try:
            with _user_errors():
                return SeglogStreamReader(self.options, schema)
        except SeglogError as e:
            return _RefusedStreamReader(e)

    def writer(self, schema: StructType, overwrite: bool):
        from .batch_writer import SeglogBatchWriter

        with _user_errors():
            writer = SeglogBatchWriter(self.options, schema, overwrite)
        _describe_sink(writer.options.ignored, writer.columns.ignored)
        return writer

    def streamWriter(self, schema: StructType, overwrite: bool):
        from .stream_writer import SeglogStreamWriter

        with _user_errors():
            writer = SeglogStreamWriter(self.options, schema, overwrite)
        _describe_sink(writer.options.ignored, writer.columns.ignored)
        return writer


class _RefusedStreamReader(DataSourceStreamReader):
    """Raises a refusal of the options from the first call (see the module docstring)."""

    def __init__(self, error: SeglogError) -> None:
        self._error = error

    def _refuse(self):
        with _user_errors():
            raise self._error

    def initialOffset(self) -> dict:
        return self._refuse()

    def latestOffset(self, *args) -> dict:
        return self._refuse()

    def partitions(self, start: dict, end: dict):
        return self._refuse()

    def read(self, partition) -> Iterator:
        return self._refuse()

    def commit(self, end: dict) -> None:
        self._refuse()

    def stop(self) -> None:
        """Nothing was opened."""


@contextmanager
def _user_errors() -> Iterator[None]:
    """Let a ``SeglogError`` reach the user as its message, without a worker traceback."""
    try:
        yield
    except SeglogError:
        if _calling_worker() is not None:
            os.environ[_HIDE_TRACEBACK] = "1"
        raise


def _calling_worker() -> str | None:
    """The PySpark worker module that called into this data source, if any."""
    frame = sys._getframe(1)
    while frame is not None:
        filename = frame.f_code.co_filename.replace("\\", "/")
        if any(d in filename for d in _WORKER_DIRS):
            return filename.rsplit("/", 1)[-1].removesuffix(".py")
        frame = frame.f_back
    return None


def _rebuilding() -> bool:
    return _calling_worker() in _REBUILDING_WORKERS


def _warn_ignored(names: tuple[str, ...], what: str) -> None:
    if names and not _rebuilding():
        logger.warning(ignored_message(names, what))


def _describe_sink(options_ignored: tuple[str, ...], columns_ignored: tuple[str, ...]) -> None:
    if _rebuilding():
        return
    _warn_ignored(options_ignored, "sink")
    if columns_ignored:
        logger.info("the seglog sink ignores the input column(s) %s, as Kafka's sink does",
                    ", ".join(repr(c) for c in columns_ignored))
