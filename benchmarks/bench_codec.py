"""Record codec throughput: seglog vs aiokafka (C extension) vs kafka-python, same run.

Run: ``python benchmarks/bench_codec.py [--records N] [--repeat R]``

Scenarios: (a) 16-byte key + 100-byte value, uncompressed; (b) 16-byte key + 1 KiB
value, uncompressed; (c) as (a) with lz4; (d) as (a), but seglog is called the way its
sink and reader call it (10,000 rows per encode, 8 MiB chunks per decode) rather than
once for everything. Every library encodes the same records into
1 MiB batches and decodes the same buffer (the one seglog wrote, which all three
read). Decoding with aiokafka / kafka-python iterates every record and touches its
key, value and timestamp; seglog produces an Arrow RecordBatch. numba compile time
is excluded (a warm-up call first). Figures are the best of ``--repeat`` runs, in
records per second of process CPU time (the machine may be shared), with the ratios
seglog/aiokafka and seglog/kafka-python.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np
import pyarrow as pa

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from aiokafka.record._crecords import DefaultRecordBatchBuilder as AioBuilder  # noqa: E402
from aiokafka.record._crecords import MemoryRecords as AioMemoryRecords  # noqa: E402
from kafka.record.default_records import (  # noqa: E402
    DefaultRecordBatchBuilder as KpBuilder,
)
from kafka.record.memory_records import MemoryRecords as KpMemoryRecords  # noqa: E402

from seglog.logstore.records.record_codec import (  # noqa: E402
    CompressionType,
    decode_batches,
    encode_batches,
)

BATCH_BYTES = 1 << 20


def make_records(n: int, value_size: int, seed: int = 1):
    rng = np.random.default_rng(seed)
    # distinct random keys and compressible values (a repeated random word + counter)
    keys = [rng.bytes(16) for _ in range(n)]
    word = rng.bytes(8)
    values = [(word * (value_size // 8 + 1))[: value_size - 8] + i.to_bytes(8, "big")
              for i in range(n)]
    timestamps = (1_700_000_000_000 + np.arange(n, dtype=np.int64) // 10).tolist()
    return keys, values, timestamps


def best(fn, repeat: int) -> float:
    times = []
    for _ in range(repeat):
        t0 = time.process_time()
        fn()
        times.append(time.process_time() - t0)
    return min(times)


def encode_with_builder(builder_cls, keys, values, timestamps, codec):
    out = []
    builder = builder_cls(2, codec, False, -1, -1, -1, BATCH_BYTES)
    delta = 0
    for k, v, ts in zip(keys, values, timestamps, strict=True):
        if builder.append(delta, ts, k, v, []) is None:
            out.append(bytes(builder.build()))
            builder = builder_cls(2, codec, False, -1, -1, -1, BATCH_BYTES)
            delta = 0
            builder.append(delta, ts, k, v, [])
        delta += 1
    out.append(bytes(builder.build()))
    return b"".join(out)


def decode_with(memory_records_cls, buf: bytes) -> int:
    records = memory_records_cls(buf)
    count = 0
    touched = 0
    while True:
        batch = records.next_batch()
        if batch is None:
            break
        for rec in batch:
            touched += len(rec.key) + len(rec.value) + (rec.timestamp & 1)
            count += 1
    return count


def _chunks(buf: bytes, chunk_bytes: int) -> list[memoryview]:
    """Whole batches, about ``chunk_bytes`` at a time (what Log.read_chunks yields)."""
    from seglog.logstore.records.record_format import iter_batch_headers

    view = memoryview(buf)
    out, start, end = [], 0, 0
    for h in iter_batch_headers(view):
        if h.end_position - start > chunk_bytes and end > start:
            out.append(view[start:end])
            start = end
        end = h.end_position
    out.append(view[start:end])
    return out


def run_scenario(name: str, n: int, value_size: int, codec: CompressionType, repeat: int,
                 kp_fraction: int, rows_per_call: int | None = None,
                 chunk_bytes: int | None = None) -> None:
    keys, values, timestamps = make_records(n, value_size)
    k_arr = pa.array(keys, pa.binary())
    v_arr = pa.array(values, pa.binary())
    t_arr = pa.array(timestamps, pa.int64())

    def seglog_encode_all():
        return encode_batches(v_arr, keys=k_arr, timestamps=t_arr, compression=codec,
                              max_batch_bytes=BATCH_BYTES)

    def seglog_encode():
        if rows_per_call is None:
            return seglog_encode_all()
        return [encode_batches(v_arr[i:i + rows_per_call], keys=k_arr[i:i + rows_per_call],
                               timestamps=t_arr[i:i + rows_per_call], compression=codec,
                               max_batch_bytes=BATCH_BYTES)
                for i in range(0, n, rows_per_call)]

    buf = bytes(seglog_encode_all())  # also the warm-up: numba compiles (or loads) here
    chunks = _chunks(buf, chunk_bytes) if chunk_bytes else [buf]

    def seglog_decode():
        return [decode_batches(c) for c in chunks]

    decode_batches(buf[:1 << 16])
    check = decode_batches(buf)
    assert check.num_rows == n and check.column("value")[n - 1].as_py() == values[-1]

    n_kp = max(1, n // kp_fraction)  # kafka-python is pure Python: a slice is enough
    kp_buf = bytes(encode_batches(v_arr[:n_kp], keys=k_arr[:n_kp], timestamps=t_arr[:n_kp],
                                  compression=codec, max_batch_bytes=BATCH_BYTES))
    assert decode_with(AioMemoryRecords, buf) == n
    assert decode_with(KpMemoryRecords, kp_buf) == n_kp

    enc = {
        "seglog": n / best(seglog_encode, repeat),
        "aiokafka": n / best(lambda: encode_with_builder(AioBuilder, keys, values,
                                                           timestamps, int(codec)), repeat),
        "kafka-python": n_kp / best(lambda: encode_with_builder(
            KpBuilder, keys[:n_kp], values[:n_kp], timestamps[:n_kp], int(codec)),
            max(1, repeat // 2)),
    }
    dec = {
        "seglog": n / best(seglog_decode, repeat),
        "aiokafka": n / best(lambda: decode_with(AioMemoryRecords, buf), repeat),
        "kafka-python": n_kp / best(lambda: decode_with(KpMemoryRecords, kp_buf),
                                    max(1, repeat // 2)),
    }
    how = "" if rows_per_call is None else (
        f"; seglog encodes {rows_per_call} rows per call, decodes "
        f"{chunk_bytes >> 20} MiB chunks")
    print(f"\n({name}) {n} records, 16 B key + {value_size} B value, "
          f"{codec.name.lower()}, {len(buf) / 1e6:.1f} MB encoded{how}")
    for label, figures in (("encode", enc), ("decode", dec)):
        row = "  ".join(f"{lib} {rate / 1e6:6.2f} M rec/s" for lib, rate in figures.items())
        print(f"  {label}: {row}")
        print(f"          seglog/aiokafka {figures['seglog'] / figures['aiokafka']:5.2f}x   "
              f"seglog/kafka-python {figures['seglog'] / figures['kafka-python']:6.1f}x")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args(argv)
    n = args.records
    run_scenario("a", n, 100, CompressionType.NONE, args.repeat, kp_fraction=10)
    run_scenario("b", max(1, n // 4), 1024, CompressionType.NONE, args.repeat, kp_fraction=10)
    run_scenario("c", n, 100, CompressionType.LZ4, args.repeat, kp_fraction=10)
    # (a) as seglog's sink and reader call the codec: Spark's Arrow batches of 10,000
    # rows, the reader's 8 MiB chunks of whole batches
    run_scenario("d", n, 100, CompressionType.NONE, args.repeat, kp_fraction=10,
                 rows_per_call=10_000, chunk_bytes=8 << 20)


if __name__ == "__main__":
    main()
