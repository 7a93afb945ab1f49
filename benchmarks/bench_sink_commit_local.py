"""The local sink's micro-batch without Spark: a task's staging and the driver's commit
(resume, intent, append, fsync, ledger, high-watermark checkpoint, pause), in a loop on
a real log dir, with the fsyncs each one issues.

``--peer-src DIR`` names another tree's ``src`` (e.g. ``git archive main`` unpacked) as
the peer: rounds alternate between the two trees, each in its own process, so both see
the same disk and the same load; the medians over all rounds and their ratio are printed.

    .venv/bin/python benchmarks/bench_sink_commit_local.py                 # this tree
    .venv/bin/python benchmarks/bench_sink_commit_local.py --peer-src /tmp/main/src \\
        --rounds 6 --batches 40
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def run_here(batches: int, rows: int, log_dir: Path) -> dict[str, list[float]]:
    """Stage + commit ``batches`` micro-batches (one task, one partition) after 3 warm-up
    ones; per micro-batch: stage ms, commit ms, fsyncs of each."""
    import pyarrow as pa

    from seglog.streaming.sink_commit import commit
    from seglog.streaming.sink_local_staging import stage_rows
    from seglog.streaming.sink_options import SinkColumns, SinkOptions

    real_fsync = os.fsync
    count = [0]
    spent = [0.0]

    def fsync(fd: int) -> None:
        count[0] += 1
        t = time.perf_counter()
        real_fsync(fd)
        spent[0] += time.perf_counter() - t

    os.fsync = fsync
    opts = SinkOptions.parse({"path": str(log_dir), "topic": "out", "numPartitions": "1"})
    data = pa.record_batch(
        {
            "key": pa.array([None] * rows, pa.string()),
            "value": pa.array([f"row-{i:08d}".encode() * 4 for i in range(rows)], pa.binary()),
        }
    )
    cols = SinkColumns.resolve(data.schema, default_topic="out")
    out: dict[str, list[float]] = {
        "stage_ms": [],
        "commit_ms": [],
        "stage_fsyncs": [],
        "commit_fsyncs": [],
        "commit_fsync_ms": [],
    }
    for b in range(batches + 3):
        count[0] = 0
        t0 = time.perf_counter()
        task = stage_rows(opts, cols, [data], "bench-sink", b, 0, 0)
        t1 = time.perf_counter()
        staged = count[0]
        spent[0] = 0.0
        commit([task], b, opts)
        t2 = time.perf_counter()
        if b >= 3:
            out["stage_ms"].append((t1 - t0) * 1000)
            out["commit_ms"].append((t2 - t1) * 1000)
            out["stage_fsyncs"].append(staged)
            out["commit_fsyncs"].append(count[0] - staged)
            out["commit_fsync_ms"].append(spent[0] * 1000)
    return out


def run_tree(src: str, batches: int, rows: int, work: Path) -> dict[str, list[float]]:
    env = dict(os.environ, PYTHONPATH=src)
    with tempfile.TemporaryDirectory(dir=work) as d:
        res = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                "--batches",
                str(batches),
                "--rows",
                str(rows),
                "--dir",
                d,
            ],
            env=env,
            check=True,
            capture_output=True,
            text=True,
        )
    result: dict[str, list[float]] = json.loads(res.stdout.strip().splitlines()[-1])
    return result


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", type=int, default=40, help="micro-batches per round")
    ap.add_argument("--rows", type=int, default=1000, help="rows per micro-batch")
    ap.add_argument("--rounds", type=int, default=4, help="rounds per tree (alternating)")
    ap.add_argument("--peer-src", help="another tree's src dir: the peer")
    ap.add_argument("--work", default=None, help="where the log dirs go (default: a temp dir)")
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--dir", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        print(json.dumps(run_here(args.batches, args.rows, Path(args.dir))))
        return
    here = str(Path(__file__).resolve().parents[1] / "src")
    trees = {"this tree": here}
    if args.peer_src:
        trees["peer"] = args.peer_src
    work = Path(args.work or tempfile.mkdtemp(prefix="bench-sink-commit-"))
    work.mkdir(parents=True, exist_ok=True)
    got: dict[str, dict[str, list[float]]] = {name: {} for name in trees}
    for r in range(args.rounds):
        order = list(trees.items()) if r % 2 == 0 else list(reversed(trees.items()))
        for name, src in order:
            res = run_tree(src, args.batches, args.rows, work)
            for k, v in res.items():
                got[name].setdefault(k, []).extend(v)
    print(
        f"load: {os.getloadavg()[0]:.2f}  rounds {args.rounds} x {args.batches} "
        f"micro-batches of {args.rows} rows, one task, one partition"
    )
    for name, res in got.items():
        med = {k: statistics.median(v) for k, v in res.items()}
        print(
            f"{name:10s} commit p50 {med['commit_ms']:6.2f} ms (n={len(res['commit_ms'])},"
            f" in fsync {med['commit_fsync_ms']:5.2f})  stage p50 {med['stage_ms']:5.2f} ms"
            f"  fsyncs: commit {med['commit_fsyncs']:.0f}, stage {med['stage_fsyncs']:.0f}"
        )
    if "peer" in got:
        a, b = got["this tree"], got["peer"]
        for k in ("commit_ms", "stage_ms"):
            ratio = statistics.median(a[k]) / statistics.median(b[k])
            print(f"{k}: this tree / peer = {ratio:.2f}")


if __name__ == "__main__":
    main()
