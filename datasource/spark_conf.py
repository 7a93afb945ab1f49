"""Spark settings that cut a micro-batch's fixed cost, for low end-to-end latency.

``LOW_LATENCY_SPARK_CONF`` is what docs/operations.md ("Low end-to-end latency")
recommends and ``benchmarks/bench_e2e_latency.py`` applies by default (to the no-op floor
and to seglog alike), given to a session as
``SparkSession.builder.config(map=LOW_LATENCY_SPARK_CONF)``; a running session takes them
with ``spark.conf.set`` before the query starts.

- ``spark.sql.streaming.checkpointFileManagerClass`` = Spark's
  ``FileSystemBasedCheckpointFileManager``. Spark's default manager goes through
  Hadoop's ``FileContext``, whose rename on the local file system asks for a file's
  status by starting a ``readlink`` process when Hadoop's native library is absent (the
  usual pip install of PySpark): about 10 commands a micro-batch for the offset and
  commit logs, against about 4 (Hadoop's ``chmod`` of each new file) with this one.
  The ``FileSystem`` manager writes the same files the same way (a temporary file, then a
  rename that refuses an existing batch file; no fsync in either) with Java's file
  calls. What it gives up: on HDFS, the default
  refuses an existing destination inside the rename itself; this one checks, then
  renames, so two runs of one query racing on one checkpoint are caught only outside
  that window, as the default already does on a local disk. Keep the default for a
  checkpoint on HDFS or an object store.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = ["LOW_LATENCY_SPARK_CONF"]

LOW_LATENCY_SPARK_CONF: Mapping[str, str] = MappingProxyType(
    {
        "spark.sql.streaming.checkpointFileManagerClass": (
            "org.apache.spark.sql.execution.streaming.checkpointing."
            "FileSystemBasedCheckpointFileManager"
        ),
    }
)
