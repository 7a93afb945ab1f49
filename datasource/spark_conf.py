"""Spark settings that cut a micro-batch's fixed cost, for low end-to-end latency.

``LOW_LATENCY_SPARK_CONF`` is what docs/operations.md ("Low end-to-end latency")
recommends and ``benchmarks/bench_e2e_latency.py`` applies by default (to the no-op floor
and to seglog alike), given to a session as it is built:
``SparkSession.builder.config(map=dict(LOW_LATENCY_SPARK_CONF))`` (or ``spark-submit
--conf``). The ``spark.python.*`` ones configure the SparkContext, so they must be there
when the session starts; a running session takes only the ``spark.sql.*`` ones
(``SESSION_SPARK_CONF``), with ``spark.conf.set`` before the query starts.

Where a micro-batch's CPU goes (``benchmarks/trace_e2e_floor.py``: each process's
``/proc/<pid>/stat`` over the micro-batches of a no-op Python source and sink): the JVM,
the driver's Python planning processes (the writer's planning, the commit), and the
task's two Python workers (the source's read, the sink's write). The last two spent
most of theirs in the full garbage collection PySpark's daemon runs after every task of
a reused worker; ``spark.python.daemon.module`` below removes it.

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
- ``spark.python.unix.domain.socket.enabled`` = ``true``: the JVM talks to its Python
  workers (the tasks', the planning ones, the source's runner) over Unix domain sockets
  instead of TCP on 127.0.0.1 (Spark 4.1 and later). Over TCP, a task's read worker
  waited a steady 40 ms per micro-batch between receiving its command and receiving the
  input partition that follows it, whatever the machine's load: Linux's delayed
  acknowledgement timeout, the signature of Nagle's algorithm holding a small write
  until the previous one is acknowledged. A Unix socket has neither. What it gives up: a
  worker's connection is admitted by the socket file's permissions (the file is created
  under ``spark.python.unix.domain.socket.dir``, by default Java's temporary directory,
  with the process's umask) instead of a secret the JVM hands to the daemon: another
  user can connect only if the umask lets them write the file (the usual 022 does not),
  so with a looser umask point that setting at a directory only the Spark user can
  enter. A process of the same user could already read the secret from the daemon's
  environment.
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
        "spark.python.unix.domain.socket.enabled": "true",
    }
)

SESSION_SPARK_CONF: Mapping[str, str] = MappingProxyType(
    {k: v for k, v in LOW_LATENCY_SPARK_CONF.items() if k.startswith("spark.sql.")}
)
"""The part of ``LOW_LATENCY_SPARK_CONF`` a running session takes (``spark.conf.set``)."""
