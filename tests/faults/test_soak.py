"""The soak's short form (``benchmarks/soak.py``): every kind of process SIGKILLed at
random on a local dir and on a bucket behind the delay- and fault-injecting proxy, then
every acknowledged record present exactly once, every read committed-only and in order,
each Spark sink output exactly once, nothing foreign touched. The seed is printed (and
``SEGLOG_TEST_SEED`` replays one); a failure names the work dir with every journal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

SOAK = Path(__file__).resolve().parents[2] / "benchmarks" / "soak.py"


def _soak(tmp_path: Path, *runs: tuple[str, ...]) -> list[dict]:
    """``benchmarks/soak.py`` once per argument tuple of ``runs``, all at once (each its
    own work dir and report; one seed), and their reports in order, each checked."""
    seed = os.environ.get("SEGLOG_TEST_SEED", str(time.time_ns() % 100_000))
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    started: list[tuple[Path, subprocess.Popen[str]]] = []
    for i, args in enumerate(runs):
        run_dir = tmp_path / f"run-{i}"
        run_dir.mkdir()
        with open(run_dir / "stdout.txt", "w") as out, open(run_dir / "stderr.txt", "w") as err:
            proc = subprocess.Popen(
                [
                    sys.executable,
                    str(SOAK),
                    "--seed",
                    seed,
                    "--work",
                    str(run_dir / "work"),
                    "--report",
                    str(run_dir / "report.json"),
                    "--kill-every",
                    "1,3",
                    *args,
                ],
                env=env,
                stdout=out,
                stderr=err,
                text=True,
            )
        started.append((run_dir, proc))
    deadline = time.monotonic() + 900
    try:
        for _, proc in started:
            proc.wait(max(1.0, deadline - time.monotonic()))
    finally:
        for _, proc in started:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
    reports: list[dict] = []
    for run_dir, proc in started:
        stdout = (run_dir / "stdout.txt").read_text()
        summary = "\n".join(line for line in stdout.splitlines() if "skipping" not in line)
        stderr = (run_dir / "stderr.txt").read_text()
        assert proc.returncode == 0, f"seed {seed}: soak failed:\n{summary}\n{stderr[-3000:]}"
        for r in json.loads((run_dir / "report.json").read_text()):
            assert r["violations"] == 0, summary
            assert sum(r["kills"].values()) > 0, summary
            assert r["counts"]["records acknowledged"] > 0, summary
            assert r["counts"]["records read checked"] > 0, summary
            if r["storage"] == "bucket":
                assert sum(r["faults injected"].values()) > 0, summary
            reports.append(r)
    return reports


@pytest.mark.slow
@pytest.mark.spark
def test_soak_of_library_processes_and_two_spark_sink_queries(tmp_path: Path) -> None:
    """Two soaks at once (each is mostly processes waiting: together they take the longer
    one's time, not the sum):

    - on a local dir, 45 s: writers, readers, ``seglog maintain`` and two seglog -> seglog
      queries, each in its own process, killed and restarted from their checkpoints; the
      soak kills each kind once before any twice, and the queries become killable only
      after a micro-batch, so every library kind is killed; the queries' outputs hold the
      input exactly once;
    - on a bucket, 18 s, library processes only (``--no-spark``): writers and readers
      killed (a bucket's maintain pass, killable once it finished one, may outlast 18 s
      under load). A fault rate of 5% (the soak's default is 2%) still faults a few of a
      loaded machine's ~100 bucket requests in that time.

    The library kinds on a local dir were a soak of their own (18 s beside the bucket's):
    the Spark soak's local dir kills them all the same."""
    local, bucket = _soak(
        tmp_path,
        ("--storage", "local", "--minutes", "0.75"),
        ("--storage", "bucket", "--no-spark", "--minutes", "0.3", "--fault-rate", "0.05"),
    )
    assert (local["storage"], bucket["storage"]) == ("local", "bucket")
    assert {"writer", "reader", "maintain"} <= set(local["kills"]), local["kills"]
    assert {"writer", "reader"} <= set(bucket["kills"]), bucket["kills"]
    assert local["counts"]["out1 records checked"] == local["counts"]["records checked"]
    assert local["counts"]["out2 records checked"] == local["counts"]["records checked"]


def test_the_checks_name_each_kind_of_violation(tmp_path: Path) -> None:
    """The end checks on planted journals: a lost acknowledged record, a duplicate, a
    record no writer tried, a reader that saw what the log does not hold, a sink output
    short of one record and long by another, a foreign object deleted."""
    from collections import Counter

    sys.path.insert(0, str(SOAK.parent))
    from soak_checks import (
        Findings,
        check_foreign,
        check_input,
        check_output,
        check_readers,
    )

    (tmp_path / "writer-0.journal").write_text(
        "try 0 3 0:0:2 1:2:2\nack 0 3\ntry 4 4 0:4:1\nfail 4 4 CommitConflictError: x\n"
    )
    (tmp_path / "reader-0.journal").write_text("start\nR 0 0 w0-0,w0-1\nR 1 0 w0-2,w0-9\n")
    log = {0: ["w0-0", "w0-1", "w0-4"], 1: ["w0-2", "w0-2", "w7-1"]}
    found = Findings()
    check_input(tmp_path, log, found)
    check_readers(tmp_path, log, found)
    check_output("out1", Counter(["a", "b"]), Counter(["a", "c"]), found)
    check_foreign({"reports/q1.csv": b"x", "README.txt": b"y"}, {"README.txt": b"y"}, found)
    assert found.violations == [
        "in-1 offset 2: 'w7-1' was written by no writer",
        "w0-3: acknowledged (writer-0.journal) but missing from in-1",
        "w0-2: present 2 times, at in-1@0, in-1@1",
        "reader-0.journal:3: read w0-9 at in-1 offset 1; the log has w0-2 there",
        "sink output out1: b missing (1 of 1)",
        "sink output out1: c 1 time(s) more than in in",
        "foreign reports/q1.csv: deleted",
    ]
    assert found.counts["records present though failed"] == 1


def test_a_soak_writer_appends_no_faster_than_its_rate(tmp_path: Path) -> None:
    """``soak_roles.py writer ... RATE`` keeps to RATE records a second (the soak's
    ``--write-rate``, so the Spark queries can keep up): run for a while, stopped by
    SIGTERM, it acknowledged at most what the rate allows plus one call's records. An
    upper bound: a loaded machine only makes it smaller."""
    import signal

    sys.path.insert(0, str(SOAK.parent))
    from soak_roles import PARTITIONS, TOPIC

    from seglog.logstore.manager.log_manager import LogManager

    logs = tmp_path / "logs"
    with LogManager([str(logs)]) as mgr:
        mgr.create_topic(TOPIC, PARTITIONS, config={"retention.ms": "-1"})
    rate = 20.0
    journal = tmp_path / "writer-0.journal"

    def acked() -> int:
        n = 0
        for line in journal.read_text().splitlines() if journal.exists() else []:
            head, *rest = line.split()
            if head == "ack":
                n += int(rest[1]) - int(rest[0]) + 1
        return n

    writer = subprocess.Popen(
        [sys.executable, str(SOAK.parent / "soak_roles.py"), "writer", "0", str(logs)]
        + [str(tmp_path), "7", str(rate)],
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and acked() == 0:  # its start-up imports
            time.sleep(0.1)
        first, started = acked(), time.monotonic()
        time.sleep(4.0)
    finally:
        writer.send_signal(signal.SIGTERM)
        writer.wait(60)
    elapsed = time.monotonic() - started
    # What it appended since: the rate's worth, plus the call in flight (at most 3
    # partitions of 10 records).
    assert first > 0
    assert acked() - first <= rate * elapsed + 3 * 10, (acked() - first, elapsed)
