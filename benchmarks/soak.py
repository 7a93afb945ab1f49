"""The soak: every kind of seglog process at once, SIGKILLed at random, on a local dir
and on a bucket behind a proxy that delays and fails requests; then a check that nothing
acknowledged was lost or duplicated, no reader saw anything uncommitted, each Spark sink
output holds its input exactly once, and nothing foreign was touched.

    python benchmarks/soak.py [--minutes 2] [--storage local|bucket|both] [--no-spark]
        [--writers 3] [--readers 1] [--seed N] [--kill-every 2,6] [--fault-rate 0.02]
        [--delay-ms 25] [--orphan-grace-s 30] [--write-rate 60] [--drain-timeout-s 600]
        [--server auto|seaweedfs|moto] [--work DIR] [--report FILE.json]

Processes (``soak_roles.py``, each in its own process group): writers (library
``append``/``append_many`` of uniquely numbered records to the topic ``in``, acknowledged
to an fsynced journal), library readers tailing ``in``, ``seglog maintain`` in a loop
(plus, on a bucket, collection with a small orphan grace), and two Spark queries
``in`` -> ``out1``/``out2`` (seglog to seglog, exactly-once, each in its own process,
restarted from its checkpoint after a kill; ``out2`` with docs/operations.md's
``LOW_LATENCY_SPARK_CONF``, ``out1`` with Spark's defaults). Until the time is up a
random process of a random kind is SIGKILLed (its whole group: driver, JVM, Python
workers) every few seconds and restarted. The bucket is SeaweedFS where installed, else moto
(``tests/s3_server.py``), behind ``tests/s3_proxy.py`` (``--delay-ms`` per request,
``--fault-rate`` of requests answered 500/503 or dropped before or after the server saw
them). Then writers stop, the queries drain ``in`` (``availableNow``), and
``soak_checks.py`` checks. Prints counts and the first violations; exit status 1 if any.
Work files stay in ``--work`` (default: a temporary dir, kept when there are violations).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

_HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(_HERE))
sys.path.insert(0, str(_HERE.parent / "tests"))

from s3_proxy import S3Proxy  # noqa: E402
from s3_server import MotoServer, SeaweedServer, seaweed_unavailable  # noqa: E402
from soak_checks import (  # noqa: E402
    Findings,
    check_foreign,
    check_input,
    check_output,
    check_readers,
)
from soak_roles import PARTITIONS, TOPIC  # noqa: E402

from seglog.logstore.errors import LogDirLockedError  # noqa: E402
from seglog.logstore.manager.log_manager import LogManager  # noqa: E402
from seglog.logstore.records.record_codec import decode_batches  # noqa: E402
from seglog.logstore.storage.object_storage import ObjectStorage  # noqa: E402

QUERIES = ("out1", "out2")
# What a process prints once it has done something worth interrupting.
_PROGRESS = {"spark-query": "PROGRESS", "maintain": "PASS"}
# How long a process that printed no progress yet is spared: a query's first micro-batch
# (a JVM, Python workers, the sink's first commit) took over 2 minutes at load 22.
_GRACE_S = {"spark-query": 600.0, "maintain": 120.0}
FOREIGN_LOCAL = ("FOREIGN-notes.txt",)
# A bucket's foreign objects, relative to the bucket: beside the log dir, under another
# prefix, and inside the log dir's prefix (a file, and a prefix no topic owns).
FOREIGN_BUCKET = (
    "README.txt",
    "reports/q1.csv",
    "logs/FOREIGN-notes.txt",
    "logs/foreign-dir/data.csv",
)


@dataclass
class Proc:
    kind: str
    name: str
    argv: list[str]
    popen: subprocess.Popen[bytes]
    started: float
    log: Path
    log_start: int  # the size of its log when it started: what it printed since is after

    def printed(self, word: str) -> bool:
        """Whether this run of the process printed ``word`` (at a line's start)."""
        return self.count(word) > 0

    def count(self, word: str) -> int:
        """How many lines this run of the process began with ``word``."""
        with open(self.log, "rb") as f:
            f.seek(self.log_start)
            return sum(1 for line in f if line.startswith(word.encode()))


class Fleet:
    """The soak's processes: each in its own session, output appended to ``<name>.log``."""

    def __init__(self, work: Path, env: Mapping[str, str]) -> None:
        self.work = work
        self.env = dict(env)
        self.procs: dict[str, Proc] = {}
        self.kills: Counter[str] = Counter()
        self.exits: Counter[str] = Counter()
        self.exit_notes: list[str] = []

    def start(self, kind: str, name: str, argv: list[str]) -> Proc:
        path = self.work / f"{name}.log"
        with open(path, "ab") as log:
            log_start = log.tell()
            popen = subprocess.Popen(
                [sys.executable, str(_HERE / "soak_roles.py"), *argv],
                stdout=log,
                stderr=subprocess.STDOUT,
                env=self.env,
                start_new_session=True,
            )
        proc = Proc(kind, name, argv, popen, time.monotonic(), path, log_start)
        self.procs[name] = proc
        return proc

    def kill(self, proc: Proc) -> None:
        _killpg(proc.popen.pid, signal.SIGKILL)
        proc.popen.wait()

    def kill_and_restart(self, proc: Proc) -> None:
        self.kill(proc)
        self.kills[proc.kind] += 1
        self.start(proc.kind, proc.name, proc.argv)

    def restart_exited(self) -> None:
        for proc in list(self.procs.values()):
            code = proc.popen.poll()
            if code is not None:
                self.exits[proc.kind] += 1
                self.exit_notes.append(
                    f"{proc.name} exited with {code}: {_why(self.work / f'{proc.name}.log')}"
                )
                self.start(proc.kind, proc.name, proc.argv)

    def drain(self, path: str, stall_timeout: float, attempts: int = 3) -> bool:
        """Run each query with ``availableNow`` to the end of its input (restarted from
        its checkpoint, as an operator would, if it fails); True if all got there. A
        query fails once it committed no micro-batch for ``stall_timeout`` seconds: the
        time a drain takes grows with the backlog, its micro-batches' time does not."""
        runs = {q: self._start_drain(q, path) for q in QUERIES}
        tries = dict.fromkeys(QUERIES, 1)
        failed: list[str] = []
        batches = dict.fromkeys(QUERIES, 0)
        moved = dict.fromkeys(QUERIES, time.monotonic())
        while runs:
            time.sleep(0.5)
            for q, proc in list(runs.items()):
                done = proc.count("PROGRESS")
                if done != batches[q]:
                    batches[q], moved[q] = done, time.monotonic()
                if proc.printed("DONE"):
                    del runs[q]
                elif time.monotonic() - moved[q] > stall_timeout:
                    self.exit_notes.append(
                        f"{proc.name}: no micro-batch committed in {stall_timeout:g} s"
                    )
                    failed.append(q)
                    del runs[q]
                elif proc.popen.poll() is not None:
                    self.exits[proc.kind] += 1
                    self.exit_notes.append(
                        f"{proc.name} exited with {proc.popen.returncode} "
                        f"(attempt {tries[q]}): {_why(proc.log)}"
                    )
                    if tries[q] >= attempts:
                        failed.append(q)
                        del runs[q]
                    else:
                        tries[q] += 1
                        runs[q] = self._start_drain(q, path)
                        batches[q], moved[q] = 0, time.monotonic()
        self.stop({"spark-drain"}, timeout=60)
        return not failed

    def _start_drain(self, q: str, path: str) -> Proc:
        chk = str(self.work / f"chk-{q}")
        return self.start("spark-drain", f"{q}-drain", ["query", q, path, chk, "drain"])

    def stop(self, kinds: set[str], timeout: float = 30.0) -> None:
        """SIGTERM (each finishes its current step), then SIGKILL after ``timeout``."""
        chosen = [p for p in self.procs.values() if p.kind in kinds]
        for proc in chosen:
            if proc.popen.poll() is None:
                _killpg(proc.popen.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in chosen:
            try:
                proc.popen.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                self.kill(proc)
            _killpg(proc.popen.pid, signal.SIGKILL)  # what it started (a JVM) goes too
            del self.procs[proc.name]


def _killpg(pid: int, sig: signal.Signals) -> None:
    # A group already gone (its leader exited on its own just now) is no error.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)


def _why(path: Path) -> str:
    """The last error a process's output names (its last line if none)."""
    try:
        lines = path.read_text(errors="replace").strip().splitlines()
    except FileNotFoundError:
        return "(no output)"
    errors = [line for line in lines if re.match(r"^[\w.]*(Error|Exception)\b", line)]
    # The cause, not Spark's wrapper around it (which repeats the Python traceback).
    causes = [line for line in errors if not line.startswith("pyspark.")] or errors
    return (causes or lines or ["(no output)"])[-1][:400]


@dataclass
class Target:
    """Where the log dir is: its path or URI, how the processes reach it (``env``), how
    the checks reach it without faults (``options``), and its foreign files."""

    kind: str
    path: str
    env: dict[str, str]
    options: dict[str, str] | None
    proxy: S3Proxy | None
    server_name: str = ""

    def manager(self, read_only: bool = True) -> LogManager:
        if self.options is None:
            if read_only:
                return LogManager([self.path], read_only=True)
            # A writer waits for the lock as the sink does (lockTimeoutMs): a process
            # just killed may still be exiting with it.
            deadline = time.monotonic() + 60
            while True:
                try:
                    return LogManager([self.path])
                except LogDirLockedError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.2)
        return LogManager(self.path, read_only=read_only, storage_options=self.options)

    def foreign(self) -> dict[str, bytes | None]:
        if self.options is None:
            root = Path(self.path)
            return {
                n: (root / n).read_bytes() if (root / n).exists() else None for n in FOREIGN_LOCAL
            }
        bucket = ObjectStorage(self.path.rsplit("/", 1)[0], self.options)
        return {n: bucket.read(n) if bucket.exists(n) else None for n in FOREIGN_BUCKET}


@contextmanager
def target(kind: str, work: Path, args: argparse.Namespace) -> Iterator[Target]:
    env = dict(os.environ, PYSPARK_PYTHON=sys.executable, PYSPARK_DRIVER_PYTHON=sys.executable)
    if kind == "local":
        logs = work / "logs"
        logs.mkdir(parents=True)
        (logs / FOREIGN_LOCAL[0]).write_bytes(b"not seglog's: keep me\n")
        yield Target("local", str(logs), env, None, None)
        return
    use_seaweed = args.server == "seaweedfs" or (
        args.server == "auto" and seaweed_unavailable() is None
    )
    server: MotoServer | SeaweedServer = SeaweedServer() if use_seaweed else MotoServer()
    with server, S3Proxy(server.endpoint, delay_s=args.delay_ms / 1000) as proxy:
        bucket = server.create_bucket("soak")
        client = server.client()
        for name in FOREIGN_BUCKET:
            client.put_object(Bucket=bucket, Key=name, Body=f"not seglog's: {name}\n".encode())
        env.update(server.env, AWS_ENDPOINT_URL=proxy.endpoint)
        yield Target(
            "bucket",
            f"s3://{bucket}/logs",
            env,
            server.storage_options(),
            proxy,
            "SeaweedFS" if use_seaweed else "moto",
        )


def _final_log(t: Target, topic: str) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    with t.manager() as mgr:
        if topic not in mgr.topics():
            return out
        hws = mgr.high_watermarks()
        for p in mgr.partitions(topic):
            log = mgr.get_log(topic, p)
            values: list[str] = []
            if log.log_start_offset != 0:
                raise RuntimeError(f"{topic}-{p} starts at {log.log_start_offset}, not 0")
            for chunk in log.read_chunks(0, hws[(topic, p)]):
                rows = decode_batches(chunk, end_offset=hws[(topic, p)])
                values.extend(v.decode() for v in rows.column("value").to_pylist())
            out[p] = values
    return out


def soak(kind: str, args: argparse.Namespace, work: Path) -> dict[str, object]:
    rng = random.Random(args.seed)
    with target(kind, work, args) as t:
        with t.manager(read_only=False) as mgr:
            mgr.create_topic(TOPIC, PARTITIONS, config={"retention.ms": "-1"})
        before = t.foreign()
        fleet = Fleet(work, t.env)
        for w in range(args.writers):
            rate = str(args.write_rate / args.writers)
            fleet.start(
                "writer", f"writer-{w}", ["writer", str(w), t.path, str(work), str(args.seed), rate]
            )
        for r in range(args.readers):
            fleet.start("reader", f"reader-{r}", ["reader", str(r), t.path, str(work)])
        fleet.start(
            "maintain",
            "maintain",
            ["maintain", t.path, str(work), str(int(args.orphan_grace_s * 1000))],
        )
        spark = not args.no_spark
        if spark:
            for q in QUERIES:
                fleet.start("spark-query", q, ["query", q, t.path, str(work / f"chk-{q}"), "run"])
        if t.proxy is not None and args.fault_rate > 0:
            t.proxy.set_random_faults(args.fault_rate, seed=args.seed)
        lo, hi = (float(x) for x in args.kill_every.split(","))
        deadline = time.monotonic() + args.minutes * 60
        while (now := time.monotonic()) < deadline:
            time.sleep(min(rng.uniform(lo, hi), max(0.0, deadline - now)))
            fleet.restart_exited()
            # A Spark query is fair game once it committed a micro-batch since its start,
            # maintain once it finished a pass (or after _GRACE_S of trying): a start-up
            # (~20 s for Spark on a quiet machine, minutes on a loaded one) or a bucket
            # pass (minutes at 25 ms a request) killed over and over would test nothing
            # past its beginning, and the queries would never catch up with the writers.
            eligible = [
                p
                for p in fleet.procs.values()
                if p.kind not in _PROGRESS
                or p.printed(_PROGRESS[p.kind])
                or time.monotonic() - p.started > _GRACE_S[p.kind]
            ]
            kinds = sorted({p.kind for p in eligible})
            if kinds and time.monotonic() < deadline:
                # Every kind that can be killed is killed once before any kind twice: a
                # short run (the test suite's) still kills each kind.
                chosen = rng.choice([k for k in kinds if not fleet.kills[k]] or kinds)
                fleet.kill_and_restart(rng.choice([p for p in eligible if p.kind == chosen]))
        if t.proxy is not None:
            t.proxy.clear_faults()
        fleet.stop({"writer", "maintain"})
        if spark:
            fleet.stop({"spark-query"}, timeout=5)
        if t.kind == "local":
            # What the next writer of a local dir does after a killed one: recover and
            # publish. A sink commit would do the same; the checks must not depend on it.
            # After the queries stopped: a sink's commit holds the dir's lock.
            with t.manager(read_only=False):
                pass
        drained = True
        drain: dict[str, float] = {}
        if spark:
            drain = _layout(t)
            started = time.monotonic()
            drained = fleet.drain(t.path, args.drain_timeout_s)
            drain["seconds"] = round(time.monotonic() - started, 1)
            drain["micro-batches"] = _micro_batches(work, "-drain.log")
        time.sleep(2.0)  # the readers' last pass
        fleet.stop({"reader"})
        found = Findings()
        final = _final_log(t, TOPIC)
        check_input(work, final, found)
        check_readers(work, final, found)
        if spark:
            if not drained:
                found.violation(
                    "a Spark query did not drain the input (failed 3 times or committed no "
                    f"micro-batch for {args.drain_timeout_s:g} s; see the exits above and "
                    "out*-drain.log)"
                )
            everything = Counter(v for values in final.values() for v in values)
            for q in QUERIES:
                got = Counter(v for vs in _final_log(t, q).values() for v in vs)
                check_output(q, everything, got, found)
        check_foreign(before, t.foreign(), found)
        ops = _operations(work)
        return {
            "storage": kind,
            "server": t.server_name,
            "minutes": args.minutes,
            "seed": args.seed,
            "operations": dict(ops),
            "kills": dict(fleet.kills),
            "unexpected exits": dict(fleet.exits),
            "exit notes": fleet.exit_notes[:10],
            "faults injected": dict(t.proxy.faults) if t.proxy else {},
            "requests": dict(t.proxy.counts) if t.proxy else {},
            "counts": dict(found.counts),
            "drain": drain,
            "violations": len(found.violations),
            "first violations": found.violations[:20],
        }


def _layout(t: Target) -> dict[str, float]:
    """What the drain starts from: the input's records and segments (on a bucket each is
    at least one object and one GET), and what each output already holds."""
    out: dict[str, float] = {}
    with t.manager() as mgr:
        hws = mgr.high_watermarks()
        for topic in (TOPIC, *QUERIES):
            if topic not in mgr.topics():
                out[f"{topic} records"] = 0
                continue
            parts = mgr.partitions(topic)
            out[f"{topic} records"] = sum(hws[(topic, p)] for p in parts)
            if topic == TOPIC:
                out[f"{topic} segments"] = sum(mgr.get_log(topic, p).num_segments for p in parts)
    return out


def _micro_batches(work: Path, suffix: str) -> int:
    return sum(
        1
        for path in work.glob(f"out*{suffix}")
        for line in path.read_text(errors="replace").splitlines()
        if line.startswith("PROGRESS")
    )


def _operations(work: Path) -> Counter[str]:
    ops: Counter[str] = Counter()
    for path in work.glob("writer-*.journal"):
        for line in path.read_text(errors="replace").splitlines():
            head = line.split(" ", 1)[0]
            if head in ("ack", "fail"):
                ops[f"appends {'ok' if head == 'ack' else 'failed'}"] += 1
    for path in work.glob("reader-*.journal"):
        ops["reads"] += sum(
            1 for line in path.read_text(errors="replace").splitlines() if line.startswith("R ")
        )
    maintain = work / "maintain.journal"
    if maintain.exists():
        for line in maintain.read_text(errors="replace").splitlines():
            if line.startswith("pass "):
                ops["maintain passes" + ("" if " exit 0 " in line else " failed")] += 1
            elif line.startswith("collect "):
                ops["collections" + (" failed" if "error" in line.split()[1] else "")] += 1
    ops["spark micro-batches"] = _micro_batches(work, ".log")
    return ops


def _print(report: Mapping[str, object]) -> None:
    print(
        f"== soak on {report['storage']} {report['server']} ({report['minutes']} min, "
        f"seed {report['seed']})"
    )
    keys = (
        "operations",
        "kills",
        "unexpected exits",
        "faults injected",
        "requests",
        "counts",
        "drain",
    )
    for key in keys:
        value = report[key]
        assert isinstance(value, dict)
        print(f"  {key}: " + (", ".join(f"{k} {v}" for k, v in sorted(value.items())) or "none"))
    notes = report["exit notes"]
    assert isinstance(notes, list)
    for note in notes:
        print(f"    exit: {note}")
    print(f"  violations: {report['violations']}")
    first = report["first violations"]
    assert isinstance(first, list)
    for v in first:
        print(f"    {v}")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--minutes", type=float, default=2.0)
    ap.add_argument("--storage", choices=("local", "bucket", "both"), default="both")
    ap.add_argument(
        "--no-spark",
        action="store_true",
        help="no Spark queries (a fast variant: library processes only)",
    )
    ap.add_argument("--writers", type=int, default=3)
    ap.add_argument("--readers", type=int, default=1)
    ap.add_argument("--seed", type=int, default=int(time.time()) % 100_000)
    ap.add_argument(
        "--kill-every",
        default="2,6",
        metavar="MIN,MAX",
        help="seconds between kills, drawn uniformly (default 2,6)",
    )
    ap.add_argument(
        "--fault-rate",
        type=float,
        default=0.02,
        help="share of bucket requests given a fault (default 0.02)",
    )
    ap.add_argument("--delay-ms", type=float, default=25.0)
    ap.add_argument("--orphan-grace-s", type=float, default=30.0)
    ap.add_argument(
        "--write-rate",
        type=float,
        default=60.0,
        help="records a second all writers together append at most (0: no limit; "
        "default 60, what two Spark queries killed every few seconds keep up with)",
    )
    ap.add_argument(
        "--drain-timeout-s",
        type=float,
        default=600.0,
        help="a draining query that commits no micro-batch for this long fails (default 600)",
    )
    ap.add_argument("--server", choices=("auto", "seaweedfs", "moto"), default="auto")
    ap.add_argument("--work", type=Path, help="keep work files here (default: a temp dir)")
    ap.add_argument("--report", type=Path, help="also write the reports as JSON here")
    args = ap.parse_args(argv)
    kinds = ("local", "bucket") if args.storage == "both" else (args.storage,)
    root = args.work or Path(tempfile.mkdtemp(prefix="seglog-soak-"))
    reports = []
    for kind in kinds:
        work = root / kind
        work.mkdir(parents=True)
        report = soak(kind, args, work)
        _print(report)
        reports.append(report)
    if args.report:
        args.report.write_text(json.dumps(reports, indent=2))
    bad = sum(int(str(r["violations"])) for r in reports)
    if bad or args.work:
        print(f"work files: {root}")
    else:
        shutil.rmtree(root)
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
