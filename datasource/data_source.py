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
puts seglog's message at the bottom of a long trace. PySpark 4.3 gives a data source no
way to shape that text except the one its ``handle_worker_exception`` documents: the
environment variable ``SPARK_HIDE_TRACEBACK`` (what Spark's
``spark.sql.execution.pyspark.udf.hideTraceback.enabled`` sets for UDF workers), read
when the error is reported. A ``SeglogError`` raised here is about the user's input
(options, columns), so its traceback helps nobody: when one leaves a method of this class
(``_user_errors``), seglog sets that variable, and the user reads ``Failed to ...:
seglog.logstore.errors.ConfigError: <message>``. These methods are called only by
PySpark's planning and runner workers, each of which exits right after reporting an
error (``worker_run``), so the setting goes with the process; a program that calls them
itself only changes how PySpark would format its own later worker errors.

On a machine where the tasks' numba kernels were never compiled (no ``python -m
seglog.warmup``), planning a read (``schema()``, ``reader()``) or a write (``writer()``)
starts compiling them in a detached process (``kernel_cache.prewarm``), so the first
tasks find them compiled, or compiling, rather than compile them themselves.

PySpark 4.3's streaming source runner masks an error raised by ``streamReader()`` with an
``UnboundLocalError`` of its own (its ``finally`` stops a reader that was never made), so a
stream-only refusal (e.g. ``endingOffsets`` in a stream) is raised from the reader's first
call instead, by ``_RefusedStreamReader``.

Kafka connector options that only configure a broker are named in one warning per query,
on the driver, from the entry point PySpark 4.3 calls once per query:
- reads: ``schema()``, called once per ``load()`` (``worker/create_data_source.py``);
  the workers that plan each (micro-)batch call only ``reader()``/``streamReader()``,
  which stay silent (a read given a schema of its own is not warned about);
- writes: the writer's pickling (``__getstate__``), done once per query by the write
  planner (``worker/write_into_data_source.py``) to ship it to the tasks; the workers
  that commit each micro-batch build a writer of their own and never pickle it.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterator
from contextlib import contextmanager

from pyspark.sql.datasource import DataSource, DataSourceStreamReader
from pyspark.sql.types import StructType

from seglog.logstore.errors import SeglogError
from seglog.logstore.kernel_cache import prewarm
from seglog.streaming.kafka_compat import warn_ignored

logger = logging.getLogger(__name__)

__all__ = ["SeglogDataSource"]

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
        warn_ignored(parsed.ignored, "source")
        # The earliest call of a read's planning: the tasks' decoder compiles meanwhile.
        prewarm("read")
        return source_schema(self.options)

    def reader(self, schema: StructType):
        from .batch_reader import SeglogBatchReader

        with _user_errors():
            reader = SeglogBatchReader.for_options(self.options, schema)
        prewarm("read")
        return reader

    def streamReader(self, schema: StructType):
        from .stream_reader import SeglogStreamReader

        try:
            with _user_errors():
                reader = SeglogStreamReader(self.options, schema)
        except SeglogError as e:
            return _RefusedStreamReader(e)
        prewarm("read")
        return reader

    def writer(self, schema: StructType, overwrite: bool):
        from .batch_writer import SeglogBatchWriter

        with _user_errors():
            writer = SeglogBatchWriter(self.options, schema, overwrite)
        prewarm("write")
        return writer

    def streamWriter(self, schema: StructType, overwrite: bool):
        from .stream_writer import SeglogStreamWriter

        with _user_errors():
            writer = SeglogStreamWriter(self.options, schema, overwrite)
        prewarm("write")
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
    """Let a ``SeglogError`` reach the user as its message, without a worker traceback
    (see the module docstring)."""
    try:
        yield
    except SeglogError:
        os.environ[_HIDE_TRACEBACK] = "1"
        raise
