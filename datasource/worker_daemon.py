"""Spark's Python worker daemon for tasks, without a full garbage collection per task.

Run by Spark as ``python -m seglog.datasource.worker_daemon pyspark.worker`` when a
session sets ``spark.python.daemon.module`` to this module (it is in
``LOW_LATENCY_SPARK_CONF``). It is PySpark's own daemon (``pyspark.daemon``: it forks
the task workers and reuses each for task after task), with one change: between two
tasks a reused worker collects Python's young generations instead of running a full
``gc.collect()``.

Why: PySpark's daemon makes every reused worker run a full collection after each task.
Its cost grows with everything the worker ever imported: about 11 ms of CPU for a bare
``pyspark.worker``, about 34 ms once a seglog task has imported its codec (numba,
pyarrow; ~85,000 objects to traverse), measured on the team's 2-core machine. A
streaming micro-batch runs one task with two such workers (the source's read and the
sink's write), so each micro-batch paid those collections right when its task ended, on
the cores the driver needs for the sink's commit and the next trigger.

What it gives up: cyclic garbage a task left in the oldest generation is freed by
Python's own collector, when its thresholds call for a full collection, rather than
right after the task. Objects without cycles (Arrow buffers, record batches, most of a
task's data) are freed as before, by reference counting, when the task drops them.

Before forking, the daemon's own objects (PySpark's modules, which it never unloads) are
moved out of the collector's reach with ``gc.freeze()``, as Python's documentation
advises for a process that forks workers: the workers' collections skip them, and
copy-on-write keeps those pages shared. The workers import everything else after the
fork, as PySpark's daemon requires (imports such as pyarrow start threads, which a fork
must not copy): this module imports only the daemon, and its package
(``seglog.datasource``) imports neither pyarrow nor numba, so the daemon forks from a
single thread (``tests/datasource/test_low_latency.py`` checks both).

Spark uses ``spark.python.daemon.module`` for the workers of tasks only; the driver's
Python planning processes (a stream writer's planning and its commit) keep PySpark's own
daemon, whatever the setting.
"""

from __future__ import annotations

import gc
import types

from pyspark import daemon

__all__ = ["YOUNG_GENERATIONS", "collect_young", "install"]

YOUNG_GENERATIONS = 1
"""``gc.collect``'s generation for the collection between tasks: 0 and 1, not 2."""


def collect_young(generation: int = YOUNG_GENERATIONS) -> int:
    """What the daemon's ``gc.collect()`` does here: a young collection (at most up to
    ``generation``), the number of unreachable objects found, as ``gc.collect``."""
    return gc.collect(min(generation, YOUNG_GENERATIONS))


def install() -> None:
    """Points PySpark's daemon at ``collect_young`` and freezes what it has loaded."""
    # The daemon's only use of its ``gc`` module is the collection between tasks; the
    # rest of ``gc`` stays reachable through this stand-in for anything else.
    young = types.ModuleType("gc", "gc, with collect() collecting the young generations")
    young.__dict__.update({k: v for k, v in vars(gc).items() if not k.startswith("__")})
    young.__dict__["collect"] = collect_young
    daemon.__dict__["gc"] = young
    gc.freeze()


if __name__ == "__main__":
    install()
    daemon.manager()
