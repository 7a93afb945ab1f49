"""Recovery speed: validating a segment (``LogSegment.recover``) vs plainly reading it.

Run: ``python benchmarks/bench_log_recovery.py [--mb 256] [--batch-bytes 1024 16384]``

For each batch size a segment of ``--mb`` MiB of uncompressed v2 batches is written
(consecutive offsets), then, with the file in the page cache (one warm-up read):

* peer: a plain sequential read of the same file in 16 MiB chunks (``preadv`` into one
  buffer, nothing else), best of ``--repeat``;
* seglog: ``LogSegment.recover`` (header walk, size/offset checks, CRC-32C of every
  batch, index rebuild), best of ``--repeat``, without and with the offset rules readers
  apply (``offset_continuity.ContinuityCheck``, what ``LogLoader`` passes).

Prints MB/s for each and the ratio recover/read (the target is >= 0.5).
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import pyarrow as pa  # noqa: E402

from seglog.logstore.log.log_segment import LogSegment  # noqa: E402
from seglog.logstore.log.offset_continuity import ContinuityCheck  # noqa: E402
from seglog.logstore.records.record_codec import encode_batches  # noqa: E402
from seglog.logstore.records.record_format import read_batch_header, set_base_offset  # noqa: E402

CHUNK = 16 << 20


def _write_segment(dir_: Path, total: int, batch_bytes: int) -> Path:
    n = max(1, (batch_bytes - 61) // 110)
    one = encode_batches(pa.array([os.urandom(100) for _ in range(n)]),
                         keys=pa.array([b"key-%06d" % i for i in range(n)]),
                         timestamps=pa.array(range(1_700_000_000_000,
                                                   1_700_000_000_000 + n), pa.int64()),
                         max_batch_bytes=2 * batch_bytes + (1 << 20))
    h = read_batch_header(one)
    assert h.size == len(one), "one batch expected"
    per = len(one)
    copies = max(1, total // per)
    buf = bytearray(one * copies)
    records = h.last_offset - h.base_offset + 1
    for i in range(copies):
        set_base_offset(buf, i * per, i * records)
    path = dir_ / "00000000000000000000.log"
    path.write_bytes(buf)
    return path


def _read_all(path: Path) -> int:
    buf = bytearray(CHUNK)
    fd = os.open(path, os.O_RDONLY)
    try:
        pos = 0
        while True:
            n = os.preadv(fd, [buf], pos)
            if n == 0:
                return pos
            pos += n
    finally:
        os.close(fd)


def _best(fn, repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--mb", type=int, default=256)
    ap.add_argument("--batch-bytes", type=int, nargs="+", default=[1024, 16384])
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    for batch_bytes in args.batch_bytes:
        with tempfile.TemporaryDirectory() as tmp:
            path = _write_segment(Path(tmp), args.mb << 20, batch_bytes)
            size = path.stat().st_size
            _read_all(path)
            t_read = _best(lambda p=path: _read_all(p), args.repeat)
            seg = LogSegment.open(Path(tmp), 0, max_index_size=10 << 20)

            def recover(s=seg, rules=False):
                # ``rules``: the offset rules readers apply, as LogLoader passes them
                check = None
                if rules:
                    check = ContinuityCheck("bench-0", contiguous=True, expected=0)
                    check.enter(s.log_path, 0, None)
                cut = s.recover(1 << 30, continuity=check)
                assert cut == 0

            t_rec = _best(recover, args.repeat)
            t_rules = _best(lambda: recover(rules=True), args.repeat)
            seg.close()
            mb = size / (1 << 20)
            print(f"batch ~{batch_bytes} B, {mb:.0f} MiB: plain read {mb / t_read:8.0f} MB/s, "
                  f"recover {mb / t_rec:8.0f} MB/s, ratio recover/read {t_read / t_rec:.2f}; "
                  f"with the readers' offset rules {mb / t_rules:8.0f} MB/s, ratio "
                  f"{t_read / t_rules:.2f}")


if __name__ == "__main__":
    main()
