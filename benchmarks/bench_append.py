"""``Log.append`` of 8 MiB chunks of whole batches, as the sink's commit hands them over.

Run: ``python benchmarks/bench_append.py [--chunks 8] [--chunk-mb 8] [--repeat 6]``

Measured in the same run, into fresh files of the same temporary directory:

* peer: ``os.write`` of the same chunks to a plain file (the page-cache copy no append
  can avoid);
* seglog, copying: ``Log.append(chunk)`` (the Log restamps a private copy of the chunk);
* seglog, in place: ``Log.append(chunk, in_place=True)`` (the caller's writable buffer is
  restamped where it is: what ``sink_commit`` does with its reusable read buffer).

Prints the best and the median milliseconds per chunk, each with its ratio to the peer's.
No fsync is timed (the flush policy decides those, not the append).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pyarrow as pa  # noqa: E402

from seglog.logstore.config.config import LogConfig  # noqa: E402
from seglog.logstore.log.log import Log  # noqa: E402
from seglog.logstore.records.record_codec import encode_batches  # noqa: E402


def chunk_of(mb: int) -> bytearray:
    """About ``mb`` MiB of whole 1 MiB batches (100-byte values, keys)."""
    n = mb * 9_000
    values = pa.array([b"v" * 100] * n)
    keys = pa.array([b"user-%d" % (i % 1000) for i in range(n)])
    return bytearray(encode_batches(values, keys, max_batch_bytes=1 << 20))


def time_peer(path: Path, chunk: bytearray, chunks: int) -> list[float]:
    out = []
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
    try:
        for _ in range(chunks):
            t0 = time.perf_counter()
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view):]
            out.append(time.perf_counter() - t0)
    finally:
        os.close(fd)
    return out


def time_log(dir_: Path, chunk: bytearray, chunks: int, in_place: bool) -> list[float]:
    config = LogConfig.from_properties({"segment.bytes": str(1 << 30)})
    out = []
    with Log.open(dir_, config) as log:
        for _ in range(chunks):
            t0 = time.perf_counter()
            if in_place:
                log.append(memoryview(chunk), in_place=True)
            else:
                log.append(memoryview(chunk))
            out.append(time.perf_counter() - t0)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=8)
    parser.add_argument("--chunk-mb", type=int, default=8)
    parser.add_argument("--repeat", type=int, default=6)
    args = parser.parse_args()
    chunk = chunk_of(args.chunk_mb)
    work = Path(tempfile.mkdtemp(prefix="seglog-bench-append-"))
    results: dict[str, list[float]] = {"peer": [], "copying": [], "in place": []}
    try:
        runs = {
            "peer": lambda r: time_peer(work / f"peer{r}.bin", chunk, args.chunks),
            "copying": lambda r: time_log(work / f"copy{r}-0", chunk, args.chunks, False),
            "in place": lambda r: time_log(work / f"inplace{r}-0", chunk, args.chunks, True),
        }
        names = list(runs)
        for r in range(args.repeat):
            # Interleaved, each first in turn: the page cache's writeback slows whatever
            # runs after a lot of dirty data, and a noisy neighbour slows all three.
            for name in names[r % 3:] + names[:r % 3]:
                results[name] += runs[name](r)
                shutil.rmtree(work)
                work.mkdir()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    peer_best, peer_median = min(results["peer"]), statistics.median(results["peer"])
    print(f"append of {len(chunk) / (1 << 20):.1f} MiB chunks, {args.chunks * args.repeat} "
          "each (best: what the code costs; median: with the machine's noise):")
    for name, times in results.items():
        best, median = min(times), statistics.median(times)
        print(f"  {name:>9}: best {best * 1000:6.2f} ms ({best / peer_best:.2f}x os.write), "
              f"median {median * 1000:6.2f} ms ({median / peer_median:.2f}x)")


if __name__ == "__main__":
    main()
