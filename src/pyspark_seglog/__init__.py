"""Lets ``spark.read.format("seglog")`` work with no register call.

PySpark registers every importable top-level module named ``pyspark_*`` that exposes
``DefaultSource`` (a DataSource subclass) when a session starts.
"""

from seglog.datasource.data_source import SeglogDataSource as DefaultSource

__all__ = ["DefaultSource"]
