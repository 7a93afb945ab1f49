"""Crash recovery of a whole log dir vs a plain sequential read of the same files.

Run: ``python benchmarks/bench_recovery.py [--gib 1] [--partitions 4] [--threads 2]``

A writer subprocess builds ``--gib`` GiB of segments through the real path
(``LogManager.create_topic`` + ``append`` of ~16 KiB v2 batches made by
``encode_batches``), never flushes, and exits without closing (``os._exit``): no
``.kafka_cleanshutdown``, no recovery-point checkpoint, i.e. every partition recovers
from offset 0. Then, with the files in the page cache (one warm-up read), measured in the
same run:

* peer: a plain sequential read of every ``.log`` file in 16 MiB chunks (``preadv``
  into one buffer), best of ``--repeat``;
* seglog: ``LogManager(dir)`` on the unclean dir, which recovers every partition at open
  (header walk, CRC-32C of every batch, index rebuild, ``num.recovery.threads.per.data.dir``
  partitions at a time), best of ``--repeat`` (between runs the dir is made unclean again
  and its recovery-point checkpoint removed).

Prints MB/s for both and the ratio recovery/read (goal: >= 0.5). ``--profile`` prints
where the recovery time goes.
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import shutil
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from seglog.logstore.manager.log_manager import LogManager  # noqa: E402
from seglog.logstore.storage.file_names import (  # noqa: E402
    CLEAN_SHUTDOWN_FILE,
    RECOVERY_POINT_CHECKPOINT,
)

CHUNK = 16 << 20

WRITER = textwrap.dedent("""
    import os
    import pyarrow as pa
    from seglog.logstore.manager.log_manager import LogManager
    from seglog.logstore.records.record_codec import encode_batches

    total, partitions = {total}, {partitions}
    n = 4 << 20 >> 7  # ~4 MiB of 100-byte values per append
    values = pa.array([os.urandom(100) for _ in range(n)])
    keys = pa.array([b"key-%06d" % i for i in range(n)])
    chunk = encode_batches(values, keys=keys, now_ms=1_700_000_000_000,
                           max_batch_bytes=16 << 10)
    mgr = LogManager([{dir!r}])
    mgr.create_topic("bench", partitions, {{"segment.bytes": {segment_bytes}}})
    written = 0
    while written < total:
        for p in range(partitions):
            mgr.append("bench", p, chunk)
            written += len(chunk)
    print(written, flush=True)
    os._exit(0)  # a crash: nothing flushed, no checkpoint, no clean-shutdown marker
""")


def read_all(files: list[Path]) -> int:
    buf = bytearray(CHUNK)
    total = 0
    for path in files:
        fd = os.open(path, os.O_RDONLY)
        try:
            pos = 0
            while n := os.preadv(fd, [buf], pos):
                pos += n
            total += pos
        finally:
            os.close(fd)
    return total


class _Unclean(Exception):
    """Leaves a LogManager without a clean shutdown (its context manager's error path)."""


def recover(dir_: Path, threads: int) -> tuple[int, float]:
    """Open the unclean dir (recovering everything), then leave it unclean again.
    Returns the total end offset and the time the open took (closing is not timed)."""
    (dir_ / RECOVERY_POINT_CHECKPOINT).unlink(missing_ok=True)
    assert not (dir_ / CLEAN_SHUTDOWN_FILE).exists()
    end = 0
    t = time.perf_counter()
    try:
        with LogManager([dir_], config={"num.recovery.threads.per.data.dir": threads}) as mgr:
            took = time.perf_counter() - t
            end = sum(mgr.get_log("bench", p).log_end_offset
                      for p in mgr.partitions("bench"))
            raise _Unclean
    except _Unclean:
        pass
    return end, took


def recover_logs_alone(dir_: Path) -> float:
    """The same recovery through ``Log.open`` alone, partition after partition: what the
    LogManager adds on top (threads, checkpoints, marker) is the difference."""
    from seglog.logstore.config.config import LogConfig
    from seglog.logstore.log.log import Log

    config = LogConfig.from_properties({})
    t = time.perf_counter()
    for part in sorted(dir_.glob("bench-*")):
        Log.open(part, config, recovery_point=0, had_clean_shutdown=False).close(flush=False)
    return time.perf_counter() - t


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--gib", type=float, default=1.0)
    ap.add_argument("--partitions", type=int, default=4)
    ap.add_argument("--threads", type=int, default=2,
                    help="num.recovery.threads.per.data.dir")
    ap.add_argument("--segment-mib", type=int, default=128)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--profile", action="store_true")
    ap.add_argument("--dir", type=Path, default=None, help="where to build (default: tmp)")
    args = ap.parse_args()
    base = Path(tempfile.mkdtemp(dir=args.dir))
    dir_ = base / "logs"
    try:
        t = time.perf_counter()
        code = WRITER.format(total=int(args.gib * (1 << 30)), partitions=args.partitions,
                             dir=str(dir_), segment_bytes=args.segment_mib << 20)
        out = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True,
                             text=True).stdout
        files = sorted(dir_.glob("bench-*/*.log"))
        size = sum(f.stat().st_size for f in files)
        mib = size / (1 << 20)
        print(f"built {mib:.0f} MiB ({int(out)} bytes appended) in {len(files)} segments of "
              f"{args.partitions} partitions through LogManager.append in "
              f"{time.perf_counter() - t:.1f} s; writer killed unflushed")

        read_all(files)  # warm the page cache for both contenders
        _, t_first = recover(dir_, args.threads)  # includes any JIT compile not cached
        # interleaved, best of each: both see the same machine load
        reads, times, alone, ends = [], [], [], set()
        for _ in range(args.repeat):
            reads.append(_timed(lambda: read_all(files)))
            end, took = recover(dir_, args.threads)
            ends.add(end)
            times.append(took)
            alone.append(recover_logs_alone(dir_))
        t_read = min(reads)
        t_rec = min(times)
        assert len(ends) == 1, f"recovery is not deterministic: {ends}"
        print(f"peer: plain sequential read      {mib / t_read:8.0f} MB/s ({t_read:.2f} s)")
        print(f"seglog: LogManager open+recovery {mib / t_rec:8.0f} MB/s ({t_rec:.2f} s, "
              f"{args.threads} threads, runs {', '.join(f'{x:.2f}' for x in times)} s)")
        print(f"breakdown: Log.open alone, one partition after another "
              f"{mib / min(alone):8.0f} MB/s ({min(alone):.2f} s, ratio to read "
              f"{t_read / min(alone):.2f})")
        print(f"ratio recovery/read: {t_read / t_rec:.2f} (goal >= 0.50); the very first "
              f"recovery (data never flushed, kernels maybe compiling) took {t_first:.2f} s, "
              f"ratio {t_read / t_first:.2f}")
        if args.profile:
            prof = cProfile.Profile()
            prof.enable()
            recover(dir_, args.threads)
            prof.disable()
            pstats.Stats(prof).sort_stats("tottime").print_stats(15)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def _timed(fn) -> float:
    t = time.perf_counter()
    fn()
    return time.perf_counter() - t


if __name__ == "__main__":
    main()
