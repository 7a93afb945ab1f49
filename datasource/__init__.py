"""PySpark adapters: the ``seglog`` data source (stream and batch, read and write)."""

from .data_source import SeglogDataSource

__all__ = ["SeglogDataSource"]
