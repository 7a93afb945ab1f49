"""Spark settings that cut a micro-batch's fixed cost, for low end-to-end latency.

``LOW_LATENCY_SPARK_CONF`` is what docs/operations.md ("Low end-to-end latency")
recommends and ``benchmarks/bench_e2e_latency.py`` applies by default (to the no-op floor
and to seglog alike), given to a session as it is built:
``SparkSession.builder.config(map=dict(LOW_LATENCY_SPARK_CONF))`` (or ``spark-submit
--conf``). ``spark.python.daemon.module`` configures the SparkContext, so it must be
there when the session starts; a running session takes only the ``spark.sql.*`` ones
(``SESSION_SPARK_CONF``), with ``spark.conf.set`` before the query starts.

Where a micro-batch's CPU goes (a no-op Python source and sink, measured with
``/proc/<pid>/stat`` over the micro-batches of ``benchmarks/bench_e2e_latency.py``'s
floor): the JVM, the driver's Python planning processes (the writer's planning, the
commit), and the task's two Python workers (the source's read, the sink's write). The
last two spent most of theirs in the full garbage collection PySpark's daemon runs after
every task of a reused worker; ``spark.python.daemon.module`` below removes it.

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
- ``spark.python.daemon.module`` = ``seglog.datasource.worker_daemon``: PySpark's daemon
  for the tasks' Python workers, except that between two tasks a reused worker collects
  only Python's young generations instead of running a full ``gc.collect()``, which
  traverses everything the worker ever imported (about 34 ms of CPU in a worker that ran
  a seglog task, 11 ms in a bare one) and ran in both task workers as each micro-batch's
  task ended, on the cores the driver needs next. What it gives up: cyclic garbage that
  reached Python's oldest generation during a task is freed when Python's own thresholds
  call for a full collection, not right after the task (see ``worker_daemon``). It
  applies to every Python task of the session (UDFs too), and needs seglog installed
  where the executors' Python runs, as a seglog query does anyway.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

__all__ = ["LOW_LATENCY_SPARK_CONF", "SESSION_SPARK_CONF"]

LOW_LATENCY_SPARK_CONF: Mapping[str, str] = MappingProxyType(
    {
        "spark.sql.streaming.checkpointFileManagerClass": (
            "org.apache.spark.sql.execution.streaming.checkpointing."
            "FileSystemBasedCheckpointFileManager"
        ),
        "spark.python.daemon.module": "seglog.datasource.worker_daemon",
    }
)

SESSION_SPARK_CONF: Mapping[str, str] = MappingProxyType(
    {k: v for k, v in LOW_LATENCY_SPARK_CONF.items() if k.startswith("spark.sql.")}
)
"""The part of ``LOW_LATENCY_SPARK_CONF`` a running session takes (``spark.conf.set``)."""
