"""Kafka's control records, read in Python: the records of a control batch (a batch with
the control bit), i.e. transaction markers (``ABORT``/``COMMIT``, Kafka's
``EndTransactionMarker``) and KRaft's control records (``LEADER_CHANGE``, snapshot
header/footer, voters). Producer state replays the markers; ``dump-log`` prints them.

Record layout (``record_format``): a v2 record whose key is ``version int16 + type
int16`` (``CONTROL_KEY``); a marker's value is ``version int16 + coordinatorEpoch
int32`` (``END_TXN_MARKER_VALUE``). Control batches are few (one per transaction), so
this is plain Python over ``record_format.read_varint``.

Thread-safety: pure functions.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from ..errors import CorruptRecordError
from .record_format import (
    CONTROL_ABORT,
    CONTROL_COMMIT,
    CONTROL_KEY,
    END_TXN_MARKER_VALUE,
    RECORDS_OFFSET,
    VARLONG_MAX_BYTES,
    BatchHeader,
    Bytes,
    read_varint,
)


@dataclass(frozen=True, slots=True)
class ControlRecord:
    """A record of a control batch: its offset, timestamp, type (the key's second
    int16), key and value; ``coordinator_epoch`` for ABORT/COMMIT markers (-1 else)."""

    offset: int
    timestamp: int
    control_type: int
    key: bytes
    value: bytes | None
    coordinator_epoch: int = -1


def control_records(buf: Bytes, h: BatchHeader) -> Iterator[ControlRecord]:
    """The records of control batch ``h`` in ``buf`` (a v2 batch with the control bit).
    Raises CorruptRecordError naming the batch when a record does not fit the format."""
    where = f"control batch at position {h.position} (offsets {h.base_offset}..{h.last_offset})"
    body = bytes(buf[h.position + RECORDS_OFFSET:h.end_position])
    if h.compression:
        # Imported here, not at the top: Kafka writes control batches uncompressed, and a
        # writer replaying producer state should not load every codec library for them.
        from .compression import decompress

        body = decompress(h.compression, body)
    pos = 0
    try:
        for _ in range(h.records_count):
            length, pos = read_varint(body, pos, len(body))
            end = pos + length
            if length < 0 or end > len(body):
                raise ValueError(f"a record of {length} bytes runs past the batch")
            pos += 1  # attributes
            ts_delta, pos = read_varint(body, pos, end, VARLONG_MAX_BYTES)
            offset_delta, pos = read_varint(body, pos, end)
            key_len, pos = read_varint(body, pos, end)
            if key_len < CONTROL_KEY.size or pos + key_len > end:
                raise ValueError(f"record at offset delta {offset_delta} has a control key "
                                 f"of {key_len} bytes")
            key = body[pos:pos + key_len]
            pos += key_len
            value_len, pos = read_varint(body, pos, end)
            if value_len < -1 or pos + max(value_len, 0) > end:
                raise ValueError(f"record at offset delta {offset_delta} has a value of "
                                 f"{value_len} bytes past its length")
            value = body[pos:pos + value_len] if value_len >= 0 else None
            control_type = CONTROL_KEY.unpack_from(key)[1]
            epoch = -1
            if (control_type in (CONTROL_ABORT, CONTROL_COMMIT) and value is not None
                    and len(value) >= END_TXN_MARKER_VALUE.size):
                epoch = END_TXN_MARKER_VALUE.unpack_from(value)[1]
            yield ControlRecord(h.base_offset + offset_delta, h.base_timestamp + ts_delta,
                                control_type, key, value, epoch)
            pos = end
    except ValueError as e:
        raise CorruptRecordError(f"{where}: malformed control record: {e}") from None
