"""The row schema of the ``seglog`` source: Spark's Kafka connector schema, and its Arrow twin.

``key binary, value binary, topic string, partition int, offset long, timestamp
timestamp, timestampType int`` and, with ``includeHeaders``, ``headers
array<struct<key:string,value:binary>>``.

PySpark accepts ``pyarrow.RecordBatch`` from ``read()`` only if its schema equals
``to_arrow_schema(schema, timezone="UTC")`` exactly (nullable fields, microsecond
timestamps in UTC), so the Arrow twin is derived by that very function.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import TYPE_CHECKING, Any

from pyspark.sql.types import (
    ArrayType,
    BinaryType,
    IntegerType,
    LongType,
    StringType,
    StructField,
    StructType,
    TimestampType,
)

from seglog.streaming.source_options import include_headers as _include_headers

if TYPE_CHECKING:
    import pyarrow as pa

HEADERS_TYPE = ArrayType(
    StructType([StructField("key", StringType()), StructField("value", BinaryType())])
)


def source_schema(options: Mapping[str, Any] | bool) -> StructType:
    """The Spark schema for these options (or for ``include_headers`` given directly)."""
    headers = options if isinstance(options, bool) else _include_headers(options)
    return _schema(headers)


def to_arrow_schema(schema: StructType, tz: str = "UTC") -> pa.Schema:
    """The Arrow twin of a Spark schema, exactly as PySpark checks ``read()`` output."""
    # Imported here: ``schema()`` runs in a planner process that needs no Arrow at all.
    from pyspark.sql.pandas.types import to_arrow_schema as spark_to_arrow_schema

    return spark_to_arrow_schema(schema, timezone=tz)


def arrow_schema(include_headers: bool) -> pa.Schema:
    """The exact Arrow schema ``read()`` must yield for the source schema (cached)."""
    return _arrow(include_headers)


@lru_cache(maxsize=2)
def _schema(include_headers: bool) -> StructType:
    fields = [
        StructField("key", BinaryType()),
        StructField("value", BinaryType()),
        StructField("topic", StringType()),
        StructField("partition", IntegerType()),
        StructField("offset", LongType()),
        StructField("timestamp", TimestampType()),
        StructField("timestampType", IntegerType()),
    ]
    if include_headers:
        fields.append(StructField("headers", HEADERS_TYPE))
    return StructType(fields)


@lru_cache(maxsize=2)
def _arrow(include_headers: bool) -> pa.Schema:
    return to_arrow_schema(_schema(include_headers))
