"""Compaction throughput (``LogCleaner.clean_log``) vs a plain copy of the same segments.

Run: ``python benchmarks/bench_compaction.py [--mb 128] [--keys 200000] [--codec none]
[--budget-mb 32] [--repeat 3]``

A compacted log of ``--mb`` MiB is written once (``--keys`` distinct keys, 100-byte
values, ~16 KiB batches, ``segment.bytes`` 16 MiB, one codec). Each repeat then:

* peer: copies every segment of that log into a fresh partition directory with plain
  reads and writes in the cleaner's chunk size, fsyncing each file (the cleaner fsyncs
  the segments it writes): the input of the next step;
* seglog: ``LogCleaner.clean_log`` over the copy until it is clean (one pass when the
  dedupe buffer holds every key: offset map over the whole dirty log, then the rewrite
  of every segment, swaps, checkpoint; with a smaller ``--budget-mb``, several passes).

Both rates are MB/s of input segments (page cache warm for both). Prints the best of
``--repeat`` for each and the ratio cleaner/copy (goal >= 0.5). A last, untimed pass runs
under ``tracemalloc`` with a new cleaner and prints the peak of traced allocations (numpy
and Python: the map, the read buffer, the output buffer, batch tables and per-record
scratch) next to the configured ``log.cleaner.dedupe.buffer.size``.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
import tracemalloc
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import numpy as np  # noqa: E402
import pyarrow as pa  # noqa: E402

from seglog.logstore.cleaner.cleaner import LogCleaner  # noqa: E402
from seglog.logstore.config.config import LogConfig, ManagerConfig  # noqa: E402
from seglog.logstore.log.log import Log  # noqa: E402
from seglog.logstore.records.record_codec import encode_batches  # noqa: E402
from seglog.logstore.util.clock import SystemClock  # noqa: E402

SEGMENT_BYTES = 16 << 20


def log_config() -> LogConfig:
    return LogConfig.from_properties({"cleanup.policy": "compact",
                                      "segment.bytes": SEGMENT_BYTES,
                                      "min.cleanable.dirty.ratio": 0.0})


def build(dir_: Path, total: int, keys: int, codec: str) -> None:
    rnd = np.random.default_rng(42)
    log = Log.open(dir_, log_config(), clock=SystemClock())
    per_append = 2048  # records per append: ~16 KiB batches of ~130 records
    payload = os.urandom(100 * per_append)
    values = pa.array([payload[i * 100:(i + 1) * 100] for i in range(per_append)], pa.binary())
    now = int(time.time() * 1000)
    while log.size_in_bytes < total:
        ids = rnd.integers(0, keys, per_append)
        k = pa.array([b"key-%08d" % i for i in ids.tolist()], pa.binary())
        log.append(encode_batches(values, k, compression=codec, now_ms=now,
                                  max_batch_bytes=16 << 10))
    log.roll()
    log.close()


def copy_segments(src: Path, dst: Path, chunk: int) -> int:
    """The peer: read + write + fsync of every file of the partition directory."""
    dst.mkdir()
    buf = bytearray(chunk)
    total = 0
    for name in sorted(os.listdir(src)):
        fin = os.open(src / name, os.O_RDONLY)
        fout = os.open(dst / name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        try:
            pos = 0
            while True:
                n = os.preadv(fin, [buf], pos)
                if n <= 0:
                    break
                view = memoryview(buf)[:n]
                while view:
                    view = view[os.write(fout, view):]
                pos += n
            os.fsync(fout)
            if name.endswith(".log"):
                total += pos
        finally:
            os.close(fin)
            os.close(fout)
    return total


def clean(dir_: Path, cleaner: LogCleaner) -> tuple[float, object, int]:
    """Clean the whole log: passes until the map covered every dirty record (one pass
    when the budget holds every key). Returns (seconds, last pass's stats, passes)."""
    log = Log.open(dir_, log_config(), clock=SystemClock())
    cleaner.forget(dir_.parent, "t", 0)  # a fresh copy: dirty from its start
    t0 = time.perf_counter()
    passes = 0
    while True:
        stats = cleaner.clean_log(log)
        passes += 1
        if not stats.more_dirty:
            break
    elapsed = time.perf_counter() - t0
    log.close()
    return elapsed, stats, passes


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--mb", type=int, default=128)
    ap.add_argument("--keys", type=int, default=200_000)
    ap.add_argument("--codec", default="none", choices=["none", "gzip", "snappy", "lz4", "zstd"])
    ap.add_argument("--budget-mb", type=float, default=32)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    budget = int(args.budget_mb * (1 << 20))
    chunk = LogCleaner(ManagerConfig.from_properties({})).chunk_bytes
    with tempfile.TemporaryDirectory(prefix="bench-compaction-") as tmp:
        base = Path(tmp)
        src = base / "source" / "t-0"
        build(src, args.mb << 20, args.keys, args.codec)
        # One long-lived cleaner, as a LogManager keeps (its map is allocated once).
        cleaner = LogCleaner(ManagerConfig.from_properties(
            {"log.cleaner.dedupe.buffer.size": budget}), SystemClock())
        clean(Path(shutil.copytree(src, base / "warm" / "t-0")), cleaner)  # JIT warm-up
        copy_best = clean_best = float("inf")
        stats = None
        for i in range(args.repeat):
            dst = base / f"run{i}" / "t-0"
            dst.parent.mkdir()
            t0 = time.perf_counter()
            size = copy_segments(src, dst, chunk)
            copy_best = min(copy_best, time.perf_counter() - t0)
            elapsed, stats, passes = clean(dst, cleaner)
            clean_best = min(clean_best, elapsed)
            shutil.rmtree(dst.parent)
        dst = Path(shutil.copytree(src, base / "traced" / "t-0"))
        tracemalloc.start()  # a new cleaner: its map allocation is traced too
        _, traced_stats, _ = clean(dst, LogCleaner(ManagerConfig.from_properties(
            {"log.cleaner.dedupe.buffer.size": budget}), SystemClock()))
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
    mb = size / 1e6
    copy_rate, clean_rate = mb / copy_best, mb / clean_best
    print(f"input: {mb:.1f} MB of segments, codec {args.codec}, {args.keys:,} keys, "
          f"dedupe buffer {args.budget_mb} MiB")
    print(f"cleaner: {stats.records_retained:,} records kept, {stats.bytes_written / 1e6:.1f} MB "
          f"written, {stats.groups} swap groups, map {stats.map_entries:,}/"
          f"{stats.map_capacity:,} entries, {passes} pass(es)")
    print(f"peer  plain read+write+fsync copy: {copy_rate:8.1f} MB/s (best of {args.repeat})")
    print(f"seglog LogCleaner.clean_log:       {clean_rate:8.1f} MB/s (best of {args.repeat})")
    print(f"ratio cleaner/copy = {clean_rate / copy_rate:.2f} (goal >= 0.5)")
    print(f"peak traced memory {peak / (1 << 20):.1f} MiB vs dedupe buffer "
          f"{budget / (1 << 20):.1f} MiB (map table {traced_stats.map_memory_bytes / (1 << 20):.1f}"
          f" MiB, chunk {chunk >> 20} MiB): ratio {peak / budget:.2f}")


if __name__ == "__main__":
    main()
