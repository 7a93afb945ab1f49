"""Test data for the log tests: v2 batches built by kafka-python (an independent
implementation of the format), plus a tiny model of what they hold."""

from __future__ import annotations

from kafka.record.default_records import DefaultRecordBatchBuilder

BASE_TS = 1_700_000_000_000


def batch(n: int = 3, *, ts: int = BASE_TS, value_size: int = 10, key: bytes | None = b"k",
          base_offset: int = 0, tag: int = 0) -> bytes:
    """One uncompressed v2 batch of ``n`` records with timestamps ``ts, ts+1, ...``;
    record i has value ``b"<tag>:<i>"`` padded to ``value_size``."""
    b = DefaultRecordBatchBuilder(magic=2, compression_type=0, is_transactional=False,
                                  producer_id=-1, producer_epoch=-1, base_sequence=-1,
                                  batch_size=1 << 30)
    for i in range(n):
        value = f"{tag}:{i}".encode().ljust(value_size, b".")
        b.append(i, timestamp=ts + i, key=key, value=value, headers=[])
    raw = bytearray(b.build())
    if base_offset:
        raw[0:8] = base_offset.to_bytes(8, "big")
    return bytes(raw)
