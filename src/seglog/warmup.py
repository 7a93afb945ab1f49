"""``python -m seglog.warmup``: compile seglog's numba kernels into numba's disk cache, once.

seglog's codec, recovery, cleaner and partitioner run numba kernels compiled with
``cache=True``: the first process that calls a kernel compiles it (seconds, for the
codec), later processes load the compiled code from the cache (milliseconds). Without a
warm-up that first process is a user's first Spark task, whose first read or write then
takes seconds longer. Run this once after installing or upgrading seglog, as the user
that runs Spark (``run.py`` does it when it builds ``.venv``); it runs the real code paths
on a few records in a temporary directory, so what it compiles is exactly what they
call, and it prints what it did. Nothing else changes: no data, no configuration.

The cache sits next to the installed modules (``__pycache__``), or under
``NUMBA_CACHE_DIR`` when that is set (set it for the warm-up too) or when the install is
read-only (numba then uses a per-user cache directory). A kernel whose source changed is
recompiled by the first process that calls it, warm-up or not.

``--kernels read`` / ``--kernels write`` load or compile only the kernels a read's or a
write's tasks call: the Spark source and sink start it themselves, in the background, when
a query is planned on a machine where those kernels were never compiled (see
``seglog.logstore.records.kernel_cache``; ``SEGLOG_PREWARM=0`` turns that off).

Not covered: compacting magic 0/1 messages (old Kafka data under ``cleanup.policy=compact``)
compiles the cleaner's key-hashing kernels on first use.
"""

from __future__ import annotations

import argparse
import struct
import sys
import tempfile
import time
import zlib
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa

__all__ = ["warm_up"]


def _values(n: int, large: bool) -> tuple[pa.Array, pa.Array]:
    import pyarrow as pa

    binary, string = (pa.large_binary(), pa.large_string()) if large else (pa.binary(),
                                                                          pa.string())
    return (pa.array([f"v{i}".encode() for i in range(n)], binary),
            pa.array([f"k{i % 3}" for i in range(n)], string))


def _codec(work: Path) -> None:
    """Encode every column combination the sink and the CLI pass; decode from bytes (the
    read-only buffers a log read returns) and from a bytearray, with and without headers."""
    import pyarrow as pa

    from seglog.logstore.records.record_codec import decode_batches, encode_batches

    headers = pa.array([[{"key": "h", "value": b"x"}], None, []],
                       pa.list_(pa.struct([("key", pa.string()), ("value", pa.binary())])))
    for large in (False, True):
        values, keys = _values(3, large)
        ts = pa.array([1, None, 3], pa.int64())
        for buf in (encode_batches(values), encode_batches(values, keys, ts, headers),
                    encode_batches(keys.cast(pa.large_string() if large else pa.string()),
                                   values, compression="lz4")):
            for data in (buf, bytes(buf)):
                for include_headers in (True, False):
                    decode_batches(data, include_headers=include_headers)


def _log_paths(work: Path) -> None:
    """Append and read back through a LogManager (the chunks the source's tasks decode),
    compact a topic, and recover the partitions after an unclean shutdown."""
    import pyarrow as pa

    from seglog.logstore.manager.log_manager import LogManager
    from seglog.logstore.records.record_codec import decode_batches, encode_batches
    from seglog.logstore.storage.file_names import CLEAN_SHUTDOWN_FILE

    logs = work / "logs"
    values, keys = _values(64, False)
    with LogManager([logs], config={"log.cleaner.dedupe.buffer.size": 1 << 20}) as mgr:
        mgr.create_topic("plain", 1)
        mgr.create_topic("compacted", 1, config={"cleanup.policy": "compact",
                                                 "segment.bytes": "1024"})
        for i in range(0, 64, 4):
            mgr.append("plain", 0, encode_batches(values[i:i + 4], keys[i:i + 4]))
            # One key of its own per batch and three shared ones: the cleaner keeps part
            # of each batch and so rewrites it (compressed or not).
            mixed = pa.array([f"u{i}", "a", "b", "c"])
            mgr.append("compacted", 0, encode_batches(
                values[i:i + 4], mixed, compression="lz4" if i % 8 else "none"))
        mgr.checkpoint_high_watermarks()  # the cleaner stays below the high watermark
        mgr.clean()
        log = mgr.get_log("plain", 0)
        for include_headers in (False, True):
            for chunk in log.read_chunks(1, 64):
                decode_batches(chunk, start_offset=1, end_offset=64,
                               include_headers=include_headers)
    # As after a crash: the next open recovers every segment (the header walk and CRCs).
    (logs / CLEAN_SHUTDOWN_FILE).unlink()
    LogManager([logs]).close()


def _legacy_message(offset: int, key: bytes | None, value: bytes, magic: int) -> bytes:
    """One uncompressed magic 0/1 message (Kafka's pre-0.11 format, CRC-32 checked)."""
    def sized(b: bytes | None) -> bytes:
        return struct.pack(">i", -1) if b is None else struct.pack(">i", len(b)) + b

    body = struct.pack(">bb", magic, 0) + (struct.pack(">q", 1000) if magic else b"")
    body += sized(key) + sized(value)
    message = struct.pack(">I", zlib.crc32(body)) + body
    return struct.pack(">qi", offset, len(message)) + message


