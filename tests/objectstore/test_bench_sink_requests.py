"""``benchmarks/bench_sink_requests.py`` in its smallest form (two micro-batches): it runs,
and what it counts from the proxy's request log is coherent (the other issue-25
benchmarks start Spark or many processes: too slow for the suite)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_sink_requests_benchmark_counts_a_commits_round_trips() -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    run = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "bench_sink_requests.py"),
            "--batches",
            "2",
            "--rows",
            "100",
            "--delay-ms",
            "5",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
        check=False,
    )
    assert run.returncode == 0, run.stderr[-3000:]
    steady = re.search(r"steady.*?; commit ([\d.]+) requests \(([^)]*)\)", run.stdout)
    trips = re.search(r"sequential round trips median (\d+)", run.stdout)
    assert steady is not None and trips is not None, run.stdout
    # A steady commit is its create alone: its writer made the topic log's last commit,
    # so it neither refreshes nor lists the uploads first; its round trips are its
    # requests, one after the other.
    assert steady.group(2) == "CONDITIONAL_PUT=1.0", steady.group(0)
    assert 1 <= int(trips.group(1)) <= float(steady.group(1))
