"""Issue 22.9: one timestamp rule for every append, Kafka's: at or after the epoch, or -1
for none. Local and bucket appends decide it at the same validation point
(``log_validator.validate_batches``), and the library's encoder refuses such timestamps
before a batch exists."""

from __future__ import annotations

import struct
from pathlib import Path

import pyarrow as pa
import pytest

from seglog.logstore.errors import InvalidRecordError
from seglog.logstore.manager.log_manager import LogManager
from seglog.logstore.records.record_codec import decode_batches, encode_batches
from seglog.logstore.records.record_format import (
    BASE_TIMESTAMP_OFFSET,
    MAX_TIMESTAMP_OFFSET,
    iter_batch_headers,
    restamp_crc,
)

TS = 1_700_000_000_000


def stamped(values: list[bytes], timestamp: int) -> bytearray:
    """One batch of ``values`` whose records all carry ``timestamp`` (written into the
    header as a hand-made producer would, since the encoder refuses it)."""
    buf = encode_batches(pa.array(values), timestamps=pa.array([TS] * len(values), pa.int64()))
    (h,) = list(iter_batch_headers(buf))
    struct.pack_into(">q", buf, h.position + BASE_TIMESTAMP_OFFSET, timestamp)
    struct.pack_into(">q", buf, h.position + MAX_TIMESTAMP_OFFSET, timestamp)
    restamp_crc(buf, h.position, h.end_position)
    return buf


def good(n: int) -> bytearray:
    return encode_batches(pa.array([b"ok%d" % i for i in range(n)]),
                          timestamps=pa.array([TS + i for i in range(n)], pa.int64()))


def check_refused(mgr: LogManager) -> None:
    mgr.create_topic("t", 1)
    mgr.append("t", 0, good(2))
    for ts in (-5000, -2):
        with pytest.raises(InvalidRecordError) as info:
            mgr.append("t", 0, good(3) + stamped([b"a", b"b"], ts))
        text = str(info.value)
        # the offending timestamp and the record's index in the append (3 good ones first)
        assert "record 3 (the first of the batch at position" in text, text
        assert f"has timestamp {ts}" in text and "-1 for none" in text, text
    # -1 (no timestamp) is allowed by the format, and nothing refused was written
    mgr.append("t", 0, stamped([b"none"], -1))
    log = mgr.get_log("t", 0)
    rows = decode_batches(b"".join(log.read_chunks(0, log.high_watermark)))
    assert rows.column("value").to_pylist() == [b"ok0", b"ok1", b"none"]
    assert rows.column("timestamp").to_pylist()[-1] == -1


def test_a_local_append_refuses_negative_timestamps(tmp_path: Path) -> None:
    with LogManager([tmp_path]) as mgr:
        check_refused(mgr)


def test_a_bucket_append_refuses_negative_timestamps(s3_uri: str) -> None:
    with LogManager([s3_uri]) as mgr:
        check_refused(mgr)


def test_a_record_after_the_first_is_caught_where_the_append_is_decoded(tmp_path: Path) -> None:
    """A negative delta can put a later record below -1 while the header's two stay
    valid; a compacted topic decodes every append, and says which record."""
    buf = encode_batches(pa.array([b"v0", b"v1", b"v2"]), keys=pa.array([b"k0", b"k1", b"k2"]),
                         timestamps=pa.array([TS, TS - 10, TS + 1], pa.int64()))
    (h,) = list(iter_batch_headers(buf))
    # deltas 0, -10, 1 from base 5: timestamps 5, -5, 6
    struct.pack_into(">q", buf, h.position + BASE_TIMESTAMP_OFFSET, 5)
    struct.pack_into(">q", buf, h.position + MAX_TIMESTAMP_OFFSET, 6)
    restamp_crc(buf, h.position, h.end_position)
    with LogManager([tmp_path]) as mgr:
        mgr.create_topic("c", 1, config={"cleanup.policy": "compact"})
        with pytest.raises(InvalidRecordError, match=r"record 1 has timestamp -5: "):
            mgr.append("c", 0, buf)
        assert mgr.get_log("c", 0).log_end_offset == 0


def test_the_encoder_refuses_negative_timestamps() -> None:
    with pytest.raises(ValueError, match=r"timestamps\[1\] is -5000: .*-1 for none"):
        encode_batches(pa.array([b"a", b"b"]), timestamps=pa.array([TS, -5000], pa.int64()))
    # -1 is "none", as Kafka's v2 format allows
    encode_batches(pa.array([b"a"]), timestamps=pa.array([-1], pa.int64()))