def _legacy(work: Path) -> None:
    """Decode a magic 0 and 1 message set (old Kafka data a reader may meet)."""
    from seglog.logstore.records.record_codec import decode_batches

    for magic in (0, 1):
        decode_batches(b"".join(_legacy_message(o, b"k", b"v", magic) for o in range(3)))


def _transactions(work: Path) -> None:
    """Find producer batches (rebuilding producer state from a long segment tail) and drop
    an aborted transaction's batches (a read_committed read)."""
    import numpy as np
    import pyarrow as pa

    from seglog.logstore.index.txn_index import AbortedTxn
    from seglog.logstore.log import transactions
    from seglog.logstore.records.record_codec import (
        ControlType,
        encode_batches,
        encode_control_batch,
    )
    from seglog.logstore.records.record_format import HEADER_COLUMNS, INT64_MAX
    from seglog.logstore.records.record_format_kernels import header_table

    data = bytearray(encode_batches(pa.array([b"a", b"b"]), producer_id=5, producer_epoch=0,
                                    base_sequence=0, is_transactional=True))
    data += encode_control_batch(ControlType.ABORT, producer_id=5, producer_epoch=0,
                                 base_offset=2)
    # The arguments transactions.producer_batches passes for a span above SMALL_SCAN.
    header_table(np.frombuffer(bytearray(data), np.uint8), 0, len(data),
                 np.empty((16, HEADER_COLUMNS), np.int64), INT64_MAX, False, 0, 0, False)
    transactions.drop_aborted_batches(bytes(data), [AbortedTxn(5, 0, 2, 0)])


def _sink(work: Path) -> None:
    """Route rows as the sink does: by key (murmur2), by value hash, by partition."""
    import pyarrow as pa

    from seglog.streaming.partitioner import assign_partitions

    for large in (False, True):
        values, keys = _values(8, large)
        for k in (keys, keys.cast(pa.large_binary() if large else pa.binary()), None):
            assign_partitions(k, values, 4)


def _one_v2_batch() -> bytes:
    """One uncompressed v2 batch holding one record (key null, value b"v"), built without
    the codec's kernels, so that a read's warm-up compiles no encoder."""
    from seglog.logstore.records.record_format import V2_HEADER_SIZE, restamp_crc

    # length 7, attributes, timestamp delta, offset delta, key null, value "v", no headers
    records = bytes([14, 0, 0, 0, 1, 2]) + b"v" + bytes([0])
    header = struct.pack(">qiibIhiqqqhii", 0, V2_HEADER_SIZE - 12 + len(records), -1, 2, 0,
                         0, 0, 0, 0, -1, -1, -1, 1)
    batch = bytearray(header + records)
    restamp_crc(batch, 0, len(batch))
    return bytes(batch)


def _read_kernels() -> None:
    from seglog.logstore.records.record_codec import decode_batches

    decode_batches(_one_v2_batch(), include_headers=False)


def _write_kernels() -> None:
    from seglog.logstore.records.record_codec import encode_batches
    from seglog.streaming.partitioner import assign_partitions

    values, keys = _values(3, False)
    encode_batches(values, keys)
    assign_partitions(None, values, 2)


# What ``--kernels`` runs: the kernels of kernel_cache.QUERY_KERNELS, by the same calls.
QUERY_STEPS = {"read": _read_kernels, "write": _write_kernels}

STEPS = (("codec", _codec), ("log append, read, cleaner, recovery", _log_paths),
         ("magic 0/1 messages", _legacy), ("transactions", _transactions),
         ("sink partitioner", _sink))


def warm_up(report: Callable[[str, float], object] | None = None) -> float:
    """Run every step in a temporary directory; returns the seconds taken.
    ``report(step, seconds)`` is called after each step."""
    start = time.perf_counter()
    with tempfile.TemporaryDirectory(prefix="seglog-warmup-") as tmp:
        for name, step in STEPS:
            t = time.perf_counter()
            step(Path(tmp))
            if report is not None:
                report(name, time.perf_counter() - t)
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m seglog.warmup",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("--kernels", choices=sorted(QUERY_STEPS),
                        help="only the kernels a read's or a write's tasks call (what the "
                             "Spark source and sink start in the background)")
    args = parser.parse_args(argv)
    out = sys.stdout
    if args.kernels:
        t = time.perf_counter()
        QUERY_STEPS[args.kernels]()
        out.write(f"{args.kernels} kernels ready in {time.perf_counter() - t:.2f} s\n")
        return 0
    out.write("compiling (or loading) seglog's numba kernels into numba's disk cache\n")
    total = warm_up(lambda step, s: out.write(f"  {step}: {s:.2f} s\n"))
    out.write(f"done in {total:.2f} s\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
