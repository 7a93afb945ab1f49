"""``SeglogDataSource``: the data source named ``seglog``, a thin shell.

It only creates readers and writers; options are parsed and validated when they are
created (on the driver), so a bad option fails the query before any task runs.

>>> spark.dataSource.register(SeglogDataSource)   # doctest: +SKIP
>>> spark.readStream.format("seglog").option("path", "/data/logs") \\
...     .option("subscribe", "events").load()     # doctest: +SKIP
"""

from __future__ import annotations

from pyspark.sql.datasource import DataSource
from pyspark.sql.types import StructType


class SeglogDataSource(DataSource):
    @classmethod
    def name(cls) -> str:
        return "seglog"

    def schema(self) -> StructType:
        from .schema import source_schema

        return source_schema(self.options)

    def reader(self, schema: StructType):
        from .batch_reader import SeglogBatchReader

        return SeglogBatchReader(self.options, schema)

    def streamReader(self, schema: StructType):
        from .stream_reader import SeglogStreamReader

        return SeglogStreamReader(self.options, schema)

    def writer(self, schema: StructType, overwrite: bool):
        from .batch_writer import SeglogBatchWriter

        return SeglogBatchWriter(self.options, schema, overwrite)

    def streamWriter(self, schema: StructType, overwrite: bool):
        from .stream_writer import SeglogStreamWriter

        return SeglogStreamWriter(self.options, schema, overwrite)
