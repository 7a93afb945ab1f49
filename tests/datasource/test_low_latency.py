"""The latency benchmark's split of ``addBatch`` joins the traced steps to Spark's
progress as documented. A real query with docs/operations.md's low-latency settings
(``LOW_LATENCY_SPARK_CONF``) and ``SEGLOG_TRACE_FILE`` set: the restart test of
``test_stream_sink.py`` (one query carries both)."""

from __future__ import annotations

import importlib
import os
import sys
from pathlib import Path
from types import ModuleType

import pytest

from seglog.streaming.step_trace import StepTime

ROOT = Path(__file__).resolve().parents[2]


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
