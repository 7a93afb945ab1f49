"""Opening a clean log dir: 100 partitions x 100 segments, and proof that no segment data
is read.

Run: ``python benchmarks/bench_open.py [--partitions 100] [--segments 100] [--repeat 5]``

The log dir is built through the real path (``LogManager.create_topic`` + ``append``,
each append rolling a new segment), then closed cleanly. Measured in the same run:

* peer: a plain ``os.scandir`` walk listing every file of the log dir (the least any
  open that looks at the partitions could do... and more than seglog's open does);
* seglog: ``LogManager(dir)`` (writer: lock, marker, checkpoints, partition listing) plus
  ``high_watermarks()`` and ``log_start_offsets()``, then ``close()``; and the read-only
  variant (what a Spark source does per trigger).

An audit hook (``sys.addaudithook``, event ``open``) counts every open of a ``.log``,
``.index`` or ``.timeindex`` file during the measured opens: it must be 0. Counted apart:
the process's first high-watermark verification (one read of each partition's last
segment tail, once per process), and for contrast loading one partition (``get_log``).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pyarrow as pa  # noqa: E402

from seglog.logstore.manager.log_manager import LogManager  # noqa: E402
from seglog.logstore.records.record_codec import encode_batches  # noqa: E402
from seglog.logstore.storage.checkpoint_file import OffsetCheckpointFile  # noqa: E402
from seglog.logstore.storage.file_names import (  # noqa: E402
    HIGH_WATERMARK_CHECKPOINT,
    RECOVERY_POINT_CHECKPOINT,
)

SEGMENT_SUFFIXES = (".log", ".index", ".timeindex")
_counting = False
_segment_opens: list[str] = []


def _audit(event: str, args: tuple) -> None:
    if _counting and event == "open" and args and isinstance(args[0], (str, bytes, os.PathLike)):
        name = os.fsdecode(args[0])
        if name.endswith(SEGMENT_SUFFIXES):
            _segment_opens.append(name)


def build(dir_: Path, partitions: int, segments: int) -> None:
    """Partition 0 through the real path (each append rolls: one batch per segment);
    the others are file copies of it (a roll fsyncs synchronously, so building 10,000
    segments through ``append`` would take minutes), with checkpoint entries to match."""
    batch = encode_batches(pa.array([b"x" * 200] * 10), now_ms=1_700_000_000_000)
    config = {"segment.bytes": len(batch) + 1, "segment.index.bytes": 4096}
    with LogManager([dir_]) as mgr:
        mgr.create_topic("bench", 1, config)
        for _ in range(segments):
            mgr.append("bench", 0, batch)
        assert mgr.get_log("bench", 0).num_segments == segments
    for p in range(1, partitions):
        shutil.copytree(dir_ / "bench-0", dir_ / f"bench-{p}")
    for name in (RECOVERY_POINT_CHECKPOINT, HIGH_WATERMARK_CHECKPOINT):
        cp = OffsetCheckpointFile(dir_ / name)
        value = cp.read()[("bench", 0)]
        cp.write({("bench", p): value for p in range(partitions)})


def walk(dir_: Path) -> int:
    n = 0
    with os.scandir(dir_) as it:
        for e in it:
            n += 1
            if e.is_dir(follow_symlinks=False):
                n += walk(Path(e.path))
    return n


def best(fn, repeat: int) -> float:
    out = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        out = min(out, time.perf_counter() - t)
    return out


def main() -> None:
    global _counting
    ap = argparse.ArgumentParser()
    ap.add_argument("--partitions", type=int, default=100)
    ap.add_argument("--segments", type=int, default=100)
    ap.add_argument("--repeat", type=int, default=5)
    ap.add_argument("--dir", type=Path, default=None, help="where to build (default: tmp)")
    args = ap.parse_args()
    sys.addaudithook(_audit)
    base = Path(tempfile.mkdtemp(dir=args.dir))
    dir_ = base / "logs"
    try:
        t = time.perf_counter()
        build(dir_, args.partitions, args.segments)
        files = walk(dir_)
        print(f"built {args.partitions} partitions x {args.segments} segments "
              f"({files} entries) in {time.perf_counter() - t:.1f} s")

        close_times = []

        def open_writer():
            with LogManager([dir_]) as mgr:
                hw = mgr.high_watermarks()
                mgr.log_start_offsets()
                t_close = time.perf_counter()
            close_times.append(time.perf_counter() - t_close)
            assert len(hw) == args.partitions

        def open_reader():
            with LogManager([dir_], read_only=True) as mgr:
                hw = mgr.high_watermarks()
                mgr.log_start_offsets()
            assert len(hw) == args.partitions

        t_walk = best(lambda: walk(dir_), args.repeat)
        # The first high_watermarks() of a process verifies each published high watermark
        # against its partition's log end (a damaged checkpoint digit must not hide or
        # invent records): one read of each last segment's tail, once per process, and
        # again only for a partition whose high watermark moved. Counted apart.
        _counting = True
        open_reader()
        _counting = False
        first_verification = len(_segment_opens)
        _segment_opens.clear()
        _counting = True
        t_writer = best(open_writer, args.repeat)
        t_reader = best(open_reader, args.repeat)
        _counting = False
        opened_during_open = len(_segment_opens)
        _counting = True
        with LogManager([dir_]) as mgr:
            mgr.get_log("bench", 0)
        _counting = False
        one_partition = len(_segment_opens) - opened_during_open

        print(f"peer: scandir walk of the whole log dir        {t_walk * 1e3:8.1f} ms")
        t_close = min(close_times)
        print(f"seglog: writer open + HWs + start offsets     {(t_writer - t_close) * 1e3:8.1f}"
              f" ms (ratio to the walk {(t_writer - t_close) / t_walk:.2f}); clean close "
              f"(3 checkpoints + marker, fsynced) {t_close * 1e3:.1f} ms")
        print(f"seglog: read-only open + HWs + start offsets  {t_reader * 1e3:8.1f} ms "
              f"(ratio to the walk {t_reader / t_walk:.2f})")
        print(f"segment files opened by the process's first high-watermark verification: "
              f"{first_verification} (each partition's last .index and .log, once)")
        print(f"segment files opened during {2 * args.repeat} opens: {opened_during_open}"
              f" (loading one partition for contrast: {one_partition})")
        if opened_during_open:
            print("FAIL: a clean open read segment files:", _segment_opens[:5])
            sys.exit(1)
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
