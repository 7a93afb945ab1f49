"""How fast the ``seglog`` command starts for commands that read metadata only.

Run: ``python benchmarks/bench_cli_startup.py [--repeat 15]``

Each case is a fresh interpreter running the command on a log dir of two topics (three
partitions, a few records). Measured in the same run, in rotating order:

* floor: ``python -c pass`` (the interpreter alone) and ``python -c "import json,
  argparse"`` (the least a command line that parses arguments and prints JSON loads);
* seglog: ``--version``, ``--help``, ``topics``, ``describe``, ``get-offsets``.

Per case: the best and median wall time, and the best CPU time (user + system of the
child, from ``os.wait4``: less disturbed by other processes on a shared machine than wall
time), with each seglog case's ratio to ``python -c pass`` and the milliseconds it adds
over the ``json, argparse`` floor.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src"))

import pyarrow as pa  # noqa: E402

from seglog.logstore.manager.log_manager import LogManager  # noqa: E402
from seglog.logstore.records.record_codec import encode_batches  # noqa: E402


def _make_log_dir(root: Path) -> Path:
    logs = root / "logs"
    with LogManager([logs]) as mgr:
        mgr.create_topic("events", 2)
        mgr.create_topic("audit", 1)
        for p in (0, 1):
            mgr.append("events", p, encode_batches(pa.array([b"a", b"b", b"c"])))
        mgr.checkpoint_high_watermarks()
    return logs


def _run(argv: list[str], env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, child CPU seconds) of one run; the command must succeed."""
    start = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env=env)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - start
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode() if proc.stderr else ""
    if proc.stderr:
        proc.stderr.close()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}): {err}")
    return wall, usage.ru_utime + usage.ru_stime


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=15)
    opts = parser.parse_args()
    py = sys.executable
    src = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "src")
    env = {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", "")}
    root = Path(tempfile.mkdtemp(prefix="bench-cli-"))
    try:
        logs = str(_make_log_dir(root))
        seglog = [py, "-m", "seglog.cli"]
        cases = {
            "python -c pass": [py, "-c", "pass"],
            "python -c 'import json, argparse'": [py, "-c", "import json, argparse"],
            "seglog --version": [*seglog, "--version"],
            "seglog --help": [*seglog, "--help"],
            "seglog topics": [*seglog, "topics", "--path", logs],
            "seglog describe": [*seglog, "describe", "--path", logs],
            "seglog get-offsets": [*seglog, "get-offsets", "--path", logs, "--topic", "events"],
        }
        walls: dict[str, list[float]] = {name: [] for name in cases}
        cpus: dict[str, list[float]] = {name: [] for name in cases}
        names = list(cases)
        for name in names:  # one unmeasured run each: the OS's file cache
            _run(cases[name], env)
        for i in range(opts.repeat):
            for name in names[i % len(names) :] + names[: i % len(names)]:
                wall, cpu = _run(cases[name], env)
                walls[name].append(wall)
                cpus[name].append(cpu)
        load = os.getloadavg()[0]
        print(f"{opts.repeat} runs per case, load average {load:.1f} ({os.cpu_count()} cores)")
        floor = min(walls["python -c pass"])
        floor_cpu = min(cpus["python -c pass"])
        argparse_wall = min(walls["python -c 'import json, argparse'"])
        print(
            f"{'case':36} {'best ms':>8} {'median':>8} {'CPU ms':>8} {'x pass':>7} "
            f"{'+ms vs json,argparse':>21}"
        )
        for name in names:
            best, med, cpu = min(walls[name]), statistics.median(walls[name]), min(cpus[name])
            print(
                f"{name:36} {best * 1000:8.0f} {med * 1000:8.0f} {cpu * 1000:8.0f} "
                f"{best / floor:7.1f} {(best - argparse_wall) * 1000:21.0f}"
            )
        print(
            f"(x pass: best wall / best wall of python -c pass; CPU floor "
            f"{floor_cpu * 1000:.0f} ms)"
        )
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
