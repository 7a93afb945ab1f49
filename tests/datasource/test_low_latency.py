"""docs/operations.md's low-latency settings (``LOW_LATENCY_SPARK_CONF``): seglog's worker
daemon collects only the young generations between tasks, and the latency benchmark's
split of ``addBatch`` joins the traced steps to Spark's progress as documented. A real
query with the settings and ``SEGLOG_TRACE_FILE`` set is the restart test of
``test_stream_sink.py`` (one query carries both)."""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from types import ModuleType

import pytest

from seglog.streaming.step_trace import StepTime

ROOT = Path(__file__).resolve().parents[2]


_YOUNG_ONLY = textwrap.dedent("""
    import gc, os, sys, weakref
    from pyspark import daemon
    from seglog.datasource import worker_daemon

    # What the daemon holds when it forks: one thread, no module that starts others.
    print(len(os.listdir("/proc/self/task")), "pyarrow" in sys.modules, "numba" in sys.modules)

    class Node:
        pass

    worker_daemon.install()
    frozen = gc.get_freeze_count()
    kept = Node()
    kept.self = kept
    old = weakref.ref(kept)
    gc.collect()  # still in use: it survives into the oldest generation
    del kept  # cyclic garbage there
    young = Node()
    young.self = young
    young = weakref.ref(young)  # cyclic garbage in the youngest generation
    found = daemon.gc.collect()  # what PySpark's daemon calls between two tasks
    print(frozen > 0, young() is None, old() is None, found >= 1)
    gc.collect()  # Python's own full collection frees it
    print(old() is None)
""")


def test_the_worker_daemon_collects_only_the_young_generations_between_tasks() -> None:
    """In its own process (``install`` changes PySpark's daemon module and freezes): the
    daemon would fork from one thread, with neither pyarrow nor numba imported, and its
    collection between tasks leaves the oldest generation to Python's own."""
    out = subprocess.run(
        [sys.executable, "-c", _YOUNG_ONLY], capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.split() == ["1", "False", "False", "True", "True", "False", "True", "True"]


@pytest.fixture
def bench(monkeypatch: pytest.MonkeyPatch) -> ModuleType:
    """``benchmarks/bench_e2e_latency.py``, imported with its changes to ``sys.path``
    and the environment undone afterwards."""
    monkeypatch.setattr(sys, "path", [str(ROOT), *sys.path])
    for name in ("PYTHONPATH", "PYSPARK_PYTHON", "PYSPARK_DRIVER_PYTHON"):
        if name in os.environ:
            monkeypatch.setenv(name, os.environ[name])
        else:
            monkeypatch.delenv(name, raising=False)
    return importlib.import_module("benchmarks.bench_e2e_latency")


def _step(step: str, batch: int, start_ms: float, end_ms: float, part: int | None = 0) -> StepTime:
    base = 1_000_000_000_000_000_000
    return StepTime(step, batch, part, base + int(start_ms * 1e6), base + int(end_ms * 1e6), 1)


def test_the_benchmark_splits_add_batch_by_the_traced_steps(bench: ModuleType) -> None:
    progress = [
        {"batchId": 4, "durationMs": {"addBatch": 100}},
        {"batchId": 5, "durationMs": {"addBatch": 60}},
        {"batchId": 6, "durationMs": {"addBatch": 50}},  # no commit traced: left out
    ]
    steps = [
        # batch 4: addBatch [0, 100]: tasks read [30, 40] and [35, 45], write until 52,
        # the commit [70, 98] (addBatch ends 2 ms after it returns)
        _step("read", 4, 30, 40, 0),
        _step("read", 4, 35, 45, 1),
        _step("write", 4, 31, 50, 0),
        _step("write", 4, 36, 52, 1),
        _step("commit", 4, 70, 100, None),
        # batch 5: addBatch [200, 260]
        _step("read", 5, 210, 214),
        _step("write", 5, 211, 220),
        _step("commit", 5, 230, 260, None),
        _step("read", 6, 300, 301),
        _step("write", 6, 300, 302),
    ]
    split = bench.split_add_batch(progress, steps)
    assert split.pop("micro-batches") == 2
    want = {
        "launch": (30 + 10) / 2,
        "read": (15 + 4) / 2,
        "write": (7 + 6) / 2,
        "to commit": (18 + 10) / 2,
        "commit": (30 + 30) / 2,
        "addBatch": (100 + 60) / 2,
    }
    assert split == pytest.approx(want)
    assert bench.split_add_batch(progress[2:], steps) == {}
