"""``SeglogDataSource``: the data source named ``seglog``, a thin shell.

It only creates readers and writers; options are parsed and validated when they are
created (on the driver), so a bad option fails the query before any task runs. Source
options are checked already when Spark asks for the schema, at ``load()``, as Spark's
Kafka connector checks them.

Installing seglog registers ``format("seglog")`` (PySpark imports the ``pyspark_seglog``
module), so no ``register`` call is needed:

>>> spark.readStream.format("seglog").option("path", "/data/logs") \\
...     .option("subscribe", "events").load()     # doctest: +SKIP

Errors in one piece: a ``SeglogError`` leaving any method here, or of the readers and
writers, reaches the user as its one-line message (``user_errors``).

On a machine where the tasks' numba kernels were never compiled (no ``python -m
seglog.warmup``), planning a read (``schema()``, ``reader()``) or a write (``writer()``)
starts compiling them in a detached process (``kernel_cache.prewarm``), so the first
tasks find them compiled, or compiling, rather than compile them themselves.

PySpark 4.3's streaming source runner masks an error raised by ``streamReader()`` with an
``UnboundLocalError`` of its own (its ``finally`` stops a reader that was never made), so a
stream-only refusal (e.g. ``endingOffsets`` in a stream) is raised from the reader's first
call instead, by ``_RefusedStreamReader``.

Kafka connector options that only configure a broker are named in one warning per query,
on the driver:
- reads: ``schema()``, called once per ``load()`` (``worker/create_data_source.py``);
  the workers that plan each (micro-)batch call only ``reader()``/``streamReader()``,
  which stay silent (a read given a schema of its own is not warned about);
- writes: the writer's pickling (``__getstate__``) by the write planner
  (``worker/write_into_data_source.py``), which ships it to the tasks, once per batch
  job and, for a stream, once per micro-batch in a reused worker, where the stream
  writer remembers the queries it described (``stream_writer.query_key``); the workers
  that commit each micro-batch build a writer of their own and never pickle it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any, NoReturn

from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.streaming.datasource import ReadLimit
from pyspark.sql.types import StructType

from seglog.logstore.errors import SeglogError
from seglog.logstore.records.kernel_cache import prewarm
from seglog.streaming.kafka_compat import warn_ignored

from .user_errors import user_errors

if TYPE_CHECKING:
    import pyarrow as pa

logger = logging.getLogger(__name__)

__all__ = ["SeglogDataSource"]


class SeglogDataSource(DataSource):
    """The ``seglog`` format: stream and batch reads and writes of seglog log dirs."""

    @classmethod
    def name(cls) -> str:
        return "seglog"

    def schema(self) -> StructType:
        from seglog.streaming.option_values import check_readable_log_dirs, log_dirs_option
        from seglog.streaming.source_options import SourceOptions

        from .schema import source_schema

        with user_errors():
            parsed = SourceOptions.parse(self.options, streaming=None)
            check_readable_log_dirs(parsed.log_dirs, log_dirs_option(self.options))
        warn_ignored(parsed.ignored, "source")
        # The earliest call of a read's planning: the tasks' decoder compiles meanwhile.
        prewarm("read")
        return source_schema(self.options)

    def reader(self, schema: StructType) -> DataSourceReader:
        from .batch_reader import SeglogBatchReader

        with user_errors():
            reader = SeglogBatchReader.for_options(self.options, schema)
        prewarm("read")
        return reader

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from .stream_reader import SeglogStreamReader

        try:
            with user_errors():
                reader = SeglogStreamReader(self.options, schema)
        except SeglogError as e:
            return _RefusedStreamReader(e)
        prewarm("read")
        return reader

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .batch_writer import SeglogBatchWriter

        with user_errors():
            writer = SeglogBatchWriter(self.options, schema, overwrite)
        prewarm("write")
        return writer

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .stream_writer import SeglogStreamWriter

        with user_errors():
            writer = SeglogStreamWriter(self.options, schema, overwrite)
        prewarm("write")
        return writer


class _RefusedStreamReader(DataSourceStreamReader):
    """Raises a refusal of the options from the first call (see the module docstring)."""

    def __init__(self, error: SeglogError) -> None:
        self._error = error

    def _refuse(self) -> NoReturn:
        with user_errors():
            raise self._error

    # Offsets are PySpark's JSON documents, which its own API types as a bare ``dict``.
    def initialOffset(self) -> dict[str, Any]:
        return self._refuse()

    def latestOffset(self, start: dict[str, Any], limit: ReadLimit) -> dict[str, Any]:
        return self._refuse()

    def partitions(self, start: dict[str, Any], end: dict[str, Any]) -> list[InputPartition]:
        return self._refuse()

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return self._refuse()

    def commit(self, end: dict[str, Any]) -> None:
        self._refuse()

    def stop(self) -> None:
        """Nothing was opened."""
